package sdktest

import (
	"strconv"
	"strings"
	"testing"

	"github.com/apache/cloudstack-go/v2/cloudstack"

	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/testenv/inproc"
)

// TestCloudStackSDK422: through the newest SDK, createKubernetesCluster's
// 4.21/4.22 parameters are refused when ztpd cannot honour the value and
// accepted when it can (node templates by the IDs listTemplates gives),
// and the cluster carries the fields those releases added, with ztpd's
// values.
func TestCloudStackSDK422(t *testing.T) {
	// The example profiles: node templates name them.
	base, cfg, a := inproc.ServeApp(t, func(c *config.Config) { c.Profiles = []string{"../../../examples/profiles"} })
	if err := a.ReloadProfiles(); err != nil { // ServeApp runs no Start, which loads them
		t.Fatal(err)
	}
	userKey, userSecret := newKey(t, cfg, "user")
	adminKey, adminSecret := newKey(t, cfg, "admin")
	user := cloudstack.NewAsyncClient(base+"/client/api", userKey, userSecret, true)
	user.AsyncTimeout(60)
	admin := cloudstack.NewAsyncClient(base+"/client/api", adminKey, adminSecret, true)
	zones, err := user.Zone.ListZones(user.Zone.NewListZonesParams())
	if err != nil || zones.Count != 1 {
		t.Fatalf("listZones: %v", err)
	}
	offs, err := user.ServiceOffering.ListServiceOfferings(user.ServiceOffering.NewListServiceOfferingsParams())
	if err != nil || offs.Count < 2 {
		t.Fatalf("listServiceOfferings: %v %+v", err, offs)
	}
	small, large := offs.ServiceOfferings[0], offs.ServiceOfferings[len(offs.ServiceOfferings)-1]
	vp := admin.Kubernetes.NewAddKubernetesSupportedVersionParams(2, 2048, "1.31.4")
	vp.SetUrl(base + "/isos/v1.31.4.iso")
	v, err := admin.Kubernetes.AddKubernetesSupportedVersion(vp)
	if err != nil {
		t.Fatal(err)
	}
	params := func() *cloudstack.CreateKubernetesClusterParams {
		p := user.Kubernetes.NewCreateKubernetesClusterParams("", v.Id, "c422", small.Id, 1, zones.Zones[0].Id)
		p.SetExternalloadbalanceripaddress("127.0.7.30") // nothing listens: the watch's probe stays on loopback
		return p
	}

	for what, set := range map[string]func(*cloudstack.CreateKubernetesClusterParams){
		"etcdnodes=2":    func(p *cloudstack.CreateKubernetesClusterParams) { p.SetEtcdnodes(2) },
		"enablecsi=true": func(p *cloudstack.CreateKubernetesClusterParams) { p.SetEnablecsi(true) },
		"asnumber=65001": func(p *cloudstack.CreateKubernetesClusterParams) { p.SetAsnumber(65001) },
		"hypervisor=KVM": func(p *cloudstack.CreateKubernetesClusterParams) { p.SetHypervisor("KVM") },
		"nodeofferings": func(p *cloudstack.CreateKubernetesClusterParams) {
			p.SetNodeofferings(map[string]string{"etcd": large.Id})
		},
		"nodetemplates": func(p *cloudstack.CreateKubernetesClusterParams) {
			p.SetNodetemplates(map[string]string{"etcd": "spine"})
		},
	} {
		p := params()
		set(p)
		name, _, _ := strings.Cut(what, "=")
		if _, err := user.Kubernetes.CreateKubernetesCluster(p); err == nil ||
			!strings.Contains(err.Error(), "CloudStack API error 431 (CSExceptionErrorCode: 4350): ztpd cannot honour parameter "+name+"=") {
			t.Errorf("create with %s: %v", what, err)
		}
	}

	// A node template names a loaded profile, and not one that puts its
	// devices in another cluster (vm-worker's is k8s-prod).
	for tmpl, want := range map[string]string{"t-1": `no profile named "t-1" is loaded`,
		"vm-worker": `profile "vm-worker" assigns its devices to cluster k8s-prod, not to c422`} {
		p := params()
		p.SetNodetemplates(map[string]string{"worker": tmpl})
		if _, err := user.Kubernetes.CreateKubernetesCluster(p); err == nil || !strings.Contains(err.Error(), "CloudStack API error 431") ||
			!strings.Contains(err.Error(), want) {
			t.Errorf("create with node template %s: %v", tmpl, err)
		}
	}

	// Node templates by the IDs listTemplates gives: each loaded profile
	// is a ready template, its ID the same whoever asks.
	tp := user.Template.NewListTemplatesParams("executable")
	tl, err := user.Template.ListTemplates(tp)
	if err != nil || tl.Count != 6 {
		t.Fatalf("listTemplates: %v %+v", err, tl)
	}
	templateIDs := map[string]string{}
	for _, tm := range tl.Templates {
		if !tm.Isready || tm.Zoneid != zones.Zones[0].Id || tm.Displaytext == "" {
			t.Errorf("template %+v", tm)
		}
		templateIDs[tm.Name] = tm.Id
	}
	if tm, n, err := admin.Template.GetTemplateByID(templateIDs["spine"], "executable"); err != nil || n != 1 || tm.Name != "spine" ||
		tm.Ostypename != "SONiC" {
		t.Fatalf("GetTemplateByID(spine): %v %d %+v", err, n, tm)
	}
	p := params()
	p.SetEtcdnodes(0)
	p.SetEnablecsi(false)
	p.SetClustertype("CloudManaged")
	p.SetNodeofferings(map[string]string{"control": small.Id, "worker": large.Id})
	p.SetNodetemplates(map[string]string{"worker": templateIDs["default-sonic"], "control": templateIDs["spine"]})
	c, err := user.Kubernetes.CreateKubernetesCluster(p)
	if err != nil {
		t.Fatalf("create with the values ztpd honours: %v", err)
	}
	if c.Clustertype != "CloudManaged" || c.Csienabled || c.Etcdnodes != 0 || c.Controlofferingid != small.Id ||
		c.Controlofferingname != small.Name || c.Workerofferingid != large.Id || c.Workerofferingname != large.Name ||
		c.Etcdofferingid != "" || len(c.Etcdips) != 0 || c.Templateid != templateIDs["default-sonic"] || c.Templatename != "default-sonic" {
		t.Fatalf("created: %+v", c)
	}
	// cpunumber adds up each role's offering: one control plane, one worker.
	if c.Cpunumber != strconv.Itoa(small.Cpunumber+large.Cpunumber) {
		t.Errorf("cpunumber %s, want %d", c.Cpunumber, small.Cpunumber+large.Cpunumber)
	}
	// A scale's nodeofferings grows the control planes' offering (of a
	// Running cluster, as CloudStack scales).
	inproc.Healthy(t, a, c.Id)
	sp := user.Kubernetes.NewScaleKubernetesClusterParams(c.Id)
	sp.SetNodeofferings(map[string]string{"control": large.Id})
	if sc, err := user.Kubernetes.ScaleKubernetesCluster(sp); err != nil || sc.Controlofferingid != large.Id || sc.Workerofferingid != large.Id {
		t.Fatalf("scale with nodeofferings: %v %+v", err, sc)
	}
	lp := user.Kubernetes.NewListKubernetesClustersParams()
	lp.SetClustertype("CloudManaged")
	if l, err := user.Kubernetes.ListKubernetesClusters(lp); err != nil || l.Count != 1 || l.KubernetesClusters[0].Id != c.Id {
		t.Fatalf("list: %v %+v", err, l)
	}
	if del, err := user.Kubernetes.DeleteKubernetesCluster(user.Kubernetes.NewDeleteKubernetesClusterParams(c.Id)); err != nil || !del.Success {
		t.Fatalf("delete: %v %+v", err, del)
	}

	// Three etcd nodes on their own offering: the SDK reads them back.
	ep := params()
	ep.SetName("c422-etcd")
	ep.SetEtcdnodes(3)
	ep.SetNodeofferings(map[string]string{"etcd": large.Id})
	ec, err := user.Kubernetes.CreateKubernetesCluster(ep)
	if err != nil {
		t.Fatalf("create with etcd nodes: %v", err)
	}
	if ec.Etcdnodes != 3 || ec.Etcdofferingid != large.Id || ec.Etcdofferingname != large.Name || len(ec.Etcdips) != 0 ||
		ec.Cpunumber != strconv.Itoa(2*small.Cpunumber+3*large.Cpunumber) {
		t.Fatalf("created with etcd nodes: %+v", ec)
	}
	if del, err := user.Kubernetes.DeleteKubernetesCluster(user.Kubernetes.NewDeleteKubernetesClusterParams(ec.Id)); err != nil || !del.Success {
		t.Fatalf("delete the etcd-node cluster: %v %+v", err, del)
	}
}
