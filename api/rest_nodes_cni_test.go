package api

import (
	"strings"
	"testing"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/api/internal/apitest"
	"github.com/ztpd/ztpd/internal/core"
)

// TestRESTNodesAndCNI: the REST equivalents of add/removeNodes and of the
// CNI configuration commands, answered as openapi.json says (the client
// validates every answer). A user key adds a device waiting in its own
// cluster, not another account's; removing it takes it out as a
// scale-down. Only admins register and delete CNI configurations; a
// cluster created over REST with one (and per-role shapes) shows them.
func TestRESTNodesAndCNI(t *testing.T) {
	e, _, _, mine, theirs, _ := tenancyEnv(t)
	u, a := e.rest(e.user.APIKey, e.userSec), e.rest(e.admin.APIKey, e.adminSec)
	const waiting, eves = "02:00:00:00:0d:01", "02:00:00:00:0d:02"
	putWaiting(t, e, waiting, mine.ID)
	putWaiting(t, e, eves, theirs.ID)

	wait := func(r apitest.RESTResp) client.Job {
		t.Helper()
		if r.Status != 202 {
			t.Fatalf("%d %s", r.Status, r.Raw)
		}
		var acc client.JobAccepted
		r.Decode(t, &acc)
		for i := 0; i < 500 && acc.Job.Status == "pending"; i++ {
			u.Do("GET", "/api/v1/jobs/"+acc.Job.ID, nil).Decode(t, &acc.Job)
		}
		return acc.Job
	}
	if r := u.Do("POST", "/api/v1/clusters/"+mine.ID+"/nodes", map[string]any{"devices": []string{eves}}); r.Status != 404 ||
		!strings.Contains(string(r.Raw), "device "+eves+" not found") {
		t.Fatalf("another account's device: %d %s", r.Status, r.Raw)
	}
	if r := u.Do("POST", "/api/v1/clusters/"+mine.ID+"/nodes", map[string]any{"devices": []string{waiting}, "bogus": 1}); r.Status != 400 {
		t.Fatalf("unknown field: %d %s", r.Status, r.Raw)
	}
	j := wait(u.Do("POST", "/api/v1/clusters/"+mine.ID+"/nodes", map[string]any{"devices": []string{waiting}, "manual_upgrade": true}))
	if j.Status != "succeeded" || j.Command != "addNodesToKubernetesCluster" || j.Cluster == nil || j.Cluster.Size != 2 {
		t.Fatalf("add: %+v", j)
	}
	if c := storedCluster(t, e, mine.ID); len(c.ManualUpgrade) != 1 || c.ManualUpgrade[0] != waiting {
		t.Fatalf("manual upgrade not recorded: %v", c.ManualUpgrade)
	}
	e.st.Update(func(tx core.Tx) error { // the added device joined
		m, _ := tx.Memberships().Get(waiting)
		m.State, m.Role = core.StateJoined, "worker"
		return tx.Memberships().Put(m)
	})
	j = wait(u.Do("POST", "/api/v1/clusters/"+mine.ID+"/nodes/remove", map[string]any{"devices": []string{waiting}}))
	if j.Status != "succeeded" || j.Command != "removeNodesFromKubernetesCluster" || j.Cluster == nil || j.Cluster.Size != 1 {
		t.Fatalf("remove: %+v", j)
	}

	// CNI configurations: admins register and delete, everyone lists.
	manifest := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cni\n  namespace: kube-system\ndata:\n  mtu: \"{{ ds.meta_data.mtu }}\"\n"
	if r := u.Do("POST", "/api/v1/cni-configurations", map[string]any{"name": "flannel", "manifest": manifest, "params": []string{"mtu"}}); r.Status != 403 {
		t.Fatalf("user registers: %d %s", r.Status, r.Raw)
	}
	if r := a.Do("POST", "/api/v1/cni-configurations", map[string]any{"name": "flannel", "manifest": manifest}); r.Status != 400 ||
		!strings.Contains(string(r.Raw), `but \"mtu\" is not among its params`) {
		t.Fatalf("undeclared parameter: %d %s", r.Status, r.Raw)
	}
	r := a.Do("POST", "/api/v1/cni-configurations", map[string]any{"name": "flannel", "manifest": manifest, "params": []string{"mtu"}})
	var cfg client.CNIConfiguration
	r.Decode(t, &cfg)
	if r.Status != 201 || cfg.Manifest != manifest || len(cfg.Params) != 1 || r.Header.Get("Location") != "/api/v1/cni-configurations/"+cfg.ID {
		t.Fatalf("register: %d %s", r.Status, r.Raw)
	}
	var page client.Page[client.CNIConfiguration]
	if r := u.Do("GET", "/api/v1/cni-configurations?keyword=flan", nil); r.Status != 200 {
		t.Fatalf("list: %d %s", r.Status, r.Raw)
	} else if r.Decode(t, &page); len(page.Items) != 1 || page.Items[0].ID != cfg.ID {
		t.Fatalf("list: %s", r.Raw)
	}
	if r := u.Do("GET", "/api/v1/cni-configurations/flannel", nil); r.Status != 200 {
		t.Fatalf("get by name: %d %s", r.Status, r.Raw)
	}
	if r := u.Do("GET", "/api/v1/cni-configurations/nosuch", nil); r.Status != 404 {
		t.Fatalf("get unknown: %d %s", r.Status, r.Raw)
	}

	j = wait(u.Do("POST", "/api/v1/clusters", map[string]any{"name": "net", "version": mine.VersionID, "size": 1,
		"node_offerings": map[string]string{"control": "ztpd-large"}, "node_templates": map[string]string{"worker": "leaf-worker"},
		"cni_configuration": "flannel", "cni_details": map[string]string{"mtu": "1450"}}))
	if j.Status != "succeeded" || j.Cluster == nil || j.Cluster.CNIConfiguration != "flannel" ||
		j.Cluster.NodeTemplates["worker"] != "leaf-worker" || j.Cluster.NodeOfferings["control"] == "" {
		t.Fatalf("create with shapes and a CNI configuration: %+v", j)
	}
	// Etcd nodes: an odd count is taken and shown, an even one refused.
	j = wait(u.Do("POST", "/api/v1/clusters", map[string]any{"name": "with-etcd", "version": mine.VersionID, "size": 1,
		"etcd_nodes": 3, "node_offerings": map[string]string{"etcd": "ztpd-medium"}}))
	if j.Status != "succeeded" || j.Cluster == nil || j.Cluster.EtcdNodes != 3 || j.Cluster.NodeOfferings["etcd"] == "" {
		t.Fatalf("create with etcd nodes: %+v", j)
	}
	if r := u.Do("POST", "/api/v1/clusters", map[string]any{"name": "even-etcd", "version": mine.VersionID, "size": 1, "etcd_nodes": 2}); r.Status != 400 ||
		!strings.Contains(string(r.Raw), "etcdnodes: 2") {
		t.Fatalf("create with 2 etcd nodes: %d %s", r.Status, r.Raw)
	}
	if r := u.Do("DELETE", "/api/v1/cni-configurations/"+cfg.ID, nil); r.Status != 403 {
		t.Fatalf("user deletes: %d %s", r.Status, r.Raw)
	}
	if r := a.Do("DELETE", "/api/v1/cni-configurations/"+cfg.ID, nil); r.Status != 409 {
		t.Fatalf("delete in use: %d %s", r.Status, r.Raw)
	}
}
