package sdktest

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/apache/cloudstack-go/v2/cloudstack"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/testenv/inproc"
)

// TestCloudStackSDKNodesAndCNI: through the newest SDK, an admin registers
// a CNI configuration (ConfigurationService), a user lists it and creates
// a cluster with it and its parameter values, which the cluster shows;
// addNodesToKubernetesCluster (async, the cluster as result) admits a
// device seen on the network into the Running cluster, growing its size;
// addVirtualMachinesToKubernetesCluster (sync) does the same for another;
// removing a device that never joined is refused with why; a configuration
// in use is not deleted, and is once its cluster is gone.
func TestCloudStackSDKNodesAndCNI(t *testing.T) {
	base, cfg, ztpd := inproc.ServeApp(t, nil)
	userKey, userSecret := newKey(t, cfg, "user")
	adminKey, adminSecret := newKey(t, cfg, "admin")
	user := cloudstack.NewAsyncClient(base+"/client/api", userKey, userSecret, true)
	user.AsyncTimeout(60)
	admin := cloudstack.NewAsyncClient(base+"/client/api", adminKey, adminSecret, true)

	manifest := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cni\n  namespace: kube-system\ndata:\n  mtu: \"{{ ds.meta_data.mtu }}\"\n"
	rp := admin.Configuration.NewRegisterCniConfigurationParams("calico")
	rp.SetCniconfig(base64.StdEncoding.EncodeToString([]byte(manifest)))
	rp.SetParams("mtu")
	if _, err := user.Configuration.RegisterCniConfiguration(rp); err == nil || !strings.Contains(err.Error(), "432") {
		t.Fatalf("a user registered a CNI configuration: %v", err)
	}
	reg, err := admin.Configuration.RegisterCniConfiguration(rp)
	if err != nil || reg.CniConfiguration == nil || reg.CniConfiguration.Name != "calico" || reg.CniConfiguration.Params != "mtu" {
		t.Fatalf("register: %v %+v", err, reg)
	}
	cniID := reg.CniConfiguration.Id
	l, err := user.Configuration.ListCniConfiguration(user.Configuration.NewListCniConfigurationParams())
	if err != nil || l.Count != 1 || l.CniConfiguration[0].Id != cniID {
		t.Fatalf("list: %v %+v", err, l)
	}
	if got, _, err := user.Configuration.GetCniConfigurationByName("calico"); err != nil || got.Id != cniID {
		t.Fatalf("get by name: %v %+v", err, got)
	}

	zones, err := user.Zone.ListZones(user.Zone.NewListZonesParams())
	if err != nil {
		t.Fatal(err)
	}
	offs, err := user.ServiceOffering.ListServiceOfferings(user.ServiceOffering.NewListServiceOfferingsParams())
	if err != nil {
		t.Fatal(err)
	}
	vp := admin.Kubernetes.NewAddKubernetesSupportedVersionParams(2, 2048, "1.31.4")
	vp.SetUrl(base + "/isos/v1.31.4.iso")
	v, err := admin.Kubernetes.AddKubernetesSupportedVersion(vp)
	if err != nil {
		t.Fatal(err)
	}
	p := user.Kubernetes.NewCreateKubernetesClusterParams("", v.Id, "nodes", offs.ServiceOfferings[0].Id, 1, zones.Zones[0].Id)
	p.SetExternalloadbalanceripaddress("127.0.7.31") // nothing listens: the watch's probe stays on loopback
	p.SetCniconfigurationid(cniID)
	p.SetCniconfigdetails(map[string]string{"mtu": "1450"})
	c, err := user.Kubernetes.CreateKubernetesCluster(p)
	if err != nil || c.Cniconfigurationid != cniID || c.Cniconfigname != "calico" {
		t.Fatalf("create with a CNI configuration: %v %+v", err, c)
	}
	inproc.Healthy(t, ztpd, c.Id) // Running once the watch sees it healthy

	const first, second = "02:00:00:00:1e:01", "02:00:00:00:1e:02"
	now := time.Now().UTC()
	if err := ztpd.Store.Update(func(tx core.Tx) error {
		for _, d := range []string{first, second} {
			if err := tx.Devices().Put(core.Device{ID: d, MAC: d, Kind: core.KindVM, State: core.StateLeased, Cluster: c.Id,
				FirstSeen: now, LastSeen: now, UpdatedAt: now}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	added, err := user.Kubernetes.AddNodesToKubernetesCluster(user.Kubernetes.NewAddNodesToKubernetesClusterParams(c.Id, []string{first}))
	if err != nil || added.Size != 2 || added.State != "Running" || added.Cniconfigname != "calico" {
		t.Fatalf("addNodes: %v %+v", err, added)
	}
	vms, err := user.Kubernetes.AddVirtualMachinesToKubernetesCluster(
		user.Kubernetes.NewAddVirtualMachinesToKubernetesClusterParams(c.Id, []string{second}))
	if err != nil || !vms.Success || !strings.Contains(vms.Displaytext, "job ") {
		t.Fatalf("addVirtualMachines: %v %+v", err, vms)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, _, err := user.Kubernetes.GetKubernetesClusterByID(c.Id)
		if err != nil {
			t.Fatal(err)
		}
		if got.Size == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("size after addVirtualMachines: %d", got.Size)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, d := range []string{first, second} {
		var dev core.Device
		ztpd.Store.View(func(tx core.Tx) error { dev, _ = tx.Devices().Get(d); return nil })
		if !dev.Approved || dev.Cluster != c.Id {
			t.Fatalf("%s not approved into the cluster: %+v", d, dev)
		}
	}
	if _, err := user.Kubernetes.RemoveNodesFromKubernetesCluster(user.Kubernetes.NewRemoveNodesFromKubernetesClusterParams(c.Id, []string{first})); err == nil ||
		!strings.Contains(err.Error(), "431") || !strings.Contains(err.Error(), "has no node "+first) {
		t.Fatalf("removeNodes of a device that never joined: %v", err)
	}

	if _, err := admin.Configuration.DeleteCniConfiguration(admin.Configuration.NewDeleteCniConfigurationParams(cniID)); err == nil || !strings.Contains(err.Error(), "536") {
		t.Fatalf("delete of a configuration in use: %v", err)
	}
	if del, err := user.Kubernetes.DeleteKubernetesCluster(user.Kubernetes.NewDeleteKubernetesClusterParams(c.Id)); err != nil || !del.Success {
		t.Fatalf("delete: %v %+v", err, del)
	}
	if del, err := admin.Configuration.DeleteCniConfiguration(admin.Configuration.NewDeleteCniConfigurationParams(cniID)); err != nil || !del.Success {
		t.Fatalf("delete of the configuration: %v %+v", err, del)
	}
}
