package dhcp6

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/ztpd/ztpd/internal/positions"
)

// slot is a planned position behind an IPv6 relay as the request path
// serves it: its reserved address, when the plan gives one.
type slot struct {
	pos *positions.Position
	res *reservation // nil when the plan reserves no address
}

// SetPlan makes pl the cabling plan DHCPv6 requests are matched against
// (nil: no plan). A request relayed by a position's IPv6 relay (its link
// address) with the position's interface-id and remote-id is that
// position's device: it gets the position's reserved address and name.
// A plan whose IPv6 address is in no subnet, or is also a configured
// reservation, is refused whole; the plan in use stays. Positions behind
// IPv4 relays are the DHCPv4 server's.
func (s *Server) SetPlan(pl *positions.Plan) error {
	slots := map[*positions.Position]*slot{}
	byIP := map[*subnet]map[netip.Addr]*reservation{}
	var errs []error
	for _, p := range pl.List() {
		if !p.Relay.Is6() {
			continue
		}
		sl := &slot{pos: p}
		if a := p.Address; a.IsValid() {
			sn := s.subnetFor(a)
			switch {
			case !a.Is6():
				errs = append(errs, fmt.Errorf("position %q (%s): address %s behind an IPv6 relay is not IPv6", p.Name, p.Where(), a))
				continue
			case sn == nil:
				errs = append(errs, fmt.Errorf("position %q (%s): address %s is in no IPv6 subnet under dhcp.subnets", p.Name, p.Where(), a))
				continue
			case sn.resByIP[a] != nil:
				errs = append(errs, fmt.Errorf("position %q (%s): address %s is also reserved under dhcp.subnets %q", p.Name, p.Where(), a, sn.name))
				continue
			}
			sl.res = &reservation{ip: a, hostname: p.Name}
			if byIP[sn] == nil {
				byIP[sn] = map[netip.Addr]*reservation{}
			}
			byIP[sn][a] = sl.res
		}
		slots[p] = sl
	}
	if len(errs) > 0 {
		return fmt.Errorf("dhcp6: cabling plan refused: %w", errors.Join(errs...))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sn := range s.subnets {
		sn.posByIP = byIP[sn]
	}
	if len(slots) == 0 {
		pl, slots = nil, nil
	}
	s.plan, s.slots = pl, slots
	return nil
}

// identifyPosition finds the planned position the request's relay proves:
// the link address stepRelay chose the subnet by, and the interface-id
// and remote-id of the relay closest to the client that adds them. Relay
// information that matches no position is served by the ordinary rules.
// The position's address replaces any reservation: the plan reserves it
// for the slot.
func (s *Server) identifyPosition(x *exchange) {
	x.slot = nil
	if s.plan == nil || !x.link.IsValid() {
		return
	}
	ifaceID, remoteID := relayIDs(x.req.relays)
	p := s.plan.Match6(x.link.As16(), ifaceID, remoteID)
	if p == nil {
		return
	}
	sl := s.slots[p]
	if sl == nil {
		return
	}
	x.slot = sl
	if sl.res == nil {
		return
	}
	if x.sn.posByIP[sl.res.ip] == sl.res {
		x.res, x.resByMAC = sl.res, false
		return
	}
	s.logDrop(x, "position "+p.Name, "planned position's address is outside the subnet its relay selects: serving a pool address",
		"position", p.Name, "address", p.Address, "subnet", x.sn.name)
}

// relayIDs are the interface-id (18) and remote-id (37, without its
// enterprise number) a request came with, each from the relay closest to
// the client that added one: that relay knows the client's port.
func relayIDs(rs []relayHop) (ifaceID, remoteID []byte) {
	for i := len(rs) - 1; i >= 0; i-- {
		if ifaceID == nil && rs[i].interfaceID != nil {
			ifaceID = rs[i].interfaceID
		}
		if remoteID == nil && len(rs[i].remoteID) > 4 {
			remoteID = rs[i].remoteID[4:]
		}
	}
	return ifaceID, remoteID
}

// positionHeld reports whether a is a planned position's address that the
// exchange's client may not have (it is not that position's device).
func (sn *subnet) positionHeld(x *exchange, a netip.Addr) bool {
	r := sn.posByIP[a]
	return r != nil && r != x.res
}
