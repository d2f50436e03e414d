package joiner

import (
	"errors"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
)

// TestWaitingIsADeviceEventOncePerReason: an unauthenticated device
// fetching its user-data over and over while it waits for approval leaves
// one join.waiting event, in the device stream: the audit trail is what a
// key holder or the appliance decided, and a storm of fetches must not
// cycle it.
func TestWaitingIsADeviceEventOncePerReason(t *testing.T) {
	e := newEnv(t, Options{}) // no auto-approval: the VM waits
	e.cluster(clusterSpec{Name: "prod", Size: 3})
	m := mac(1)
	ip := e.hold(addrOf(1), m)
	e.store.Update(func(tx core.Tx) error {
		return tx.Devices().Put(core.Device{ID: m, MAC: m, Kind: core.KindVM, IP: ip})
	})
	count := func() (audit, waiting, all int) {
		e.store.View(func(tx core.Tx) error {
			for _, st := range []core.EventStream{core.DeviceEvents, core.AuditEvents} {
				tx.Events().List(st, 0, func(ev core.Event) (bool, error) {
					if ev.Device == m {
						all++
						if st == core.AuditEvents {
							audit++
						}
						if ev.Type == "join.waiting" {
							waiting++
						}
					}
					return true, nil
				})
			}
			return nil
		})
		return
	}
	for i := range 300 {
		var we *WaitError
		if _, err := e.svc.UserData(bg, e.device(m), "prod", "", "vm-1"); !errors.As(err, &we) {
			t.Fatalf("fetch %d: %v", i, err)
		}
		if i%50 == 0 {
			e.clk.add(time.Second)
		}
	}
	audit, waiting, all := count()
	if audit != 0 || waiting != 1 || all != 1 {
		t.Fatalf("300 user-data fetches of a waiting VM: %d audit events, %d join.waiting, %d in all; want 0, 1, 1", audit, waiting, all)
	}
	if core.IsAudit("join.waiting") {
		t.Fatal("join.waiting is in the audit trail")
	}
}

// TestProfileNamesOnlyAdminClustersByName: a user key may create a cluster
// under any free name, also the one an operator's profile names before the
// operator created it. The profile's devices must not then join that
// account's cluster: by name a profile reaches only the admin account's
// clusters; another account's cluster it names by id.
func TestProfileNamesOnlyAdminClustersByName(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll, BaseURL: "http://10.99.0.1:8080"})
	e.cluster(clusterSpec{Name: "other", Size: 1}) // the version the tenant picks
	v, err := e.cl.GetVersion(bg, "v1.28.4")
	if err != nil {
		t.Fatal(err)
	}
	tenant := clusters.Caller{APIKey: "k-tenant", Name: "tenant", Account: "tenant-a"}
	c, j, err := e.cl.CreateCluster(bg, tenant, clusters.ClusterSpec{Name: "prod", ZoneID: e.cl.Zone().ID,
		VersionID: v.ID, ServiceOfferingID: clusters.Offerings[0].ID, Size: 1})
	if err != nil {
		t.Fatal(err)
	}
	e.waitJob(j)
	e.healthy(c.ID)
	sw := mac(1)
	ip := e.hold(addrOf(1), sw)
	e.store.Update(func(tx core.Tx) error {
		return tx.Devices().Put(core.Device{ID: sw, MAC: sw, Kind: core.KindSONiC, IP: ip, Serial: "SN-1"})
	})
	vm := mac(2)
	vmIP := e.hold(addrOf(2), vm)
	e.store.Update(func(tx core.Tx) error {
		return tx.Devices().Put(core.Device{ID: vm, MAC: vm, Kind: core.KindVM, IP: vmIP})
	})
	if sec, err := e.svc.ZTPSection(bg, e.device(sw), "prod", "leaf-1"); !errors.Is(err, ErrClusterByName) || sec != nil {
		t.Fatalf("ztp.json join section for the tenant's cluster named by the profile: %v %v", sec, err)
	}
	if _, _, ok, err := e.svc.KubernetesMaster(bg, e.device(sw), "prod"); ok || !errors.Is(err, ErrClusterByName) {
		t.Fatalf("KUBERNETES_MASTER of the tenant's cluster named by the profile: %v %v", ok, err)
	}
	if ud, err := e.svc.UserData(bg, e.device(vm), "prod", "", "vm-1"); !errors.Is(err, ErrClusterByName) || ud != nil {
		t.Fatalf("user-data for the tenant's cluster named by the profile: %v", err)
	}
	if ms, err := e.svc.Membership(bg, vm); err == nil {
		t.Fatalf("a membership was made: %+v", ms)
	}
	// Named by its id, the tenant's cluster is the profile's on purpose.
	if sec, err := e.svc.ZTPSection(bg, e.device(sw), c.ID, "leaf-1"); err != nil || sec == nil {
		t.Fatalf("join section for the tenant's cluster by id: %v %v", sec, err)
	}
}
