// Package api is ztpd's API front end: it composes the doors on one gin
// engine, with one middleware order (panic recovery and metrics first, then
// the console's security headers on every answer) and one answer, in the
// REST error shape, for a path or method no door serves. The doors are
// thin adapters over the domain services, each in its own package:
//
//   - /client/api: the CloudStack-compatible API (package cloudstack);
//   - /api/v1/: the REST API (package rest), whose openapi.json also
//     documents the agents' routes;
//   - /ui/ and the console's pages: the web console (package console),
//     whose pages fetch all their data through the REST routes with the
//     session cookie that REST accepts from it (rest.Sessions);
//   - /agent/v1/: the device agents (package agentdoor).
//
// What several doors share is built here once and handed to each: the
// failed-authentication limiter and log and the signature verifier
// (package auth), the response cache (package bodycache) and the API's
// metrics.
//
// The admin socket (<data-dir>/ztpd.sock, mode 0600) serves the same
// routes through LocalHandler, as the local administrator and without
// signatures: the socket's file mode is the access control (package
// caller). Its local-only operations (API key creation, versions from an
// ISO) are MountAdmin's, which stay here beside LocalHandler: they answer
// on the same socket and reuse REST's key creation and version spec.
package api

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/ztpd/ztpd/api/agentdoor"
	"github.com/ztpd/ztpd/api/auth"
	"github.com/ztpd/ztpd/api/bodycache"
	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/api/cloudstack"
	"github.com/ztpd/ztpd/api/console"
	"github.com/ztpd/ztpd/api/rest"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/desired"
	"github.com/ztpd/ztpd/internal/rollout"
)

// apiMetrics are the API's Prometheus metrics, registered on the
// registerer its Deps name (never a global one: tests build many servers).
type apiMetrics struct {
	requests       *prometheus.CounterVec
	requestSeconds *prometheus.HistogramVec
	authFailures   *prometheus.CounterVec
	cacheHits      prometheus.Counter
	cacheRenders   prometheus.Counter
}

func newAPIMetrics(reg prometheus.Registerer) *apiMetrics {
	f := promauto.With(reg)
	cache := f.NewCounterVec(prometheus.CounterOpts{
		Name: "ztpd_api_response_cache_total",
		Help: "Cacheable API answers by outcome: hit (a current body, or one being rendered, was shared) or render.",
	}, []string{"result"})
	return &apiMetrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_api_requests_total", Help: "API requests by API, operation and HTTP status.",
		}, []string{"api", "op", "code"}),
		requestSeconds: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ztpd_api_request_seconds", Help: "API request latency.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"api"}),
		authFailures: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_api_auth_failures_total", Help: "Failed API authentications by outcome.",
		}, []string{"api", "outcome"}),
		cacheHits:    cache.WithLabelValues("hit"),
		cacheRenders: cache.WithLabelValues("render"),
	}
}

// Deps are what the API needs.
type Deps struct {
	Log *slog.Logger
	// Metrics registers the API's metrics (required).
	Metrics  prometheus.Registerer
	Store    core.Store
	Clusters *clusters.Service
	Keys     *apikeys.Service
	Images   rest.ImageLister
	// Refusals lists recent refusals of addresses that hold no lease; nil
	// answers none.
	Refusals rest.RefusalLister
	// AuthFailuresPerMinute bounds failed authentications per client
	// address; 0 disables the limit.
	AuthFailuresPerMinute int
	// Signatures is what signatures are accepted; nil means
	// DefaultSignaturePolicy.
	Signatures *auth.SignaturePolicy
	// Now is the clock (tests); default time.Now.
	Now func() time.Time

	// For the web console; each may be nil, which answers
	// none or refuses what needs it.
	// Pools is the DHCP pools' use (ztp/dhcp).
	Pools rest.PoolLister
	// Preview renders what a device fetches under the loaded profiles.
	Preview rest.DevicePreviewer
	// ImageStore adds and removes images: uploads, versions from a stored
	// ISO (images/imagestore).
	ImageStore rest.ISOStore
	// ISOBaseURL is where devices and CloudStack fetch ISOs
	// (endpoints.Endpoints.ISOs).
	ISOBaseURL string
	// Config is the effective configuration with secrets redacted.
	Config func() any
	// Warnings are the startup warnings as they stand now.
	Warnings func() []string

	// Day-2 operations; nil serves none of their routes.
	// Desired owns devices' desired states and answers device agents.
	Desired *desired.Service
	// Rollouts runs operations over clusters' nodes.
	Rollouts *rollout.Engine
	// Positions owns the cabling plan; nil serves no position routes.
	Positions rest.Positions
}

// Server is the API front end.
type Server struct {
	log    *slog.Logger
	engine *gin.Engine
	// cloudStack is the CloudStack door (/client/api).
	cloudStack *cloudstack.Door
	rest       *rest.Door
	console    *console.Door
	agents     *agentdoor.Door
	verifier   *auth.Verifier
	bodies     *bodycache.Cache
	metrics    *apiMetrics
}

// New builds the API and its routes.
func New(d Deps) *Server {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Metrics == nil {
		panic("api.New: Deps.Metrics is required (the registerer of the API's metrics)")
	}
	m := newAPIMetrics(d.Metrics)
	sigs := auth.DefaultSignaturePolicy()
	if d.Signatures != nil {
		sigs = *d.Signatures
	}
	gin.SetMode(gin.ReleaseMode)
	s := &Server{log: d.Log, verifier: auth.NewVerifier(d.Keys, sigs, d.Now, d.Metrics),
		bodies: bodycache.New(64<<20, m.cacheHits, m.cacheRenders), metrics: m}
	limiter := auth.NewFailLimiter(d.AuthFailuresPerMinute)
	failures := auth.NewFailures(limiter, d.Keys, d.Log, m.authFailures, d.Now)
	s.cloudStack = cloudstack.New(cloudstack.Deps{Log: d.Log, Clusters: d.Clusters, Verifier: s.verifier, Limiter: limiter,
		Failures: failures, AuthFailures: m.authFailures, Bodies: s.bodies, Now: d.Now})
	// The console's stream sends REST's device counts and REST accepts the
	// console's sessions: the console is built first and reaches the REST
	// door, built next, when its stream first asks.
	s.console = console.New(console.Deps{Log: d.Log, Store: d.Store, Keys: d.Keys, Limiter: limiter, Failures: failures,
		AuthFailures: m.authFailures, Now: d.Now,
		Counts: func(own map[string]bool) (client.DeviceCounts, error) { return s.rest.DeviceCounts(own) }})
	s.rest = rest.New(rest.Deps{Log: d.Log, Store: d.Store, Clusters: d.Clusters, Keys: d.Keys, Images: d.Images,
		Refusals: d.Refusals, Limiter: limiter, Verifier: s.verifier, Failures: failures, AuthFailures: m.authFailures,
		Bodies: s.bodies, Sessions: s.console, Now: d.Now,
		Pools: d.Pools, Preview: d.Preview, ImageStore: d.ImageStore, ISOBaseURL: d.ISOBaseURL, Config: d.Config,
		Warnings: d.Warnings, Desired: d.Desired, Rollouts: d.Rollouts, Positions: d.Positions})
	s.agents = agentdoor.New(d.Desired, d.Log)
	e := gin.New()
	e.HandleMethodNotAllowed = true
	e.Use(s.recoverAndObserve(), console.SecurityHeaders)
	e.GET(CloudStackPath, s.cloudStack.Serve)
	e.POST(CloudStackPath, s.cloudStack.Serve)
	s.rest.Route(e)
	s.agents.Route(e)
	s.console.Route(e)
	e.NoRoute(rest.NoRoute)
	e.NoMethod(rest.NoMethod)
	s.engine = e
	return s
}

// Close ends the console's live streams and stops their poller. A server
// shutting down through http.Server.Shutdown ends the streams it serves
// by itself; Close is for the API going away while its listener stays.
func (s *Server) Close() { s.console.Close() }

// Handler is the API as an http.Handler.
func (s *Server) Handler() http.Handler { return s.engine }

// Mount serves the API on mux (the ZTP HTTP listener's router).
func (s *Server) Mount(mux *http.ServeMux) {
	mux.Handle(CloudStackPath, s.engine)
	mux.Handle(rest.Path, s.engine)
}

// recoverAndObserve turns panics into 500s and records metrics and a debug
// access log line. The query string is never logged: it carries signatures.
func (s *Server) recoverAndObserve() gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		defer func() {
			if v := recover(); v != nil {
				s.log.Error("API handler panic", "path", c.Request.URL.Path, "panic", v)
				if !c.Writer.Written() {
					rest.Refuse(c, core.KindInternal, "internal error")
				}
			}
			api := "rest"
			if c.Request.URL.Path == CloudStackPath {
				api = "cloudstack"
			}
			op := c.GetString("op")
			if op == "" {
				op = c.FullPath()
			}
			code := c.Writer.Status()
			s.metrics.requests.WithLabelValues(api, op, strconv.Itoa(code)).Inc()
			s.metrics.requestSeconds.WithLabelValues(api).Observe(time.Since(start).Seconds())
			if s.log.Enabled(context.Background(), slog.LevelDebug) {
				s.log.Debug("api request", "method", c.Request.Method, "path", c.Request.URL.Path, "op", op,
					"status", code, "client", auth.ClientIP(c.Request), "duration", time.Since(start))
			}
		}()
		c.Next()
	}
}
