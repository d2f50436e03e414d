package rest

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/ztpd/ztpd/api/agentdoor"
	"github.com/ztpd/ztpd/api/auth"
	"github.com/ztpd/ztpd/api/bodycache"
	"github.com/ztpd/ztpd/api/caller"
	"github.com/ztpd/ztpd/api/internal/apitest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/desired"
	"github.com/ztpd/ztpd/internal/rollout"
	"github.com/ztpd/ztpd/internal/store/boltstore"
)

// encodeValues mirrors the SDK: sort keys, url.QueryEscape each value, then
// "+" -> "%20" and "%2A" -> "*".
func encodeValues(v url.Values) string {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		for _, val := range v[k] {
			e := url.QueryEscape(val)
			e = strings.ReplaceAll(e, "+", "%20")
			e = strings.ReplaceAll(e, "%2A", "*")
			parts = append(parts, k+"="+e)
		}
	}
	return strings.Join(parts, "&")
}

// hmacExact is the REST signature: the same HMAC over the string as is.
func hmacExact(secret, s string) string {
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(s))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func mustJSON(t *testing.T, raw json.RawMessage, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("decoding %s into %T: %v", raw, v, err)
	}
}

// jsonKind reports the JSON type of a raw value.
func jsonKind(raw json.RawMessage) string {
	s := strings.TrimSpace(string(raw))
	switch {
	case s == "":
		return "missing"
	case s == "null":
		return "null"
	case s == "true" || s == "false":
		return "bool"
	case s[0] == '"':
		return "string"
	case s[0] == '[':
		return "array"
	case s[0] == '{':
		return "object"
	}
	return "number"
}

// checkTypes asserts each listed field has the JSON type given.
func checkTypes(t *testing.T, what string, obj map[string]json.RawMessage, types map[string]string) {
	t.Helper()
	for field, want := range types {
		if got := jsonKind(obj[field]); got != want {
			t.Errorf("%s.%s: JSON %s, want %s (value %s)", what, field, got, want, obj[field])
		}
	}
}

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
		Now:    e.clock.Now, Desired: e.desired, Rollouts: e.rollouts})
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
