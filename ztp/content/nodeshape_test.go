package content

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
)

// TestClusterNodeShapePicksProfileAndOffering: a member of a cluster whose
// node template and offering name its role gets that profile (not the one
// its facts match) and that offering in its meta-data; another role of the
// same cluster, and a device in no cluster, keep the profile they match.
func TestClusterNodeShapePicksProfileAndOffering(t *testing.T) {
	e := newEnv(t, fakeJoiner{}, "")
	large, _ := clusters.OfferingByID("ztpd-large")
	err := e.db.Update(func(tx core.Tx) error {
		return tx.Clusters().Put(core.Cluster{ID: "c-shapes", Name: "shapes", State: core.ClusterRunning,
			ServiceOfferingID: clusters.Offerings[0].ID,
			NodeOfferings:     map[string]string{clusters.NodeControl: large.ID},
			NodeTemplates:     map[string]string{clusters.NodeControl: "fabric-control-plane"}})
	})
	if err != nil {
		t.Fatal(err)
	}
	// Each VM sits on the vm-worker profile's subnet.
	devs := []struct {
		mac, ip, cluster, role string
		profile, hostname      string
		offering               string
	}{
		{"52:54:00:00:42:01", "10.99.42.11", "c-shapes", "control-plane", "fabric-control-plane", "fabric-cp-525400004201", "ztpd-large"},
		{"52:54:00:00:42:02", "10.99.42.12", "c-shapes", "worker", "vm-worker", "worker-525400004202", "medium"},
		{"52:54:00:00:42:03", "10.99.42.13", "", "", "vm-worker", "worker-525400004203", "medium"},
	}
	for _, d := range devs {
		e.putDevice(t, core.Device{ID: d.mac, MAC: d.mac, Kind: core.KindVM, IP: d.ip, Subnet: "vms", Cluster: d.cluster, Role: d.role}, d.ip)
		vm, err := e.svc.VM(context.Background(), &Client{Addr: netip.MustParseAddr(d.ip), Transport: "http"}, false)
		if err != nil {
			t.Fatalf("%s: %v", d.mac, err)
		}
		if vm.Result.Profile != d.profile || vm.Result.Hostname != d.hostname {
			t.Errorf("%s (%s %s): profile %s hostname %s, want %s %s", d.mac, d.cluster, d.role, vm.Result.Profile, vm.Result.Hostname, d.profile, d.hostname)
		}
		if v, _ := MetadataValue("service-offering", &vm.Device, vm.Result); v != d.offering {
			t.Errorf("%s: service-offering %q, want %q", d.mac, v, d.offering)
		}
	}

	// A template naming a profile no longer loaded is a refusal that says
	// so, never another profile.
	err = e.db.Update(func(tx core.Tx) error {
		return tx.Clusters().Put(core.Cluster{ID: "c-gone", Name: "gone", State: core.ClusterRunning,
			NodeTemplates: map[string]string{clusters.NodeWorker: "removed-profile"}})
	})
	if err != nil {
		t.Fatal(err)
	}
	e.putDevice(t, core.Device{ID: "52:54:00:00:42:04", MAC: "52:54:00:00:42:04", Kind: core.KindVM, IP: "10.99.42.14", Subnet: "vms",
		Cluster: "c-gone", Role: "worker"}, "10.99.42.14")
	if _, err := e.svc.VM(context.Background(), &Client{Addr: netip.MustParseAddr("10.99.42.14"), Transport: "http"}, false); err == nil ||
		!strings.Contains(err.Error(), `names profile "removed-profile", which is not loaded`) {
		t.Fatalf("template of a profile not loaded: %v", err)
	}
}
