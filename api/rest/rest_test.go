package rest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/ztpd/ztpd/api/agentdoor"
	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
)

// loadDoc loads and validates the OpenAPI document.
func loadDoc(t *testing.T) (*openapi3.T, routers.Router) {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(OpenAPI())
	if err != nil {
		t.Fatalf("openapi.json does not load: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.json is not a valid OpenAPI 3 document: %v", err)
	}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return doc, router
}

// restClient signs REST requests as the OpenAPI document describes, and
// validates every response against the document.
type restClient struct {
	t      *testing.T
	base   string
	apiKey string
	secret string
	http   *http.Client
	router routers.Router
	// sent counts requests: each is signed with its own expiry, so the
	// same write twice in one second is two signatures, as a real client
	// signs every write afresh (the replay guard refuses a repeat).
	sent int
}

func (c *restClient) authorization(method, path string, q url.Values, body []byte, exp time.Time) string {
	v := url.Values{}
	for k, vals := range q {
		v[k] = vals
	}
	// Milliseconds: two identical writes a moment apart must not sign
	// alike, or the second is refused as a replay.
	e := exp.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	v.Set("ztpd-method", method)
	v.Set("ztpd-path", path)
	v.Set("ztpd-expires", e)
	v.Set("ztpd-apikey", c.apiKey)
	if len(body) > 0 {
		sum := sha256.Sum256(body)
		v.Set("ztpd-body-sha256", hex.EncodeToString(sum[:]))
	}
	// Like CloudStack's signature, but the string is not lowercased.
	return fmt.Sprintf("ZTPD-HMAC-SHA1 apikey=%s, expires=%s, signature=%s", c.apiKey, e, hmacExact(c.secret, encodeValues(v)))
}

type restResp struct {
	status int
	header http.Header
	raw    []byte
}

func (r restResp) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.raw, v); err != nil {
		t.Fatalf("decode %s: %v", r.raw, err)
	}
}

func (c *restClient) do(method, pathAndQuery string, body any) restResp {
	c.t.Helper()
	u, err := url.Parse(c.base + pathAndQuery)
	if err != nil {
		c.t.Fatal(err)
	}
	var raw []byte
	if body != nil {
		raw, _ = json.Marshal(body)
	}
	req, _ := http.NewRequest(method, u.String(), bytes.NewReader(raw))
	if c.apiKey != "" {
		c.sent++
		exp := time.Now().Add(5*time.Minute + time.Duration(c.sent%600)*time.Second)
		req.Header.Set("Authorization", c.authorization(method, u.EscapedPath(), u.Query(), raw, exp))
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.send(req)
}

func (c *restClient) send(req *http.Request) restResp {
	c.t.Helper()
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := restResp{status: resp.StatusCode, header: resp.Header, raw: raw}
	c.validate(req, out)
	return out
}

// validate checks the response against the OpenAPI document: the status
// must be documented for the operation and the body must match its schema.
func (c *restClient) validate(req *http.Request, r restResp) {
	c.t.Helper()
	if c.router == nil {
		return
	}
	vreq := req.Clone(context.Background())
	vreq.URL.Host, vreq.URL.Scheme, vreq.Host = "", "", ""
	route, params, err := c.router.FindRoute(vreq)
	if err != nil {
		if r.status == http.StatusNotFound || r.status == http.StatusMethodNotAllowed {
			var e map[string]map[string]string
			if json.Unmarshal(r.raw, &e) != nil || e["error"]["code"] == "" {
				c.t.Errorf("%s %s: %d without a JSON error body: %s", req.Method, req.URL.Path, r.status, r.raw)
			}
			return
		}
		c.t.Errorf("%s %s answered %d but is not in openapi.json: %v", req.Method, req.URL.Path, r.status, err)
		return
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route},
		Status:                 r.status, Header: r.header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	in.SetBodyBytes(r.raw)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		c.t.Errorf("%s %s -> %d does not match openapi.json: %v\nbody: %s", req.Method, req.URL.Path, r.status, err, r.raw)
	}
}

func (e *env) rest(key, secret string) *restClient {
	_, router := loadDoc(e.t)
	return &restClient{t: e.t, base: e.ts.URL, apiKey: key, secret: secret, http: e.ts.Client(), router: router}
}

func seed(t *testing.T, st core.Store, devices int) {
	t.Helper()
	err := st.Update(func(tx core.Tx) error {
		now := time.Now().UTC()
		for i := 0; i < devices; i++ {
			mac := fmt.Sprintf("02:00:00:00:%02x:%02x", i/256, i%256)
			kind := core.KindSONiC
			if i%3 == 0 {
				kind = core.KindVM
			}
			d := core.Device{ID: mac, Kind: kind, MAC: mac, Serial: fmt.Sprintf("SN%05d", i), IP: fmt.Sprintf("10.99.%d.%d", 1+i/250, 1+i%250),
				Subnet: "lab", State: core.StateLeased, FirstSeen: now, LastSeen: now, UpdatedAt: now}
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
			if err := tx.Leases().Put(core.Lease{IP: d.IP, MAC: mac, Subnet: "lab", State: core.LeaseActive, Start: now, Expiry: now.Add(time.Hour), UpdatedAt: now}); err != nil {
				return err
			}
			if _, err := tx.Events().Append(core.Event{Type: "dhcp.ack", Device: mac, Message: "lease " + d.IP}); err != nil {
				return err
			}
		}
		return tx.Tokens().Put(core.Token{ID: "abcdef", Kind: "kubeadm", SecretHash: "deadbeefsecrethash", Cluster: "c", Created: now})
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestOpenAPIDocumentCoversEveryRoute(t *testing.T) {
	doc, _ := loadDoc(t)
	e := newEnv(t, envOpts{})
	documented := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}
	param := regexp.MustCompile(`:([a-z]+)`)
	served := map[string]bool{}
	for _, r := range e.srv.engine.Routes() {
		if !strings.HasPrefix(r.Path, Path) && !strings.HasPrefix(r.Path, agentdoor.Path) {
			continue
		}
		served[r.Method+" "+param.ReplaceAllString(r.Path, "{$1}")] = true
	}
	var missing, extra []string
	for k := range served {
		if !documented[k] {
			missing = append(missing, k)
		}
	}
	for k := range documented {
		if !served[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 || len(extra) > 0 {
		t.Fatalf("routes not documented: %v\ndocumented but not served: %v", missing, extra)
	}
	// The document is served, without authentication.
	resp, err := http.Get(e.ts.URL + OpenAPIPath)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(body, OpenAPI()) {
		t.Fatalf("GET openapi.json: %d", resp.StatusCode)
	}
}

func TestRESTDevicesPagingAndFilters(t *testing.T) {
	e := newEnv(t, envOpts{})
	seed(t, e.st, 250)
	c := e.rest(e.admin.APIKey, e.adminSec)
	var seen []string
	cursor := ""
	pages := 0
	for {
		q := "/api/v1/devices?limit=100"
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		r := c.do("GET", q, nil)
		if r.status != 200 {
			t.Fatalf("page %d: %d %s", pages, r.status, r.raw)
		}
		var p client.Page[core.Device]
		r.decode(t, &p)
		for _, d := range p.Items {
			seen = append(seen, d.ID)
		}
		pages++
		if p.NextCursor == "" {
			break
		}
		cursor = p.NextCursor
	}
	if len(seen) != 250 || pages != 3 || !sort.StringsAreSorted(seen) {
		t.Fatalf("paged %d devices in %d pages", len(seen), pages)
	}
	var p client.Page[core.Device]
	c.do("GET", "/api/v1/devices?kind=vm&limit=1000", nil).decode(t, &p)
	if len(p.Items) != 84 {
		t.Fatalf("kind filter: %d", len(p.Items))
	}
	c.do("GET", "/api/v1/devices?state=joined", nil).decode(t, &p)
	if len(p.Items) != 0 {
		t.Fatalf("state filter: %d", len(p.Items))
	}
	var d core.Device
	r := c.do("GET", "/api/v1/devices/02-00-00-00-00-05", nil)
	r.decode(t, &d)
	if r.status != 200 || d.Serial != "SN00005" {
		t.Fatalf("device by dashed MAC: %d %+v", r.status, d)
	}
	c.do("GET", "/api/v1/devices/SN00007", nil).decode(t, &d)
	if d.ID != "02:00:00:00:00:07" {
		t.Fatalf("device by serial: %+v", d)
	}
	var lp client.Page[core.Lease]
	c.do("GET", "/api/v1/leases?limit=10&mac=02:00:00:00:00:09", nil).decode(t, &lp)
	if len(lp.Items) != 1 || lp.Items[0].MAC != "02:00:00:00:00:09" {
		t.Fatalf("lease filter: %+v", lp)
	}
	var ep client.Page[core.Event]
	c.do("GET", "/api/v1/events?since=240&type=dhcp", nil).decode(t, &ep)
	// Two apikey.created events come first, so dhcp events are 3..252.
	if len(ep.Items) != 12 || ep.Items[0].Seq != 241 || ep.Items[0].Type != "dhcp.ack" {
		t.Fatalf("events since: %d", len(ep.Items))
	}
	for _, bad := range []string{"/api/v1/devices?limit=0", "/api/v1/devices?limit=5000", "/api/v1/devices?cursor=@@",
		"/api/v1/events?since=x", "/api/v1/devices?approved=maybe", "/api/v1/devices?ztpd-method=GET"} {
		if r := c.do("GET", bad, nil); r.status != 400 {
			t.Errorf("%s: %d %.200s", bad, r.status, r.raw)
		}
	}
	if r := c.do("GET", "/api/v1/devices/02:00:00:00:ff:ff", nil); r.status != 404 {
		t.Errorf("unknown device: %d", r.status)
	}
	if r := c.do("GET", "/api/v1/nothing", nil); r.status != 404 {
		t.Errorf("unknown path: %d", r.status)
	}
	if r := c.do("PUT", "/api/v1/devices", nil); r.status != 405 {
		t.Errorf("wrong method: %d %s", r.status, r.raw)
	}
}

func TestRESTAuthAndRoles(t *testing.T) {
	e := newEnv(t, envOpts{})
	seed(t, e.st, 3)
	anon := e.rest("", "")
	if r := anon.do("GET", "/api/v1/devices", nil); r.status != 401 || !strings.Contains(string(r.raw), `"unauthorized"`) {
		t.Fatalf("no auth: %d %s", r.status, r.raw)
	}
	wrong := e.rest(e.admin.APIKey, "wrong")
	if r := wrong.do("GET", "/api/v1/devices", nil); r.status != 401 {
		t.Fatalf("wrong secret: %d", r.status)
	}
	// A signature for one path does not open another.
	u := e.rest(e.user.APIKey, e.userSec)
	req, _ := http.NewRequest("GET", e.ts.URL+"/api/v1/leases", nil)
	req.Header.Set("Authorization", u.authorization("GET", "/api/v1/devices", nil, nil, time.Now().Add(time.Minute)))
	if r := u.send(req); r.status != 401 {
		t.Fatalf("replayed to another path: %d", r.status)
	}
	// Expired.
	req, _ = http.NewRequest("GET", e.ts.URL+"/api/v1/devices", nil)
	req.Header.Set("Authorization", u.authorization("GET", "/api/v1/devices", nil, nil, time.Now().Add(-time.Second)))
	if r := u.send(req); r.status != 401 {
		t.Fatalf("expired: %d", r.status)
	}
	// Bearer is refused over plain HTTP (the secret would travel in clear).
	req, _ = http.NewRequest("GET", e.ts.URL+"/api/v1/devices", nil)
	req.Header.Set("Authorization", "Bearer "+e.user.APIKey+":"+e.userSec)
	if r := u.send(req); r.status != 401 {
		t.Fatalf("bearer over HTTP: %d", r.status)
	}
	// Role: tokens and approvals are admin only.
	if r := u.do("GET", "/api/v1/tokens", nil); r.status != 403 {
		t.Fatalf("user lists tokens: %d", r.status)
	}
	if r := u.do("POST", "/api/v1/devices/02:00:00:00:00:01/approve", map[string]string{}); r.status != 403 {
		t.Fatalf("user approves: %d", r.status)
	}
	a := e.rest(e.admin.APIKey, e.adminSec)
	r := a.do("GET", "/api/v1/tokens", nil)
	if r.status != 200 || strings.Contains(string(r.raw), "deadbeefsecrethash") || strings.Contains(string(r.raw), "secret") {
		t.Fatalf("tokens: %d %s", r.status, r.raw)
	}
	if r := a.do("POST", "/api/v1/tokens/abcdef/revoke", nil); r.status != 200 || !strings.Contains(string(r.raw), `"revoked":true`) {
		t.Fatalf("revoke: %d %s", r.status, r.raw)
	}
	if r := a.do("POST", "/api/v1/devices/02:00:00:00:00:01/approve", map[string]string{"cluster": ""}); r.status != 200 {
		t.Fatalf("approve: %d %s", r.status, r.raw)
	}
	if r := a.do("POST", "/api/v1/devices/02:00:00:00:00:01/approve", map[string]string{"clutser": "x"}); r.status != 400 {
		t.Fatalf("unknown body field: %d %s", r.status, r.raw)
	}
}

func TestRESTBearerOverTLS(t *testing.T) {
	e := newEnv(t, envOpts{tls: true})
	c := e.rest("", "")
	req, _ := http.NewRequest("GET", e.ts.URL+"/api/v1/devices", nil)
	req.Header.Set("Authorization", "Bearer "+e.user.APIKey+":"+e.userSec)
	if r := c.send(req); r.status != 200 {
		t.Fatalf("bearer over TLS: %d %s", r.status, r.raw)
	}
	req, _ = http.NewRequest("GET", e.ts.URL+"/api/v1/devices", nil)
	req.Header.Set("Authorization", "Bearer "+e.user.APIKey+":"+e.adminSec)
	if r := c.send(req); r.status != 401 {
		t.Fatalf("bearer with another key's secret: %d", r.status)
	}
}

func TestRESTClusterLifecycle(t *testing.T) {
	e := newEnv(t, envOpts{})
	a := e.rest(e.admin.APIKey, e.adminSec)
	u := e.rest(e.user.APIKey, e.userSec)
	var v core.Version
	if r := u.do("POST", "/api/v1/versions", map[string]any{"semver": "1.30.2", "url": "http://x/a.iso"}); r.status != 403 {
		t.Fatalf("user adds version: %d", r.status)
	}
	r := a.do("POST", "/api/v1/versions", map[string]any{"semver": "1.30.2", "url": "http://10.99.0.1:8080/isos/v1.30.2.iso"})
	r.decode(t, &v)
	if r.status != 201 || v.Name != "v1.30.2" {
		t.Fatalf("add version: %d %s", r.status, r.raw)
	}
	a.do("POST", "/api/v1/versions", map[string]any{"semver": "1.31.0", "url": "http://10.99.0.1:8080/isos/v1.31.0.iso"})
	if r := a.do("POST", "/api/v1/versions", map[string]any{"semver": "1.9.0", "url": "http://x/a.iso"}); r.status != 400 {
		t.Fatalf("old version: %d", r.status)
	}

	wait := func(r restResp, by ...*restClient) client.Job {
		t.Helper()
		poller := u
		if len(by) > 0 {
			poller = by[0]
		}
		if r.status != 202 {
			t.Fatalf("not accepted: %d %s", r.status, r.raw)
		}
		var acc struct{ Job client.Job }
		r.decode(t, &acc)
		loc := r.header.Get("Location")
		for i := 0; i < 500; i++ {
			var j client.Job
			poller.do("GET", loc, nil).decode(t, &j)
			if j.Status != "pending" {
				return j
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatal("job did not finish")
		return client.Job{}
	}
	j := wait(u.do("POST", "/api/v1/clusters", map[string]any{"name": "lab", "version": "v1.30.2", "size": 2}))
	if j.Status != "succeeded" || j.Cluster == nil || j.Cluster.State != core.ClusterStarting || j.Cluster.CPU != 6 {
		t.Fatalf("create: %+v", j)
	}
	// Starting: no kubeconfig yet, and the answer says what it waits for.
	if r := u.do("GET", "/api/v1/clusters/lab/kubeconfig", nil); r.status != 503 ||
		!strings.Contains(string(r.raw), `"code":"unavailable"`) ||
		!strings.Contains(string(r.raw), "Kubernetes cluster lab is Starting (waiting for its first control plane to start the API server") {
		t.Fatalf("kubeconfig of a Starting cluster: %d %s", r.status, r.raw)
	}
	getLab := func() (client.Cluster, []byte) {
		t.Helper()
		var lab client.Cluster
		r := u.do("GET", "/api/v1/clusters/lab", nil)
		if r.status != 200 {
			t.Fatalf("get: %d %s", r.status, r.raw)
		}
		r.decode(t, &lab)
		return lab, r.raw
	}
	if lab, raw := getLab(); lab.State != core.ClusterStarting || lab.Observed != nil ||
		!strings.Contains(lab.Waiting, "waiting for its first control plane to start the API server") {
		t.Fatalf("Starting cluster: %s", raw)
	}
	e.healthy("lab") // ztpd's watch sees it answer, control plane Ready
	if lab, raw := getLab(); lab.State != core.ClusterRunning || lab.Waiting != "" || lab.Observed == nil ||
		!lab.Observed.APIReachable || lab.Observed.ReadyControlPlanes != 1 {
		t.Fatalf("after a healthy observation: %s", raw)
	}
	if r := u.do("POST", "/api/v1/clusters", map[string]any{"name": "lab", "version": "v1.30.2", "size": 2}); r.status != 409 {
		t.Fatalf("duplicate: %d %s", r.status, r.raw)
	}
	if j = wait(u.do("POST", "/api/v1/clusters/lab/scale", map[string]any{"size": 3})); j.Cluster.Size != 3 {
		t.Fatalf("scale: %+v", j)
	}
	if j = wait(u.do("POST", "/api/v1/clusters/lab/upgrade", map[string]any{"version": "v1.31.0"})); j.Cluster.Version.SemVer != "1.31.0" {
		t.Fatalf("upgrade: %+v", j)
	}
	if j = wait(u.do("POST", "/api/v1/clusters/lab/stop", nil)); j.Status != "succeeded" {
		t.Fatalf("stop: %+v", j)
	}
	if r := u.do("POST", "/api/v1/clusters/lab/upgrade", map[string]any{"version": "v1.31.0"}); r.status != 409 {
		t.Fatalf("upgrade while stopped: %d %s", r.status, r.raw)
	}
	if j = wait(u.do("POST", "/api/v1/clusters/lab/start", nil)); j.Status != "succeeded" || j.Cluster == nil || j.Cluster.State != "Starting" {
		t.Fatalf("start: %+v", j)
	}
	e.healthy("lab") // started, it is Running once the watch sees it healthy
	var kc map[string]string
	u.do("GET", "/api/v1/clusters/lab/kubeconfig", nil).decode(t, &kc)
	if !strings.Contains(kc["kubeconfig"], "name: lab") {
		t.Fatalf("kubeconfig: %v", kc)
	}
	var cp client.Page[client.Cluster]
	u.do("GET", "/api/v1/clusters?state=Running", nil).decode(t, &cp)
	if len(cp.Items) != 1 {
		t.Fatalf("clusters: %+v", cp)
	}
	if r := a.do("DELETE", "/api/v1/versions/v1.31.0", nil); r.status != 409 {
		t.Fatalf("delete used version: %d %s", r.status, r.raw)
	}
	if j = wait(u.do("DELETE", "/api/v1/clusters/lab", nil)); j.Status != "succeeded" {
		t.Fatalf("delete: %+v", j)
	}
	if r := u.do("GET", "/api/v1/clusters/lab", nil); r.status != 404 {
		t.Fatalf("deleted cluster: %d", r.status)
	}
	var vv core.Version
	a.do("PATCH", "/api/v1/versions/v1.30.2", map[string]string{"state": "Disabled"}).decode(t, &vv)
	if vv.State != "Disabled" {
		t.Fatalf("disable: %+v", vv)
	}
	u.do("GET", "/api/v1/offerings", nil)
	u.do("GET", "/api/v1/images", nil)
	u.do("GET", "/api/v1/versions/v1.30.2", nil)
	// The user's writes are audit events naming its key and account, and
	// stay visible to it after its cluster is gone.
	var ev client.Page[core.Event]
	u.do("GET", "/api/v1/events?type=api.write", nil).decode(t, &ev)
	if len(ev.Items) < 6 {
		t.Fatalf("write events: %d", len(ev.Items))
	}
	for _, e := range ev.Items {
		if e.Fields["api_key"] == "" || e.Fields["key_name"] != "dev" || e.Fields["account"] == "" {
			t.Fatalf("write event without the key: %+v", e)
		}
	}
	// API writes are audit events: the device stream has none, and the
	// merged stream pages in sequence order across both.
	var dev client.Page[core.Event]
	u.do("GET", "/api/v1/events?type=api.write&stream=device", nil).decode(t, &dev)
	if len(dev.Items) != 0 {
		t.Fatalf("audit events in the device stream: %d", len(dev.Items))
	}
	var aud client.Page[core.Event]
	u.do("GET", "/api/v1/events?type=api.write&stream=audit", nil).decode(t, &aud)
	if len(aud.Items) != len(ev.Items) {
		t.Fatalf("audit stream %d, all %d", len(aud.Items), len(ev.Items))
	}
	var seqs []uint64
	for cursor := ""; ; {
		var p client.Page[core.Event]
		u.do("GET", "/api/v1/events?limit=3&cursor="+cursor, nil).decode(t, &p)
		for _, e := range p.Items {
			seqs = append(seqs, e.Seq)
		}
		if p.NextCursor == "" {
			break
		}
		cursor = p.NextCursor
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Fatalf("merged events out of order: %v", seqs)
		}
	}
	if r := u.do("GET", "/api/v1/events?stream=bogus", nil); r.status != 400 {
		t.Fatalf("bad stream: %d", r.status)
	}
	// Jobs are private to the key that started them.
	r = a.do("DELETE", "/api/v1/versions/v1.31.0?delete_iso=true", nil)
	var acc struct{ Job client.Job }
	r.decode(t, &acc)
	if r := u.do("GET", "/api/v1/jobs/"+acc.Job.ID, nil); r.status != 404 {
		t.Fatalf("user reads an admin job: %d", r.status)
	}
	if j := wait(r, a); j.Status != "succeeded" {
		t.Fatalf("delete version: %+v", j)
	}
}
