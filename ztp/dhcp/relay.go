package dhcp

import (
	"fmt"
	"net/netip"
)

// relayRule is a declared relay in the form the request path reads: the
// giaddrs one source address may set, and the interface it must use.
type relayRule struct {
	giaddrs []uint32
	iface   string // "" = any
}

// relayTable maps a relay's source address to what it may send. A map
// keyed by a 4-byte array: no allocation per lookup.
type relayTable map[[4]byte][]relayRule

func buildRelays(rs []Relay) (relayTable, error) {
	t := relayTable{}
	for i, r := range rs {
		if len(r.Sources) == 0 || len(r.GIAddrs) == 0 {
			return nil, fmt.Errorf("dhcp: relay %d: needs a source address and a giaddr", i)
		}
		rule := relayRule{iface: r.Interface}
		for _, g := range r.GIAddrs {
			if !g.Is4() || g.IsUnspecified() {
				return nil, fmt.Errorf("dhcp: relay %d: giaddr %s is not an IPv4 address", i, g)
			}
			rule.giaddrs = append(rule.giaddrs, u32Addr(g))
		}
		for _, src := range r.Sources {
			if !src.Is4() || src.IsUnspecified() {
				return nil, fmt.Errorf("dhcp: relay %d: source %s is not an IPv4 address", i, src)
			}
			t[src.As4()] = append(t[src.As4()], rule)
		}
	}
	return t, nil
}

// trusts reports whether a packet from src, arriving on ifname, may carry
// giaddr: it comes from a declared relay, on its interface, with one of
// its giaddrs.
func (t relayTable) trusts(src [4]byte, ifname string, giaddr [4]byte) bool {
	g := u32(giaddr)
	for _, r := range t[src] {
		if r.iface != "" && r.iface != ifname {
			continue
		}
		for _, a := range r.giaddrs {
			if a == g {
				return true
			}
		}
	}
	return false
}

// carriesRelayInfo reports whether a packet carries what only a relay may
// add: relay agent information (option 82, with its link selection) or
// subnet selection (option 118).
func (p *Packet) carriesRelayInfo() bool {
	return p.Has(optRelayAgent) || p.Has(optSubnetSelection)
}

// stepRelay lets relay information through only from declared relays
// (RFC 3046 §2.1, RFC 6607): a packet with giaddr set must come from a
// relay declared under dhcp.relays that may use that giaddr; a packet
// without giaddr (a client on the link) must carry no option 82 or 118.
// Everything downstream (the subnet choice, the device record, approval
// rules) then reads relay information only a declared relay wrote.
func (s *Server) stepRelay(x *exchange) bool {
	req := x.req
	if req.GIAddr == ([4]byte{}) {
		if !req.carriesRelayInfo() {
			return true
		}
		s.metrics.dropClientRelayInfo.Inc()
		s.logDrop(x, "client "+macText(req.HWAddr()),
			"DHCP request from a client on the link carries relay agent information (option 82 or 118), which only a relay may add: dropped; a switch inserting option 82 without setting giaddr (DHCP snooping) must stop inserting it",
			"mac", macText(req.HWAddr()), "source", x.src, "interface", x.ifc.name)
		return false
	}
	if x.src.Is4() && s.relays.trusts(x.src.As4(), x.ifc.name, req.GIAddr) {
		return true
	}
	s.metrics.dropUntrustedRelay.Inc()
	s.logDrop(x, "relay "+x.src.String(),
		"relayed DHCP request from an undeclared relay dropped: declare the relay (its source address, giaddr and interface) under dhcp.relays",
		"mac", macText(req.HWAddr()), "source", x.src, "giaddr", netip.AddrFrom4(req.GIAddr), "interface", x.ifc.name)
	return false
}
