package joiner

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// bindingTable is the configuration's reservations as core.Bindings.
type bindingTable map[netip.Addr]core.Binding

func (b bindingTable) BindingFor(ip netip.Addr) (core.Binding, bool) {
	bd, ok := b[ip]
	return bd, ok
}

// TestReservedRuleCountsOnlyMACReservations: `reserved: true` is network
// proof only for a reservation by MAC (a lease the DHCP server marked
// reserved, or a MAC binding). A reservation by serial or client id is
// matched on the device's word, which any host can repeat: it does not
// admit.
func TestReservedRuleCountsOnlyMACReservations(t *testing.T) {
	bySerial, byMAC := netip.MustParseAddr("10.99.1.50"), netip.MustParseAddr("10.99.1.51")
	e := newEnv(t, Options{
		AutoApprove: []Rule{{Reserved: true, Cluster: "prod"}},
		Bindings: bindingTable{
			bySerial: {IP: bySerial, Serial: "SNRES1", Kind: core.KindSONiC},
			byMAC:    {IP: byMAC, MAC: mac(51), Kind: core.KindVM},
		},
	})
	e.cluster(clusterSpec{Name: "prod", Size: 10})
	// A worker approved by an operator first: the rule approves workers.
	e.store.Update(func(tx core.Tx) error {
		return tx.Devices().Put(core.Device{ID: mac(100), MAC: mac(100), Kind: core.KindVM})
	})
	if _, err := e.svc.Approve(bg, mac(100), "prod"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: e.enroll("prod", mac(100), ""), MAC: mac(100), RemoteIP: e.hold("10.99.1.100", mac(100))}); err != nil {
		t.Fatalf("approved control plane: %v", err)
	}
	waits := func(err error) bool {
		var we *WaitError
		return errors.As(err, &we) && strings.Contains(we.Reason, "approval")
	}
	_, err := e.svc.Join(bg, JoinRequest{Enrollment: e.enroll("prod", mac(50), ""), MAC: mac(50), Serial: "SNRES1", RemoteIP: bySerial.String()})
	if !waits(err) {
		t.Fatalf("a reservation by serial admitted through reserved: true: %v", err)
	}
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: e.enroll("prod", mac(51), ""), MAC: mac(51), RemoteIP: byMAC.String()}); err != nil {
		t.Fatalf("a reservation by MAC: %v", err)
	}
	// Leases: the DHCP server marks reserved only those of MAC reservations.
	now := e.clk.now()
	e.store.Update(func(tx core.Tx) error {
		for i, reserved := range []bool{true, false} {
			l := core.Lease{IP: addrOf(60 + i), MAC: mac(60 + i), State: core.LeaseActive, Start: now, Expiry: now.Add(time.Hour), Reserved: reserved}
			if err := tx.Leases().Put(l); err != nil {
				return err
			}
		}
		return nil
	})
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: e.enroll("prod", mac(60), ""), MAC: mac(60), RemoteIP: addrOf(60)}); err != nil {
		t.Fatalf("a reserved lease: %v", err)
	}
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: e.enroll("prod", mac(61), ""), MAC: mac(61), RemoteIP: addrOf(61)}); !waits(err) {
		t.Fatalf("a lease not reserved admitted: %v", err)
	}
}
