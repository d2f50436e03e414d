package console

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/ztpd/ztpd/api/auth"
	"github.com/ztpd/ztpd/api/bodycache"
	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/api/internal/apitest"
	"github.com/ztpd/ztpd/api/rest"
	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/desired"
	"github.com/ztpd/ztpd/internal/rollout"
	"github.com/ztpd/ztpd/internal/store/boltstore"
)

// testServer is the console's door and the REST door it fetches its data
// from, on an engine composed as package api composes them: the security
// headers on every answer, the same fallbacks for unknown paths and
// methods.
type testServer struct {
	*Door
	rest   *rest.Door
	engine *gin.Engine
}

func (s *testServer) Handler() http.Handler { return s.engine }

// env is a running console over a real bbolt store.
type env struct {
	t        *testing.T
	fx       *apitest.Fixture
	dir      string
	st       *boltstore.Store
	keys     *apikeys.Service
	clusters *clusters.Service
	srv      *testServer
	images   *imagestore.Store // with envOpts.images
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
	// images gives REST an image store (env.images) to upload to.
	images bool
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	f := apitest.NewFixture(t, o.noJoiner)
	e := &env{t: t, fx: f, dir: f.Dir, st: f.Store, keys: f.Keys, clusters: f.Clusters, logs: f.Logs, admin: f.Admin, adminSec: f.AdminSecret,
		user: f.User, userSec: f.UserSecret, clock: f.Clock, desired: f.Desired, rollouts: f.Rollouts}
	e.srv = e.compose(o)
	if o.tls {
		e.ts = httptest.NewTLSServer(e.srv.Handler())
	} else {
		e.ts = httptest.NewServer(e.srv.Handler())
	}
	t.Cleanup(e.ts.Close)
	return e
}

// compose builds the console's and the REST door over e's services, on an
// engine of their own.
func (e *env) compose(o envOpts) *testServer {
	t, f := e.t, e.fx
	sigs := auth.DefaultSignaturePolicy()
	if o.sigs != nil {
		sigs = *o.sigs
	}
	reg := prometheus.NewRegistry()
	authFailures := promauto.With(reg).NewCounterVec(prometheus.CounterOpts{Name: "test_auth_failures_total"}, []string{"api", "outcome"})
	limiter := auth.NewFailLimiter(o.failuresPerMinute)
	failures := auth.NewFailures(limiter, e.keys, f.Log, authFailures, e.clock.Now)
	var srv *testServer
	door := New(Deps{Log: f.Log, Store: e.st, Keys: e.keys, Limiter: limiter, Failures: failures, AuthFailures: authFailures, Now: e.clock.Now,
		Counts: func(own map[string]bool) (client.DeviceCounts, error) { return srv.rest.DeviceCounts(own) }})
	rdeps := rest.Deps{Log: f.Log, Store: e.st, Clusters: e.clusters, Keys: e.keys, Limiter: limiter,
		Verifier: auth.NewVerifier(e.keys, sigs, e.clock.Now, reg), Failures: failures, AuthFailures: authFailures,
		Bodies:   bodycache.New(64<<20, prometheus.NewCounter(prometheus.CounterOpts{Name: "hits"}), prometheus.NewCounter(prometheus.CounterOpts{Name: "renders"})),
		Sessions: door, Now: e.clock.Now, Desired: e.desired, Rollouts: e.rollouts}
	if o.images {
		st, err := imagestore.Open(e.st, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		e.images = st
		rdeps.Images, rdeps.ImageStore, rdeps.ISOBaseURL = st, st, "http://10.99.0.1:8080/isos/"
	}
	rd := rest.New(rdeps)
	gin.SetMode(gin.ReleaseMode)
	eng := gin.New()
	eng.HandleMethodNotAllowed = true
	eng.Use(SecurityHeaders)
	rd.Route(eng)
	door.Route(eng)
	eng.NoRoute(rest.NoRoute)
	eng.NoMethod(rest.NoMethod)
	srv = &testServer{Door: door, rest: rd, engine: eng}
	return srv
}

// tenancyEnv: the user key "dev" owns cluster "mine", another user key
// "eve" (its own account) owns "theirs", and the admin owns "ops"
// (apitest.Fixture.Tenancy).
func tenancyEnv(t *testing.T) (e *env, eve apikeys.Info, eveSec string, mine, theirs, ops core.Cluster) {
	e = newEnv(t, envOpts{})
	eve, eveSec, mine, theirs, ops = e.fx.Tenancy(t)
	return
}

func (e *env) runAgents(devices ...string) { e.fx.RunAgents(e.t, devices...) }

func (e *env) fabric() { e.fx.Fabric(e.t) }

const labID = apitest.LabID

func dayDevice(i int) string { return apitest.DayDevice(i) }

func clusterState(t *testing.T, e *env, id string) core.ClusterState { return e.fx.ClusterState(t, id) }

func (e *env) rest(key, secret string) *apitest.RESTClient {
	return apitest.NewRESTClient(e.t, e.ts, key, secret, rest.OpenAPI())
}
