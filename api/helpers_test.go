package api

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/api/auth"
	"github.com/ztpd/ztpd/api/internal/apitest"
	"github.com/ztpd/ztpd/api/rest"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/desired"
	"github.com/ztpd/ztpd/internal/rollout"
	"github.com/ztpd/ztpd/internal/store/boltstore"
)

// csClient is a CloudStack API client written from the specification (the
// reference document and the Go SDK's request builder), independently of
// package signing: it must agree with the server, not share code with it.
type csClient struct {
	t       *testing.T
	base    string
	apiKey  string
	secret  string
	expires time.Time
	http    *http.Client
}

func hmacSig(secret, s string) string {
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(strings.ToLower(s)))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

type csResp struct {
	status int
	body   map[string]json.RawMessage
	raw    []byte
}

// inner returns the single envelope value and its key.
func (r csResp) inner(t *testing.T) (string, map[string]json.RawMessage) {
	t.Helper()
	if len(r.body) != 1 {
		t.Fatalf("envelope has %d keys: %s", len(r.body), r.raw)
	}
	for k, v := range r.body {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(v, &m); err != nil {
			t.Fatalf("envelope value is not an object: %s", r.raw)
		}
		return k, m
	}
	return "", nil
}

// call signs params like the SDK (signatureversion 3, expires) and sends
// them with GET, or POST form when post is set.
func (c *csClient) call(command string, params map[string]string, post bool) csResp {
	c.t.Helper()
	v := url.Values{}
	for k, val := range params {
		v.Set(k, val)
	}
	v.Set("apiKey", c.apiKey)
	v.Set("command", command)
	if v.Get("response") == "" {
		v.Set("response", "json")
	}
	v.Set("signatureversion", "3")
	exp := c.expires
	if exp.IsZero() {
		exp = time.Now().UTC().Add(15 * time.Minute)
	}
	v.Set("expires", exp.Format(time.RFC3339))
	s := apitest.EncodeValues(v)
	sig := hmacSig(c.secret, s)
	var resp *http.Response
	var err error
	if post {
		v.Set("signature", sig)
		resp, err = c.http.PostForm(c.base+"/client/api", v)
	} else {
		resp, err = c.http.Get(c.base + "/client/api?" + s + "&signature=" + url.QueryEscape(sig))
	}
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := csResp{status: resp.StatusCode, raw: raw}
	if err := json.Unmarshal(raw, &out.body); err != nil {
		c.t.Fatalf("%s: not JSON (%d): %s", command, resp.StatusCode, raw)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		c.t.Fatalf("%s: content type %q", command, ct)
	}
	return out
}

// ok calls and requires HTTP 200 with the command's envelope key.
func (c *csClient) ok(command string, params map[string]string, post bool) map[string]json.RawMessage {
	c.t.Helper()
	r := c.call(command, params, post)
	if r.status != http.StatusOK {
		c.t.Fatalf("%s: HTTP %d: %s", command, r.status, r.raw)
	}
	key, inner := r.inner(c.t)
	if key != strings.ToLower(command)+"response" {
		c.t.Fatalf("%s: envelope key %q", command, key)
	}
	return inner
}

// wait polls queryAsyncJobResult until the job is no longer pending.
func (c *csClient) wait(jobid string) map[string]json.RawMessage {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		r := c.ok("queryAsyncJobResult", map[string]string{"jobid": jobid}, false)
		var status int
		mustJSON(c.t, r["jobstatus"], &status)
		if status != 0 {
			return r
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("job %s did not finish", jobid)
	return nil
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

// env is a running API over a real bbolt store.
type env struct {
	t        *testing.T
	fx       *apitest.Fixture
	dir      string
	st       *boltstore.Store
	keys     *apikeys.Service
	clusters *clusters.Service
	srv      *Server
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
	e.srv = New(Deps{Metrics: prometheus.NewRegistry(), Log: f.Log, Store: e.st, Clusters: e.clusters, Keys: e.keys,
		AuthFailuresPerMinute: o.failuresPerMinute, Now: e.clock.Now, Signatures: o.sigs,
		Desired: e.desired, Rollouts: e.rollouts})
	if o.tls {
		e.ts = httptest.NewTLSServer(e.srv.Handler())
	} else {
		e.ts = httptest.NewServer(e.srv.Handler())
	}
	t.Cleanup(e.ts.Close)
	return e
}

func (e *env) adminClient() *csClient {
	return &csClient{t: e.t, base: e.ts.URL, apiKey: e.admin.APIKey, secret: e.adminSec, http: e.ts.Client()}
}

func (e *env) userClient() *csClient {
	return &csClient{t: e.t, base: e.ts.URL, apiKey: e.user.APIKey, secret: e.userSec, http: e.ts.Client()}
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
	return apitest.NewRESTClient(e.t, e.ts, key, secret, rest.OpenAPI())
}
