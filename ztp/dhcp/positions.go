package dhcp

import (
	"errors"
	"fmt"
	"time"

	"github.com/ztpd/ztpd/internal/positions"
)

// slot is a planned position as the request path serves it: the host name
// it hands out and, when the plan reserves one, the address in its subnet.
type slot struct {
	pos  *positions.Position
	host []byte       // option 12: the position's name
	res  *reservation // nil when the plan reserves no address
}

// SetPlan makes pl the cabling plan requests are matched against (nil: no
// plan). A request relayed by a position's relay with its relay agent
// information is that position's device: it gets the position's reserved
// address (not a MAC's) and name. A plan whose address is in no subnet,
// or collides with a configured reservation or a subnet's own addresses,
// is refused whole; the plan in use stays.
func (s *Server) SetPlan(pl *positions.Plan) error {
	slots := make(map[*positions.Position]*slot, pl.Len())
	byIP := make(map[*subnet]map[uint32]*reservation, len(s.subnets))
	var errs []error
	for _, p := range pl.List() {
		if !p.Relay.Is4() {
			continue // an IPv6 relay's position: DHCPv6 serves it
		}
		sl := &slot{pos: p, host: []byte(p.Name)}
		if a := p.Address; a.IsValid() {
			var sn *subnet
			if a.Is4() {
				sn = s.subnetFor(a.As4())
			}
			ip := u32Addr(a)
			switch {
			case !a.Is4():
				errs = append(errs, fmt.Errorf("position %q (%s): address %s is not IPv4", p.Name, p.Where(), a))
				continue
			case sn == nil:
				errs = append(errs, fmt.Errorf("position %q (%s): address %s is in no subnet under dhcp.subnets", p.Name, p.Where(), a))
				continue
			case sn.resByIP[ip] != nil:
				errs = append(errs, fmt.Errorf("position %q (%s): address %s is also reserved under dhcp.subnets %q", p.Name, p.Where(), a, sn.name))
				continue
			case sn.excluded[ip]:
				errs = append(errs, fmt.Errorf("position %q (%s): address %s is subnet %q's network, broadcast or router address", p.Name, p.Where(), a, sn.name))
				continue
			}
			sl.res = &reservation{ip: ip, hostname: p.Name, opts: sn.opts, position: p}
			if byIP[sn] == nil {
				byIP[sn] = map[uint32]*reservation{}
			}
			byIP[sn][ip] = sl.res
		}
		slots[p] = sl
	}
	if len(errs) > 0 {
		return fmt.Errorf("dhcp: cabling plan refused: %w", errors.Join(errs...))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for _, sn := range s.subnets {
		old := sn.posByIP
		sn.posByIP = byIP[sn]
		for ip := range sn.posByIP {
			s.occupy(sn, ip)
		}
		for ip := range old {
			if _, kept := sn.posByIP[ip]; kept {
				continue
			}
			if b := s.byIP[ip]; b == nil || !b.busy(now) {
				s.release(sn, ip)
			}
		}
	}
	if pl.Len() == 0 {
		pl, slots = nil, nil
	}
	s.plan, s.slots = pl, slots
	return nil
}

// identifyPosition finds the planned position the request's relay proves
// (its giaddr, option 82 circuit and remote ids), if any; relay
// information that matches none is served by the ordinary rules. Only
// relay information stepRelay let through is read. The position's address
// replaces any reservation: the plan reserves it for the slot.
func (s *Server) identifyPosition(x *exchange) {
	x.slot = nil
	if s.plan == nil || x.req.GIAddr == ([4]byte{}) {
		return
	}
	circuit, _ := x.req.relaySubOpt(relayCircuitID)
	remote, _ := x.req.relaySubOpt(relayRemoteID)
	p := s.plan.Match4(x.req.GIAddr, circuit, remote)
	if p == nil {
		return
	}
	sl := s.slots[p]
	if sl == nil {
		return
	}
	x.slot = sl
	if sl.res != nil {
		if x.sn.posByIP[sl.res.ip] == sl.res {
			x.res, x.resByMAC = sl.res, false
		} else {
			s.logDrop(x, "position "+p.Name, "planned position's address is outside the subnet its relay selects: serving a pool address",
				"position", p.Name, "address", p.Address, "subnet", x.sn.name)
		}
	}
}
