package dhcp

import (
	"bytes"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/ztpd/ztpd/internal/core"
)

func TestDORACommitsLeaseAndDevice(t *testing.T) {
	h := newHarness(t, nil)
	hw := mac(1)
	offer, d := h.exchange(discover(hw, dhcpv4.WithOption(dhcpv4.OptHostName("vm1"))))
	if offer == nil || offer.MessageType() != dhcpv4.MessageTypeOffer {
		t.Fatalf("want OFFER, got %v", offer)
	}
	if got := offer.YourIPAddr.String(); got != "10.99.0.100" {
		t.Fatalf("offered %s, want the first pool address 10.99.0.100", got)
	}
	if !d.l2 || d.hw != [6]byte(hw) || d.addr.Addr() != addr("10.99.0.100") || d.addr.Port() != 68 {
		t.Fatalf("OFFER without broadcast flag must go to yiaddr at layer 2, got %+v", d)
	}
	if _, ok := h.lease("10.99.0.100"); ok {
		t.Fatal("an OFFER must not be written to the store")
	}
	if !offer.ServerIdentifier().Equal(serverIP) || offer.IPAddressLeaseTime(0) != time.Hour ||
		!offer.Router()[0].Equal(ip("10.99.0.1")) || !offer.DNS()[0].Equal(ip("10.99.0.53")) ||
		offer.DomainName() != "lab.example" || offer.SubnetMask().String() != "ffffff00" {
		t.Fatalf("OFFER options wrong:\n%s", offer.Summary())
	}
	ack, _ := h.exchange(requestFor(offer, dhcpv4.WithOption(dhcpv4.OptHostName("vm1"))))
	if ack.MessageType() != dhcpv4.MessageTypeAck || !ack.YourIPAddr.Equal(ip("10.99.0.100")) {
		t.Fatalf("want ACK 10.99.0.100, got %v", ack.Summary())
	}
	l, ok := h.lease("10.99.0.100")
	if !ok || l.MAC != hw.String() || l.State != core.LeaseActive || l.Subnet != "lab" ||
		!l.Expiry.Equal(h.now.Add(time.Hour)) || l.Hostname != "vm1" {
		t.Fatalf("stored lease = %+v, %v", l, ok)
	}
	dev := h.device(hw.String())
	if dev.State != core.StateLeased || dev.IP != "10.99.0.100" || dev.Kind != core.KindUnknown ||
		dev.Hostname != "vm1" || !dev.FirstSeen.Equal(h.now) || dev.Subnet != "lab" {
		t.Fatalf("device = %+v", dev)
	}
}

func TestSONiCGetsZTPURL(t *testing.T) {
	h := newHarness(t, func(c *Options) {
		c.Subnets[0].Syslog = addrs("10.99.0.9")
	})
	hw := mac(2)
	// As SONiC's dhclient.conf sends them: raw user class, client id without type byte.
	mods := []dhcpv4.Modifier{
		generic(optUserClass, []byte("SONiC-ZTP")),
		dhcpv4.WithOption(dhcpv4.OptClientIdentifier([]byte("SONiC##Force10-S6000##SN1234"))),
		dhcpv4.WithOption(dhcpv4.OptHostName("sonic")),
		dhcpv4.WithRequestedOptions(dhcpv4.OptionSubnetMask, dhcpv4.OptionBroadcastAddress, dhcpv4.OptionRouter,
			dhcpv4.OptionDomainNameServer, dhcpv4.OptionHostName, dhcpv4.OptionLogServer,
			dhcpv4.OptionBootfileName, dhcpv4.GenericOptionCode(239), dhcpv4.OptionTFTPServerName),
	}
	ack := h.dora(hw, mods...)
	if got := ack.BootFileNameOption(); got != "http://10.99.0.1:8080/ztp/ztp.json" {
		t.Fatalf("option 67 = %q", got)
	}
	if got := ack.TFTPServerName(); got != "10.99.0.1" {
		t.Fatalf("option 66 = %q", got)
	}
	if got := dhcpv4.GetIPs(dhcpv4.OptionLogServer, ack.Options); len(got) != 1 || !got[0].Equal(ip("10.99.0.9")) {
		t.Fatalf("option 7 = %v", got)
	}
	if got := ack.GetOneOption(dhcpv4.OptionClientIdentifier); string(got) != "SONiC##Force10-S6000##SN1234" {
		t.Fatalf("client id not echoed: %q", got)
	}
	dev := h.device(hw.String())
	if dev.Kind != core.KindSONiC || dev.Serial != "SN1234" || dev.Product != "Force10-S6000" ||
		dev.ClientID != "SONiC##Force10-S6000##SN1234" {
		t.Fatalf("device = %+v", dev)
	}
	if l, _ := h.lease(ack.YourIPAddr.String()); l.ClientID != "SONiC##Force10-S6000##SN1234" {
		t.Fatalf("lease client id = %q", l.ClientID)
	}
	// Content serving asks the server's memory before the device record lands.
	addr, _ := netip.AddrFromSlice(ack.YourIPAddr.To4())
	if d, ok := h.s.DeviceByIP(addr); !ok || d.Kind != core.KindSONiC || d.Serial != "SN1234" || d.IP != addr.String() {
		t.Fatalf("DeviceByIP(%s) = %+v, %v", addr, d, ok)
	}
	if _, ok := h.s.DeviceByIP(netip.MustParseAddr("10.99.0.250")); ok {
		t.Fatal("DeviceByIP answered for an address nobody holds")
	}
}

func TestSONiCMarkerForms(t *testing.T) {
	for name, mod := range map[string]dhcpv4.Modifier{
		"rfc3004 user class":   dhcpv4.WithUserClass("SONiC-ZTP", true),
		"client id only":       generic(optClientID, []byte("SONiC##p##s")),
		"client id type byte0": generic(optClientID, []byte("\x00SONiC##p##s")),
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, nil)
			offer, _ := h.exchange(discover(mac(3), mod))
			if got := offer.BootFileNameOption(); got != "http://10.99.0.1:8080/ztp/ztp.json" {
				t.Fatalf("not classified as SONiC: option 67 = %q", got)
			}
		})
	}
	h := newHarness(t, nil)
	offer, _ := h.exchange(discover(mac(4), generic(optUserClass, []byte("SONiC-ZTPX"))))
	if offer.Options.Has(dhcpv4.OptionBootfileName) {
		t.Fatal("a different user class must not be classified SONiC")
	}
}

func TestONIEGetsInstallerURL(t *testing.T) {
	h := newHarness(t, nil)
	hw := mac(5)
	ack := h.dora(hw, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("onie_vendor:x86_64-accton_as7712_32x-r0")))
	if got := string(ack.GetOneOption(dhcpv4.GenericOptionCode(114))); got != "http://10.99.0.1:8080/onie/installer" {
		t.Fatalf("option 114 = %q", got)
	}
	if ack.Options.Has(dhcpv4.OptionBootfileName) {
		t.Fatal("ONIE must not get the SONiC ztp.json URL")
	}
	dev := h.device(hw.String())
	if dev.Kind != core.KindONIE || dev.Platform != "x86_64-accton_as7712_32x-r0" {
		t.Fatalf("device = %+v", dev)
	}
}

func TestReservations(t *testing.T) {
	h := newHarness(t, func(c *Options) {
		c.Subnets[0].Reservations = []Reservation{
			{MAC: mac(10), IP: addr("10.99.0.150"), Hostname: "vm-a"},
			{ClientID: "01:52:54:00:10:00:0b", IP: addr("10.99.0.20"), Hostname: "vm-b"},
			{Serial: "SN77", IP: addr("10.99.0.21"), Hostname: "leaf1", Kind: core.KindSONiC},
		}
		c.Subnets[0].Routes = []Route{{Dest: prefix("10.0.0.0/8"), Via: addr("10.99.0.254")}}
		c.Subnets[0].NTP = addrs("10.99.0.123")
	})
	ack := h.dora(mac(10))
	if !ack.YourIPAddr.Equal(ip("10.99.0.150")) || ack.HostName() != "vm-a" {
		t.Fatalf("MAC reservation: got %s %q", ack.YourIPAddr, ack.HostName())
	}
	if l, _ := h.lease("10.99.0.150"); !l.Reserved {
		t.Fatal("reserved lease not marked reserved")
	}
	if d := h.device(mac(10).String()); d.Kind != core.KindVM {
		t.Fatalf("a reservation without kind makes a VM, got %s", d.Kind)
	}
	routes := ack.ClasslessStaticRoute()
	if len(routes) != 2 || routes[0].Dest.String() != "10.0.0.0/8" || routes[1].Dest.String() != "0.0.0.0/0" ||
		!routes[1].Router.Equal(ip("10.99.0.1")) {
		t.Fatalf("option 121 = %v (want the route plus the router as default)", routes)
	}
	if n := ack.NTPServers(); len(n) != 1 || !n[0].Equal(ip("10.99.0.123")) {
		t.Fatalf("option 42 = %v", n)
	}
	// udhcpc-style client id (type 1 + MAC) matches the ISC-style spelling.
	ack = h.dora(mac(11), generic(optClientID, append([]byte{1}, mac(11)...)))
	if !ack.YourIPAddr.Equal(ip("10.99.0.20")) || ack.HostName() != "vm-b" {
		t.Fatalf("client-id reservation: got %s %q", ack.YourIPAddr, ack.HostName())
	}
	// Serial from the SONiC client id; the reservation outside the pool still works.
	ack = h.dora(mac(12), generic(optClientID, []byte("SONiC##X##SN77")))
	if !ack.YourIPAddr.Equal(ip("10.99.0.21")) || ack.HostName() != "leaf1" || ack.BootFileNameOption() == "" {
		t.Fatalf("serial reservation: got %s %q %q", ack.YourIPAddr, ack.HostName(), ack.BootFileNameOption())
	}
	// Reserved addresses inside the pool are never handed to others.
	for i := 0; i < 99; i++ {
		a := h.dora(mac(100 + i))
		if a.YourIPAddr.Equal(ip("10.99.0.150")) {
			t.Fatal("reserved address given to another client")
		}
	}
}

func TestOptionOverridesPrecedence(t *testing.T) {
	h := newHarness(t, func(c *Options) {
		c.GlobalOptions = optionText(t, map[uint8]string{optNTP: "10.99.0.1", optDomainName: "global.example", 252: "wpad"})
		c.ClassOptions = map[core.DeviceKind]OptionValues{core.KindSONiC: optionText(t, map[uint8]string{optDomainName: "class.example", 224: "public"})}
		c.Subnets[0].Options = optionText(t, map[uint8]string{252: ""}) // removes the global one
		c.Subnets[0].ClassOptions = map[core.DeviceKind]OptionValues{core.KindSONiC: optionText(t, map[uint8]string{optBootfile: "http://elsewhere/ztp.json"})}
		c.Subnets[0].Reservations = []Reservation{
			{MAC: mac(21), IP: addr("10.99.0.30"), Kind: core.KindSONiC, Options: optionText(t, map[uint8]string{224: "secret", 230: "hex:0a:0b"})},
		}
	})
	plain, _ := h.exchange(discover(mac(20)))
	if plain.DomainName() != "lab.example" || plain.Options.Has(dhcpv4.GenericOptionCode(252)) ||
		!plain.NTPServers()[0].Equal(ip("10.99.0.1")) {
		t.Fatalf("subnet field must beat global option, \"\" must remove:\n%s", plain.Summary())
	}
	sonic, _ := h.exchange(discover(mac(22), generic(optUserClass, []byte("SONiC-ZTP"))))
	// dhcp.class_options beats dhcp.options but not the subnet's own fields.
	if sonic.DomainName() != "lab.example" || string(sonic.GetOneOption(dhcpv4.GenericOptionCode(224))) != "public" ||
		sonic.BootFileNameOption() != "http://elsewhere/ztp.json" {
		t.Fatalf("class and subnet-class overrides:\n%s", sonic.Summary())
	}
	relayed, _ := h.exchange(discover(mac(23), generic(optUserClass, []byte("SONiC-ZTP")), dhcpv4.WithRelay(ip("10.99.5.1"))))
	if relayed.DomainName() != "class.example" {
		t.Fatalf("without a subnet domain the class option must beat the global one: %q", relayed.DomainName())
	}
	res, _ := h.exchange(discover(mac(21)))
	if string(res.GetOneOption(dhcpv4.GenericOptionCode(224))) != "secret" ||
		!bytes.Equal(res.GetOneOption(dhcpv4.GenericOptionCode(230)), []byte{10, 11}) ||
		res.BootFileNameOption() != "http://elsewhere/ztp.json" {
		t.Fatalf("reservation overrides:\n%s", res.Summary())
	}
}

// Settings are resolved by the app from a validated configuration (whose
// errors name the configuration field: see internal/app); New still refuses
// values that would make it serve wrong answers, whoever built them.
func TestNewRefusesInvalidSettings(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		mutate     func(*Options)
	}{
		{"managed option", "option 51 cannot be configured (set lease_time instead)",
			func(o *Options) { o.GlobalOptions = OptionValues{51: {0, 0, 0, 60}} }},
		{"managed class option", `subnet "lab": class options sonic: option 54 cannot be configured`,
			func(o *Options) {
				o.Subnets[0].ClassOptions = map[core.DeviceKind]OptionValues{core.KindSONiC: {54: {10, 99, 0, 2}}}
			}},
		{"reservation outside", `subnet "lab": reservation 0: 10.99.5.7 is not an IPv4 address inside 10.99.0.0/24`,
			func(o *Options) { o.Subnets[0].Reservations = []Reservation{{MAC: mac(1), IP: addr("10.99.5.7")}} }},
		{"reservation twice", "10.99.0.7 is reserved twice",
			func(o *Options) {
				o.Subnets[0].Reservations = []Reservation{{MAC: mac(1), IP: addr("10.99.0.7")}, {Serial: "S", IP: addr("10.99.0.7")}}
			}},
		{"reservation without identity", "needs a MAC, a client id or a serial",
			func(o *Options) { o.Subnets[0].Reservations = []Reservation{{IP: addr("10.99.0.7")}} }},
		{"pool outside", `subnet "lab": pool 0 (10.99.0.100-10.99.1.5) is not an IPv4 range inside 10.99.0.0/24`,
			func(o *Options) { o.Subnets[0].Pools = pools("10.99.0.100-10.99.1.5") }},
		{"pool reversed", "is not an IPv4 range", func(o *Options) { o.Subnets[0].Pools = pools("10.99.0.9-10.99.0.8") }},
		{"IPv6 dns", `subnet "lab": dns: ::1 is not an IPv4 address`, func(o *Options) { o.Subnets[0].DNS = addrs("::1") }},
		{"IPv6 route", "destination ::/0 is not an IPv4 prefix",
			func(o *Options) { o.Subnets[0].Routes = []Route{{Dest: prefix("::/0"), Via: addr("10.99.0.1")}} }},
		{"no lease time", `subnet "relayed": lease time 0s is not positive`, func(o *Options) { o.Subnets[1].LeaseTime = 0 }},
		{"no prefix", "is not an IPv4 prefix", func(o *Options) { o.Subnets[1].Prefix = netip.Prefix{} }},
		{"no offer hold", "offer hold 0s must be positive", func(o *Options) { o.OfferHold = 0 }},
		{"no subnet", "no subnet configured", func(o *Options) { o.Subnets = nil }},
	} {
		opt := testOptions(t)
		tc.mutate(&opt)
		if _, err := New(opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := New(testOptions(t)); err != nil {
		t.Fatalf("the test settings must be accepted: %v", err)
	}
}

func TestParameterRequestOrderAndSizeCap(t *testing.T) {
	h := newHarness(t, func(c *Options) {
		c.Subnets[0].NTP = addrs("10.99.0.123")
		c.GlobalOptions = optionText(t, map[uint8]string{200: strings.Repeat("x", 250), 201: strings.Repeat("y", 250)})
	})
	prl := generic(optParamRequest, []byte{optNTP, optDomainName, optRouter, optSubnetMask})
	out, _ := h.raw(discover(mac(30), prl, dhcpv4.WithOption(dhcpv4.OptMaxMessageSize(1500))).ToBytes())
	codes := replyCodes(out)
	want := []uint8{optMessageType, optServerID, optLeaseTime, optRenewalTime, optRebindingTime,
		optNTP, optDomainName, optRouter, optSubnetMask}
	if !slices.Equal(codes[:len(want)], want) {
		t.Fatalf("option order %v, want prefix %v", codes, want)
	}
	if !slices.Contains(codes, 200) || !slices.Contains(codes, 201) {
		t.Fatalf("unrequested configured options missing with room to spare: %v", codes)
	}
	// Without option 57 the reply must fit 576-byte datagrams: the
	// unrequested big options go, the requested ones stay.
	out, _ = h.raw(discover(mac(31), prl).ToBytes())
	if len(out) > 548 {
		t.Fatalf("reply of %d bytes exceeds the default maximum 548", len(out))
	}
	codes = replyCodes(out)
	if !slices.Equal(codes[:len(want)], want) || slices.Contains(codes, 201) {
		t.Fatalf("size cap dropped the wrong options: %v", codes)
	}
}

func TestRelayAndOption82(t *testing.T) {
	h := newHarness(t, nil)
	agent := dhcpv4.OptRelayAgentInfo(dhcpv4.OptGeneric(dhcpv4.GenericOptionCode(1), []byte("port7")))
	mods := []dhcpv4.Modifier{dhcpv4.WithRelay(ip("10.99.5.1")), dhcpv4.WithOption(agent)}
	offer, d := h.exchange(discover(mac(40), mods...))
	if offer == nil || !offer.YourIPAddr.Equal(ip("10.99.5.10")) {
		t.Fatalf("relayed DISCOVER must get an address from the giaddr subnet, got %v", offer)
	}
	if d.l2 || d.addr.String() != "10.99.5.1:67" {
		t.Fatalf("relayed reply must go to giaddr:67, got %+v", d)
	}
	out, _ := h.raw(discover(mac(41), mods...).ToBytes())
	codes := replyCodes(out)
	if codes[len(codes)-1] != optRelayAgent {
		t.Fatalf("option 82 must be echoed last, codes %v", codes)
	}
	if got := offer.RelayAgentInfo(); got == nil || string(got.Get(dhcpv4.GenericOptionCode(1))) != "port7" {
		t.Fatalf("option 82 not echoed: %v", got)
	}
	// RFC 3527 link selection overrides giaddr.
	ls := dhcpv4.OptRelayAgentInfo(dhcpv4.OptGeneric(dhcpv4.GenericOptionCode(relayLinkSelection), ip("10.99.0.0")))
	offer, d = h.exchange(discover(mac(42), dhcpv4.WithRelay(ip("10.99.5.1")), dhcpv4.WithOption(ls)))
	if offer == nil || !offer.YourIPAddr.Equal(ip("10.99.0.100")) || d.addr.String() != "10.99.5.1:67" {
		t.Fatalf("link selection: got %v to %+v", offer, d)
	}
	// A relay from an unknown network gets nothing.
	before := counterValue(h.s.metrics.dropNoSubnet)
	if r, _ := h.exchange(discover(mac(43), dhcpv4.WithRelay(ip("10.99.77.1")))); r != nil {
		t.Fatal("unknown giaddr answered")
	}
	if counterValue(h.s.metrics.dropNoSubnet) != before+1 {
		t.Fatal("no_subnet drop not counted")
	}
}

func TestRequestStates(t *testing.T) {
	h := newHarness(t, nil)
	a := h.dora(mac(50))
	aIP := a.YourIPAddr

	// INIT-REBOOT for its own address: ACK.
	r, _ := dhcpv4.New(dhcpv4.WithHwAddr(mac(50)), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(aIP)))
	ack, _ := h.exchange(r)
	if ack.MessageType() != dhcpv4.MessageTypeAck || !ack.YourIPAddr.Equal(aIP) {
		t.Fatalf("INIT-REBOOT own address: %v", ack.Summary())
	}
	// INIT-REBOOT from a foreign network: NAK, broadcast.
	r, _ = dhcpv4.New(dhcpv4.WithHwAddr(mac(50)), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip("192.168.1.5"))))
	nak, d := h.exchange(r)
	if nak.MessageType() != dhcpv4.MessageTypeNak || d.addr != broadcast || d.l2 {
		t.Fatalf("wrong network: %v to %+v", nak, d)
	}
	if nak.Options.Has(dhcpv4.OptionIPAddressLeaseTime) || !nak.YourIPAddr.IsUnspecified() {
		t.Fatal("NAK must carry no lease")
	}
	// Another client asking for A's address: NAK.
	r, _ = dhcpv4.New(dhcpv4.WithHwAddr(mac(51)), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(aIP)))
	if nak, _ := h.exchange(r); nak == nil || nak.MessageType() != dhcpv4.MessageTypeNak {
		t.Fatalf("taken address must be NAKed, got %v", nak)
	}
	// An unknown client INIT-REBOOTing a free address: silence (RFC 2131 §4.3.2).
	r, _ = dhcpv4.New(dhcpv4.WithHwAddr(mac(52)), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip("10.99.0.190"))))
	if rep, _ := h.exchange(r); rep != nil {
		t.Fatalf("unknown client must get no reply, got %v", rep.Summary())
	}
	// SELECTING another server: silence, and our offer is freed.
	offer, _ := h.exchange(discover(mac(53)))
	other := requestFor(offer)
	other.UpdateOption(dhcpv4.OptServerIdentifier(ip("10.99.0.2")))
	if rep, _ := h.exchange(other); rep != nil {
		t.Fatal("REQUEST for another server answered")
	}
	h.s.subnets[0].pools[0].cursor = 0
	if o2, _ := h.exchange(discover(mac(54))); !o2.YourIPAddr.Equal(offer.YourIPAddr) {
		t.Fatalf("declined offer %s not freed, next client got %s", offer.YourIPAddr, o2.YourIPAddr)
	}
	// RENEWING: ciaddr, unicast back to ciaddr; expiry extended and committed.
	h.now = h.now.Add(30 * time.Minute)
	renew, _ := dhcpv4.NewRenewFromAck(a)
	renew.ServerIPAddr = net.IPv4zero
	ack, d = h.exchange(renew)
	if ack.MessageType() != dhcpv4.MessageTypeAck || d.addr.String() != aIP.String()+":68" || d.l2 {
		t.Fatalf("RENEW: %v to %+v", ack, d)
	}
	if l, _ := h.lease(aIP.String()); !l.Expiry.Equal(h.now.Add(time.Hour)) || !l.Start.Equal(h.now.Add(-30*time.Minute)) {
		t.Fatalf("renewal must extend expiry and keep start: %+v", l)
	}
	// Broadcast flag: broadcast.
	_, d = h.exchange(discover(mac(55), dhcpv4.WithBroadcast(true)))
	if d.addr != broadcast || d.l2 {
		t.Fatalf("broadcast flag: %+v", d)
	}
}

func TestDeclineReleaseInformExpiry(t *testing.T) {
	h := newHarness(t, func(c *Options) {
		c.DeclineQuarantine = 10 * time.Minute
	})
	a := h.dora(mac(60))
	dec, _ := dhcpv4.New(dhcpv4.WithHwAddr(mac(60)), dhcpv4.WithMessageType(dhcpv4.MessageTypeDecline),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(a.YourIPAddr)), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(serverIP)))
	if rep, _ := h.exchange(dec); rep != nil {
		t.Fatal("DECLINE answered")
	}
	h.commit()
	if l, _ := h.lease(a.YourIPAddr.String()); l.State != core.LeaseDeclined {
		t.Fatalf("declined lease stored as %q", l.State)
	}
	// The decliner and everybody else get other addresses during quarantine.
	if o, _ := h.exchange(discover(mac(60))); o.YourIPAddr.Equal(a.YourIPAddr) {
		t.Fatal("declined address re-offered to the decliner")
	}
	for i := 0; i < 5; i++ {
		if o := h.dora(mac(61 + i)); o.YourIPAddr.Equal(a.YourIPAddr) {
			t.Fatal("quarantined address offered")
		}
	}
	// After the quarantine and a sweep the address is free again.
	h.now = h.now.Add(11 * time.Minute)
	h.sweep()
	h.s.subnets[0].pools[0].cursor = 0
	if o, _ := h.exchange(discover(mac(70))); !o.YourIPAddr.Equal(a.YourIPAddr) {
		t.Fatalf("quarantine over: want %s, got %s", a.YourIPAddr, o.YourIPAddr)
	}

	// RELEASE frees; the same client gets the address back, another can have it.
	b := h.dora(mac(71))
	rel, _ := dhcpv4.NewReleaseFromACK(b)
	if rep, _ := h.exchange(rel); rep != nil {
		t.Fatal("RELEASE answered")
	}
	h.commit()
	if l, _ := h.lease(b.YourIPAddr.String()); l.State != core.LeaseReleased {
		t.Fatalf("released lease stored as %q", l.State)
	}
	r, _ := dhcpv4.New(dhcpv4.WithHwAddr(mac(72)), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(b.YourIPAddr)), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(serverIP)))
	if ack, _ := h.exchange(r); ack == nil || ack.MessageType() != dhcpv4.MessageTypeAck {
		t.Fatalf("released address must be claimable, got %v", ack)
	}

	// INFORM: options, no lease, unicast to ciaddr.
	inf, _ := dhcpv4.NewInform(mac(80), ip("10.99.0.7"))
	rep, d := h.exchange(inf)
	if rep.MessageType() != dhcpv4.MessageTypeAck || !rep.YourIPAddr.IsUnspecified() ||
		rep.Options.Has(dhcpv4.OptionIPAddressLeaseTime) || d.addr.String() != "10.99.0.7:68" || rep.DomainName() != "lab.example" {
		t.Fatalf("INFORM reply: %v to %+v", rep.Summary(), d)
	}

	// Expiry: after the lease time a sweep marks it expired and another
	// client may take the address.
	c := h.dora(mac(90))
	h.now = h.now.Add(2 * time.Hour)
	h.sweep()
	h.commit()
	if l, _ := h.lease(c.YourIPAddr.String()); l.State != core.LeaseExpired {
		t.Fatalf("lapsed lease stored as %q", l.State)
	}
	r, _ = dhcpv4.New(dhcpv4.WithHwAddr(mac(91)), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(c.YourIPAddr)), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(serverIP)))
	if ack, _ := h.exchange(r); ack == nil || ack.MessageType() != dhcpv4.MessageTypeAck {
		t.Fatalf("expired address must be claimable by another client, got %v", ack)
	}
}

func TestExhaustedPool(t *testing.T) {
	h := newHarness(t, func(c *Options) {
		c.Subnets[0].Pools = pools("10.99.0.100-10.99.0.101")
	})
	h.dora(mac(1))
	h.dora(mac(2))
	before := counterValue(h.s.metrics.exhaustedTotal.WithLabelValues("lab"))
	if o, _ := h.exchange(discover(mac(3))); o != nil {
		t.Fatalf("exhausted pool offered %s", o.YourIPAddr)
	}
	if got := counterValue(h.s.metrics.exhaustedTotal.WithLabelValues("lab")); got != before+1 {
		t.Fatalf("exhausted counter %v, want %v", got, before+1)
	}
	if !strings.Contains(h.logs.String(), "level=WARN msg=\"address pool exhausted") {
		t.Fatalf("no warning logged:\n%s", h.logs)
	}
	// Lapsed offers come back: an offer not taken frees its address.
	h2 := newHarness(t, func(c *Options) { c.Subnets[0].Pools = pools("10.99.0.100-10.99.0.100") })
	h2.exchange(discover(mac(1)))
	if o, _ := h2.exchange(discover(mac(2))); o != nil {
		t.Fatal("held offer given to another client")
	}
	h2.now = h2.now.Add(h2.opt.OfferHold + time.Second)
	if o, _ := h2.exchange(discover(mac(2))); o == nil {
		t.Fatal("lapsed offer not reclaimed")
	}
}

func TestRestartKeepsAddresses(t *testing.T) {
	h := newHarness(t, nil)
	got := map[string]string{}
	for i := 0; i < 60; i++ {
		ack := h.dora(mac(i))
		got[mac(i).String()] = ack.YourIPAddr.String()
	}
	// Offers pending at the crash are lost; that must not matter.
	h.exchange(discover(mac(999)))
	h.restart()
	seen := map[string]bool{}
	for i := 0; i < 60; i++ {
		offer, _ := h.exchange(discover(mac(i)))
		if offer.YourIPAddr.String() != got[mac(i).String()] {
			t.Fatalf("client %d: offered %s after restart, had %s", i, offer.YourIPAddr, got[mac(i).String()])
		}
		r, _ := dhcpv4.New(dhcpv4.WithHwAddr(mac(i)), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(offer.YourIPAddr)))
		if ack, _ := h.exchange(r); ack == nil || ack.MessageType() != dhcpv4.MessageTypeAck {
			t.Fatalf("client %d INIT-REBOOT after restart: %v", i, ack)
		}
		seen[offer.YourIPAddr.String()] = true
	}
	for i := 1000; i < 1030; i++ {
		ack := h.dora(mac(i))
		if seen[ack.YourIPAddr.String()] {
			t.Fatalf("new client got %s, which belongs to another client", ack.YourIPAddr)
		}
	}
}

func TestONIEThenSONiCKeepsAddress(t *testing.T) {
	h := newHarness(t, nil)
	hw := mac(7)
	onie := h.dora(hw, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("onie_vendor:x86_64-dell_s6000-r0")))
	sonic := h.dora(hw, generic(optUserClass, []byte("SONiC-ZTP")), generic(optClientID, []byte("SONiC##S6000##SN9")))
	if !sonic.YourIPAddr.Equal(onie.YourIPAddr) {
		t.Fatalf("SONiC got %s, ONIE had %s on the same switch", sonic.YourIPAddr, onie.YourIPAddr)
	}
	h.commit() // the lease was cached; the device change is written behind
	d := h.device(hw.String())
	if d.Kind != core.KindSONiC || d.Platform != "x86_64-dell_s6000-r0" || d.Serial != "SN9" {
		t.Fatalf("device = %+v", d)
	}
	// Two clients with different client ids on one MAC stay apart.
	x := h.dora(mac(8), generic(optClientID, []byte("id-one")))
	y := h.dora(mac(8), generic(optClientID, []byte("id-two")))
	if x.YourIPAddr.Equal(y.YourIPAddr) {
		t.Fatal("two client ids shared one address")
	}
}

func TestDeviceStateNeverGoesBack(t *testing.T) {
	h := newHarness(t, nil)
	hw := mac(9)
	h.dora(hw)
	err := h.st.Update(func(tx core.Tx) error {
		d, err := tx.Devices().Get(hw.String())
		if err != nil {
			return err
		}
		d.State, d.Approved, d.Cluster = core.StateJoined, true, "c1"
		return tx.Devices().Put(d)
	})
	if err != nil {
		t.Fatal(err)
	}
	h.now = h.now.Add(2 * time.Minute)
	h.dora(hw)
	h.commit()
	d := h.device(hw.String())
	if d.State != core.StateJoined || !d.Approved || d.Cluster != "c1" || !d.LastSeen.Equal(h.now) {
		t.Fatalf("DHCP clobbered the device: %+v", d)
	}
}

func TestEventsWritten(t *testing.T) {
	h := newHarness(t, nil)
	a := h.dora(mac(1))
	rel, _ := dhcpv4.NewReleaseFromACK(a)
	h.exchange(rel)
	h.commit()
	var types []string
	h.st.View(func(tx core.Tx) error {
		return tx.Events().List(core.DeviceEvents, 0, func(e core.Event) (bool, error) {
			types = append(types, e.Type+" "+e.Device)
			return true, nil
		})
	})
	want := []string{"dhcp.ack " + mac(1).String(), "dhcp.release " + mac(1).String()}
	if !slices.Equal(types, want) {
		t.Fatalf("events %v, want %v", types, want)
	}
}

func TestReplyDestination(t *testing.T) {
	hw := [16]byte{1, 2, 3, 4, 5, 6}
	y := [4]byte{10, 0, 0, 5}
	cases := []struct {
		name string
		req  Packet
		r    reply
		want string
		l2   bool
	}{
		{"relay", Packet{GIAddr: [4]byte{10, 1, 1, 1}, CIAddr: [4]byte{10, 0, 0, 9}, HType: 1, HLen: 6}, reply{msgType: msgAck, yiaddr: y}, "10.1.1.1:67", false},
		{"relay nak", Packet{GIAddr: [4]byte{10, 1, 1, 1}}, reply{msgType: msgNak}, "10.1.1.1:67", false},
		{"nak", Packet{CIAddr: [4]byte{10, 0, 0, 9}}, reply{msgType: msgNak}, "255.255.255.255:68", false},
		{"ciaddr", Packet{CIAddr: [4]byte{10, 0, 0, 9}, Flags: flagBroadcast}, reply{msgType: msgAck, yiaddr: y}, "10.0.0.9:68", false},
		{"broadcast flag", Packet{Flags: flagBroadcast, HType: 1, HLen: 6, CHAddr: hw}, reply{msgType: msgOffer, yiaddr: y}, "255.255.255.255:68", false},
		{"unicast l2", Packet{HType: 1, HLen: 6, CHAddr: hw}, reply{msgType: msgOffer, yiaddr: y}, "10.0.0.5:68", true},
		{"not ethernet", Packet{HType: 32, HLen: 16, CHAddr: hw}, reply{msgType: msgOffer, yiaddr: y}, "255.255.255.255:68", false},
	}
	for _, c := range cases {
		d := replyDest(&c.req, &c.r)
		if d.addr.String() != c.want || d.l2 != c.l2 || (c.l2 && d.hw != [6]byte(hw[:6])) {
			t.Errorf("%s: got %+v, want %s l2=%v", c.name, d, c.want, c.l2)
		}
	}
}

func TestManyClientsUniqueAddresses(t *testing.T) {
	h := newHarness(t, func(c *Options) {
		c.Subnets[0].Prefix = prefix("10.99.0.0/22")
		c.Subnets[0].Pools = pools("10.99.0.100-10.99.3.200")
	})
	owner := map[string]string{}
	for i := 0; i < 800; i++ {
		ack := h.dora(mac(i))
		if o, dup := owner[ack.YourIPAddr.String()]; dup {
			t.Fatalf("%s given to %s and %s", ack.YourIPAddr, o, mac(i))
		}
		owner[ack.YourIPAddr.String()] = mac(i).String()
	}
	// Renewing everyone keeps them all.
	for i := 0; i < 800; i++ {
		ack := h.dora(mac(i))
		if owner[ack.YourIPAddr.String()] != mac(i).String() {
			t.Fatalf("client %d moved to %s", i, ack.YourIPAddr)
		}
	}
	var n int
	h.st.View(func(tx core.Tx) error { n, _ = tx.Leases().Count(); return nil })
	if n != 800 {
		t.Fatalf("%d leases stored, want 800", n)
	}
}

func TestLeaseCache(t *testing.T) {
	h := newHarness(t, nil)
	ack := h.dora(mac(1))
	l1, _ := h.lease(ack.YourIPAddr.String())
	reboot := func() *dhcpv4.DHCPv4 {
		r, _ := dhcpv4.New(dhcpv4.WithHwAddr(mac(1)), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ack.YourIPAddr)))
		out, _ := h.raw(r.ToBytes())
		rep, _ := dhcpv4.FromBytes(out)
		return rep
	}
	// Ten minutes later the committed lease has 50 minutes left: that is
	// what the ACK grants, and nothing is written.
	h.now = h.now.Add(10 * time.Minute)
	h.s.mu.Lock()
	pending := len(h.s.acks)
	h.s.mu.Unlock()
	rep := reboot()
	if rep.MessageType() != dhcpv4.MessageTypeAck || rep.IPAddressLeaseTime(0) != 50*time.Minute {
		t.Fatalf("cached ACK: %v lease %v", rep.MessageType(), rep.IPAddressLeaseTime(0))
	}
	h.s.mu.Lock()
	if len(h.s.acks) != pending || len(h.s.dirty) != 0 {
		t.Fatal("a cached ACK must not wait for a commit")
	}
	h.s.mu.Unlock()
	if l2, _ := h.lease(ack.YourIPAddr.String()); !l2.UpdatedAt.Equal(l1.UpdatedAt) {
		t.Fatal("cached ACK rewrote the lease")
	}
	// Past the threshold the lease is extended and written again.
	h.now = h.now.Add(10 * time.Minute)
	rep = reboot()
	if rep.IPAddressLeaseTime(0) != time.Hour {
		t.Fatalf("lease time %v, want a fresh hour", rep.IPAddressLeaseTime(0))
	}
	if l3, _ := h.lease(ack.YourIPAddr.String()); !l3.Expiry.Equal(h.now.Add(time.Hour)) {
		t.Fatalf("extended lease not written: %+v", l3)
	}
	// A release in between makes the next REQUEST write again.
	rel, _ := dhcpv4.NewReleaseFromACK(ack)
	h.exchange(rel)
	rep = reboot()
	if rep.IPAddressLeaseTime(0) != time.Hour {
		t.Fatalf("after RELEASE: lease time %v, want a written hour", rep.IPAddressLeaseTime(0))
	}
	if l4, _ := h.lease(ack.YourIPAddr.String()); l4.State != core.LeaseActive {
		t.Fatalf("lease after RELEASE and REQUEST: %+v", l4)
	}
}

// TestClientWithoutHardwareAddress: a client known only by its client id
// (hlen 0, as IPoIB clients are) gets a lease, and its lack of a device
// record never blocks the commit other clients' ACKs wait for.
func TestClientWithoutHardwareAddress(t *testing.T) {
	h := newHarness(t, nil)
	cid := dhcpv4.WithOption(dhcpv4.OptClientIdentifier([]byte("ib-client-1")))
	d, err := dhcpv4.NewDiscovery(nil, cid)
	if err != nil {
		t.Fatal(err)
	}
	d.HWType = 32 // InfiniBand: chaddr unused
	offer, _ := h.exchange(d)
	if offer == nil || offer.MessageType() != dhcpv4.MessageTypeOffer {
		t.Fatalf("no OFFER for a client-id-only client: %v", offer)
	}
	ack, _ := h.exchange(requestFor(offer, cid))
	if ack == nil || ack.MessageType() != dhcpv4.MessageTypeAck {
		t.Fatalf("no ACK for a client-id-only client: %v", ack)
	}
	if l, ok := h.lease(ack.YourIPAddr.String()); !ok || l.ClientID != "ib-client-1" {
		t.Fatalf("lease %+v", l)
	}
	// Everyone else is still served.
	h.dora(mac(7))
}

// TestUnstorableRecordDoesNotHoldACKs: a device record the store refuses
// (here one without an id) fails its group commit; the leases are then
// committed alone and the ACKs leave, the good records are stored one by
// one and the bad one is dropped.
func TestUnstorableRecordDoesNotHoldACKs(t *testing.T) {
	h := newHarness(t, nil)
	h.s.mu.Lock()
	h.s.queueDevice(&device{d: core.Device{Kind: core.KindVM}})
	h.s.mu.Unlock()
	ack := h.dora(mac(9)) // fails the test unless the ACK is released
	if _, ok := h.lease(ack.YourIPAddr.String()); !ok {
		t.Fatal("lease not stored")
	}
	if d := h.device(mac(9).String()); d.IP != ack.YourIPAddr.String() {
		t.Fatalf("the good device record was not stored apart: %+v", d)
	}
	if !strings.Contains(h.logs.String(), "device record cannot be stored; dropped") {
		t.Fatalf("no log of the dropped record:\n%s", h.logs.String())
	}
	h.dora(mac(10)) // the bad record is gone: plain group commits again
}
