package dhcp

import (
	"context"
	"crypto/rand"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
)

func hostname(n string) dhcpv4.Modifier { return dhcpv4.WithOption(dhcpv4.OptHostName(n)) }
func vendor(v string) dhcpv4.Modifier   { return dhcpv4.WithOption(dhcpv4.OptClassIdentifier(v)) }

func (h *harness) eventsOf(id, typ string) []core.Event {
	h.t.Helper()
	var out []core.Event
	if err := h.st.View(func(tx core.Tx) error {
		return tx.Events().List(core.DeviceEvents, 0, func(e core.Event) (bool, error) {
			if e.Device == id && e.Type == typ {
				out = append(out, e)
			}
			return true, nil
		})
	}); err != nil {
		h.t.Fatal(err)
	}
	return out
}

// renew sends a REQUEST from a bound client (ciaddr, no server id) and
// returns the reply.
func (h *harness) renew(hw net.HardwareAddr, addr net.IP, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	h.t.Helper()
	mods = append([]dhcpv4.Modifier{dhcpv4.WithHwAddr(hw), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithClientIP(addr)}, mods...)
	r, err := dhcpv4.New(mods...)
	if err != nil {
		h.t.Fatal(err)
	}
	rep, _ := h.exchange(r)
	return rep
}

// TestSpoofedPacketsChangeNoRecord: a DISCOVER, a NAKed REQUEST and an
// INFORM quoting an established SONiC switch's hardware address with
// another kind (ONIE), hostname, vendor class and relay change nothing in
// its record (what its config_db.json is rendered from); only its lease
// exchanges do.
func TestSpoofedPacketsChangeNoRecord(t *testing.T) {
	h := newHarness(t, nil)
	victim := mac(0x301)
	ack := h.dora(victim, generic(optUserClass, []byte("SONiC-ZTP")), hostname("leaf1"), vendor("SONiC"))
	h.commit()
	id := macText(victim)
	before := h.device(id)
	if before.Kind != core.KindSONiC || before.Hostname != "leaf1" {
		t.Fatalf("victim's record: %+v", before)
	}
	h.now = h.now.Add(5 * time.Minute)
	evil := []dhcpv4.Modifier{vendor("onie_vendor:x86_64-evil_box-r0"), hostname("pwned")}
	if offer, _ := h.exchange(discover(victim, evil...)); offer == nil {
		t.Fatal("no OFFER to the spoofed DISCOVER")
	}
	if offer, _ := h.exchange(discover(victim, append(evil, dhcpv4.WithRelay(ip("10.99.5.1")))...)); offer == nil {
		t.Fatal("no OFFER to the spoofed relayed DISCOVER")
	}
	// A REQUEST the server NAKs (an address outside the pool).
	nak, _ := dhcpv4.New(append([]dhcpv4.Modifier{dhcpv4.WithHwAddr(victim), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip("10.99.0.20"))), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(serverIP))}, evil...)...)
	if rep, _ := h.exchange(nak); rep == nil || rep.MessageType() != dhcpv4.MessageTypeNak {
		t.Fatalf("REQUEST for another address: %v", rep)
	}
	inf, _ := dhcpv4.NewInform(victim, ack.YourIPAddr, evil...)
	if rep, _ := h.exchange(inf); rep == nil || rep.MessageType() != dhcpv4.MessageTypeAck {
		t.Fatalf("INFORM reply: %v", rep)
	}
	h.commit()
	if after := h.device(id); !reflect.DeepEqual(after, before) {
		t.Fatalf("spoofed packets changed the record:\nbefore %+v\nafter  %+v", before, after)
	}
	if got := h.s.devs[string(victim)].d; got.Kind != core.KindSONiC || got.Hostname != "leaf1" || got.Platform != "" {
		t.Fatalf("spoofed packets changed the server's view: %+v", got)
	}
}

// TestRenewalContradictingTheRecordIsAnEvent: a REQUEST that renews a
// switch's lease stating another platform, or ONIE for a SONiC switch, is
// acknowledged but overwrites nothing: each contradiction is an event.
func TestRenewalContradictingTheRecordIsAnEvent(t *testing.T) {
	h := newHarness(t, nil)
	hw := mac(0x302)
	id := macText(hw)
	ack := h.dora(hw, vendor("onie_vendor:x86_64-accton_as7712_32x-r0"), hostname("sw1"))
	h.commit()
	if d := h.device(id); d.Kind != core.KindONIE || d.Platform != "x86_64-accton_as7712_32x-r0" {
		t.Fatalf("ONIE record: %+v", d)
	}
	// ONIE installed SONiC: a refinement, not a conflict.
	h.now = h.now.Add(2 * time.Minute)
	if rep := h.renew(hw, ack.YourIPAddr, generic(optUserClass, []byte("SONiC-ZTP"))); rep == nil || rep.MessageType() != dhcpv4.MessageTypeAck {
		t.Fatalf("renewal: %v", rep)
	}
	h.commit()
	if d := h.device(id); d.Kind != core.KindSONiC {
		t.Fatalf("ONIE was not refined to SONiC: %+v", d)
	}
	if evs := h.eventsOf(id, devices.EventFactConflict); len(evs) != 0 {
		t.Fatalf("refinement recorded as a conflict: %+v", evs)
	}
	h.now = h.now.Add(2 * time.Minute)
	if rep := h.renew(hw, ack.YourIPAddr, vendor("onie_vendor:x86_64-evil_box-r0")); rep == nil || rep.MessageType() != dhcpv4.MessageTypeAck {
		t.Fatalf("renewal: %v", rep)
	}
	h.commit()
	d := h.device(id)
	if d.Kind != core.KindSONiC || d.Platform != "x86_64-accton_as7712_32x-r0" {
		t.Fatalf("a renewal overwrote the record: %+v", d)
	}
	got := map[string]string{}
	for _, e := range h.eventsOf(id, devices.EventFactConflict) {
		got[e.Fields["fact"]] = e.Fields["stated"]
	}
	if want := map[string]string{"kind": "onie", "platform": "x86_64-evil_box-r0"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("conflict events %v, want %v", got, want)
	}
}

// TestMadeUpMACsArePruned: thousands of DORA+RELEASE exchanges with random
// hardware addresses leave records that never got past a released lease;
// retention caps them at once, oldest first, and deletes the rest after
// the expiry, while a device that holds its lease keeps its record.
func TestMadeUpMACsArePruned(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 400
	}
	h := newHarness(t, nil)
	keeper := mac(0x303)
	kept := h.dora(keeper)
	start := h.now
	for i := range n {
		hw := make(net.HardwareAddr, 6)
		rand.Read(hw)
		hw[0] = hw[0]&^1 | 2 // unicast, locally administered
		ack := h.dora(hw)
		rel, _ := dhcpv4.NewReleaseFromACK(ack)
		h.exchange(rel)
		if i%100 == 99 {
			h.now = h.now.Add(time.Second)
		}
	}
	h.commit()
	count := func() int {
		var c int
		if err := h.st.View(func(tx core.Tx) error { var err error; c, err = tx.Devices().Count(); return err }); err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := count(); c != n+1 {
		t.Fatalf("%d records after %d exchanges, want %d", c, n, n+1)
	}
	// The server's in-memory view of devices stays within its bindings.
	h.sweep()
	if len(h.s.devs) > len(h.s.byIP) {
		t.Fatalf("%d device views kept in memory for %d bindings", len(h.s.devs), len(h.s.byIP))
	}
	if h.s.devs[string(keeper)] == nil {
		t.Fatal("the keeper's view was dropped while it holds its lease")
	}
	const maxUnleased = 100
	r := devices.New(devices.Options{Store: h.st, Log: h.s.log, UnleasedExpiry: time.Hour, MaxUnleased: maxUnleased})
	defer r.Close()
	if pruned := r.PruneDevices(context.Background(), h.now); pruned != n-maxUnleased {
		t.Fatalf("pruned %d over the cap, want %d", pruned, n-maxUnleased)
	}
	if c := count(); c != maxUnleased+1 {
		t.Fatalf("%d records after the cap, want %d", c, maxUnleased+1)
	}
	var oldest time.Time
	if err := h.st.View(func(tx core.Tx) error {
		return tx.Devices().List("", func(d core.Device) (bool, error) {
			if d.ID != macText(keeper) && (oldest.IsZero() || d.LastSeen.Before(oldest)) {
				oldest = d.LastSeen
			}
			return true, nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	if !oldest.After(start.Add(time.Duration(n/100-2) * time.Second)) {
		t.Fatalf("the cap kept a record last seen %v: not the newest", oldest)
	}
	// The keeper renews its lease (a real device); the others are gone
	// after the expiry.
	h.now = h.now.Add(50 * time.Minute)
	if rep := h.renew(keeper, kept.YourIPAddr); rep == nil || rep.MessageType() != dhcpv4.MessageTypeAck {
		t.Fatalf("keeper's renewal: %v", rep)
	}
	h.now = h.now.Add(30 * time.Minute)
	if pruned := r.PruneDevices(context.Background(), h.now); pruned != maxUnleased {
		t.Fatalf("pruned %d expired, want %d", pruned, maxUnleased)
	}
	if c := count(); c != 1 {
		t.Fatalf("%d records left, want the keeper's", c)
	}
	h.device(macText(keeper))
}
