package dhcp6

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
)

// seeds are packets of every parser path: client messages, relays nested
// once, twice and past the hop limit, IA options inside relay messages,
// truncated and overlong options, DUIDs over 130 bytes.
func seeds() [][]byte {
	c := newClient("02:00:00:00:20:01", sonicClass, askZTP)
	sol := c.msg(dhcpv6.MessageTypeSolicit, c.ia("fd99:0:0:1::150"), dhcpv6.WithRapidCommit)
	req := c.msg(dhcpv6.MessageTypeRequest, c.ia("fd99:0:0:1::150"),
		serverID(&dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: net.HardwareAddr{2, 1, 1, 1, 1, 1}}))
	wrap := func(m dhcpv6.DHCPv6, n int) []byte {
		for range n {
			r, _ := dhcpv6.EncapsulateRelay(m, dhcpv6.MessageTypeRelayForward, net.ParseIP("fd99:0:0:5::1"), net.ParseIP("fe80::1"))
			r.AddOption(dhcpv6.OptInterfaceID([]byte("Ethernet0")))
			r.AddOption(dhcpv6.OptClientLinkLayerAddress(iana.HWTypeEthernet, net.HardwareAddr{2, 0, 0, 0, 0x20, 1}))
			m = r
		}
		return m.ToBytes()
	}
	long := newClient("02:00:00:00:20:02")
	long.duid = &dhcpv6.DUIDOpaque{Type: 0x00ff, Data: bytes.Repeat([]byte{7}, 200)}
	// A relay carrying an IA_NA of its own beside the relayed message.
	iaInRelay := wrap(sol, 1)
	iaInRelay = append(iaInRelay, 0, optIANA, 0, 12, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0)
	out := [][]byte{sol.ToBytes(), req.ToBytes(), wrap(sol, 1), wrap(req, 2), wrap(sol, maxRelayDepth),
		wrap(sol, maxRelayDepth+1), long.msg(dhcpv6.MessageTypeSolicit, long.ia()).ToBytes(), iaInRelay}
	s := sol.ToBytes()
	out = append(out, s[:len(s)-3], append(append([]byte(nil), s...), 0, 1, 0xff, 0xff, 1))
	return out
}

// refRelay is insomniacslk's reading of a packet's framing: the relay
// chain and the client message, every option list parsed as generic
// options (its own option parsers also judge contents, which ztpd reads
// only where it uses them).
type refRelay struct {
	hops        uint8
	link, peer  net.IP
	interfaceID []byte
}

func generic(code dhcpv6.OptionCode, data []byte) (dhcpv6.Option, error) {
	return &dhcpv6.OptionGeneric{OptionCode: code, OptionData: data}, nil
}

// refParse returns the relays and the client message insomniacslk finds, or
// ok false where ztpd must refuse the packet too.
func refParse(b []byte) (relays []refRelay, mt uint8, xid [3]byte, opts dhcpv6.Options, ok bool) {
	for depth := 0; ; depth++ {
		if len(b) < 4 || b[0] == msgRelayRepl {
			return nil, 0, xid, nil, false
		}
		if b[0] != msgRelayForw {
			// The client message: its header and its options' framing.
			var o dhcpv6.Options
			if err := o.FromBytesWithParser(b[4:], generic); err != nil {
				return nil, 0, xid, nil, false
			}
			return relays, b[0], [3]byte(b[1:4]), o, true
		}
		if b[0] != msgRelayForw || len(b) < 34 || depth == maxRelayDepth {
			return nil, 0, xid, nil, false
		}
		var o dhcpv6.Options
		if err := o.FromBytesWithParser(b[34:], generic); err != nil {
			return nil, 0, xid, nil, false
		}
		var inner []byte
		n := 0
		r := refRelay{hops: b[1], link: net.IP(b[2:18]), peer: net.IP(b[18:34])}
		for _, op := range o {
			switch op.Code() {
			case dhcpv6.OptionRelayMsg:
				inner, n = op.ToBytes(), n+1
			case dhcpv6.OptionInterfaceID:
				if r.interfaceID == nil {
					r.interfaceID = op.ToBytes()
				}
			}
		}
		if n != 1 {
			return nil, 0, xid, nil, false
		}
		relays = append(relays, r)
		b = inner
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Packet
		err := p.Parse(b)
		relays, mt, xid, opts, ok := refParse(b)
		clientType := mt != msgAdvertise && mt != msgReply && mt != 10 && mt != msgRelayRepl
		if ok && clientType && err != nil {
			t.Fatalf("insomniacslk reads a client message, ztpd refuses it: %v", err)
		}
		if err != nil {
			return
		}
		if !ok {
			t.Fatal("ztpd accepts a packet insomniacslk cannot frame")
		}
		if p.Type != mt || p.XID != xid || len(p.relays) != len(relays) {
			t.Fatalf("type %d/%d, xid %x/%x, relays %d/%d", p.Type, mt, p.XID, xid, len(p.relays), len(relays))
		}
		for i, r := range relays {
			h := p.relays[i]
			if h.hops != r.hops || !net.IP(h.link[:]).Equal(r.link) || !net.IP(h.peer[:]).Equal(r.peer) ||
				(h.interfaceID == nil) != (r.interfaceID == nil) || !bytes.Equal(h.interfaceID, r.interfaceID) {
				t.Fatalf("relay %d: ztpd %+v, insomniacslk %+v", i, h, r)
			}
		}
		for _, code := range []uint16{optClientID, optServerID, optORO, optUserClass, optVendorClass, optRapidCommit} {
			mine, has := p.Opt(code)
			ref := opts.GetOne(dhcpv6.OptionCode(code))
			if has != (ref != nil) || (has && !bytes.Equal(mine, ref.ToBytes())) {
				t.Fatalf("option %d: ztpd %x (%v), insomniacslk %v", code, mine, has, ref)
			}
		}
		// The IA_NAs, where insomniacslk's own parser reads the message.
		m, rerr := dhcpv6.MessageFromBytes(p.raw)
		ias, ierr := p.IANAs(nil)
		if rerr != nil {
			return
		}
		if ierr != nil {
			t.Fatalf("insomniacslk reads the IA_NAs, ztpd refuses them: %v", ierr)
		}
		ref := m.Options.IANA()
		if len(ref) > maxIAs {
			ref = ref[:maxIAs]
		}
		if len(ias) != len(ref) {
			t.Fatalf("%d IA_NAs, insomniacslk %d", len(ias), len(ref))
		}
		for i, ia := range ias {
			if ia.id != ref[i].IaId {
				t.Fatalf("IA %d: IAID %x, insomniacslk %x", i, ia.id, ref[i].IaId)
			}
			addrs := ref[i].Options.Addresses()
			if len(addrs) > 4 {
				addrs = addrs[:4]
			}
			if len(ia.addrs) != len(addrs) {
				t.Fatalf("IA %d: %d addresses, insomniacslk %d", i, len(ia.addrs), len(addrs))
			}
			for j, a := range addrs {
				if !net.IP(ia.addrs[j][:]).Equal(a.IPv6Addr) {
					t.Fatalf("IA %d address %d: %x, insomniacslk %s", i, j, ia.addrs[j], a.IPv6Addr)
				}
			}
		}
	})
}

// FuzzHandle runs whole packets through the request path: no packet
// panics, a reply always parses (insomniacslk), and a relayed one is
// answered through every relay it came through.
func FuzzHandle(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s, true)
		f.Add(s, false)
	}
	h := newHarness(f, nil)
	f.Fuzz(func(t *testing.T, b []byte, fromRelay bool) {
		h.src = netip.AddrPortFrom(addr("fe80::1"), 546)
		if fromRelay {
			h.src = netip.AddrPortFrom(addr("fd99:0:0:5::1"), 547)
		}
		x := newExchange(h.ifc)
		x.src = h.src
		out := h.s.handle(x, b)
		var last time.Time
		h.s.flush(&snapshot{}, &last)
		for _, s := range h.conn.take() {
			out = s.pkt
		}
		if out == nil {
			return
		}
		d, err := dhcpv6.FromBytes(out)
		if err != nil {
			t.Fatalf("reply does not parse: %v (%x)", err, out)
		}
		depth := 0
		for d.IsRelay() {
			r := d.(*dhcpv6.RelayMessage)
			if r.MessageType != dhcpv6.MessageTypeRelayReply {
				t.Fatalf("relay reply of type %s", r.MessageType)
			}
			depth++
			if d, err = dhcpv6.DecapsulateRelay(d); err != nil {
				t.Fatal(err)
			}
		}
		var p Packet
		if p.Parse(b) == nil && depth != len(p.relays) {
			t.Fatalf("reply through %d relays, request came through %d", depth, len(p.relays))
		}
	})
}
