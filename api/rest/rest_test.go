package rest

import (
	"bytes"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/routers"

	"github.com/ztpd/ztpd/api/agentdoor"
	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/api/internal/apitest"
	"github.com/ztpd/ztpd/internal/core"
)

func loadDoc(t *testing.T) (*openapi3.T, routers.Router) { return apitest.LoadDoc(t, OpenAPI()) }

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
	apitest.Seed(t, e.st, 250)
	c := e.rest(e.admin.APIKey, e.adminSec)
	var seen []string
	cursor := ""
	pages := 0
	for {
		q := "/api/v1/devices?limit=100"
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		r := c.Do("GET", q, nil)
		if r.Status != 200 {
			t.Fatalf("page %d: %d %s", pages, r.Status, r.Raw)
		}
		var p client.Page[core.Device]
		r.Decode(t, &p)
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
	c.Do("GET", "/api/v1/devices?kind=vm&limit=1000", nil).Decode(t, &p)
	if len(p.Items) != 84 {
		t.Fatalf("kind filter: %d", len(p.Items))
	}
	c.Do("GET", "/api/v1/devices?state=joined", nil).Decode(t, &p)
	if len(p.Items) != 0 {
		t.Fatalf("state filter: %d", len(p.Items))
	}
	var d core.Device
	r := c.Do("GET", "/api/v1/devices/02-00-00-00-00-05", nil)
	r.Decode(t, &d)
	if r.Status != 200 || d.Serial != "SN00005" {
		t.Fatalf("device by dashed MAC: %d %+v", r.Status, d)
	}
	c.Do("GET", "/api/v1/devices/SN00007", nil).Decode(t, &d)
	if d.ID != "02:00:00:00:00:07" {
		t.Fatalf("device by serial: %+v", d)
	}
	var lp client.Page[core.Lease]
	c.Do("GET", "/api/v1/leases?limit=10&mac=02:00:00:00:00:09", nil).Decode(t, &lp)
	if len(lp.Items) != 1 || lp.Items[0].MAC != "02:00:00:00:00:09" {
		t.Fatalf("lease filter: %+v", lp)
	}
	var ep client.Page[core.Event]
	c.Do("GET", "/api/v1/events?since=240&type=dhcp", nil).Decode(t, &ep)
	// Two apikey.created events come first, so dhcp events are 3..252.
	if len(ep.Items) != 12 || ep.Items[0].Seq != 241 || ep.Items[0].Type != "dhcp.ack" {
		t.Fatalf("events since: %d", len(ep.Items))
	}
	for _, bad := range []string{"/api/v1/devices?limit=0", "/api/v1/devices?limit=5000", "/api/v1/devices?cursor=@@",
		"/api/v1/events?since=x", "/api/v1/devices?approved=maybe", "/api/v1/devices?ztpd-method=GET"} {
		if r := c.Do("GET", bad, nil); r.Status != 400 {
			t.Errorf("%s: %d %.200s", bad, r.Status, r.Raw)
		}
	}
	if r := c.Do("GET", "/api/v1/devices/02:00:00:00:ff:ff", nil); r.Status != 404 {
		t.Errorf("unknown device: %d", r.Status)
	}
	if r := c.Do("GET", "/api/v1/nothing", nil); r.Status != 404 {
		t.Errorf("unknown path: %d", r.Status)
	}
	if r := c.Do("PUT", "/api/v1/devices", nil); r.Status != 405 {
		t.Errorf("wrong method: %d %s", r.Status, r.Raw)
	}
}

func TestRESTAuthAndRoles(t *testing.T) {
	e := newEnv(t, envOpts{})
	apitest.Seed(t, e.st, 3)
	anon := e.rest("", "")
	if r := anon.Do("GET", "/api/v1/devices", nil); r.Status != 401 || !strings.Contains(string(r.Raw), `"unauthorized"`) {
		t.Fatalf("no auth: %d %s", r.Status, r.Raw)
	}
	wrong := e.rest(e.admin.APIKey, "wrong")
	if r := wrong.Do("GET", "/api/v1/devices", nil); r.Status != 401 {
		t.Fatalf("wrong secret: %d", r.Status)
	}
	// A signature for one path does not open another.
	u := e.rest(e.user.APIKey, e.userSec)
	req, _ := http.NewRequest("GET", e.ts.URL+"/api/v1/leases", nil)
	req.Header.Set("Authorization", u.Authorization("GET", "/api/v1/devices", nil, nil, time.Now().Add(time.Minute)))
	if r := u.Send(req); r.Status != 401 {
		t.Fatalf("replayed to another path: %d", r.Status)
	}
	// Expired.
	req, _ = http.NewRequest("GET", e.ts.URL+"/api/v1/devices", nil)
	req.Header.Set("Authorization", u.Authorization("GET", "/api/v1/devices", nil, nil, time.Now().Add(-time.Second)))
	if r := u.Send(req); r.Status != 401 {
		t.Fatalf("expired: %d", r.Status)
	}
	// Bearer is refused over plain HTTP (the secret would travel in clear).
	req, _ = http.NewRequest("GET", e.ts.URL+"/api/v1/devices", nil)
	req.Header.Set("Authorization", "Bearer "+e.user.APIKey+":"+e.userSec)
	if r := u.Send(req); r.Status != 401 {
		t.Fatalf("bearer over HTTP: %d", r.Status)
	}
	// Role: tokens and approvals are admin only.
	if r := u.Do("GET", "/api/v1/tokens", nil); r.Status != 403 {
		t.Fatalf("user lists tokens: %d", r.Status)
	}
	if r := u.Do("POST", "/api/v1/devices/02:00:00:00:00:01/approve", map[string]string{}); r.Status != 403 {
		t.Fatalf("user approves: %d", r.Status)
	}
	a := e.rest(e.admin.APIKey, e.adminSec)
	r := a.Do("GET", "/api/v1/tokens", nil)
	if r.Status != 200 || strings.Contains(string(r.Raw), "deadbeefsecrethash") || strings.Contains(string(r.Raw), "secret") {
		t.Fatalf("tokens: %d %s", r.Status, r.Raw)
	}
	if r := a.Do("POST", "/api/v1/tokens/abcdef/revoke", nil); r.Status != 200 || !strings.Contains(string(r.Raw), `"revoked":true`) {
		t.Fatalf("revoke: %d %s", r.Status, r.Raw)
	}
	if r := a.Do("POST", "/api/v1/devices/02:00:00:00:00:01/approve", map[string]string{"cluster": ""}); r.Status != 200 {
		t.Fatalf("approve: %d %s", r.Status, r.Raw)
	}
	if r := a.Do("POST", "/api/v1/devices/02:00:00:00:00:01/approve", map[string]string{"clutser": "x"}); r.Status != 400 {
		t.Fatalf("unknown body field: %d %s", r.Status, r.Raw)
	}
}

func TestRESTBearerOverTLS(t *testing.T) {
	e := newEnv(t, envOpts{tls: true})
	c := e.rest("", "")
	req, _ := http.NewRequest("GET", e.ts.URL+"/api/v1/devices", nil)
	req.Header.Set("Authorization", "Bearer "+e.user.APIKey+":"+e.userSec)
	if r := c.Send(req); r.Status != 200 {
		t.Fatalf("bearer over TLS: %d %s", r.Status, r.Raw)
	}
	req, _ = http.NewRequest("GET", e.ts.URL+"/api/v1/devices", nil)
	req.Header.Set("Authorization", "Bearer "+e.user.APIKey+":"+e.adminSec)
	if r := c.Send(req); r.Status != 401 {
		t.Fatalf("bearer with another key's secret: %d", r.Status)
	}
}

func TestRESTClusterLifecycle(t *testing.T) {
	e := newEnv(t, envOpts{})
	a := e.rest(e.admin.APIKey, e.adminSec)
	u := e.rest(e.user.APIKey, e.userSec)
	var v core.Version
	if r := u.Do("POST", "/api/v1/versions", map[string]any{"semver": "1.30.2", "url": "http://x/a.iso"}); r.Status != 403 {
		t.Fatalf("user adds version: %d", r.Status)
	}
	r := a.Do("POST", "/api/v1/versions", map[string]any{"semver": "1.30.2", "url": "http://10.99.0.1:8080/isos/v1.30.2.iso"})
	r.Decode(t, &v)
	if r.Status != 201 || v.Name != "v1.30.2" {
		t.Fatalf("add version: %d %s", r.Status, r.Raw)
	}
	a.Do("POST", "/api/v1/versions", map[string]any{"semver": "1.31.0", "url": "http://10.99.0.1:8080/isos/v1.31.0.iso"})
	if r := a.Do("POST", "/api/v1/versions", map[string]any{"semver": "1.9.0", "url": "http://x/a.iso"}); r.Status != 400 {
		t.Fatalf("old version: %d", r.Status)
	}

	wait := func(r apitest.RESTResp, by ...*apitest.RESTClient) client.Job {
		t.Helper()
		poller := u
		if len(by) > 0 {
			poller = by[0]
		}
		if r.Status != 202 {
			t.Fatalf("not accepted: %d %s", r.Status, r.Raw)
		}
		var acc struct{ Job client.Job }
		r.Decode(t, &acc)
		loc := r.Header.Get("Location")
		for i := 0; i < 500; i++ {
			var j client.Job
			poller.Do("GET", loc, nil).Decode(t, &j)
			if j.Status != "pending" {
				return j
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatal("job did not finish")
		return client.Job{}
	}
	j := wait(u.Do("POST", "/api/v1/clusters", map[string]any{"name": "lab", "version": "v1.30.2", "size": 2}))
	if j.Status != "succeeded" || j.Cluster == nil || j.Cluster.State != core.ClusterStarting || j.Cluster.CPU != 6 {
		t.Fatalf("create: %+v", j)
	}
	// Starting: no kubeconfig yet, and the answer says what it waits for.
	if r := u.Do("GET", "/api/v1/clusters/lab/kubeconfig", nil); r.Status != 503 ||
		!strings.Contains(string(r.Raw), `"code":"unavailable"`) ||
		!strings.Contains(string(r.Raw), "Kubernetes cluster lab is Starting (waiting for its first control plane to start the API server") {
		t.Fatalf("kubeconfig of a Starting cluster: %d %s", r.Status, r.Raw)
	}
	getLab := func() (client.Cluster, []byte) {
		t.Helper()
		var lab client.Cluster
		r := u.Do("GET", "/api/v1/clusters/lab", nil)
		if r.Status != 200 {
			t.Fatalf("get: %d %s", r.Status, r.Raw)
		}
		r.Decode(t, &lab)
		return lab, r.Raw
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
	if r := u.Do("POST", "/api/v1/clusters", map[string]any{"name": "lab", "version": "v1.30.2", "size": 2}); r.Status != 409 {
		t.Fatalf("duplicate: %d %s", r.Status, r.Raw)
	}
	if j = wait(u.Do("POST", "/api/v1/clusters/lab/scale", map[string]any{"size": 3})); j.Cluster.Size != 3 {
		t.Fatalf("scale: %+v", j)
	}
	if j = wait(u.Do("POST", "/api/v1/clusters/lab/upgrade", map[string]any{"version": "v1.31.0"})); j.Cluster.Version.SemVer != "1.31.0" {
		t.Fatalf("upgrade: %+v", j)
	}
	if j = wait(u.Do("POST", "/api/v1/clusters/lab/stop", nil)); j.Status != "succeeded" {
		t.Fatalf("stop: %+v", j)
	}
	if r := u.Do("POST", "/api/v1/clusters/lab/upgrade", map[string]any{"version": "v1.31.0"}); r.Status != 409 {
		t.Fatalf("upgrade while stopped: %d %s", r.Status, r.Raw)
	}
	if j = wait(u.Do("POST", "/api/v1/clusters/lab/start", nil)); j.Status != "succeeded" || j.Cluster == nil || j.Cluster.State != "Starting" {
		t.Fatalf("start: %+v", j)
	}
	e.healthy("lab") // started, it is Running once the watch sees it healthy
	var kc map[string]string
	u.Do("GET", "/api/v1/clusters/lab/kubeconfig", nil).Decode(t, &kc)
	if !strings.Contains(kc["kubeconfig"], "name: lab") {
		t.Fatalf("kubeconfig: %v", kc)
	}
	var cp client.Page[client.Cluster]
	u.Do("GET", "/api/v1/clusters?state=Running", nil).Decode(t, &cp)
	if len(cp.Items) != 1 {
		t.Fatalf("clusters: %+v", cp)
	}
	if r := a.Do("DELETE", "/api/v1/versions/v1.31.0", nil); r.Status != 409 {
		t.Fatalf("delete used version: %d %s", r.Status, r.Raw)
	}
	if j = wait(u.Do("DELETE", "/api/v1/clusters/lab", nil)); j.Status != "succeeded" {
		t.Fatalf("delete: %+v", j)
	}
	if r := u.Do("GET", "/api/v1/clusters/lab", nil); r.Status != 404 {
		t.Fatalf("deleted cluster: %d", r.Status)
	}
	var vv core.Version
	a.Do("PATCH", "/api/v1/versions/v1.30.2", map[string]string{"state": "Disabled"}).Decode(t, &vv)
	if vv.State != "Disabled" {
		t.Fatalf("disable: %+v", vv)
	}
	u.Do("GET", "/api/v1/offerings", nil)
	u.Do("GET", "/api/v1/images", nil)
	u.Do("GET", "/api/v1/versions/v1.30.2", nil)
	// The user's writes are audit events naming its key and account, and
	// stay visible to it after its cluster is gone.
	var ev client.Page[core.Event]
	u.Do("GET", "/api/v1/events?type=api.write", nil).Decode(t, &ev)
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
	u.Do("GET", "/api/v1/events?type=api.write&stream=device", nil).Decode(t, &dev)
	if len(dev.Items) != 0 {
		t.Fatalf("audit events in the device stream: %d", len(dev.Items))
	}
	var aud client.Page[core.Event]
	u.Do("GET", "/api/v1/events?type=api.write&stream=audit", nil).Decode(t, &aud)
	if len(aud.Items) != len(ev.Items) {
		t.Fatalf("audit stream %d, all %d", len(aud.Items), len(ev.Items))
	}
	var seqs []uint64
	for cursor := ""; ; {
		var p client.Page[core.Event]
		u.Do("GET", "/api/v1/events?limit=3&cursor="+cursor, nil).Decode(t, &p)
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
	if r := u.Do("GET", "/api/v1/events?stream=bogus", nil); r.Status != 400 {
		t.Fatalf("bad stream: %d", r.Status)
	}
	// Jobs are private to the key that started them.
	r = a.Do("DELETE", "/api/v1/versions/v1.31.0?delete_iso=true", nil)
	var acc struct{ Job client.Job }
	r.Decode(t, &acc)
	if r := u.Do("GET", "/api/v1/jobs/"+acc.Job.ID, nil); r.Status != 404 {
		t.Fatalf("user reads an admin job: %d", r.Status)
	}
	if j := wait(r, a); j.Status != "succeeded" {
		t.Fatalf("delete version: %+v", j)
	}
}
