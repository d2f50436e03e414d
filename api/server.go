// Package api is ztpd's API front end (gin): it composes the doors on one
// engine, the CloudStack-compatible endpoint /client/api (package
// cloudstack) and the REST API /api/v1/ with the console, all thin
// adapters over the clusters domain service and the store, authenticated
// with API keys (package auth).
//
// Authentication:
//   - /client/api: CloudStack request signing (package signing), including
//     signatureversion=3 with expires. Errors are CloudStack's: HTTP 401 with
//     errortext "unable to verify user credentials and/or request signature".
//   - Both APIs: parameter names are limited to [A-Za-z0-9_.-[]] and given
//     once; expires may lie at most SignaturePolicy.MaxLifetime ahead; a
//     write's signature is accepted once (remembered until it expires);
//     signatures without expires are refused on REST (and on CloudStack when
//     the policy says so).
//   - /api/v1/: the header
//     Authorization: ZTPD-HMAC-SHA1 apikey=<key>, expires=<RFC3339>, signature=<b64>
//     signed with the same algorithm over the query, method, path, expiry and
//     body digest; or, over TLS only, "Authorization: Bearer <key>:<secret>",
//     checked against the secret's stored hash.
//
// The web console (console_pages.go, console_session.go) signs in with an
// API key and its secret at POST /ui/signin and gets a session cookie;
// restAuth accepts that session on /api/v1 when a request carries no
// Authorization header, and every write must carry the session's CSRF token
// (X-CSRF-Token). The console's pages fetch all their data through these
// same REST routes.
//
// The admin socket (<data-dir>/ztpd.sock, mode 0600) serves the same routes
// through LocalHandler, as the local administrator and without signatures:
// the socket's file mode is the access control (package caller).
//
// Failed authentications are counted per client address; past
// auth_failures_per_minute the address gets 429 until its budget refills.
// Failures are logged with address, API key and reason, never a signature
// or secret.
//
// Roles: admin may do everything; user may manage clusters, read versions,
// devices, leases, images, events and its own jobs. Version management,
// device approval, tokens and API keys are admin only.
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

	"github.com/ztpd/ztpd/api/auth"
	"github.com/ztpd/ztpd/api/bodycache"
	"github.com/ztpd/ztpd/api/cloudstack"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/desired"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/httpserve"
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

// ImageLister lists the artifact store (images/imagestore satisfies it).
type ImageLister interface {
	List(kind string) ([]core.Image, error)
}

// Deps are what the API needs.
type Deps struct {
	Log *slog.Logger
	// Metrics registers the API's metrics (required).
	Metrics  prometheus.Registerer
	Store    core.Store
	Clusters *clusters.Service
	Keys     *apikeys.Service
	Images   ImageLister
	// Refusals lists recent refusals of addresses that hold no lease; nil
	// answers none.
	Refusals RefusalLister
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
	Pools PoolLister
	// Preview renders what a device fetches under the loaded profiles.
	Preview DevicePreviewer
	// ImageStore adds and removes images: uploads, versions from a stored
	// ISO (images/imagestore).
	ImageStore ISOStore
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
}

// Server is the API front end.
type Server struct {
	log      *slog.Logger
	st       core.Store
	clusters *clusters.Service
	keys     *apikeys.Service
	images   ImageLister
	refusals RefusalLister
	limiter  *auth.FailLimiter
	verifier *auth.Verifier
	now      func() time.Time
	engine   *gin.Engine
	// cloudStack is the CloudStack door (/client/api).
	cloudStack *cloudstack.Door
	failures   *auth.Failures
	bodies     *bodycache.Cache
	console    consoleDeps   // the console's REST additions (rest_overview.go)
	sessions   *sessionTable // console sessions (console_session.go)
	hub        *streamHub    // the console's live stream (console_stream.go)
	counts     consoleCounts // device tally and onboarding marks (console_counts.go)
	desired    *desired.Service
	rollouts   *rollout.Engine
	queries    *devices.Queries // devices, leases, events and counts, in the caller's scope
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
	s := &Server{log: d.Log, st: d.Store, clusters: d.Clusters, keys: d.Keys, images: d.Images, refusals: d.Refusals,
		limiter: auth.NewFailLimiter(d.AuthFailuresPerMinute), verifier: auth.NewVerifier(d.Keys, sigs, d.Now, d.Metrics),
		now: d.Now, bodies: bodycache.New(64<<20, m.cacheHits, m.cacheRenders), metrics: m, desired: d.Desired, rollouts: d.Rollouts,
		queries: devices.NewQueries(d.Store)}
	s.failures = auth.NewFailures(s.limiter, d.Keys, d.Log, m.authFailures, d.Now)
	s.console = consoleDeps{pools: d.Pools, preview: d.Preview, imageStore: d.ImageStore, isoBaseURL: d.ISOBaseURL,
		config: d.Config, warnings: d.Warnings}
	s.cloudStack = cloudstack.New(cloudstack.Deps{Log: d.Log, Clusters: d.Clusters, Verifier: s.verifier, Limiter: s.limiter,
		Failures: s.failures, AuthFailures: m.authFailures, Bodies: s.bodies, Now: d.Now})
	e := gin.New()
	e.HandleMethodNotAllowed = true
	e.Use(s.recoverAndObserve(), pgSecurityHeaders)
	e.GET(CloudStackPath, s.cloudStack.Serve)
	e.POST(CloudStackPath, s.cloudStack.Serve)
	s.routeREST(e)
	s.routeAgent(e)
	s.routeConsoleSession(e)
	s.routeConsolePages(e)
	e.NoRoute(func(c *gin.Context) {
		restRefuse(c, core.KindNotFound, "no such API path: "+c.Request.URL.Path)
	})
	e.NoMethod(func(c *gin.Context) {
		httpserve.WriteRefusal(c.Writer, http.StatusMethodNotAllowed, httpserve.CodeMethodNotAllowed, c.Request.Method+" is not allowed on "+c.Request.URL.Path)
		c.Abort()
	})
	s.engine = e
	return s
}

// Handler is the API as an http.Handler.
func (s *Server) Handler() http.Handler { return s.engine }

// Mount serves the API on mux (the ZTP HTTP listener's router).
func (s *Server) Mount(mux *http.ServeMux) {
	mux.Handle(CloudStackPath, s.engine)
	mux.Handle(RESTPath, s.engine)
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
					restRefuse(c, core.KindInternal, "internal error")
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
