package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/api/internal/apitest"
	"github.com/ztpd/ztpd/internal/core"
)

func listedNames(t *testing.T, inner map[string]json.RawMessage) string {
	t.Helper()
	var cs []map[string]json.RawMessage
	if raw := inner["kubernetescluster"]; len(raw) > 0 {
		mustJSON(t, raw, &cs)
	}
	var names []string
	for _, c := range cs {
		names = append(names, field[string](t, c, "name"))
	}
	return strings.Join(names, ",")
}

// TestCloudStackTenancy: through the CloudStack API, a user key cannot
// list, see, scale, stop, start, upgrade, delete or get the kubeconfig of
// another account's cluster, and learns nothing more than for a cluster
// that does not exist. Admins list their own account's clusters, and all
// with listall=true. Responses carry account and domainid.
func TestCloudStackTenancy(t *testing.T) {
	e, eve, eveSec, mine, theirs, ops := tenancyEnv(t)
	u := e.userClient()
	ev := &csClient{t: t, base: e.ts.URL, apiKey: eve.APIKey, secret: eveSec, http: e.ts.Client()}
	a := e.adminClient()

	for _, tc := range []struct {
		c      *csClient
		params map[string]string
		want   string
	}{
		{u, nil, "mine"},
		{u, map[string]string{"listall": "true"}, "mine"},
		{u, map[string]string{"id": theirs.ID}, ""},
		{u, map[string]string{"name": "theirs"}, ""},
		{u, map[string]string{"keyword": "the"}, ""},
		{ev, nil, "theirs"},
		{a, nil, "ops"},
		{a, map[string]string{"listall": "true"}, "mine,theirs,ops"},
		{a, map[string]string{"id": theirs.ID}, "theirs"},
	} {
		if got := listedNames(t, tc.c.ok("listKubernetesClusters", tc.params, false)); got != tc.want {
			t.Errorf("%s lists %v: %q, want %q", tc.c.apiKey[:6], tc.params, got, tc.want)
		}
	}
	inner := a.ok("listKubernetesClusters", map[string]string{"listall": "true"}, false)
	var cs []map[string]json.RawMessage
	mustJSON(t, inner["kubernetescluster"], &cs)
	accounts := map[string]string{}
	for _, c := range cs {
		accounts[field[string](t, c, "name")] = field[string](t, c, "account")
		if field[string](t, c, "domainid") == "" || field[string](t, c, "domain") != "ROOT" {
			t.Errorf("cluster without domain: %s", c["domainid"])
		}
	}
	if accounts["mine"] != e.user.Account || accounts["theirs"] != eve.Account || accounts["ops"] != "admin" {
		t.Fatalf("accounts %v", accounts)
	}

	// Every command on eve's cluster answers as for a missing one.
	missing := "Invalid Kubernetes cluster ID: "
	for _, cmd := range []struct {
		name   string
		params map[string]string
	}{
		{"scaleKubernetesCluster", map[string]string{"size": "3"}},
		{"stopKubernetesCluster", nil},
		{"startKubernetesCluster", nil},
		{"upgradeKubernetesCluster", map[string]string{"kubernetesversionid": "v1.30.2"}},
		{"deleteKubernetesCluster", nil},
		{"getKubernetesClusterConfig", nil},
	} {
		answer := func(ref string) (int, string) {
			p := map[string]string{"id": ref}
			for k, v := range cmd.params {
				p[k] = v
			}
			r := u.call(cmd.name, p, true)
			return r.status, strings.ReplaceAll(string(r.raw), ref, "<id>")
		}
		nowhereCode, nowhere := answer("00000000-0000-4000-8000-000000000000")
		for _, ref := range []string{theirs.ID, ops.ID, "theirs"} {
			code, got := answer(ref)
			if code != 431 || !strings.Contains(got, missing+"<id>") || code != nowhereCode || got != nowhere {
				t.Errorf("%s on another account's cluster: %d %s (missing cluster: %d %s)", cmd.name, code, got, nowhereCode, nowhere)
			}
		}
	}
	for _, c := range []core.Cluster{theirs, ops} {
		if st := clusterState(t, e, c.ID); st != core.ClusterRunning {
			t.Fatalf("cluster %s is %s after the refused commands", c.Name, st)
		}
	}
	// The owner and the admin do operate.
	cfg := u.ok("getKubernetesClusterConfig", map[string]string{"id": mine.ID}, false)
	if !strings.Contains(string(cfg["clusterconfig"]), "name: dev") {
		t.Fatalf("kubeconfig not issued to the key's name: %s", cfg["clusterconfig"])
	}
	j := a.ok("stopKubernetesCluster", map[string]string{"id": theirs.ID}, true)
	if r := a.wait(field[string](t, j, "jobid")); field[int](t, r, "jobstatus") != 1 {
		t.Fatalf("admin stop of a user's cluster: %v", r)
	}
	// eve cannot read the job the admin ran on her cluster.
	if r := ev.call("queryAsyncJobResult", map[string]string{"jobid": field[string](t, j, "jobid")}, false); r.status != 431 {
		t.Fatalf("eve reads the admin's job: %d %s", r.status, r.raw)
	}
}

// TestRESTTenancy: the same rules on /api/v1, plus devices, leases and
// events of other accounts' clusters are hidden from user keys.
func TestRESTTenancy(t *testing.T) {
	e, _, _, mine, theirs, _ := tenancyEnv(t)
	u := e.rest(e.user.APIKey, e.userSec)
	a := e.rest(e.admin.APIKey, e.adminSec)

	names := func(c *apitest.RESTClient, q string) string {
		t.Helper()
		var p client.Page[client.Cluster]
		r := c.Do("GET", "/api/v1/clusters"+q, nil)
		r.Decode(t, &p)
		var out []string
		for _, cl := range p.Items {
			out = append(out, cl.Name)
		}
		return strings.Join(out, ",")
	}
	if got := names(u, ""); got != "mine" {
		t.Fatalf("user lists %q", got)
	}
	if got := names(u, "?listall=true"); got != "mine" {
		t.Fatalf("user with listall lists %q", got)
	}
	if got := names(a, ""); got != "ops" {
		t.Fatalf("admin lists %q", got)
	}
	if got := names(a, "?listall=true"); got != "mine,theirs,ops" {
		t.Fatalf("admin with listall lists %q", got)
	}
	for _, ref := range []string{theirs.ID, "theirs"} {
		for _, op := range []struct{ method, path string }{
			{"GET", ""}, {"GET", "/kubeconfig"}, {"POST", "/scale"}, {"POST", "/stop"}, {"POST", "/start"},
			{"POST", "/upgrade"}, {"DELETE", ""},
		} {
			var body any
			switch op.path {
			case "/scale":
				body = map[string]int{"size": 3}
			case "/upgrade":
				body = map[string]string{"version": "v1.30.2"}
			}
			r := u.Do(op.method, "/api/v1/clusters/"+ref+op.path, body)
			if r.Status != http.StatusNotFound || !strings.Contains(string(r.Raw), "Invalid Kubernetes cluster ID: "+ref) {
				t.Errorf("%s %s on another account's cluster: %d %s", op.method, op.path, r.Status, r.Raw)
			}
		}
	}
	if st := clusterState(t, e, theirs.ID); st != core.ClusterRunning {
		t.Fatalf("their cluster is %s", st)
	}
	var rc client.Cluster
	u.Do("GET", "/api/v1/clusters/mine", nil).Decode(t, &rc)
	if rc.ID != mine.ID || rc.Account != e.user.Account {
		t.Fatalf("own cluster %+v", rc)
	}

	var devs client.Page[core.Device]
	u.Do("GET", "/api/v1/devices", nil).Decode(t, &devs)
	if len(devs.Items) != 1 || devs.Items[0].Cluster != mine.ID {
		t.Fatalf("user sees devices %+v", devs.Items)
	}
	if r := u.Do("GET", "/api/v1/devices/02:00:00:00:0b:01", nil); r.Status != 404 {
		t.Fatalf("user reads another account's device: %d", r.Status)
	}
	var leases client.Page[core.Lease]
	u.Do("GET", "/api/v1/leases", nil).Decode(t, &leases)
	if len(leases.Items) != 1 || leases.Items[0].IP != "10.99.10.1" {
		t.Fatalf("user sees leases %+v", leases.Items)
	}
	var evs client.Page[core.Event]
	u.Do("GET", "/api/v1/events?limit=1000", nil).Decode(t, &evs)
	for _, ev := range evs.Items {
		if ev.Cluster != mine.ID && ev.Fields["account"] != e.user.Account {
			t.Fatalf("user sees another account's event %+v", ev)
		}
	}
	if len(evs.Items) == 0 {
		t.Fatal("user sees none of its events")
	}
	a.Do("GET", "/api/v1/devices", nil).Decode(t, &devs)
	if len(devs.Items) != 2 {
		t.Fatalf("admin sees %d devices", len(devs.Items))
	}
}
