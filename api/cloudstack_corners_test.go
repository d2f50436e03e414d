package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/api/internal/apitest"
	"github.com/ztpd/ztpd/api/rest"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
)

// stuckEnv is a CloudStack env with one enabled version, and a create that
// waits for its job and returns the cluster's ID (Starting: nothing boots).
func stuckEnv(t *testing.T) (e *env, u *csClient, create func(name string) string) {
	e = newEnv(t, envOpts{})
	a, u := e.adminClient(), e.userClient()
	v := a.ok("addKubernetesSupportedVersion", map[string]string{"semanticversion": "1.31.4", "mincpunumber": "2", "minmemory": "2048",
		"url": "http://10.99.0.1:8080/isos/v1.31.4.iso"}, true)
	var ver map[string]json.RawMessage
	mustJSON(t, v["kubernetessupportedversion"], &ver)
	vid := field[string](t, ver, "id")
	create = func(name string) string {
		t.Helper()
		cr := u.ok("createKubernetesCluster", map[string]string{"name": name, "zoneid": e.clusters.Zone().ID,
			"kubernetesversionid": vid, "serviceofferingid": "ztpd-small", "size": "1"}, true)
		u.wait(field[string](t, cr, "jobid"))
		id := field[string](t, cr, "id")
		if st := listedState(t, u, id); st != "Starting" {
			t.Fatalf("%s after create: %s", name, st)
		}
		return id
	}
	return e, u, create
}

func listedState(t *testing.T, c *csClient, id string) string {
	t.Helper()
	l := c.ok("listKubernetesClusters", map[string]string{"id": id}, false)
	if len(l) == 0 {
		return "gone"
	}
	var items []map[string]json.RawMessage
	mustJSON(t, l["kubernetescluster"], &items)
	return field[string](t, items[0], "state")
}

// joined makes device a joined control plane of cluster id, as the joiner
// records one whose Node registered.
func joined(t *testing.T, e *env, id, device string) {
	t.Helper()
	if err := e.st.Update(func(tx core.Tx) error {
		if err := tx.Memberships().Put(core.Membership{Device: device, Cluster: id, Role: "control-plane", State: core.StateJoined}); err != nil {
			return err
		}
		return tx.Memberships().Enlist(id, device, "control-plane")
	}); err != nil {
		t.Fatal(err)
	}
}

func deleted(t *testing.T, c *csClient, id string) {
	t.Helper()
	r := c.ok("deleteKubernetesCluster", map[string]string{"id": id}, true)
	j := c.wait(field[string](t, r, "jobid"))
	if field[int](t, j, "jobstatus") != 1 {
		t.Fatalf("delete job: %s", j["jobresult"])
	}
	if st := listedState(t, c, id); st != "gone" {
		t.Fatalf("after delete: %s", st)
	}
}

// TestCloudStackStuckCluster: a cluster no device ever boots for can be
// deleted at once; one with a joined member is refused with why until the
// start timeout moves it to Alert, from where it is deleted.
func TestCloudStackStuckCluster(t *testing.T) {
	e, u, create := stuckEnv(t)

	// Nothing joined: deleted at once.
	deleted(t, u, create("empty"))

	// A control plane joined but never came up: refused, with what lets it go.
	id := create("stuck")
	joined(t, e, id, "02:00:00:00:00:01")
	// (expunge, which ztpd ignores, makes this write's signature other than the delete's below.)
	errorBody(t, u.call("deleteKubernetesCluster", map[string]string{"id": id, "expunge": "true"}, true), "deletekubernetesclusterresponse", 431, 4350,
		"Kubernetes cluster ID: "+id+" is in Starting state and cannot be deleted: 1 member has joined (02:00:00:00:00:01); "+
			"it can be deleted once it is Running, or in Alert, where it goes if it is not Running within 1h of starting, or with force")

	// The start timeout passes (the service's clock; signatures keep the real one).
	e.clock.Advance(59 * time.Minute)
	if n, err := e.clusters.ExpireStarts(); err != nil || n != 0 {
		t.Fatalf("before the timeout: %d %v", n, err)
	}
	e.clock.Advance(time.Minute)
	n, err := e.clusters.ExpireStarts()
	e.clock.Advance(-time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("at the timeout: %d %v", n, err)
	}
	if st := listedState(t, u, id); st != "Alert" {
		t.Fatalf("after the start timeout: %s", st)
	}
	deleted(t, u, id)
}

// TestRESTForcedDeleteOfAStartingCluster: DELETE /clusters/{id} of a
// Starting cluster with a joined member is refused as CloudStack's is;
// ?force=true deletes it.
func TestRESTForcedDeleteOfAStartingCluster(t *testing.T) {
	e, u, create := stuckEnv(t)
	id := create("stuck")
	joined(t, e, id, "02:00:00:00:00:02")
	_, router := apitest.LoadDoc(t, rest.OpenAPI())
	a := &apitest.RESTClient{T: t, Base: e.ts.URL, APIKey: e.user.APIKey, Secret: e.userSec, HTTP: e.ts.Client(), Router: router}
	if r := a.Do("DELETE", "/api/v1/clusters/stuck", nil); r.Status != 409 || !strings.Contains(string(r.Raw), "is in Starting state and cannot be deleted: 1 member has joined") {
		t.Fatalf("delete without force: %d %s", r.Status, r.Raw)
	}
	r := a.Do("DELETE", "/api/v1/clusters/stuck?force=true", nil)
	if r.Status != 202 {
		t.Fatalf("forced delete: %d %s", r.Status, r.Raw)
	}
	var started client.JobAccepted
	r.Decode(t, &started)
	j := u.wait(started.Job.ID)
	if field[int](t, j, "jobstatus") != 1 || listedState(t, u, id) != "gone" {
		t.Fatalf("forced delete job: %s", j["jobresult"])
	}
}

// TestCloudStackRefusesWhatItCannotHonour: newer CloudStack's parameters
// are refused with 431 naming the parameter and why when ztpd cannot
// honour the value, accepted when it can; unknown ones are ignored.
func TestCloudStackRefusesWhatItCannotHonour(t *testing.T) {
	e, u, _ := stuckEnv(t)
	var vid string
	{
		l := u.ok("listKubernetesSupportedVersions", nil, false)
		var vs []map[string]json.RawMessage
		mustJSON(t, l["kubernetessupportedversion"], &vs)
		vid = field[string](t, vs[0], "id")
	}
	base := func(name string, extra map[string]string) map[string]string {
		p := map[string]string{"name": name, "zoneid": e.clusters.Zone().ID, "kubernetesversionid": vid,
			"serviceofferingid": "ztpd-small", "size": "1"}
		for k, v := range extra {
			p[k] = v
		}
		return p
	}
	refused := []struct {
		params map[string]string
		text   string
	}{
		{map[string]string{"etcdnodes": "2"}, "ztpd cannot honour parameter etcdnodes=2: use 0 (etcd on the control planes) or an odd number of dedicated etcd nodes from 1 to 7"},
		{map[string]string{"etcdnodes": "9"}, "ztpd cannot honour parameter etcdnodes=9: use 0"},
		{map[string]string{"etcdnodes": "-1"}, "ztpd cannot honour parameter etcdnodes=-1: use 0"},
		{map[string]string{"etcdnodes": "1", "clustertype": "ExternalManaged", "kubeconfig": "x"}, "ztpd cannot honour parameter etcdnodes=1: an ExternalManaged cluster's etcd is its administrators'"},
		{map[string]string{"clustertype": "ExternalManaged"}, "an ExternalManaged cluster needs the kubeconfig ztpd reaches it with (parameter kubeconfig)"},
		{map[string]string{"clustertype": "cloudmanaged"}, "Unable to resolve cluster type cloudmanaged to a supported value (CloudManaged, ExternalManaged)"},
		{map[string]string{"enablecsi": "true"}, "ztpd cannot honour parameter enablecsi=true: ztpd installs no CloudStack CSI driver"},
		{map[string]string{"nodeofferings[0].node": "worker", "nodeofferings[0].offering": "nosuch"},
			"nodeofferings: no service offering with ID nosuch (node type worker)"},
		{map[string]string{"nodeofferings[0].node": "gpu", "nodeofferings[0].offering": "ztpd-large"},
			`nodeofferings: node type "gpu" is none of worker, control, etcd`},
		{map[string]string{"nodeofferings[0].node": "worker"}, "Invalid value for parameter nodeofferings: each entry needs node and offering"},
		{map[string]string{"nodeofferings[0].node": "etcd", "nodeofferings[0].offering": "ztpd-small"},
			"ztpd cannot honour parameter nodeofferings={node:etcd,offering:ztpd-small}: node type etcd needs etcd nodes (etcdnodes)"},
		{map[string]string{"nodetemplates[0].node": "etcd", "nodetemplates[0].template": "leaf-worker"}, "node type etcd needs etcd nodes"},
		{map[string]string{"nodetemplates[0].node": "worker", "nodetemplates[0].template": "t-1"},
			`nodetemplates: no profile named "t-1" is loaded (node type worker): a node template names the profile its nodes get`},
		{map[string]string{"nodetemplates[0].node": "worker", "nodetemplates[0].template": "pinned-elsewhere"},
			`nodetemplates: profile "pinned-elsewhere" assigns its devices to cluster core-1, not to refused`},
		{map[string]string{"cniconfigurationid": "c-1"}, "Unable to find CNI configuration with ID: c-1"},
		{map[string]string{"cniconfigdetails[0].key": "mtu", "cniconfigdetails[0].value": "9000"}, "cniconfigdetails given without cniconfigurationid"},
		{map[string]string{"asnumber": "65001"}, "ztpd cannot honour parameter asnumber=65001: ztpd sets up no routed network"},
		{map[string]string{"hypervisor": "KVM"}, "ztpd cannot honour parameter hypervisor=KVM"},
		{map[string]string{"projectid": "p-1"}, "ztpd cannot honour parameter projectid=p-1: ztpd has no projects"},
		{map[string]string{"dockerregistryurl": "https://registry.example"}, "ztpd cannot honour parameter dockerregistryurl=https://registry.example"},
	}
	for _, c := range refused {
		errorBody(t, u.call("createKubernetesCluster", base("refused", c.params), true), "createkubernetesclusterresponse", 431, 4350, c.text)
	}
	if l := u.ok("listKubernetesClusters", nil, false); len(l) != 0 {
		t.Fatalf("a refused create made a cluster: %s", l["kubernetescluster"])
	}

	// What ztpd honours is accepted, and what CloudStack does not know is
	// ignored. Per-role offerings and templates shape the roles apart; the
	// workers' offering stands in for serviceofferingid.
	hp := base("honoured", map[string]string{"enablecsi": "false", "clustertype": "CloudManaged",
		"etcdnodes": "0", "nodeofferings[0].node": "control", "nodeofferings[0].offering": "ztpd-small",
		"nodeofferings[1].node": "Worker", "nodeofferings[1].offering": "ztpd-large",
		"nodetemplates[0].node": "worker", "nodetemplates[0].template": "leaf-worker",
		"nodetemplates[1].node": "control", "nodetemplates[1].template": "vm-control", "nosuchparameter": "x"})
	delete(hp, "serviceofferingid")
	cr := u.ok("createKubernetesCluster", hp, true)
	j := u.wait(field[string](t, cr, "jobid"))
	var res struct {
		Cluster client.CSCluster `json:"kubernetescluster"`
	}
	mustJSON(t, j["jobresult"], &res)
	c := res.Cluster
	small, _ := clusters.OfferingByID("ztpd-small")
	large, _ := clusters.OfferingByID("ztpd-large")
	if c.ClusterType != "CloudManaged" || c.CSIEnabled || c.EtcdNodes != 0 || c.ControlOfferingName != "ztpd-small" ||
		c.ControlOfferingID != small.ID || c.WorkerOfferingName != "ztpd-large" || c.WorkerOfferingID != large.ID ||
		c.ServiceOfferingID != large.ID || c.TemplateID != clusters.TemplateID("leaf-worker") || c.TemplateName != "leaf-worker" ||
		c.ZTPDNodeTemplates["control"] != clusters.TemplateID("vm-control") || c.ZTPDNodeProfiles["worker"] != "leaf-worker" {
		t.Fatalf("created: %+v", c)
	}
	// cpunumber and memory add up each role's offering: 1 small control
	// plane and 1 large worker.
	if c.CPUNumber != fmt.Sprint(small.CPU+large.CPU) || c.Memory != fmt.Sprint(small.MemoryMB+large.MemoryMB) {
		t.Fatalf("cpunumber %s memory %s", c.CPUNumber, c.Memory)
	}

	// Etcd nodes: three, on their own offering, counted in the totals.
	ep := base("with-etcd", map[string]string{"etcdnodes": "3", "nodeofferings[0].node": "etcd", "nodeofferings[0].offering": "ztpd-medium"})
	j = u.wait(field[string](t, u.ok("createKubernetesCluster", ep, true), "jobid"))
	mustJSON(t, j["jobresult"], &res)
	medium, _ := clusters.OfferingByID("ztpd-medium")
	if ec := res.Cluster; ec.EtcdNodes != 3 || ec.EtcdOfferingID != medium.ID || ec.EtcdOfferingName != "ztpd-medium" ||
		ec.CPUNumber != fmt.Sprint(2*small.CPU+3*medium.CPU) || len(ec.EtcdIPs) != 0 {
		t.Fatalf("created with etcd nodes: %+v", ec)
	}
	u.wait(field[string](t, u.ok("deleteKubernetesCluster", map[string]string{"id": res.Cluster.ID}, true), "jobid"))

	// listKubernetesClusters' clustertype filters: ztpd's are all CloudManaged.
	for typ, want := range map[string]int{"CloudManaged": 1, "ExternalManaged": 0} {
		l := u.ok("listKubernetesClusters", map[string]string{"clustertype": typ}, false)
		if n := len(l); (want == 0) != (n == 0) {
			t.Fatalf("listKubernetesClusters clustertype=%s: %v", typ, l)
		}
	}
	errorBody(t, u.call("listKubernetesClusters", map[string]string{"clustertype": "Other"}, false), "listkubernetesclustersresponse", 431, 4350,
		"Unable to resolve cluster type Other")

	e.healthy(c.ID)
	// Scale: no autoscaling, per-role offerings only as serviceofferingid.
	for _, s := range []struct {
		params map[string]string
		text   string
	}{
		{map[string]string{"autoscalingenabled": "true", "minsize": "1", "maxsize": "3"}, "ztpd cannot honour parameter autoscalingenabled=true: Autoscaling is not supported by ztpd"},
		{map[string]string{"size": "2", "minsize": "1"}, "ztpd cannot honour parameter minsize=1: Autoscaling is not supported by ztpd"},
		{map[string]string{"nodeofferings[0].node": "worker", "nodeofferings[0].offering": "ztpd-medium"},
			"Service offering ID: " + clusters.Offerings[1].ID + " offers lesser resources as compared to service offering ID: " + clusters.Offerings[2].ID + " of the worker nodes of Kubernetes cluster ID: " + c.ID},
		{map[string]string{"nodeofferings[0].node": "etcd", "nodeofferings[0].offering": "ztpd-xlarge"}, "nodeofferings: node type etcd needs etcd nodes, and Kubernetes cluster honoured runs etcd on its control planes"},
		{map[string]string{"nodeids": "02:00:00:00:0a:01", "nodeofferings[0].node": "control", "nodeofferings[0].offering": "ztpd-xlarge"},
			"nodeids and nodeofferings cannot be passed together"},
	} {
		s.params["id"] = c.ID
		errorBody(t, u.call("scaleKubernetesCluster", s.params, true), "scalekubernetesclusterresponse", 431, 4350, s.text)
	}
	sr := u.ok("scaleKubernetesCluster", map[string]string{"id": c.ID, "size": "2", "autoscalingenabled": "false"}, true)
	if j := u.wait(field[string](t, sr, "jobid")); field[int](t, j, "jobstatus") != 1 {
		t.Fatalf("scale with autoscalingenabled=false: %s", j["jobresult"])
	}
	// A scale's nodeofferings grows one role's offering and keeps the other's.
	sr = u.ok("scaleKubernetesCluster", map[string]string{"id": c.ID, "nodeofferings[0].node": "control", "nodeofferings[0].offering": "ztpd-xlarge"}, true)
	if j := u.wait(field[string](t, sr, "jobid")); field[int](t, j, "jobstatus") != 1 {
		t.Fatalf("scale with nodeofferings: %s", j["jobresult"])
	}
	l := u.ok("listKubernetesClusters", map[string]string{"id": c.ID}, false)
	var listed []client.CSCluster
	mustJSON(t, l["kubernetescluster"], &listed)
	if len(listed) != 1 || listed[0].ControlOfferingName != "ztpd-xlarge" || listed[0].WorkerOfferingName != "ztpd-large" {
		t.Fatalf("after scaling the control offering: %+v", listed)
	}
}

// TestListApisSaysWhatIsServed: each command's since, each limited
// parameter with its since and what ztpd takes, listCapabilities' fields
// as it answers them.
func TestListApisSaysWhatIsServed(t *testing.T) {
	e := newEnv(t, envOpts{})
	a := e.adminClient()
	l := a.ok("listApis", nil, false)
	var apis []client.CSAPI
	mustJSON(t, l["api"], &apis)
	byName := map[string]client.CSAPI{}
	for _, api := range apis {
		byName[api.Name] = api
	}
	if byName["createKubernetesCluster"].Since != "4.14.0" || byName["listZones"].Since != "" {
		t.Fatalf("since: create %q, listZones %q", byName["createKubernetesCluster"].Since, byName["listZones"].Since)
	}
	params := map[string]client.CSAPIParam{}
	for _, p := range byName["createKubernetesCluster"].Params {
		params[p.Name] = p
	}
	for name, since := range map[string]string{"clustertype": "4.19.0", "etcdnodes": "4.21.0", "nodeofferings": "4.21.0",
		"cniconfigurationid": "4.21.0", "enablecsi": "4.22.0", "asnumber": ""} {
		if p, ok := params[name]; !ok || p.Since != since || p.Required || p.Description == "" {
			t.Errorf("createKubernetesCluster %s: %+v", name, p)
		}
	}
	var capFields []string
	for _, r := range byName["listCapabilities"].Response {
		capFields = append(capFields, r.Name)
	}
	caps := a.ok("listCapabilities", nil, false)
	var capability map[string]json.RawMessage
	mustJSON(t, caps["capability"], &capability)
	if len(capFields) != len(capability) {
		t.Fatalf("listApis says listCapabilities answers %v; it answers %d fields", capFields, len(capability))
	}
	for _, f := range capFields {
		if _, ok := capability[f]; !ok {
			t.Errorf("listCapabilities does not answer %s", f)
		}
	}
	// Every command listed is answered (with no parameters: a refusal
	// naming what is missing, not an unknown command), listTemplates among
	// them.
	lt := byName["listTemplates"]
	if len(lt.Params) == 0 || lt.Params[0].Name != "templatefilter" || !lt.Params[0].Required {
		t.Errorf("listTemplates: %+v", lt)
	}
	for name := range byName {
		if r := a.call(name, nil, true); strings.Contains(string(r.raw), "either does not exist") {
			t.Errorf("listApis lists %s, which is not served: %s", name, r.raw)
		}
	}
}
