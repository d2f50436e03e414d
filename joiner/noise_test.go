package joiner

import (
	"errors"
	"testing"
	"time"

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
