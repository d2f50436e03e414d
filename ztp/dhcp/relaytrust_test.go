package dhcp

import (
	"strings"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// rackPort is option 82 with circuit id rack7/port3, what the attacker of
// these tests claims.
func rackPort() dhcpv4.Modifier {
	rai := append([]byte{relayCircuitID, 11}, "rack7/port3"...)
	return generic(optRelayAgent, rai)
}

// TestForgedGIAddrGetsNothing: a host on the appliance's link that sets
// giaddr (and option 82) itself is not a relay: no lease, no device
// record, the drop counted and logged with the setting to use.
func TestForgedGIAddrGetsNothing(t *testing.T) {
	h := newHarness(t, nil)
	h.src = addr("10.99.0.66") // the attacker's own address on the link
	before := counterValue(h.s.metrics.dropUntrustedRelay)
	hw := mac(300)
	mods := []dhcpv4.Modifier{dhcpv4.WithRelay(ip("10.99.5.1")), rackPort()}
	if r, _ := h.exchange(discover(hw, mods...)); r != nil {
		t.Fatalf("forged giaddr answered: %v", r)
	}
	req, _ := dhcpv4.New(dhcpv4.WithHwAddr(hw), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip("10.99.5.10"))), dhcpv4.WithRelay(ip("10.99.5.1")), rackPort())
	if r, _ := h.exchange(req); r != nil {
		t.Fatalf("forged giaddr REQUEST answered: %v", r)
	}
	if got := counterValue(h.s.metrics.dropUntrustedRelay) - before; got != 2 {
		t.Fatalf("untrusted_relay drops: %v, want 2", got)
	}
	h.commit()
	if n := h.devices(); n != 0 {
		t.Fatalf("%d device records from forged relay information", n)
	}
	if _, ok := h.lease("10.99.5.10"); ok {
		t.Fatal("lease stored for a forged relay")
	}
	if !containsAll(h.logs.String(), "dhcp.relays", "source=10.99.0.66", "giaddr=10.99.5.1") {
		t.Fatalf("the drop is not logged with the relay and the setting:\n%s", h.logs)
	}

	// A declared relay is trusted only with its own giaddrs and, when one
	// is named, on its interface.
	h.src = addr("10.99.5.1")
	if r, _ := h.exchange(discover(mac(301), dhcpv4.WithRelay(ip("10.99.5.9")))); r != nil {
		t.Fatal("a declared relay's packet with a giaddr not its own answered")
	}
	h2 := newHarness(t, func(o *Options) { o.Relays[0].Interface = "other0" })
	if r, _ := h2.exchange(discover(mac(302), dhcpv4.WithRelay(ip("10.99.5.1")))); r != nil {
		t.Fatal("a declared relay's packet on another interface answered")
	}
	h3 := newHarness(t, func(o *Options) { o.Relays[0].Interface = "test0" })
	if r, _ := h3.exchange(discover(mac(303), dhcpv4.WithRelay(ip("10.99.5.1")))); r == nil {
		t.Fatal("a declared relay on its interface not answered")
	}
}

// TestRelayInformationFromClientIsDropped: option 82 (circuit id, link
// selection) and option 118 in a packet without giaddr come from the
// client itself (RFC 3046 §2.1): dropped and counted, and no lease in the
// relayed subnet they name.
func TestRelayInformationFromClientIsDropped(t *testing.T) {
	h := newHarness(t, nil)
	h.src = addr("10.99.0.66")
	linkSel := generic(optRelayAgent, append([]byte{relayLinkSelection, 4}, 10, 99, 5, 0))
	for name, mod := range map[string]dhcpv4.Modifier{
		"circuit id":       rackPort(),
		"link selection":   linkSel,
		"subnet selection": generic(optSubnetSelection, []byte{10, 99, 5, 0}),
	} {
		before := counterValue(h.s.metrics.dropClientRelayInfo)
		if r, _ := h.exchange(discover(mac(310), mod)); r != nil {
			t.Fatalf("%s from a client answered: yiaddr %s", name, r.YourIPAddr)
		}
		req, _ := dhcpv4.New(dhcpv4.WithHwAddr(mac(310)), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip("10.99.5.11"))), mod)
		if r, _ := h.exchange(req); r != nil {
			t.Fatalf("%s REQUEST from a client answered: %v", name, r.MessageType())
		}
		if got := counterValue(h.s.metrics.dropClientRelayInfo) - before; got != 2 {
			t.Fatalf("%s: relay_info_from_client drops %v, want 2", name, got)
		}
	}
	// Not relayed, naming a free address of the relayed subnet as its own
	// (a unicast renewal): no lease there either.
	req, _ := dhcpv4.New(dhcpv4.WithHwAddr(mac(311)), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithClientIP(ip("10.99.5.12")))
	if r, _ := h.exchange(req); r != nil && r.MessageType() == dhcpv4.MessageTypeAck {
		t.Fatalf("a client on the link renewed %s of the relayed subnet it never held", r.YourIPAddr)
	}
	h.commit()
	for _, a := range []string{"10.99.5.10", "10.99.5.11", "10.99.5.12"} {
		if l, ok := h.lease(a); ok {
			t.Fatalf("lease in the relayed subnet for a client on the link: %+v", l)
		}
	}
	// The client on the link without relay options is served as before.
	h.src = addr("0.0.0.0")
	if ack := h.dora(mac(312)); ack.YourIPAddr[2] != 0 {
		t.Fatalf("direct client got %s", ack.YourIPAddr)
	}
}

// TestSerialReservationIsNotClaimable: a reservation by serial is matched
// on the client's word. Another hardware address repeating the switch's
// client id (SONiC##product##serial) while the switch holds the reserved
// address gets a pool address, never the switch's; and only a reservation
// by MAC marks a lease reserved (what approval rules take as proof).
func TestSerialReservationIsNotClaimable(t *testing.T) {
	h := newHarness(t, func(o *Options) {
		o.Subnets[0].Reservations = []Reservation{
			{Serial: "SNRES1", IP: addr("10.99.0.50")},
			{MAC: mac(321), IP: addr("10.99.0.51")},
		}
	})
	cid := generic(optClientID, []byte("SONiC##Accton-AS7712-32X##SNRES1"))
	uc := generic(optUserClass, append([]byte{9}, "SONiC-ZTP"...))
	sw, attacker := mac(320), mac(322)
	if ack := h.dora(sw, cid, uc); !ack.YourIPAddr.Equal(ip("10.99.0.50")) {
		t.Fatalf("switch got %s, want its reservation 10.99.0.50", ack.YourIPAddr)
	}
	ack := h.dora(attacker, cid, uc)
	if ack.YourIPAddr.Equal(ip("10.99.0.50")) {
		t.Fatal("another MAC took the address reserved by serial while the switch held it")
	}
	req, _ := dhcpv4.New(dhcpv4.WithHwAddr(attacker), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest), cid, uc,
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip("10.99.0.50"))))
	if r, _ := h.exchange(req); r != nil && r.MessageType() == dhcpv4.MessageTypeAck {
		t.Fatal("INIT-REBOOT for the switch's reserved address ACKed to another MAC")
	}
	h.commit()
	l, ok := h.lease("10.99.0.50")
	if !ok || l.MAC != sw.String() {
		t.Fatalf("reserved lease moved: %+v", l)
	}
	if l.Reserved {
		t.Fatal("a reservation by serial marks the lease reserved (network proof)")
	}
	h.dora(mac(321))
	h.commit()
	if l, _ := h.lease("10.99.0.51"); !l.Reserved || l.MAC != mac(321).String() {
		t.Fatalf("a reservation by MAC must mark its lease reserved: %+v", l)
	}
	// The switch keeps renewing its address.
	if r := h.dora(sw, cid, uc); !r.YourIPAddr.Equal(ip("10.99.0.50")) {
		t.Fatalf("switch moved to %s", r.YourIPAddr)
	}
}

// TestClientIDDoesNotMoveALiveLease: udhcpc's default client id is
// 01:<its MAC>. Another hardware address sending that client id while the
// owner's lease is live is served apart: it does not get the owner's
// address, the owner's lease stays the owner's.
func TestClientIDDoesNotMoveALiveLease(t *testing.T) {
	h := newHarness(t, nil)
	victim, attacker := mac(330), mac(331)
	cid := generic(optClientID, append([]byte{1}, victim...))
	va := h.dora(victim, cid)
	before := counterValue(h.s.metrics.clientIDInUse)
	offer, _ := h.exchange(discover(attacker, cid))
	if offer != nil && offer.YourIPAddr.Equal(va.YourIPAddr) {
		t.Fatalf("another MAC offered the victim's %s", va.YourIPAddr)
	}
	for _, m := range []dhcpv4.Modifier{dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(va.YourIPAddr)), dhcpv4.WithClientIP(va.YourIPAddr)} {
		req, _ := dhcpv4.New(dhcpv4.WithHwAddr(attacker), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest), cid, m)
		if r, _ := h.exchange(req); r != nil && r.MessageType() == dhcpv4.MessageTypeAck {
			t.Fatalf("another MAC got the victim's %s ACKed", va.YourIPAddr)
		}
	}
	if counterValue(h.s.metrics.clientIDInUse) == before {
		t.Fatal("client id held by another MAC not counted")
	}
	h.commit()
	if l, _ := h.lease(va.YourIPAddr.String()); l.MAC != victim.String() {
		t.Fatalf("victim's lease now names %s", l.MAC)
	}
	if r := h.dora(victim, cid); !r.YourIPAddr.Equal(va.YourIPAddr) {
		t.Fatalf("victim moved from %s to %s", va.YourIPAddr, r.YourIPAddr)
	}
	// The attacker still gets an address of its own.
	if r := h.dora(attacker, cid); r.YourIPAddr.Equal(va.YourIPAddr) {
		t.Fatal("attacker shares the victim's address")
	}
}

func containsAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

// TestRelayedSubnetWithoutRelaysWarns: a subnet reached only through relays
// while no relay is declared is named at start, so an operator upgrading
// from a release that believed any giaddr learns why its relayed devices
// get nothing; with a relay declared, nothing is said.
func TestRelayedSubnetWithoutRelaysWarns(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.Relays = nil })
	h.s.warnRelayedWithoutRelays()
	if !containsAll(h.logs.String(), "level=WARN", "no relay is declared", "dhcp.relays", "subnet=relayed") {
		t.Fatalf("no warning for the relayed subnet:\n%s", h.logs)
	}
	if strings.Contains(h.logs.String(), "subnet=lab") {
		t.Fatalf("the directly attached subnet was named:\n%s", h.logs)
	}
	h2 := newHarness(t, nil)
	h2.s.warnRelayedWithoutRelays()
	if strings.Contains(h2.logs.String(), "no relay is declared") {
		t.Fatalf("warned with a relay declared:\n%s", h2.logs)
	}
}
