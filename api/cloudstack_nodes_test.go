package api

import (
	"encoding/base64"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
)

// putWaiting stores a device waiting in cluster (assigned to it, as its
// profile or an approval does), or unassigned when cluster is "".
func putWaiting(t *testing.T, e *env, mac, cluster string) {
	t.Helper()
	now := time.Now().UTC()
	err := e.st.Update(func(tx core.Tx) error {
		if err := tx.Devices().Put(core.Device{ID: mac, MAC: mac, Kind: core.KindVM, Cluster: cluster,
			State: core.StateWaiting, FirstSeen: now, LastSeen: now, UpdatedAt: now}); err != nil {
			return err
		}
		if cluster == "" {
			return nil
		}
		if err := tx.Memberships().Put(core.Membership{Device: mac, Cluster: cluster, State: core.StateWaiting,
			WaitReason: "cluster is at its desired size (1 workers)", Created: now}); err != nil {
			return err
		}
		return tx.Memberships().Enlist(cluster, mac, "")
	})
	if err != nil {
		t.Fatal(err)
	}
}

func storedCluster(t *testing.T, e *env, id string) core.Cluster {
	t.Helper()
	var c core.Cluster
	if err := e.st.View(func(tx core.Tx) error { var err error; c, err = tx.Clusters().Get(id); return err }); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestNodesByName: addNodesToKubernetesCluster admits a waiting device
// into a Running cluster (size grows, approved into it, manualupgrade
// recorded and shown), removeNodesFromKubernetesCluster takes it out
// again; the 4.19 VM commands answer synchronously with the job to
// follow. A user key adds only devices meant for its own cluster: another
// account's device, an unassigned device, another account's cluster are
// all "not found"; a replayed add is refused.
func TestNodesByName(t *testing.T) {
	e, eve, eveSec, mine, theirs, _ := tenancyEnv(t)
	u := e.userClient()
	const (
		waiting    = "02:00:00:00:0c:01" // waiting in mine
		unassigned = "02:00:00:00:0c:02"
		eves       = "02:00:00:00:0c:03" // waiting in theirs
		second     = "02:00:00:00:0c:04" // waiting in mine
	)
	putWaiting(t, e, waiting, mine.ID)
	putWaiting(t, e, unassigned, "")
	putWaiting(t, e, eves, theirs.ID)
	putWaiting(t, e, second, mine.ID)

	for _, c := range []struct {
		id, nodes, text string
	}{
		{mine.ID, unassigned, "device " + unassigned + " not found"},
		{mine.ID, eves, "device " + eves + " not found"},
		{mine.ID, "02:00:00:00:0b:01", "device 02:00:00:00:0b:01 not found"}, // a member of theirs
		{mine.ID, "02:00:00:00:0a:01", "is already a node of Kubernetes cluster mine"},
		{mine.ID, waiting + "," + waiting, "is named twice"},
		{theirs.ID, eves, "Invalid Kubernetes cluster ID: " + theirs.ID},
	} {
		errorBody(t, u.call("addNodesToKubernetesCluster", map[string]string{"id": c.id, "nodeids": c.nodes}, true),
			"addnodestokubernetesclusterresponse", 431, 4350, c.text)
	}
	errorBody(t, u.call("addNodesToKubernetesCluster", map[string]string{"id": mine.ID, "nodeids": waiting, "mountcksisoonvr": "true"}, true),
		"addnodestokubernetesclusterresponse", 431, 4350, "ztpd cannot honour parameter mountcksisoonvr=true")
	errorBody(t, u.call("addNodesToKubernetesCluster", map[string]string{"id": mine.ID}, true),
		"addnodestokubernetesclusterresponse", 431, 9999, "missing parameter nodeids")

	// Added by MAC in another notation, left out of upgrades.
	r := u.ok("addNodesToKubernetesCluster", map[string]string{"id": mine.ID, "nodeids": strings.ToUpper(strings.ReplaceAll(waiting, ":", "-")),
		"manualupgrade": "true"}, true)
	j := u.wait(field[string](t, r, "jobid"))
	if field[int](t, j, "jobstatus") != 1 {
		t.Fatalf("addNodes: %s", j["jobresult"])
	}
	var res struct {
		Cluster client.CSCluster `json:"kubernetescluster"`
	}
	mustJSON(t, j["jobresult"], &res)
	if res.Cluster.Size != 2 || res.Cluster.State != "Running" {
		t.Fatalf("after addNodes: size %d state %s", res.Cluster.Size, res.Cluster.State)
	}
	found := false
	for _, vm := range res.Cluster.VirtualMachines {
		if vm.ID == waiting {
			found = vm.ZTPDManualUpgrade
		} else if vm.ZTPDManualUpgrade {
			t.Fatalf("%s shown manual-upgrade", vm.ID)
		}
	}
	if !found {
		t.Fatalf("the added node is not shown manual-upgrade: %+v", res.Cluster.VirtualMachines)
	}
	var d core.Device
	e.st.View(func(tx core.Tx) error { d, _ = tx.Devices().Get(waiting); return nil })
	if !d.Approved || d.Cluster != mine.ID {
		t.Fatalf("the added device was not approved into the cluster: %+v", d)
	}
	if c := storedCluster(t, e, mine.ID); c.Size != 2 || !slices.Equal(c.ManualUpgrade, []string{waiting}) {
		t.Fatalf("stored: size %d manual %v", c.Size, c.ManualUpgrade)
	}

	// The 4.19 VM command answers at once, with the job to follow.
	vr := u.ok("addVirtualMachinesToKubernetesCluster", map[string]string{"id": mine.ID, "virtualmachineids": second}, true)
	if field[bool](t, vr, "success") != true {
		t.Fatalf("addVirtualMachines: %v", vr)
	}
	text := field[string](t, vr, "displaytext")
	jobID := text[strings.Index(text, "job ")+4 : strings.Index(text, " (")]
	if j := u.wait(jobID); field[int](t, j, "jobstatus") != 1 || field[string](t, j, "cmd") != "org.apache.cloudstack.api.command.user.kubernetes.cluster.AddVirtualMachinesToKubernetesClusterCmd" {
		t.Fatalf("addVirtualMachines job: %v", j)
	}
	if c := storedCluster(t, e, mine.ID); c.Size != 3 {
		t.Fatalf("size after addVirtualMachines: %d", c.Size)
	}

	// Another account's key cannot remove my nodes; I can.
	ev := &csClient{t: t, base: e.ts.URL, apiKey: eve.APIKey, secret: eveSec, http: e.ts.Client()}
	errorBody(t, ev.call("removeNodesFromKubernetesCluster", map[string]string{"id": mine.ID, "nodeids": "02:00:00:00:0a:01"}, true),
		"removenodesfromkubernetesclusterresponse", 431, 4350, "")
	e.st.Update(func(tx core.Tx) error { // the added device joined
		m, _ := tx.Memberships().Get(waiting)
		m.State, m.Role = core.StateJoined, "worker"
		return tx.Memberships().Put(m)
	})
	rr := u.ok("removeNodesFromKubernetesCluster", map[string]string{"id": mine.ID, "nodeids": waiting}, true)
	j = u.wait(field[string](t, rr, "jobid"))
	if field[int](t, j, "jobstatus") != 1 {
		t.Fatalf("removeNodes: %s", j["jobresult"])
	}
	if c := storedCluster(t, e, mine.ID); c.Size != 2 || len(c.ManualUpgrade) != 0 {
		t.Fatalf("after removeNodes: size %d manual %v", c.Size, c.ManualUpgrade)
	}
	var ms core.Membership
	e.st.View(func(tx core.Tx) error { ms, _ = tx.Memberships().Get(waiting); return nil })
	if ms.State != core.StateLeaving {
		t.Fatalf("removed member: %s", ms.State)
	}
	// removeVirtualMachines: one item per VM, the job named, listed under
	// the command's response name as CloudStack lists them.
	lr := u.ok("removeVirtualMachinesFromKubernetesCluster", map[string]string{"id": mine.ID, "virtualmachineids": "02:00:00:00:0a:01"}, true)
	var items []map[string]any
	mustJSON(t, lr["removevirtualmachinesfromkubernetesclusterresponse"], &items)
	if field[int](t, lr, "count") != 1 || len(items) != 1 || items[0]["id"] != "02:00:00:00:0a:01" || items[0]["success"] != true {
		t.Fatalf("removeVirtualMachines: %v", lr)
	}

	// A replayed add is refused like every write.
	exp := e.clock.Now().UTC().Add(5 * time.Minute).Format(time.RFC3339)
	putWaiting(t, e, "02:00:00:00:0c:05", mine.ID)
	add := signedCS(url.Values{"apiKey": {e.user.APIKey}, "command": {"addNodesToKubernetesCluster"}, "id": {mine.ID},
		"nodeids": {"02:00:00:00:0c:05"}, "response": {"json"}, "signatureversion": {"3"}, "expires": {exp}}, e.userSec)
	if code, body, _ := rawGet(t, e, "/client/api?"+add, nil); code != 200 {
		t.Fatalf("first add: %d %s", code, body)
	}
	if code, body, _ := rawGet(t, e, "/client/api?"+add, nil); code != 401 || !strings.Contains(body, "already used") {
		t.Fatalf("replayed add: %d %s", code, body)
	}
}

// TestCNIConfigurations: an admin registers a manifest with parameters
// (base64, as CloudStack takes user data); users list it, cannot register
// or delete one; a cluster created with it and its details records them
// and shows the configuration; bad details are refused with why; a
// configuration in use cannot be deleted.
func TestCNIConfigurations(t *testing.T) {
	e := newEnv(t, envOpts{})
	a, u := e.adminClient(), e.userClient()
	manifest := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cni\n  namespace: kube-system\ndata:\n  mtu: \"{{ ds.meta_data.mtu }}\"\n  pool: {{ ds.meta_data.PodCIDR }}\n"
	b64 := base64.StdEncoding.EncodeToString([]byte(manifest))

	errorBody(t, u.call("registerCniConfiguration", map[string]string{"name": "calico", "cniconfig": b64}, true),
		"errorresponse", 432, 9999, "does not exist or is not available")
	for _, c := range []struct {
		params map[string]string
		text   string
	}{
		{map[string]string{"name": "calico", "cniconfig": "not base64!"}, "cniconfig is not base64-encoded"},
		{map[string]string{"name": "calico", "cniconfig": b64, "params": "mtu"}, `"PodCIDR" is not among its params`},
		{map[string]string{"name": "calico", "cniconfig": b64, "params": "mtu,1bad"}, `parameter "1bad"`},
		{map[string]string{"name": "calico", "cniconfig": b64, "params": "mtu,PodCIDR", "account": "dev"}, "ztpd cannot honour parameter account=dev"},
	} {
		errorBody(t, a.call("registerCniConfiguration", c.params, true), "registercniconfigurationresponse", 431, 4350, c.text)
	}
	reg := a.ok("registerCniConfiguration", map[string]string{"name": "calico", "cniconfig": b64, "params": "mtu,PodCIDR"}, true)
	var cfg map[string]json.RawMessage
	mustJSON(t, reg["cniconfig"], &cfg)
	id := field[string](t, cfg, "id")
	if field[string](t, cfg, "userdata") != b64 || field[string](t, cfg, "params") != "mtu,PodCIDR" || field[string](t, cfg, "name") != "calico" {
		t.Fatalf("registered: %v", cfg)
	}
	errorBody(t, a.call("registerCniConfiguration", map[string]string{"name": "calico", "cniconfig": b64, "params": "PodCIDR,mtu"}, true),
		"registercniconfigurationresponse", 431, 4350, "already exists")

	l := u.ok("listCniConfiguration", map[string]string{"keyword": "cal"}, false)
	if field[int](t, l, "count") != 1 {
		t.Fatalf("list: %v", l)
	}
	if l := u.ok("listCniConfiguration", map[string]string{"name": "other"}, false); len(l) != 0 {
		t.Fatalf("list by another name: %v", l)
	}

	var vid string
	{
		a.ok("addKubernetesSupportedVersion", map[string]string{"semanticversion": "1.31.4", "url": "http://10.99.0.1/k.iso"}, true)
		l := u.ok("listKubernetesSupportedVersions", nil, false)
		var vs []map[string]json.RawMessage
		mustJSON(t, l["kubernetessupportedversion"], &vs)
		vid = field[string](t, vs[0], "id")
	}
	create := func(name string, extra map[string]string) csResp {
		p := map[string]string{"name": name, "zoneid": e.clusters.Zone().ID, "kubernetesversionid": vid,
			"serviceofferingid": "ztpd-small", "size": "1", "cniconfigurationid": id}
		for k, v := range extra {
			p[k] = v
		}
		return u.call("createKubernetesCluster", p, true)
	}
	for _, c := range []struct {
		extra map[string]string
		text  string
	}{
		{map[string]string{"cniconfigdetails[0].mtu": "1450"}, "parameter PodCIDR has no value"},
		{map[string]string{"cniconfigdetails[0].mtu": "1450", "cniconfigdetails[1].podcidr": "10.1.0.0/16", "cniconfigdetails[2].other": "x"}, `names "other"`},
		{map[string]string{"cniconfigdetails[0].mtu": "1450\n  evil: x", "cniconfigdetails[1].podcidr": "10.1.0.0/16"}, "cniconfigdetails mtu: a value is"},
		{map[string]string{"cniconfigdetails[0].mtu": "1 450", "cniconfigdetails[1].podcidr": "10.1.0.0/16"}, "cniconfigdetails mtu: a value is"},
	} {
		errorBody(t, create("bad", c.extra), "createkubernetesclusterresponse", 431, 4350, c.text)
	}
	// Both map forms.
	cr := create("net", map[string]string{"cniconfigdetails[0].mtu": "1450", "cniconfigdetails[1].key": "PodCIDR", "cniconfigdetails[1].value": "10.1.0.0/16"})
	if cr.status != 200 {
		t.Fatalf("create with a CNI configuration: %s", cr.raw)
	}
	_, inner := cr.inner(t)
	j := u.wait(field[string](t, inner, "jobid"))
	var res struct {
		Cluster client.CSCluster `json:"kubernetescluster"`
	}
	mustJSON(t, j["jobresult"], &res)
	if res.Cluster.CNIConfigurationID != id || res.Cluster.CNIConfigName != "calico" || res.Cluster.ZTPDCNIState != "pending" {
		t.Fatalf("cluster's CNI: %+v", res.Cluster)
	}
	c := storedCluster(t, e, res.Cluster.ID)
	if c.CNI == nil || c.CNI.Details["mtu"] != "1450" || c.CNI.Details["PodCIDR"] != "10.1.0.0/16" {
		t.Fatalf("stored CNI: %+v", c.CNI)
	}

	errorBody(t, u.call("deleteCniConfiguration", map[string]string{"id": id}, true), "errorresponse", 432, 9999, "")
	errorBody(t, a.call("deleteCniConfiguration", map[string]string{"id": id}, true), "deletecniconfigurationresponse", 536, 9999, "in use by Kubernetes cluster(s) net")
	d := u.ok("deleteKubernetesCluster", map[string]string{"id": c.ID}, true)
	u.wait(field[string](t, d, "jobid"))
	if del := a.ok("deleteCniConfiguration", map[string]string{"id": id, "domainid": e.clusters.Domain().ID}, true); field[bool](t, del, "success") != true {
		t.Fatalf("delete: %v", del)
	}
	if l := u.ok("listCniConfiguration", nil, false); len(l) != 0 {
		t.Fatalf("list after delete: %v", l)
	}
}
