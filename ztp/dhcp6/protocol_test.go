package dhcp6

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/ztpd/ztpd/internal/core"
)

var askZTP = dhcpv6.WithRequestedOptions(dhcpv6.OptionBootfileURL, dhcpv6.OptionDNSRecursiveNameServer,
	dhcpv6.OptionDomainSearchList, dhcpv6.OptionCode(optProvisionScript))

func sonicClass(d dhcpv6.DHCPv6) {
	d.AddOption(&dhcpv6.OptUserClass{UserClasses: [][]byte{[]byte("SONiC-ZTP")}})
}

func TestSONiCGetsLeaseAndZTPURL(t *testing.T) {
	h := newHarness(t, nil)
	c := newClient("02:00:00:00:10:01", sonicClass, askZTP)
	rep := h.dora(c)
	if got := rep.Options.BootFileURL(); got != h.opt.ZTPJSONURL {
		t.Fatalf("option 59 = %q, want %q", got, h.opt.ZTPJSONURL)
	}
	if dns := rep.Options.DNS(); len(dns) != 1 || !dns[0].Equal(net.ParseIP("fd99:0:0:1::53")) {
		t.Fatalf("DNS = %v", dns)
	}
	if l := rep.Options.DomainSearchList(); l == nil || len(l.Labels) != 1 || l.Labels[0] != "lab.example" {
		t.Fatalf("domain list = %v", l)
	}
	if !bytes.Equal(rep.Options.ClientID().ToBytes(), c.duid.ToBytes()) {
		t.Fatal("client id not echoed")
	}
	ip := addrOf(rep)
	l, ok := h.storedLease(ip)
	if !ok {
		t.Fatalf("no stored lease for %s after the Reply", ip)
	}
	if l.State != core.LeaseActive || l.MAC != "02:00:00:00:10:01" || l.ClientID != hexColon(c.duid.ToBytes()) || l.Subnet != "lab6" {
		t.Fatalf("stored lease = %+v", l)
	}
	if d, ok := h.s.DeviceByIP(addr(ip)); !ok || d.Kind != core.KindSONiC || d.IP != ip {
		t.Fatalf("DeviceByIP(%s) = %+v, %v", ip, d, ok)
	}
}

func TestOptionsOnlyWhenAsked(t *testing.T) {
	h := newHarness(t, nil)
	rep := h.dora(newClient("02:00:00:00:10:02", sonicClass))
	for _, code := range []dhcpv6.OptionCode{dhcpv6.OptionBootfileURL, dhcpv6.OptionDNSRecursiveNameServer, dhcpv6.OptionDomainSearchList} {
		if rep.GetOneOption(code) != nil {
			t.Fatalf("option %d answered without being asked for", code)
		}
	}
}

func TestONIEByVendorClassGetsInstallerURL(t *testing.T) {
	h := newHarness(t, nil)
	onie := func(d dhcpv6.DHCPv6) {
		d.AddOption(&dhcpv6.OptVendorClass{EnterpriseNumber: 40310, Data: [][]byte{[]byte("onie_vendor:x86_64-accton_as7712_32x-r0")}})
	}
	rep := h.dora(newClient("02:00:00:00:10:03", onie, askZTP))
	if got := rep.Options.BootFileURL(); got != h.opt.ONIEInstallerURL {
		t.Fatalf("option 59 = %q, want the installer URL", got)
	}
	d, ok := h.s.DeviceByIP(addr(addrOf(rep)))
	if !ok || d.Kind != core.KindONIE || d.Platform != "x86_64-accton_as7712_32x-r0" {
		t.Fatalf("device = %+v", d)
	}
}

func TestVMByMACPrefixGetsNoBootURL(t *testing.T) {
	h := newHarness(t, nil)
	rep := h.dora(newClient("1e:00:00:00:10:04", askZTP))
	if rep.Options.BootFileURL() != "" {
		t.Fatal("a VM got option 59")
	}
	if d, _ := h.s.DeviceByIP(addr(addrOf(rep))); d.Kind != core.KindVM {
		t.Fatalf("kind = %q", d.Kind)
	}
}

// A flood of Solicits with made-up DUIDs stores nothing: only lease
// holders are stored.
func TestSolicitFloodStoresNothing(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.Subnets[0].RapidCommit = false })
	for i := range 300 {
		c := newClient(fmt.Sprintf("02:aa:00:00:%02x:%02x", i>>8, i&255), sonicClass)
		if r := h.exchange(c.msg(dhcpv6.MessageTypeSolicit, c.ia())); r == nil || r.MessageType != dhcpv6.MessageTypeAdvertise {
			t.Fatalf("Solicit %d: %v", i, r)
		}
	}
	var last time.Time
	h.s.flush(&snapshot{}, &last)
	if n := h.leaseCount(); n != 0 {
		t.Fatalf("%d leases stored for Solicits alone", n)
	}
	var devs int
	_ = h.st.View(func(tx core.Tx) error {
		return tx.Devices().List("", func(core.Device) (bool, error) { devs++; return true, nil })
	})
	if devs != 0 {
		t.Fatalf("%d device records stored for Solicits alone", devs)
	}
}

func TestRapidCommit(t *testing.T) {
	h := newHarness(t, nil)
	c := newClient("02:00:00:00:10:05", sonicClass)
	rep := h.exchange(c.msg(dhcpv6.MessageTypeSolicit, c.ia(), dhcpv6.WithRapidCommit))
	if rep == nil || rep.MessageType != dhcpv6.MessageTypeReply || rep.GetOneOption(dhcpv6.OptionRapidCommit) == nil {
		t.Fatalf("Solicit with Rapid Commit: got %v, want a Reply with option 14", rep)
	}
	if _, ok := h.storedLease(addrOf(rep)); !ok {
		t.Fatal("Rapid Commit Reply sent before its lease was stored")
	}

	off := newHarness(t, func(o *Options) { o.Subnets[0].RapidCommit = false })
	if r := off.exchange(c.msg(dhcpv6.MessageTypeSolicit, c.ia(), dhcpv6.WithRapidCommit)); r == nil || r.MessageType != dhcpv6.MessageTypeAdvertise {
		t.Fatalf("Rapid Commit off: got %v, want an Advertise", r)
	}
}

// A Request, Renew, Release or Decline addressed to another server is
// ignored (RFC 8415 §16.4 ff.).
func TestOtherServersMessagesIgnored(t *testing.T) {
	h := newHarness(t, nil)
	c := newClient("02:00:00:00:10:06")
	other := &dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: net.HardwareAddr{2, 9, 9, 9, 9, 9}}
	for _, mt := range []dhcpv6.MessageType{dhcpv6.MessageTypeRequest, dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRelease, dhcpv6.MessageTypeDecline} {
		if r := h.exchange(c.msg(mt, c.ia("fd99:0:0:1::100"), serverID(other))); r != nil {
			t.Fatalf("%s for another server answered: %v", mt, r)
		}
		if r := h.exchange(c.msg(mt, c.ia("fd99:0:0:1::100"))); r != nil {
			t.Fatalf("%s without server id answered: %v", mt, r)
		}
	}
	if r := h.exchange(c.msg(dhcpv6.MessageTypeSolicit, c.ia(), serverID(other))); r != nil {
		t.Fatal("Solicit with a server id answered")
	}
}

func TestRenewReleaseDecline(t *testing.T) {
	h := newHarness(t, nil)
	c := newClient("02:00:00:00:10:07")
	rep := h.dora(c)
	ip, sid := addrOf(rep), rep.Options.ServerID()
	before, _ := h.storedLease(ip)
	time.Sleep(1100 * time.Millisecond)
	ren := h.exchange(c.msg(dhcpv6.MessageTypeRenew, c.ia(ip), serverID(sid)))
	if addrOf(ren) != ip {
		t.Fatalf("Renew: %v", ren)
	}
	after, _ := h.storedLease(ip)
	if !after.Expiry.After(before.Expiry) {
		t.Fatalf("Renew did not extend the stored lease: %s -> %s", before.Expiry, after.Expiry)
	}
	reb := h.exchange(c.msg(dhcpv6.MessageTypeRebind, c.ia(ip)))
	if addrOf(reb) != ip {
		t.Fatalf("Rebind: %v", reb)
	}
	rel := h.exchange(c.msg(dhcpv6.MessageTypeRelease, c.ia(ip), serverID(sid)))
	if rel == nil || rel.Options.Status() == nil || rel.Options.Status().StatusCode != iana.StatusSuccess {
		t.Fatalf("Release: %v", rel)
	}
	var last time.Time
	h.s.flush(&snapshot{}, &last)
	if l, _ := h.storedLease(ip); l.State != core.LeaseReleased {
		t.Fatalf("after Release the lease is %s", l.State)
	}
	// Decline quarantines: another client does not get the address.
	rep = h.dora(c)
	ip = addrOf(rep)
	if r := h.exchange(c.msg(dhcpv6.MessageTypeDecline, c.ia(ip), serverID(sid))); r == nil {
		t.Fatal("Decline unanswered")
	}
	h.s.flush(&snapshot{}, &last)
	if l, _ := h.storedLease(ip); l.State != core.LeaseDeclined {
		t.Fatalf("after Decline the lease is %s", l.State)
	}
	for i := range 20 {
		if got := addrOf(h.dora(newClient(fmt.Sprintf("02:00:00:00:11:%02x", i)))); got == ip {
			t.Fatalf("declined address %s given to another client", ip)
		}
	}
}

func TestRenewOfUnknownOrOffLinkAddress(t *testing.T) {
	h := newHarness(t, nil)
	c := newClient("02:00:00:00:10:08")
	sid := h.dora(c).Options.ServerID()
	other := newClient("02:00:00:00:10:09")
	r := h.exchange(other.msg(dhcpv6.MessageTypeRenew, other.ia("fd99:0:0:7::1"), serverID(sid)))
	if r == nil {
		t.Fatal("Renew unanswered")
	}
	ia := r.Options.OneIANA()
	if ia == nil {
		t.Fatalf("no IA in %s", r.Summary())
	}
	for _, a := range ia.Options.Addresses() {
		if a.ValidLifetime != 0 {
			t.Fatalf("off-link address returned with lifetime %s", a.ValidLifetime)
		}
	}
	// A Request naming an address off the link gets another, and the
	// named one back with lifetimes 0.
	rep := h.exchange(other.msg(dhcpv6.MessageTypeRequest, other.ia("fd99:0:0:7::1"), serverID(sid)))
	if got := addrOf(rep); !strings.HasPrefix(got, "fd99:0:0:1::") {
		t.Fatalf("Request with an off-link hint got %q", got)
	}
}

func TestConfirm(t *testing.T) {
	h := newHarness(t, nil)
	c := newClient("02:00:00:00:10:0a")
	ok := h.exchange(c.msg(dhcpv6.MessageTypeConfirm, c.ia("fd99:0:0:1::150")))
	if ok == nil || ok.Options.Status().StatusCode != iana.StatusSuccess {
		t.Fatalf("Confirm on link: %v", ok)
	}
	bad := h.exchange(c.msg(dhcpv6.MessageTypeConfirm, c.ia("fd99:0:0:9::150")))
	if bad == nil || bad.Options.Status().StatusCode != iana.StatusNotOnLink {
		t.Fatalf("Confirm off link: %v", bad)
	}
}

func TestNoAddrsAvail(t *testing.T) {
	h := newHarness(t, func(o *Options) {
		o.Subnets[0].Pools = []Range{{addr("fd99:0:0:1::100"), addr("fd99:0:0:1::101")}}
	})
	h.dora(newClient("02:00:00:00:12:01"))
	h.dora(newClient("02:00:00:00:12:02"))
	c := newClient("02:00:00:00:12:03")
	adv := h.exchange(c.msg(dhcpv6.MessageTypeSolicit, c.ia()))
	if adv == nil || adv.Options.Status() == nil || adv.Options.Status().StatusCode != iana.StatusNoAddrsAvail {
		t.Fatalf("Solicit on a full pool: %v", adv)
	}
	rep := h.exchange(c.msg(dhcpv6.MessageTypeRequest, c.ia(), serverID(adv.Options.ServerID())))
	ia := rep.Options.OneIANA()
	if ia == nil || ia.Options.Status() == nil || ia.Options.Status().StatusCode != iana.StatusNoAddrsAvail {
		t.Fatalf("Request on a full pool: %s", rep.Summary())
	}
}

func TestInformationRequest(t *testing.T) {
	h := newHarness(t, nil)
	c := newClient("02:00:00:00:10:0b", askZTP)
	r := h.exchange(c.msg(dhcpv6.MessageTypeInformationRequest))
	if r == nil || len(r.Options.DNS()) != 1 || r.Options.OneIANA() != nil {
		t.Fatalf("Information-request: %v", r)
	}
	if h.leaseCount() != 0 {
		t.Fatal("Information-request stored a lease")
	}
}

// The server's DUID survives a restart; so do leases: a renewing client
// keeps its address and nobody else gets it.
func TestRestartKeepsDUIDAndLeases(t *testing.T) {
	h := newHarness(t, nil)
	c := newClient("02:00:00:00:10:0c")
	rep := h.dora(c)
	ip, sid := addrOf(rep), rep.Options.ServerID()
	h.restart()
	if !bytes.Equal(h.s.duid, sid.ToBytes()) {
		t.Fatalf("server DUID changed across a restart: %x -> %x", sid.ToBytes(), h.s.duid)
	}
	for i := range 50 {
		if got := addrOf(h.dora(newClient(fmt.Sprintf("02:00:00:00:13:%02x", i)))); got == ip {
			t.Fatalf("after a restart %s went to another client", ip)
		}
	}
	if got := addrOf(h.exchange(c.msg(dhcpv6.MessageTypeRenew, c.ia(ip), serverID(sid)))); got != ip {
		t.Fatalf("Renew after restart got %q, want %s", got, ip)
	}
}

func TestReservations(t *testing.T) {
	byDUID := newClient("02:00:00:00:14:01")
	h := newHarness(t, func(o *Options) {
		o.Subnets[0].Reservations = []Reservation{
			{DUID: byDUID.duid.ToBytes(), IP: addr("fd99:0:0:1::1a0"), Kind: core.KindSONiC},
			{MAC: net.HardwareAddr{2, 0, 0, 0, 0x14, 2}, IP: addr("fd99:0:0:1::1a1"), Hostname: "vm-1"},
		}
	})
	if got := addrOf(h.dora(byDUID, askZTP)); got != "fd99:0:0:1::1a0" {
		t.Fatalf("reservation by DUID: %s", got)
	}
	// The MAC from a DUID-LLT.
	llt := &client{mac: net.HardwareAddr{2, 0, 0, 0, 0x14, 2}, iaid: [4]byte{9, 9, 9, 9},
		duid: &dhcpv6.DUIDLLT{HWType: iana.HWTypeEthernet, Time: 12345, LinkLayerAddr: net.HardwareAddr{2, 0, 0, 0, 0x14, 2}}}
	rep := h.dora(llt)
	if got := addrOf(rep); got != "fd99:0:0:1::1a1" {
		t.Fatalf("reservation by MAC: %s", got)
	}
	if l, _ := h.storedLease("fd99:0:0:1::1a1"); !l.Reserved || l.Hostname != "vm-1" {
		t.Fatalf("lease by MAC reservation = %+v", l)
	}
	// Nobody else gets a reserved address, even asking for it.
	o := newClient("02:00:00:00:14:03")
	if got := addrOf(h.exchange(o.msg(dhcpv6.MessageTypeRequest, o.ia("fd99:0:0:1::1a0"), serverID(rep.Options.ServerID())))); got == "fd99:0:0:1::1a0" {
		t.Fatal("reserved address given to another client")
	}
}

// relayed wraps m in Relay-Forw messages, innermost link first.
func relayed(t *testing.T, m dhcpv6.DHCPv6, hops ...relayHopSpec) dhcpv6.DHCPv6 {
	t.Helper()
	var cur dhcpv6.DHCPv6 = m
	for _, hp := range hops {
		r, err := dhcpv6.EncapsulateRelay(cur, dhcpv6.MessageTypeRelayForward, net.ParseIP(hp.link), net.ParseIP(hp.peer))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range hp.opts {
			r.AddOption(o)
		}
		cur = r
	}
	return cur
}

type relayHopSpec struct {
	link, peer string
	opts       []dhcpv6.Option
}

func (h *harness) relayExchange(t *testing.T, m dhcpv6.DHCPv6) (*dhcpv6.RelayMessage, *dhcpv6.Message) {
	t.Helper()
	out := h.raw(m.ToBytes())
	if out == nil {
		return nil, nil
	}
	r, err := dhcpv6.RelayMessageFromBytes(out)
	if err != nil || r.MessageType != dhcpv6.MessageTypeRelayReply {
		t.Fatalf("reply to a relay is not a Relay-Repl: %v %v", r, err)
	}
	inner, err := r.GetInnerMessage()
	if err != nil {
		t.Fatal(err)
	}
	return r, inner
}

func TestRelayedThroughDeclaredRelay(t *testing.T) {
	h := newHarness(t, nil)
	h.src = netip.AddrPortFrom(addr("fd99:0:0:5::1"), 547)
	c := newClient("02:00:00:00:15:01", sonicClass, askZTP)
	// A client with a DUID-EN: its MAC comes from the relay's option 79.
	c.duid = &dhcpv6.DUIDEN{EnterpriseNumber: 9, EnterpriseIdentifier: []byte("switch-15-01")}
	hop := relayHopSpec{link: "fd99:0:0:5::1", peer: "fe80::15:1", opts: []dhcpv6.Option{
		dhcpv6.OptInterfaceID([]byte("Ethernet12")),
		&dhcpv6.OptRemoteID{EnterpriseNumber: 9, RemoteID: []byte("rack7-tor")},
		dhcpv6.OptClientLinkLayerAddress(iana.HWTypeEthernet, net.HardwareAddr{2, 0, 0, 0, 0x15, 1}),
	}}
	r, adv := h.relayExchange(t, relayed(t, c.msg(dhcpv6.MessageTypeSolicit, c.ia()), hop))
	if adv == nil || adv.MessageType != dhcpv6.MessageTypeAdvertise {
		t.Fatalf("relayed Solicit: %v", adv)
	}
	if id := r.Options.InterfaceID(); string(id) != "Ethernet12" {
		t.Fatalf("Relay-Repl interface-id = %q", id)
	}
	if !r.PeerAddr.Equal(net.ParseIP("fe80::15:1")) || !r.LinkAddr.Equal(net.ParseIP("fd99:0:0:5::1")) {
		t.Fatalf("Relay-Repl addresses: %s", r.Summary())
	}
	ip := addrOf(adv)
	if !strings.HasPrefix(ip, "fd99:0:0:5::") {
		t.Fatalf("relayed client got %s, not from the relayed subnet", ip)
	}
	_, rep := h.relayExchange(t, relayed(t, c.msg(dhcpv6.MessageTypeRequest, c.ia(ip), serverID(adv.Options.ServerID())), hop))
	if addrOf(rep) != ip {
		t.Fatalf("relayed Request: %v", rep)
	}
	h.devs.Flush()
	var d core.Device
	_ = h.st.View(func(tx core.Tx) error {
		var err error
		d, err = tx.Devices().Get("02:00:00:00:15:01")
		return err
	})
	if d.CircuitID != "Ethernet12" || d.RemoteID != "rack7-tor" || d.RelayAddr != "fd99:0:0:5::1" || d.IP != ip || d.Kind != core.KindSONiC {
		t.Fatalf("device record = %+v", d)
	}
	if l, _ := h.storedLease(ip); l.MAC != "02:00:00:00:15:01" {
		t.Fatalf("lease MAC from option 79 = %q", l.MAC)
	}

	// Nested twice: the relay closest to the client names the link.
	c2 := newClient("02:00:00:00:15:02")
	_, adv2 := h.relayExchange(t, relayed(t, c2.msg(dhcpv6.MessageTypeSolicit, c2.ia()),
		relayHopSpec{link: "fd99:0:0:5::1", peer: "fe80::15:2", opts: []dhcpv6.Option{dhcpv6.OptInterfaceID([]byte("p1"))}},
		relayHopSpec{link: "::", peer: "fd99:0:0:6::9", opts: []dhcpv6.Option{dhcpv6.OptInterfaceID([]byte("p2"))}}))
	if !strings.HasPrefix(addrOf(adv2), "fd99:0:0:5::") {
		t.Fatalf("doubly relayed Solicit: %v", adv2)
	}
}

func TestRelayedFromUndeclaredRelayDropped(t *testing.T) {
	h := newHarness(t, nil)
	c := newClient("02:00:00:00:16:01")
	hop := relayHopSpec{link: "fd99:0:0:5::1", peer: "fe80::16:1"}
	h.src = netip.AddrPortFrom(addr("fd99:0:0:5::66"), 547)
	if r := h.raw(relayed(t, c.msg(dhcpv6.MessageTypeSolicit, c.ia()), hop).ToBytes()); r != nil {
		t.Fatal("Relay-Forw from an undeclared source answered")
	}
	h.src = netip.AddrPortFrom(addr("fd99:0:0:5::1"), 547)
	bad := relayHopSpec{link: "fd99:0:0:5::77", peer: "fe80::16:1"}
	if r := h.raw(relayed(t, c.msg(dhcpv6.MessageTypeSolicit, c.ia()), bad).ToBytes()); r != nil {
		t.Fatal("Relay-Forw stating an undeclared link address answered")
	}
	// Nested past the hop limit.
	var hops []relayHopSpec
	for range maxRelayDepth + 1 {
		hops = append(hops, hop)
	}
	if r := h.raw(relayed(t, c.msg(dhcpv6.MessageTypeSolicit, c.ia()), hops...).ToBytes()); r != nil {
		t.Fatal("relays nested past the hop limit answered")
	}
}

// A DUID longer than RFC 8415's 130 bytes, or too short for its type, is
// no client identifier: the message is dropped.
func TestMalformedDUIDsDropped(t *testing.T) {
	h := newHarness(t, nil)
	for _, d := range []dhcpv6.DUID{
		&dhcpv6.DUIDOpaque{Type: 0x00ff, Data: bytes.Repeat([]byte{7}, 129)},
		&dhcpv6.DUIDOpaque{Type: 3, Data: []byte{0, 1}},
		&dhcpv6.DUIDOpaque{Type: 4, Data: []byte{1, 2, 3}},
	} {
		c := newClient("02:00:00:00:17:01")
		c.duid = d
		if r := h.exchange(c.msg(dhcpv6.MessageTypeSolicit, c.ia())); r != nil {
			t.Fatalf("DUID %x answered", d.ToBytes())
		}
	}
}

func TestVMByVendorClass(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.VMVendorClasses = []string{"CloudStack"} })
	vc := func(d dhcpv6.DHCPv6) {
		d.AddOption(&dhcpv6.OptVendorClass{EnterpriseNumber: 9, Data: [][]byte{[]byte("CloudStack-guest")}})
	}
	rep := h.dora(newClient("02:00:00:00:18:01", vc))
	if d, _ := h.s.DeviceByIP(addr(addrOf(rep))); d.Kind != core.KindVM {
		t.Fatalf("kind = %q", d.Kind)
	}
}

// New addresses are handed out in order, and after a restart they follow
// the highest one stored rather than scanning the leases from the pool's
// start.
func TestAddressesInOrderAcrossRestart(t *testing.T) {
	h := newHarness(t, nil)
	want := []string{"fd99:0:0:1::100", "fd99:0:0:1::101", "fd99:0:0:1::102"}
	for i, w := range want {
		c := newClient(fmt.Sprintf("02:00:00:00:20:%02x", i))
		if got := addrOf(h.dora(c)); got != w {
			t.Fatalf("client %d got %s, want %s", i, got, w)
		}
	}
	h.restart()
	c := newClient("02:00:00:00:20:99")
	if got := addrOf(h.dora(c)); got != "fd99:0:0:1::103" {
		t.Fatalf("after a restart a new client got %s, want fd99:0:0:1::103", got)
	}
}

// TestLeaseCache: a Request (or a Rapid Commit Solicit) for the lease the
// client holds, committed less than a quarter of the lease time ago, is
// answered at once with what the stored lease has left and writes nothing;
// past that share, and for every Renew, the lease is extended and written
// before the Reply.
func TestLeaseCache(t *testing.T) {
	h := newHarness(t, nil)
	c := newClient("02:00:00:00:10:30", sonicClass)
	rep := h.dora(c)
	ip, sid := addrOf(rep), rep.Options.ServerID()
	l1, _ := h.storedLease(ip)
	request := func() ([]byte, *dhcpv6.Message) {
		t.Helper()
		x := newExchange(h.ifc)
		x.src = h.src
		out := h.s.handle(x, c.msg(dhcpv6.MessageTypeRequest, c.ia(ip), serverID(sid)).ToBytes())
		pkt := out
		if out == nil {
			var last time.Time
			h.s.flush(&snapshot{}, &last)
			sent := h.conn.take()
			if len(sent) != 1 {
				t.Fatalf("%d replies to a Request after its commit", len(sent))
			}
			pkt = sent[0].pkt
		}
		m, err := dhcpv6.MessageFromBytes(pkt)
		if err != nil {
			t.Fatal(err)
		}
		return out, m
	}
	validOf := func(m *dhcpv6.Message) time.Duration {
		for _, a := range m.Options.OneIANA().Options.Addresses() {
			return a.ValidLifetime
		}
		return -1
	}

	out, m := request()
	if out == nil || addrOf(m) != ip {
		t.Fatalf("repeated Request: %v, want a Reply sent at once", m)
	}
	if v := validOf(m); v > time.Hour || v < 59*time.Minute {
		t.Fatalf("cached Reply grants %s, want what the stored hour has left", v)
	}
	if ia := m.Options.OneIANA(); ia.T1 != (validOf(m) / 2).Truncate(time.Second) {
		t.Fatalf("cached Reply T1 %s for lifetime %s", ia.T1, validOf(m))
	}
	h.s.mu.Lock()
	pending, dirty := len(h.s.replies), len(h.s.dirty)
	h.s.mu.Unlock()
	if pending != 0 || dirty != 0 {
		t.Fatalf("a cached Reply left %d replies and %d leases for a commit", pending, dirty)
	}
	if l2, _ := h.storedLease(ip); !l2.UpdatedAt.Equal(l1.UpdatedAt) {
		t.Fatal("a cached Reply rewrote the lease")
	}

	// Twenty minutes on (the stored lease has 40 of its 60 left): the
	// Request extends the lease and waits for its commit.
	h.s.mu.Lock()
	b := h.s.byIP[addr(ip)]
	b.durable, b.expiry, b.start = b.durable.Add(-20*time.Minute), b.expiry.Add(-20*time.Minute), b.start.Add(-20*time.Minute)
	h.s.mu.Unlock()
	out, m = request()
	if out != nil || addrOf(m) != ip || validOf(m) != time.Hour {
		t.Fatalf("Request past the threshold: sent at once %v, %v", out != nil, m)
	}
	l3, _ := h.storedLease(ip)
	if !l3.Expiry.After(l1.Expiry) {
		t.Fatalf("extended lease not written: %s, first %s", l3.Expiry, l1.Expiry)
	}

	// A Renew always extends and writes.
	time.Sleep(1100 * time.Millisecond)
	ren := h.exchange(c.msg(dhcpv6.MessageTypeRenew, c.ia(ip), serverID(sid)))
	if addrOf(ren) != ip || validOf(ren) != time.Hour {
		t.Fatalf("Renew: %v", ren)
	}
	if l4, _ := h.storedLease(ip); !l4.Expiry.After(l3.Expiry) {
		t.Fatalf("Renew did not extend the stored lease: %s -> %s", l3.Expiry, l4.Expiry)
	}

	// A Rapid Commit Solicit of a client holding a fresh lease: a Reply
	// with option 14, at once.
	x := newExchange(h.ifc)
	x.src = h.src
	out = h.s.handle(x, c.msg(dhcpv6.MessageTypeSolicit, c.ia(), dhcpv6.WithRapidCommit).ToBytes())
	if out == nil {
		t.Fatal("Rapid Commit Solicit of a fresh lease waited for a commit")
	}
	if m, _ := dhcpv6.MessageFromBytes(out); m == nil || m.MessageType != dhcpv6.MessageTypeReply ||
		m.GetOneOption(dhcpv6.OptionRapidCommit) == nil || addrOf(m) != ip {
		t.Fatalf("Rapid Commit Solicit: %v", m)
	}

	// After a Release the next Request is written again.
	if r := h.exchange(c.msg(dhcpv6.MessageTypeRelease, c.ia(ip), serverID(sid))); r == nil {
		t.Fatal("Release unanswered")
	}
	if out, m = request(); out != nil || addrOf(m) != ip {
		t.Fatalf("Request after Release: sent at once %v, %v", out != nil, m)
	}
	if l, _ := h.storedLease(ip); l.State != core.LeaseActive {
		t.Fatalf("lease after Release and Request: %+v", l)
	}
}
