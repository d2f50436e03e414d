package rest

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/ztpd/ztpd/api/agentdoor"
	"github.com/ztpd/ztpd/api/auth"
	"github.com/ztpd/ztpd/api/bodycache"
	"github.com/ztpd/ztpd/api/caller"
	"github.com/ztpd/ztpd/api/internal/apitest"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/desired"
	"github.com/ztpd/ztpd/internal/positions"
	"github.com/ztpd/ztpd/internal/rollout"
	"github.com/ztpd/ztpd/internal/store/boltstore"
)

// testServer is the REST door on an engine composed as package api
// composes it (the same fallbacks for unknown paths and methods), with the
// agents' door beside it: openapi.json documents both.
type testServer struct {
	*Door
	engine *gin.Engine
}

func (s *testServer) Handler() http.Handler { return s.engine }

// LocalHandler serves the engine as the admin socket does.
func (s *testServer) LocalHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.engine.ServeHTTP(w, caller.AsLocal(r))
	})
}

// env is a running REST API over a real bbolt store.
type env struct {
	t        *testing.T
	fx       *apitest.Fixture
	dir      string
	st       *boltstore.Store
	keys     *apikeys.Service
	clusters *clusters.Service
	srv      *testServer
	ts       *httptest.Server
	logs     *apitest.SyncBuffer
	admin    apikeys.Info
	adminSec string
	user     apikeys.Info
	userSec  string
	clock    *apitest.Clock
	// Day-2 operations over fake Nodes and members; agents are the
	// tests' own loops.
	desired  *desired.Service
	rollouts *rollout.Engine
}

type envOpts struct {
	failuresPerMinute int
	noJoiner          bool
	tls               bool
	sigs              *auth.SignaturePolicy
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	f := apitest.NewFixture(t, o.noJoiner)
	e := &env{t: t, fx: f, dir: f.Dir, st: f.Store, keys: f.Keys, clusters: f.Clusters, logs: f.Logs, admin: f.Admin, adminSec: f.AdminSecret,
		user: f.User, userSec: f.UserSecret, clock: f.Clock, desired: f.Desired, rollouts: f.Rollouts}
	sigs := auth.DefaultSignaturePolicy()
	if o.sigs != nil {
		sigs = *o.sigs
	}
	reg := prometheus.NewRegistry()
	authFailures := promauto.With(reg).NewCounterVec(prometheus.CounterOpts{Name: "test_auth_failures_total"}, []string{"api", "outcome"})
	limiter := auth.NewFailLimiter(o.failuresPerMinute)
	door := New(Deps{Log: f.Log, Store: e.st, Clusters: e.clusters, Keys: e.keys, Limiter: limiter,
		Verifier: auth.NewVerifier(e.keys, sigs, e.clock.Now, reg),
		Failures: auth.NewFailures(limiter, e.keys, f.Log, authFailures, e.clock.Now), AuthFailures: authFailures,
		Bodies: bodycache.New(64<<20, prometheus.NewCounter(prometheus.CounterOpts{Name: "hits"}), prometheus.NewCounter(prometheus.CounterOpts{Name: "renders"})),
		Now:    e.clock.Now, Desired: e.desired, Rollouts: e.rollouts, Positions: positions.NewService(nil, e.st, nil)})
	gin.SetMode(gin.ReleaseMode)
	eng := gin.New()
	eng.HandleMethodNotAllowed = true
	door.Route(eng)
	agentdoor.New(e.desired, f.Log).Route(eng)
	eng.NoRoute(NoRoute)
	eng.NoMethod(NoMethod)
	e.srv = &testServer{Door: door, engine: eng}
	if o.tls {
		e.ts = httptest.NewTLSServer(e.srv.Handler())
	} else {
		e.ts = httptest.NewServer(e.srv.Handler())
	}
	t.Cleanup(e.ts.Close)
	return e
}

func (e *env) healthy(ref string) { e.fx.Healthy(e.t, ref) }

// tenancyEnv: the user key "dev" owns cluster "mine", another user key
// "eve" (its own account) owns "theirs", and the admin owns "ops"
// (apitest.Fixture.Tenancy).
func tenancyEnv(t *testing.T) (e *env, eve apikeys.Info, eveSec string, mine, theirs, ops core.Cluster) {
	e = newEnv(t, envOpts{})
	eve, eveSec, mine, theirs, ops = e.fx.Tenancy(t)
	return
}

func (e *env) rest(key, secret string) *apitest.RESTClient {
	return apitest.NewRESTClient(e.t, e.ts, key, secret, OpenAPI())
}
