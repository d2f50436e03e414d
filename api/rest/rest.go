// Package rest is ztpd's REST API door (/api/v1/): thin handlers over the
// clusters domain service, the device queries, the desired-state owner and
// the rollout engine, authenticated with API keys (package auth).
//
// Authentication (auth.go):
//   - the header
//     Authorization: ZTPD-HMAC-SHA1 apikey=<key>, expires=<RFC3339>, signature=<b64>
//     signed like CloudStack's requests (package signing) over the query,
//     method, path, expiry and body digest; or, over TLS only,
//     "Authorization: Bearer <key>:<secret>", checked against the secret's
//     stored hash;
//   - parameter names are limited to [A-Za-z0-9_.-[]] and given once;
//     expires may lie at most SignaturePolicy.MaxLifetime ahead; a write's
//     signature is accepted once (remembered until it expires); signatures
//     without expires are refused;
//   - a request without an Authorization header may carry the web
//     console's session cookie (Deps.Sessions, package console), and every
//     such write its CSRF token;
//   - the admin socket's requests act as the local administrator without
//     a signature (package caller).
//
// Failed authentications are counted per client address; past the limit
// the address gets 429 until its budget refills. Failures are logged with
// address, API key and reason, never a signature or secret.
//
// Roles: admin may do everything; user may manage clusters, read versions,
// devices, leases, images, events and its own jobs. Version management,
// device approval, tokens and API keys are admin only.
//
// The handlers are split by resource: auth.go (signatures, roles, request
// bodies and the one error writer), paging.go (pages, cursors, the
// response cache), and one file per resource with its view types: devices
// and leases, clusters and jobs, versions and offerings, images, tokens,
// events, desired states and rollouts (dayops.go), and what the web
// console added (overview.go, counts.go). Answers are mapped from domain
// values to those view types explicitly, so the storage format never leaks
// into the API: openapi.json is the contract. The console's pages fetch
// all their data through these routes.
package rest

import (
	_ "embed"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/api/auth"
	"github.com/ztpd/ztpd/api/bodycache"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/desired"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/rollout"
)

// URL paths of the REST API.
const (
	Path        = "/api/v1/"
	OpenAPIPath = Path + "openapi.json"
)

// ImageLister lists the artifact store (images/imagestore satisfies it).
type ImageLister interface {
	List(kind string) ([]core.Image, error)
}

// Sessions authenticates the web console's sessions on REST requests
// (package console's door satisfies it).
type Sessions interface {
	// HasSession reports whether r carries a session cookie.
	HasSession(r *http.Request) bool
	// Authenticate answers the session's credential, or refuses the
	// request (expired session, missing CSRF token, cross-site write) and
	// reports false.
	Authenticate(c *gin.Context) (apikeys.Credential, bool)
}

// Deps are what the REST door needs; the composer (package api) shares
// the limiter, verifier, failure log and response cache with the other
// doors.
type Deps struct {
	Log      *slog.Logger
	Store    core.Store
	Clusters *clusters.Service
	Keys     *apikeys.Service
	Images   ImageLister
	// Refusals lists recent refusals of addresses that hold no lease; nil
	// answers none.
	Refusals RefusalLister
	Limiter  *auth.FailLimiter
	Verifier *auth.Verifier
	Failures *auth.Failures
	// AuthFailures counts failed authentications by API and outcome.
	AuthFailures *prometheus.CounterVec
	Bodies       *bodycache.Cache
	// Sessions are the console's; nil accepts none.
	Sessions Sessions
	Now      func() time.Time

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
	// Desired owns devices' desired states.
	Desired *desired.Service
	// Rollouts runs operations over clusters' nodes.
	Rollouts *rollout.Engine
	// Positions owns the cabling plan; nil serves no position routes.
	Positions Positions
}

// restMetrics are the metrics the REST door records.
type restMetrics struct {
	authFailures *prometheus.CounterVec
}

// Door is the REST API.
type Door struct {
	log       *slog.Logger
	st        core.Store
	clusters  *clusters.Service
	keys      *apikeys.Service
	images    ImageLister
	refusals  RefusalLister
	limiter   *auth.FailLimiter
	verifier  *auth.Verifier
	now       func() time.Time
	failures  *auth.Failures
	bodies    *bodycache.Cache
	sessions  Sessions
	console   consoleDeps   // the console's REST additions (overview.go)
	counts    consoleCounts // device tally and onboarding marks (counts.go)
	desired   *desired.Service
	rollouts  *rollout.Engine
	positions Positions
	queries   *devices.Queries // devices, leases, events and counts, in the caller's scope
	metrics   restMetrics
}

// New builds the REST door; Route registers its routes.
func New(d Deps) *Door {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	return &Door{log: d.Log, st: d.Store, clusters: d.Clusters, keys: d.Keys, images: d.Images, refusals: d.Refusals,
		limiter: d.Limiter, verifier: d.Verifier, now: d.Now, failures: d.Failures, bodies: d.Bodies, sessions: d.Sessions,
		console: consoleDeps{pools: d.Pools, preview: d.Preview, imageStore: d.ImageStore, isoBaseURL: d.ISOBaseURL,
			config: d.Config, warnings: d.Warnings},
		desired: d.Desired, rollouts: d.Rollouts, positions: d.Positions, queries: devices.NewQueries(d.Store),
		metrics: restMetrics{authFailures: d.AuthFailures}}
}

//go:embed openapi.json
var openAPIDoc []byte

// OpenAPI returns the REST API's OpenAPI 3 document.
func OpenAPI() []byte { return openAPIDoc }

// Route registers the REST routes on e.
func (s *Door) Route(e *gin.Engine) {
	e.GET(OpenAPIPath, func(c *gin.Context) {
		c.Set("op", "openapi")
		c.Data(http.StatusOK, "application/json", openAPIDoc)
	})
	g := e.Group(strings.TrimSuffix(Path, "/"), s.restAuth)
	admin := requireAdmin

	g.GET("/devices", s.listDevices)
	g.GET("/devices/:id", s.getDevice)
	g.POST("/devices/:id/approve", admin, s.approveDevice)
	g.POST("/devices/:id/reset", admin, s.resetDevice)
	g.GET("/leases", s.listLeases)

	g.GET("/clusters", s.listClusters)
	g.POST("/clusters", s.createCluster)
	g.GET("/clusters/:id", s.getCluster)
	g.DELETE("/clusters/:id", s.clusterOp)
	g.POST("/clusters/:id/scale", s.clusterOp)
	g.POST("/clusters/:id/upgrade", s.clusterOp)
	g.POST("/clusters/:id/start", s.clusterOp)
	g.POST("/clusters/:id/stop", s.clusterOp)
	g.GET("/clusters/:id/kubeconfig", s.kubeconfig)
	g.POST("/clusters/:id/nodes", s.addNodes)
	g.POST("/clusters/:id/nodes/remove", s.removeNodes)
	g.GET("/cni-configurations", s.listCNI)
	g.POST("/cni-configurations", admin, s.registerCNI)
	g.GET("/cni-configurations/:id", s.getCNI)
	g.DELETE("/cni-configurations/:id", admin, s.deleteCNI)
	g.GET("/jobs/:id", s.getJob)

	g.GET("/versions", s.listVersions)
	g.POST("/versions", admin, s.addVersion)
	g.GET("/versions/:id", s.getVersion)
	g.PATCH("/versions/:id", admin, s.updateVersion)
	g.DELETE("/versions/:id", admin, s.deleteVersion)
	g.GET("/offerings", s.listOfferings)

	g.GET("/images", s.listImages)
	g.GET("/tokens", admin, s.listTokens)
	g.POST("/tokens/:id/revoke", admin, s.revokeToken)
	g.GET("/events", s.listEvents)
	g.GET("/refusals", admin, s.listRefusals)
	s.routeDayOps(g)
	s.routePositions(g)
	s.routeConsoleREST(e, g)
}
