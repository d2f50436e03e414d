package joiner

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// TestHolderOf is the one holder check every joiner door applies (joins,
// node reports, agent credentials) over each kind of address: a lease, a
// reservation by MAC, a binding by serial only (claimed by a record, not
// yet claimed, overlaid by a lease), another device's address, none.
func TestHolderOf(t *testing.T) {
	const (
		leased      = "10.99.1.10" // lease of mac(10)
		byMAC       = "10.99.1.11" // reservation of mac(11), no lease
		bySerial    = "10.99.1.12" // reservation of serial SN-12, held by mac(12)'s record
		unclaimed   = "10.99.1.13" // reservation of serial SN-13, no record holds it
		leasedOver  = "10.99.1.14" // reservation of serial SN-14 (mac(14)'s record), leased to mac(15)
		byClientID  = "10.99.1.16" // reservation by client id only
		nobodys     = "10.99.1.99"
		statedOther = "SN-OTHER"
	)
	ip := netip.MustParseAddr
	e := newEnv(t, Options{Bindings: bindingTable{
		ip(byMAC):      {IP: ip(byMAC), MAC: mac(11)},
		ip(bySerial):   {IP: ip(bySerial), Serial: "SN-12"},
		ip(unclaimed):  {IP: ip(unclaimed), Serial: "SN-13"},
		ip(leasedOver): {IP: ip(leasedOver), Serial: "SN-14"},
		ip(byClientID): {IP: ip(byClientID), ClientID: "leaf-16"},
	}})
	e.hold(leased, mac(10))
	e.hold(leasedOver, mac(15))
	e.store.Update(func(tx core.Tx) error {
		for _, d := range []core.Device{{ID: mac(12), MAC: mac(12), Serial: "SN-12"}, {ID: mac(14), MAC: mac(14), Serial: "SN-14"}} {
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
		}
		return nil
	})
	for _, tc := range []struct {
		name string
		addr string
		a    asker
		want string // the holder's device, when err is nil
		err  error
	}{
		{"lease: its holder's credential", leased, asker{device: mac(10)}, mac(10), nil},
		{"lease: another device's credential", leased, asker{device: mac(11)}, "", ErrWrongHolder},
		{"lease: a join stating nothing", leased, asker{}, mac(10), nil},
		{"lease: a join stating another MAC gets the holder (admission refuses it)", leased, asker{mac: mac(9)}, mac(10), nil},
		{"reservation by MAC: its device", byMAC, asker{device: mac(11)}, mac(11), nil},
		{"reservation by MAC: another device", byMAC, asker{device: mac(10)}, "", ErrWrongHolder},
		{"reservation by MAC: a join", byMAC, asker{mac: mac(11), serial: "SN-11"}, mac(11), nil},
		{"serial binding: the record holding its serial", bySerial, asker{device: mac(12)}, mac(12), nil},
		{"serial binding: another device's credential", bySerial, asker{device: mac(13)}, "", ErrWrongHolder},
		{"serial binding: a join stating its serial", bySerial, asker{mac: mac(12), serial: "SN-12"}, mac(12), nil},
		{"serial binding: a join stating its serial and another MAC gets the holder", bySerial, asker{mac: mac(20), serial: "SN-12"}, mac(12), nil},
		{"serial binding: a join stating no serial", bySerial, asker{mac: mac(12)}, mac(12), nil},
		{"serial binding: a join stating another serial", bySerial, asker{mac: mac(12), serial: statedOther}, "", ErrBindingMismatch},
		{"unclaimed serial binding: a join stating its serial names its MAC", unclaimed, asker{mac: mac(13), serial: "SN-13"}, mac(13), nil},
		{"unclaimed serial binding: a join stating no serial", unclaimed, asker{mac: mac(13)}, "", ErrBindingMismatch},
		{"unclaimed serial binding: a join stating no MAC", unclaimed, asker{serial: "SN-13"}, "", ErrBindingMismatch},
		{"unclaimed serial binding: a credential", unclaimed, asker{device: mac(13)}, "", ErrWrongHolder},
		{"serial binding under a lease: the lease's holder", leasedOver, asker{device: mac(15)}, mac(15), nil},
		{"serial binding under a lease: the serial's record", leasedOver, asker{device: mac(14)}, "", ErrWrongHolder},
		{"serial binding under a lease: a join stating the serial", leasedOver, asker{mac: mac(14), serial: "SN-14"}, mac(15), nil},
		{"client-id binding: a credential", byClientID, asker{device: mac(16)}, "", ErrWrongHolder},
		{"client-id binding: a join", byClientID, asker{mac: mac(16), serial: "SN-16"}, "", ErrBindingMismatch},
		{"no lease, no binding: a credential", nobodys, asker{device: mac(10)}, "", ErrNotHolder},
		{"no lease, no binding: a join", nobodys, asker{mac: mac(10), serial: "SN-10"}, "", ErrNotHolder},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			err := e.store.View(func(tx core.Tx) error {
				var err error
				_, got, err = holderOf(tx, ip(tc.addr), e.clk.now(), e.svc.opts.Bindings, tc.a)
				return err
			})
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("got %q, %v; want %v", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	// An expired lease holds nothing.
	e.clk.add(25 * time.Hour)
	err := e.store.View(func(tx core.Tx) error {
		_, _, err := holderOf(tx, ip(leased), e.clk.now(), e.svc.opts.Bindings, asker{device: mac(10)})
		return err
	})
	if !errors.Is(err, ErrNotHolder) {
		t.Fatalf("expired lease: %v", err)
	}
}

// TestSerialBindingDoors: a static device declared by serial only, whose
// record holds the serial, is the holder of its address on every door:
// its join, its node report and its agent (which the agent door refused:
// it took only a MAC as the holder). Another device stating the serial
// from that address does not join as itself (the join took the MAC it
// stated and recorded a serial conflict on the binding's device).
func TestSerialBindingDoors(t *testing.T) {
	const serial = "SN-STATIC-1"
	bound := netip.MustParseAddr("10.99.1.40")
	e := newEnv(t, Options{AutoApprove: approveAll, AgentFiles: agentFiles, ReportURL: "http://10.99.0.1:8080/join/report",
		Bindings: bindingTable{bound: {IP: bound, Serial: serial, Kind: core.KindVM}}})
	e.cluster(clusterSpec{Name: "prod", Size: 3, ControlNodes: 1})
	e.must(e.join("prod", 1)) // its control plane
	static, other := mac(40), mac(41)
	// Its first ZTP fetch recorded it (a VM declared by its serial).
	e.store.Update(func(tx core.Tx) error {
		return tx.Devices().Put(core.Device{ID: static, MAC: static, Serial: serial, Kind: core.KindVM, IP: bound.String()})
	})
	// Another device stating the binding's serial from its address.
	_, err := e.svc.Join(bg, JoinRequest{Enrollment: e.enroll("prod", other, ""), MAC: other, Serial: serial, RemoteIP: bound.String()})
	if !errors.Is(err, ErrBindingMismatch) {
		t.Fatalf("another MAC stating the bound serial joined: %v", err)
	}
	e.store.View(func(tx core.Tx) error {
		if _, err := tx.Memberships().Get(other); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("a membership of %s: %v", other, err)
		}
		if d, err := tx.Devices().Get(static); err != nil || d.SerialConflict != nil {
			t.Errorf("the binding's device: %+v %v", d, err)
		}
		return nil
	})
	b := e.must(e.svc.Join(bg, JoinRequest{Enrollment: e.enroll("prod", static, ""), MAC: static, Serial: serial, RemoteIP: bound.String()}))
	cred := agentCredentialOf(t, cloudFiles(t, b)["/etc/ztpd/agent.json"])
	if dev, err := e.svc.AuthenticateAgent(bg, cred, bound); err != nil || dev != static {
		t.Fatalf("the static device's agent from its bound address: %q %v", dev, err)
	}
	if _, err := e.svc.AuthenticateAgent(bg, cred, netip.MustParseAddr(e.hold("10.99.1.41", other))); !errors.Is(err, ErrAgentRefused) {
		t.Fatalf("its agent credential from another device's address: %v", err)
	}
	if _, err := e.svc.Report(bg, b.ReportToken(), bound, ReportJoined, ""); err != nil {
		t.Fatalf("its node report from its bound address: %v", err)
	}
}
