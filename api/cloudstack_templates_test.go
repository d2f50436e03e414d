package api

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/clusters"
)

// TestListTemplates: listTemplates shows each loaded profile as a ready,
// public template whose ID is derived from its name (the same on every
// appliance, before and after a restart: a fixed value here), filtered by
// templatefilter, id, name, keyword and zoneid and paged as the other
// lists; nodetemplates takes those IDs as it takes names, and the cluster
// answers its templates by ID with the profiles' names beside them.
func TestListTemplates(t *testing.T) {
	e, u, _ := stuckEnv(t)
	a := e.adminClient()
	// Derived, not stored: a change of the derivation would break every
	// client that kept an ID.
	if id := clusters.TemplateID("leaf-worker"); id != "c1cc4ffd-0b11-538c-a569-e30e1b9eb581" {
		t.Fatalf("TemplateID(leaf-worker) = %s: template IDs must not change", id)
	}
	list := func(c *csClient, p map[string]string) (int, []client.CSTemplate) {
		t.Helper()
		l := c.ok("listTemplates", p, false)
		if len(l) == 0 {
			return 0, nil
		}
		var ts []client.CSTemplate
		mustJSON(t, l["template"], &ts)
		return field[int](t, l, "count"), ts
	}
	names := func(ts []client.CSTemplate) []string {
		var out []string
		for _, tm := range ts {
			out = append(out, tm.Name)
		}
		return out
	}
	all := []string{"leaf-worker", "pinned-elsewhere", "vm-control"}
	for _, f := range []string{"executable", "featured", "Featured"} {
		n, ts := list(u, map[string]string{"templatefilter": f})
		if n != 3 || !slices.Equal(names(ts), all) {
			t.Fatalf("templatefilter=%s: %d %v", f, n, names(ts))
		}
		for _, tm := range ts {
			if tm.ID != clusters.TemplateID(tm.Name) || !tm.IsReady || !tm.IsPublic || !tm.ForCKS || tm.ZoneID != e.clusters.Zone().ID ||
				tm.DisplayText == "" || tm.Status != "Download Complete" {
				t.Fatalf("template %+v", tm)
			}
		}
		if ts[1].ZTPDCluster != "core-1" {
			t.Fatalf("pinned-elsewhere does not say its cluster: %+v", ts[1])
		}
	}
	if n, ts := list(a, map[string]string{"templatefilter": "all"}); n != 3 || !slices.Equal(names(ts), all) {
		t.Fatalf("admin templatefilter=all: %d %v", n, names(ts))
	}
	for _, f := range []string{"self", "selfexecutable", "sharedexecutable", "community"} {
		if n, _ := list(u, map[string]string{"templatefilter": f}); n != 0 {
			t.Fatalf("templatefilter=%s lists %d: ztpd registers no templates of an account", f, n)
		}
	}
	vmControl := clusters.TemplateID("vm-control")
	for _, c := range []struct {
		p    map[string]string
		want []string
	}{
		{map[string]string{"id": vmControl}, []string{"vm-control"}},
		{map[string]string{"name": "leaf-worker"}, []string{"leaf-worker"}},
		{map[string]string{"keyword": "PINNED"}, []string{"pinned-elsewhere"}},
		{map[string]string{"zoneid": e.clusters.Zone().ID, "keyword": "control"}, []string{"vm-control"}},
		{map[string]string{"zoneid": "7c0c3b5e-0000-4000-8000-000000000000"}, nil},
		{map[string]string{"id": "7c0c3b5e-0000-4000-8000-000000000000"}, nil},
	} {
		c.p["templatefilter"] = "executable"
		if _, ts := list(u, c.p); !slices.Equal(names(ts), c.want) {
			t.Errorf("listTemplates %v: %v, want %v", c.p, names(ts), c.want)
		}
	}
	if n, ts := list(u, map[string]string{"templatefilter": "executable", "page": "2", "pagesize": "2"}); n != 3 || !slices.Equal(names(ts), all[2:]) {
		t.Fatalf("page 2 of 2: %d %v", n, names(ts))
	}
	errorBody(t, u.call("listTemplates", map[string]string{"templatefilter": "all"}, false), "listtemplatesresponse", 431, 4350,
		"Filter all can be specified by admin only")
	errorBody(t, u.call("listTemplates", map[string]string{"templatefilter": "mine"}, false), "listtemplatesresponse", 431, 4350,
		"Please specify a valid template filter")
	errorBody(t, u.call("listTemplates", nil, false), "listtemplatesresponse", 431, 9999, "missing parameter templatefilter")
	errorBody(t, u.call("listTemplates", map[string]string{"templatefilter": "executable", "projectid": "p-1"}, false), "listtemplatesresponse", 431, 4350,
		"ztpd cannot honour parameter projectid=p-1: ztpd has no projects")

	// nodetemplates by ID (the workers') and by name (the control planes').
	var vid string
	{
		l := u.ok("listKubernetesSupportedVersions", nil, false)
		var vs []map[string]json.RawMessage
		mustJSON(t, l["kubernetessupportedversion"], &vs)
		vid = field[string](t, vs[0], "id")
	}
	create := func(name string, templates map[string]string) csResp {
		p := map[string]string{"name": name, "zoneid": e.clusters.Zone().ID, "kubernetesversionid": vid, "serviceofferingid": "ztpd-small", "size": "1"}
		i := 0
		for node, tmpl := range templates {
			p["nodetemplates["+string(rune('0'+i))+"].node"], p["nodetemplates["+string(rune('0'+i))+"].template"] = node, tmpl
			i++
		}
		return u.call("createKubernetesCluster", p, true)
	}
	leafWorker := clusters.TemplateID("leaf-worker")
	errorBody(t, create("t-unknown", map[string]string{"worker": "7c0c3b5e-0000-4000-8000-000000000000"}), "createkubernetesclusterresponse", 431, 4350,
		"nodetemplates: no loaded profile has template ID 7c0c3b5e-0000-4000-8000-000000000000 (node type worker): listTemplates lists them")
	errorBody(t, create("t-pinned", map[string]string{"worker": clusters.TemplateID("pinned-elsewhere")}), "createkubernetesclusterresponse", 431, 4350,
		`nodetemplates: profile "pinned-elsewhere" assigns its devices to cluster core-1, not to t-pinned`)
	r := create("t-byid", map[string]string{"worker": leafWorker, "control": "vm-control"})
	if r.status != 200 {
		t.Fatalf("create with a template ID: %s", r.raw)
	}
	_, inner := r.inner(t)
	j := u.wait(field[string](t, inner, "jobid"))
	var res struct {
		Cluster client.CSCluster `json:"kubernetescluster"`
	}
	mustJSON(t, j["jobresult"], &res)
	check := func(what string, c client.CSCluster) {
		t.Helper()
		if c.TemplateID != leafWorker || c.TemplateName != "leaf-worker" ||
			c.ZTPDNodeTemplates["worker"] != leafWorker || c.ZTPDNodeTemplates["control"] != vmControl ||
			c.ZTPDNodeProfiles["worker"] != "leaf-worker" || c.ZTPDNodeProfiles["control"] != "vm-control" {
			t.Fatalf("%s: templateid %s templatename %s ztpdnodetemplates %v ztpdnodeprofiles %v", what, c.TemplateID, c.TemplateName,
				c.ZTPDNodeTemplates, c.ZTPDNodeProfiles)
		}
	}
	check("create job", res.Cluster)
	l := u.ok("listKubernetesClusters", map[string]string{"id": res.Cluster.ID}, false)
	var listed []client.CSCluster
	mustJSON(t, l["kubernetescluster"], &listed)
	if len(listed) != 1 {
		t.Fatalf("listed %d", len(listed))
	}
	check("listKubernetesClusters", listed[0])
	// The REST view names the profiles.
	var rc client.Cluster
	rr := e.rest(e.user.APIKey, e.userSec).Do("GET", "/api/v1/clusters/"+res.Cluster.ID, nil)
	if rr.Status != 200 {
		t.Fatalf("REST cluster: %d %s", rr.Status, rr.Raw)
	}
	rr.Decode(t, &rc)
	if rc.NodeTemplates["worker"] != "leaf-worker" || rc.NodeTemplates["control"] != "vm-control" {
		t.Fatalf("REST node_templates: %v", rc.NodeTemplates)
	}
}
