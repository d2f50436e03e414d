package dhcp

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

func seedPackets() [][]byte {
	hw := net.HardwareAddr{0x52, 0x54, 0, 1, 2, 3}
	d1, _ := dhcpv4.NewDiscovery(hw, dhcpv4.WithOption(dhcpv4.OptClientIdentifier([]byte("SONiC##p##s"))),
		dhcpv4.WithOption(dhcpv4.OptGeneric(dhcpv4.GenericOptionCode(77), []byte("SONiC-ZTP"))),
		dhcpv4.WithOption(dhcpv4.OptHostName("sonic")))
	d2, _ := dhcpv4.NewDiscovery(hw, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("onie_vendor:x86_64-accton_as7712_32x-r0")),
		dhcpv4.WithRelay(net.IPv4(10, 99, 5, 1)),
		dhcpv4.WithOption(dhcpv4.OptRelayAgentInfo(dhcpv4.OptGeneric(dhcpv4.GenericOptionCode(1), []byte("eth0")))))
	r, _ := dhcpv4.New(dhcpv4.WithHwAddr(hw), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 99, 0, 100))),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IPv4(10, 99, 0, 1))))
	inf, _ := dhcpv4.NewInform(hw, net.IPv4(10, 99, 0, 7))
	rel, _ := dhcpv4.New(dhcpv4.WithHwAddr(hw), dhcpv4.WithMessageType(dhcpv4.MessageTypeRelease),
		dhcpv4.WithClientIP(net.IPv4(10, 99, 0, 100)))
	dec, _ := dhcpv4.New(dhcpv4.WithHwAddr(hw), dhcpv4.WithMessageType(dhcpv4.MessageTypeDecline),
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.IPv4(10, 99, 0, 100))))
	return [][]byte{d1.ToBytes(), d2.ToBytes(), r.ToBytes(), inf.ToBytes(), rel.ToBytes(), dec.ToBytes()}
}

func TestParseMatchesLibrary(t *testing.T) {
	for _, b := range seedPackets() {
		var p Packet
		if err := p.Parse(b); err != nil {
			t.Fatal(err)
		}
		m, _ := dhcpv4.FromBytes(b)
		for code, v := range m.Options {
			got, ok := p.Opt(code)
			if !ok || !bytes.Equal(got, v) {
				t.Fatalf("option %d: %x, library %x", code, got, v)
			}
		}
		if p.MessageType() != uint8(m.MessageType()) || !bytes.Equal(p.HWAddr(), m.ClientHWAddr) {
			t.Fatal("header mismatch")
		}
	}
}

func TestParseConcatenationAndOverload(t *testing.T) {
	// Option 12 split over three instances (RFC 3396), others in between.
	b := append([]byte{}, seedPackets()[0][:240]...)
	b = append(b, optMessageType, 1, msgDiscover, 12, 5, 's', 'o', 'n', 'i', 'c', 12, 3, 'a', 'b', 'c',
		optPad, 61, 1, 'x', 12, 2, 'd', 'e', optEnd)
	var p Packet
	if err := p.Parse(b); err != nil {
		t.Fatal(err)
	}
	if v, _ := p.Opt(optHostname); string(v) != "sonicabcde" {
		t.Fatalf("concatenated hostname = %q", v)
	}
	// Option 52 = 1: more options in the file field.
	b2 := make([]byte, 240)
	b2[0], b2[1], b2[2] = 1, 1, 6
	copy(b2[236:], magicCookie[:])
	b2 = append(b2, optMessageType, 1, msgDiscover, optOverload, 1, 1, optEnd)
	copy(b2[108:], []byte{optHostname, 4, 'f', 'i', 'l', 'e', optEnd})
	if err := p.Parse(b2); err != nil {
		t.Fatal(err)
	}
	if v, _ := p.Opt(optHostname); string(v) != "file" {
		t.Fatalf("overloaded hostname = %q", v)
	}
}

func TestParseRejectsMalformed(t *testing.T) {
	good := seedPackets()[0]
	cases := map[string][]byte{
		"short":     good[:200],
		"reply":     append([]byte{2}, good[1:]...),
		"cookie":    append(append(append([]byte{}, good[:236]...), 1, 2, 3, 4), good[240:]...),
		"truncated": append(append([]byte{}, good[:240]...), optHostname, 200, 'x'),
		"hlen":      append([]byte{1, 1, 17}, good[3:]...),
		"overload":  append(append([]byte{}, good[:240]...), optOverload, 1, 9, optEnd),
	}
	for name, b := range cases {
		var p Packet
		if err := p.Parse(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestEncodeReplySplitsLongOptionsAndPads(t *testing.T) {
	var p Packet
	if err := p.Parse(seedPackets()[0]); err != nil {
		t.Fatal(err)
	}
	long := bytes.Repeat([]byte("u"), 300)
	out := encodeReply(make([]byte, 0, 1500), &p, &reply{msgType: msgOffer, yiaddr: [4]byte{1, 2, 3, 4}},
		[]option{{optMessageType, []byte{msgOffer}}, {optBootfile, long}})
	m, err := dhcpv4.FromBytes(out)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.GetOneOption(dhcpv4.OptionBootfileName); !bytes.Equal(got, long) {
		t.Fatalf("long option came back as %d bytes", len(got))
	}
	if m.OpCode != dhcpv4.OpcodeBootReply || m.TransactionID != dhcpv4.TransactionID(p.XID) || !m.YourIPAddr.Equal(net.IPv4(1, 2, 3, 4)) {
		t.Fatal("header wrong")
	}
	short := encodeReply(make([]byte, 0, 1500), &p, &reply{msgType: msgNak}, nil)
	if len(short) != minReplyLen {
		t.Fatalf("short reply is %d bytes, want padding to %d", len(short), minReplyLen)
	}
}

func TestEncodeOption(t *testing.T) {
	cases := []struct {
		code uint8
		text string
		want []byte
		err  string
	}{
		{3, "10.0.0.1, 10.0.0.2", []byte{10, 0, 0, 1, 10, 0, 0, 2}, ""},
		{1, "255.255.255.0", []byte{255, 255, 255, 0}, ""},
		{58, "1h", binary.BigEndian.AppendUint32(nil, 3600), ""},
		{2, "-3600", binary.BigEndian.AppendUint32(nil, uint32(0xffff_f1f0)), ""},
		{26, "9000", []byte{0x23, 0x28}, ""},
		{19, "yes", []byte{1}, ""},
		{67, "http://x/ztp.json", []byte("http://x/ztp.json"), ""},
		{200, "hex:01:02:ff", []byte{1, 2, 255}, ""},
		{121, "10.0.0.0/8 via 10.99.0.254, 0.0.0.0/0 10.99.0.1", []byte{8, 10, 10, 99, 0, 254, 0, 10, 99, 0, 1}, ""},
		{119, "a.example, b.example.", []byte("\x01a\x07example\x00\x01b\x07example\x00"), ""},
		{12, "", nil, ""},
		{3, "10.0.0.300", nil, "not an IPv4"},
		{26, "70000", nil, "0..65535"},
		{51, "60", nil, "lease_time"},
		{54, "10.0.0.1", nil, "server identifier"},
		{121, "10.0.0.0/8", nil, "via"},
		{200, "hex:zz", nil, "hex"},
	}
	for _, c := range cases {
		got, err := EncodeOption(c.code, c.text)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("EncodeOption(%d, %q) err = %v, want %q", c.code, c.text, err, c.err)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, c.want) {
			t.Errorf("EncodeOption(%d, %q) = %v, %v; want %v", c.code, c.text, got, err, c.want)
		}
	}
}

func TestClientIDText(t *testing.T) {
	for _, id := range [][]byte{[]byte("SONiC##p##s"), {1, 0x52, 0x54, 0, 1, 2, 3}, []byte("41:42"), {0, 'x'}} {
		if back := parseClientIDText(clientIDText(id)); !bytes.Equal(back, id) {
			t.Errorf("client id %q stored as %q read back as %q", id, clientIDText(id), back)
		}
	}
}

func TestPoolNextWraps(t *testing.T) {
	p := newPool(100, 299) // 200 addresses, spans 4 words
	for i := uint32(100); i <= 299; i++ {
		p.set(i)
	}
	p.clear(170)
	p.cursor = 180
	if ip, ok := p.next(); !ok || ip != 170 {
		t.Fatalf("next = %d %v, want the wrapped 170", ip, ok)
	}
	p.set(170)
	if _, ok := p.next(); ok {
		t.Fatal("full pool returned an address")
	}
	p.clear(299)
	if ip, ok := p.next(); !ok || ip != 299 {
		t.Fatalf("next = %d %v, want the last address", ip, ok)
	}
}

// FuzzParse checks the allocation-light parser against the library's: the
// same options must come out whenever both accept a packet.
func FuzzParse(f *testing.F) {
	for _, b := range seedPackets() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Packet
		err := p.Parse(b)
		if err != nil {
			return
		}
		_ = p.MaxMessage()
		_, _ = p.relaySubOpt(relayLinkSelection)
		if p.Has(optOverload) {
			return // the library ignores overloading
		}
		m, lerr := dhcpv4.FromBytes(b)
		if lerr != nil {
			return
		}
		for code, v := range m.Options {
			got, ok := p.Opt(code)
			if !ok || !bytes.Equal(got, v) {
				t.Fatalf("option %d: ours %x, library %x", code, got, v)
			}
		}
	})
}

// FuzzHandle feeds arbitrary bytes through the whole request path (parse,
// every step, encode, commit) of a server with SONiC, ONIE and VM
// reservations: it must never panic and every reply must parse.
func FuzzHandle(f *testing.F) {
	for _, b := range seedPackets() {
		f.Add(b)
	}
	h := newHarness(f, nil)
	f.Fuzz(func(t *testing.T, b []byte) {
		h.t = t
		x := &exchange{ifc: h.ifc, req: &Packet{}, out: make([]byte, 0, 1500)}
		if x.req.Parse(b) != nil {
			return
		}
		x.now = time.Now()
		if x.req.GIAddr != [4]byte{} {
			x.src = netip.AddrFrom4(x.req.GIAddr) // a relay sends from its giaddr
		}
		if !h.s.decide(x) {
			return
		}
		if _, err := dhcpv4.FromBytes(x.out); err != nil {
			t.Fatalf("reply does not parse: %v", err)
		}
		if x.commit {
			h.now = x.now
			h.commit()
		}
	})
}

// TestParseManyRepeatedOptions: a maximal datagram of interleaved repeated
// options (RFC 3396 concatenation) parses without overflow, in linear work:
// each option's value is its instances in order, and the joined buffer is no
// larger than the options themselves.
func TestParseManyRepeatedOptions(t *testing.T) {
	b := make([]byte, 240, 65507)
	b[0], b[1], b[2] = opRequest, 1, 6
	copy(b[236:], magicCookie[:])
	want := map[uint8][]byte{}
	for i := 0; len(b)+4 <= cap(b)-1; i++ {
		code := uint8(200 + i%3)
		v := []byte{byte(i), byte(i >> 8)}
		b = append(b, code, 2, v[0], v[1])
		want[code] = append(want[code], v...)
	}
	b = append(b, optEnd)
	var p Packet
	if err := p.Parse(b); err != nil {
		t.Fatal(err)
	}
	for code, v := range want {
		got, ok := p.Opt(code)
		if !ok || !bytes.Equal(got, v) {
			t.Fatalf("option %d: %d bytes, want %d", code, len(got), len(v))
		}
	}
	if len(p.joined) > len(b) {
		t.Fatalf("joined %d bytes for a %d-byte packet", len(p.joined), len(b))
	}
}
