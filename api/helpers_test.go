package api

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"github.com/ztpd/ztpd/api/auth"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/desired"
	"github.com/ztpd/ztpd/internal/rollout"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/internal/store/storetest"
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

func hmacSig(secret, s string) string {
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(strings.ToLower(s)))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// hmacExact is the REST signature: the same HMAC over the string as is.
func hmacExact(secret, s string) string {
	m := hmac.New(sha1.New, []byte(secret))
	m.Write([]byte(s))
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
	s := encodeValues(v)
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

// testMembership is a joiner stand-in for API tests: it issues a kubeconfig
// and reads memberships from the store, nothing else.
type testMembership struct {
	st core.Store
	mu sync.Mutex
	n  map[string]int
}

func (m *testMembership) count(op string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == nil {
		m.n = map[string]int{}
	}
	m.n[op]++
	return nil
}
func (m *testMembership) Provision(context.Context, core.Cluster) error { return m.count("provision") }
func (m *testMembership) Resize(context.Context, core.Cluster) error    { return m.count("resize") }
func (m *testMembership) SetVersion(context.Context, core.Cluster, core.Version) error {
	return m.count("setversion")
}
func (m *testMembership) Stop(context.Context, core.Cluster) error    { return m.count("stop") }
func (m *testMembership) Start(context.Context, core.Cluster) error   { return m.count("start") }
func (m *testMembership) Destroy(context.Context, core.Cluster) error { return m.count("destroy") }
func (m *testMembership) Kubeconfig(_ context.Context, c core.Cluster, req clusters.KubeconfigRequest) (clusters.IssuedKubeconfig, error) {
	return clusters.IssuedKubeconfig{Config: []byte(fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: %s\nusers:\n- name: %s\n", c.Name, req.User)),
		User: req.User, Group: req.Group, Serial: "1", NotAfter: time.Now().Add(req.Validity)}, nil
}
func (m *testMembership) Approve(_ context.Context, id, cluster string) (core.Device, error) {
	var d core.Device
	err := m.st.Update(func(tx core.Tx) error {
		var err error
		if d, err = tx.Devices().Get(id); err != nil {
			return err
		}
		d.Approved = true
		if cluster != "" {
			d.Cluster = cluster
		}
		return tx.Devices().Put(d)
	})
	return d, err
}
func (m *testMembership) RevokeToken(context.Context, string) error { return nil }

func (m *testMembership) ResetDevice(_ context.Context, id string) (core.Device, error) {
	return core.Device{ID: id, MAC: id, State: core.StateLeased}, m.count("reset")
}

// env is a running API over a real bbolt store.
type env struct {
	t        *testing.T
	dir      string
	st       *boltstore.Store
	keys     *apikeys.Service
	clusters *clusters.Service
	srv      *Server
	ts       *httptest.Server
	logs     *syncBuffer
	admin    apikeys.Info
	adminSec string
	user     apikeys.Info
	userSec  string
	clock    *fakeClock
	// Day-2 operations over fake Nodes and members (rest_dayops_test.go);
	// agents are the tests' own loops (runAgents).
	desired  *desired.Service
	rollouts *rollout.Engine
	nodes    *testNodes
	members  *testMembers
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type fakeClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

type envOpts struct {
	failuresPerMinute int
	noJoiner          bool
	tls               bool
	sigs              *auth.SignaturePolicy
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	f := storetest.Open(t)
	e := &env{t: t, dir: f.Dir, st: f.Store, logs: &syncBuffer{}, clock: &fakeClock{}}
	e.keys = apikeys.New(e.st, f.Keys)
	log := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var mem clusters.Membership
	if !o.noJoiner {
		mem = &testMembership{st: e.st}
	}
	var err error
	if e.clusters, err = clusters.New(e.st, mem, clusters.Options{Log: log}); err != nil {
		t.Fatal(err)
	}
	if e.admin, e.adminSec, err = e.keys.Create("ops", apikeys.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	if e.user, e.userSec, err = e.keys.Create("dev", apikeys.RoleUser); err != nil {
		t.Fatal(err)
	}
	e.nodes, e.members = &testNodes{}, &testMembers{st: e.st}
	e.desired = desired.New(e.st, desired.Options{Auth: credentialIsDevice{}, Log: log})
	if e.rollouts, err = rollout.New(e.st, rollout.Options{Nodes: e.nodes, Agents: e.desired, Members: e.members, Log: log}); err != nil {
		t.Fatal(err)
	}
	e.srv = New(Deps{Metrics: prometheus.NewRegistry(), Log: log, Store: e.st, Clusters: e.clusters, Keys: e.keys,
		AuthFailuresPerMinute: o.failuresPerMinute, Now: e.clock.now, Signatures: o.sigs,
		Desired: e.desired, Rollouts: e.rollouts})
	if o.tls {
		e.ts = httptest.NewTLSServer(e.srv.Handler())
	} else {
		e.ts = httptest.NewServer(e.srv.Handler())
	}
	t.Cleanup(func() {
		e.ts.Close()
		e.clusters.Close(context.Background())
	})
	return e
}

func (e *env) adminClient() *csClient {
	return &csClient{t: e.t, base: e.ts.URL, apiKey: e.admin.APIKey, secret: e.adminSec, http: e.ts.Client()}
}

func (e *env) userClient() *csClient {
	return &csClient{t: e.t, base: e.ts.URL, apiKey: e.user.APIKey, secret: e.userSec, http: e.ts.Client()}
}

// healthy feeds the cluster one observation of a healthy cluster (its API
// server answers, every desired Node Ready), as ztpd's watch would: the
// create job leaves a cluster Starting, this makes it Running.
func (e *env) healthy(ref string) {
	e.t.Helper()
	var c core.Cluster
	if err := e.st.View(func(tx core.Tx) error {
		var err error
		c, err = clusters.ByRef(tx, ref)
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
	cp := max(c.ControlNodes, 1)
	if err := e.clusters.ObserveHealth(c.ID, clusters.Health{APIReachable: true, Nodes: cp + c.Size, ReadyNodes: cp + c.Size,
		ControlPlanes: cp, ReadyControlPlanes: cp}); err != nil {
		e.t.Fatal(err)
	}
}
