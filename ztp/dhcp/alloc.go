package dhcp

import (
	"math/bits"
	"net/netip"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/ztp/dhcpgroup"
)

// binding is the in-memory state of one address. The store holds the
// durable copy (core.Lease, keyed by address); the committer writes a
// binding whenever it is marked dirty. Every field is guarded by Server.mu.
type binding struct {
	ip       uint32
	sn       *subnet
	key      string // owner's client key ("i"+client id or "h"+hardware address); "" = nobody
	hw       string // owner's raw hardware address
	clientID string // owner's raw client identifier, "" when it sent none
	hostname string // option 12 the owner sent
	state    core.LeaseState
	start    time.Time
	expiry   time.Time // lease end; quarantine end when declined
	hold     time.Time // an OFFER holds the address for its client until then
	reserved bool
	dirty    bool
	// durable is the expiry of the active lease as committed to the store;
	// zero while a write of the binding is pending or it is not active.
	durable time.Time
	// pending: the binding carries a decision not yet known to be durable
	// (dirty, or in a commit under way). With several appliances it was
	// decided under session, and is committed only under that session;
	// stored is the lease as the store last showed it (nil: none), what
	// the binding goes back to when that session ends first.
	pending bool
	session int64
	stored  *core.Lease
}

// busy reports whether the address is taken for anyone but its owner.
func (b *binding) busy(now time.Time) bool {
	if b.hold.After(now) {
		return true
	}
	switch b.state {
	case core.LeaseActive, core.LeaseDeclined:
		return b.expiry.After(now)
	}
	return false
}

// unbound reports a binding that only ever carried an offer: the store has
// no record written by this server instance for it.
func (b *binding) unbound() bool { return b.state == "" }

func (s *Server) markDirty(b *binding) {
	s.queueDirty(b)
	if !b.pending {
		// A binding already pending keeps the session of its first
		// undurable decision: what it holds now builds on that one.
		b.pending, b.session = true, dhcpgroup.Session(s.part)
	}
}

// queueDirty queues b's write for the next commit, once.
func (s *Server) queueDirty(b *binding) {
	if !b.dirty {
		b.dirty = true
		s.dirty = append(s.dirty, b)
	}
}

// keepsLiveDecision reports whether cur holds this server's own decision,
// its write pending, made under its live session: it stands over the
// stored lease l (nil: deleted), which becomes what it goes back to should
// that session end first.
func (s *Server) keepsLiveDecision(cur *binding, l *core.Lease) bool {
	if cur == nil || !cur.dirty || cur.session != dhcpgroup.Session(s.part) {
		return false
	}
	cur.stored = l
	return true
}

// revert drops the undurable decisions of b, made under a session that
// has ended: the address goes back to the lease the store holds, or to
// nobody.
func (s *Server) revert(b *binding, now time.Time) {
	s.metrics.staleDecisions.Inc()
	b.pending, b.dirty = false, false
	if b.stored != nil {
		s.adoptStored(*b.stored, now)
		return
	}
	s.forget(b)
}

// lookupClient finds the client's binding in its subnet: by client key, or,
// when that key has none, by hardware address provided one of the two
// identities is the bare MAC. That lets an ONIE installer (MAC only) and the
// SONiC it installs (client id "SONiC##...") on one switch keep one address,
// while two clients sending different client ids stay apart.
func (s *Server) lookupClient(x *exchange) *binding {
	sn := x.sn
	if b := sn.clients[string(x.key)]; b != nil {
		return b
	}
	b := sn.byHW[string(x.hw)]
	if b == nil || b.key == "" {
		return nil
	}
	if x.key[0] == 'h' || b.key[0] == 'h' {
		return b
	}
	return nil
}

// own makes b the binding of the exchange's client: it leaves any previous
// owner's indexes and any previous binding of this client.
func (s *Server) own(b *binding, x *exchange) {
	sn := x.sn
	changed := false
	if b.key != string(x.key) {
		if old := s.lookupClient(x); old != nil && old != b {
			s.disown(old)
			if old.unbound() {
				s.forget(old)
			}
		}
		s.disown(b)
		b.key = string(x.key)
		sn.clients[b.key] = b
		changed = true
	}
	if b.hw != string(x.hw) {
		if sn.byHW[b.hw] == b {
			delete(sn.byHW, b.hw)
		}
		b.hw = string(x.hw)
		changed = true
	}
	sn.byHW[b.hw] = b
	if b.clientID != string(x.clientID) {
		b.clientID = string(x.clientID)
		changed = true
	}
	if changed && !b.unbound() {
		s.markDirty(b) // the stored lease names its owner
	}
}

// disown removes b from its owner's indexes; the binding itself stays.
func (s *Server) disown(b *binding) {
	if b.key == "" {
		return
	}
	if b.sn.clients[b.key] == b {
		delete(b.sn.clients, b.key)
	}
	if b.sn.byHW[b.hw] == b {
		delete(b.sn.byHW, b.hw)
	}
	b.key = ""
}

// forget drops a binding from memory entirely and frees its pool bit.
func (s *Server) forget(b *binding) {
	s.disown(b)
	if s.byIP[b.ip] == b {
		delete(s.byIP, b.ip)
	}
	s.release(b.sn, b.ip)
}

// release clears an address's pool bit unless it is fixed.
func (s *Server) release(sn *subnet, ip uint32) {
	if p := sn.poolOf(ip); p != nil && !sn.fixed(ip) {
		p.clear(ip)
	}
}

func (s *Server) occupy(sn *subnet, ip uint32) {
	if p := sn.poolOf(ip); p != nil {
		p.set(ip)
	}
}

// bindingAt returns the binding for ip, creating it, or taking it over from
// a previous owner that no longer uses it. Callers have checked that it is
// not busy for anyone else.
func (s *Server) bindingAt(sn *subnet, ip uint32, x *exchange) *binding {
	b := s.byIP[ip]
	if b == nil || b.sn != sn {
		b = &binding{ip: ip, sn: sn}
		s.byIP[ip] = b
	} else if b.key != string(x.key) {
		s.disown(b)
		b.state, b.hostname, b.reserved = "", "", false
		b.start, b.expiry, b.hold, b.durable = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	}
	s.own(b, x)
	s.occupy(sn, ip)
	return b
}

// freeFor reports whether ip may be given to the exchange's client.
func (s *Server) freeFor(x *exchange, ip uint32) bool {
	b := s.byIP[ip]
	return b == nil || b.key == string(x.key) || !b.busy(x.now)
}

// servable reports whether ip is an address this subnet may give the
// client: its reservation, or a pool address not fixed for someone else.
func (s *Server) servable(x *exchange, ip uint32) bool {
	if x.res != nil && x.res.ip == ip {
		return true
	}
	return x.sn.poolOf(ip) != nil && !x.sn.fixed(ip)
}

// reservedIP returns the client's reserved address when it can have it now.
func (s *Server) reservedIP(x *exchange) (uint32, bool) {
	if x.res == nil {
		return 0, false
	}
	if s.freeFor(x, x.res.ip) || s.replacesAtPosition(x) {
		return x.res.ip, true
	}
	return 0, false
}

// replacesAtPosition reports whether the client takes over its planned
// position's address from the box that holds it (positions.TakesAddress
// says when).
func (s *Server) replacesAtPosition(x *exchange) bool {
	if x.slot == nil || x.slot.res != x.res {
		return false
	}
	b := s.byIP[x.res.ip]
	if b == nil || b.state == core.LeaseDeclined {
		return false
	}
	sameBox := len(x.hw) > 0 && b.hw == string(x.hw)
	if !x.slot.pos.TakesAddress(sameBox) {
		return false
	}
	if !sameBox {
		s.logDrop(x, "replaced "+x.slot.pos.Name, "position's address taken over by a replacement box (replace: auto): the relay proves it is cabled to the slot",
			"position", x.slot.pos.Name, "address", addrOf(x.res.ip), "mac", macText(x.hw), "previous_mac", macText([]byte(b.hw)))
	}
	return true
}

// allocate picks the address to offer: the reservation, the client's
// current binding, the address it asks for (option 50), then the next free
// pool address. It returns nil when the subnet is exhausted.
func (s *Server) allocate(x *exchange) *binding {
	sn := x.sn
	if ip, ok := s.reservedIP(x); ok {
		b := s.bindingAt(sn, ip, x)
		b.reserved = x.resByMAC
		return b
	}
	if x.res != nil {
		// Any host can repeat a reserved serial or client id: say it once
		// per address every dropLogEvery, not per packet.
		s.logDrop(x, "reserved "+addrOf(x.res.ip).String(), "reserved address is in use by another client; offering a pool address",
			"subnet", sn.name, "reserved", addrOf(x.res.ip), "mac", macText(x.hw))
	}
	if b := s.lookupClient(x); b != nil && b.state != core.LeaseDeclined && s.servable(x, b.ip) {
		s.own(b, x)
		s.occupy(sn, b.ip)
		return b
	}
	if x.hasRequested {
		ip := u32(x.requested)
		if sn.contains(ip) && sn.poolOf(ip) != nil && !sn.fixed(ip) && s.freeFor(x, ip) && s.mayAllocate(sn, ip) {
			return s.bindingAt(sn, ip, x)
		}
	}
	for attempt := 0; attempt < 2; attempt++ {
		for _, p := range sn.pools {
			for {
				ip, ok := p.next()
				if !ok {
					break
				}
				if !s.freeFor(x, ip) || !s.mayAllocate(sn, ip) {
					p.set(ip)
					continue
				}
				return s.bindingAt(sn, ip, x)
			}
		}
		if attempt > 0 || x.now.Sub(sn.lastReclaim) < time.Second {
			break
		}
		s.reclaim(sn, x.now)
	}
	if s.blocks != nil {
		s.blocks.Need() // the blocks held are used up: claim another now
	}
	return nil
}

// reclaim clears the bits of pool addresses whose bindings stopped being
// busy (expired leases, lapsed offers and quarantines). It runs when a pool
// looks full, at most once a second, and from the sweeper.
func (s *Server) reclaim(sn *subnet, now time.Time) {
	sn.lastReclaim = now
	for _, p := range sn.pools {
		for wi, w := range p.bits {
			for w != 0 {
				bit := w & -w
				w &^= bit
				off := uint32(wi)*64 + uint32(bits.TrailingZeros64(bit))
				ip := p.start + off
				if b := s.byIP[ip]; b != nil && !b.busy(now) && s.mayAllocate(sn, ip) {
					p.clear(ip)
				}
			}
		}
	}
}

// claim decides whether the client may have ip (REQUEST in any state) and
// returns its binding, or nil for a NAK. A client with a usable
// reservation gets only that address.
func (s *Server) claim(x *exchange, ip uint32) *binding {
	sn := x.sn
	if !sn.contains(ip) || !s.servable(x, ip) {
		return nil
	}
	if rip, ok := s.reservedIP(x); ok && rip != ip {
		return nil
	}
	if b := s.lookupClient(x); b != nil && b.ip == ip && b.state != core.LeaseDeclined {
		s.own(b, x)
		s.occupy(sn, ip)
		return b
	}
	if !s.freeFor(x, ip) {
		return nil
	}
	if (x.res == nil || x.res.ip != ip) && !s.mayAllocate(sn, ip) {
		// An address this client does not hold, in another appliance's
		// block: that appliance may be offering it right now.
		return nil
	}
	b := s.bindingAt(sn, ip, x)
	b.reserved = x.resByMAC && x.res.ip == ip
	return b
}

// bind turns b into an active lease of lease length; it reports whether the
// client is newly bound (as opposed to renewing).
func (s *Server) bind(x *exchange, b *binding, lease time.Duration) bool {
	renewal := b.state == core.LeaseActive && b.expiry.After(x.now)
	if !renewal {
		b.start = x.now
	}
	b.state = core.LeaseActive
	b.expiry = x.now.Add(lease)
	b.hold = time.Time{}
	if h, ok := x.req.Opt(optHostname); ok && b.hostname != string(h) {
		b.hostname = printable(h)
	}
	s.markDirty(b)
	return !renewal
}

// sweep expires lapsed leases and quarantines, forgets lapsed offers, frees
// their pool addresses and refreshes the pool gauges.
func (s *Server) sweep(now time.Time) {
	used := make(map[*subnet]int, len(s.subnets))
	for _, b := range s.byIP {
		switch {
		case b.unbound() && !b.busy(now):
			s.forget(b)
			continue
		case (b.state == core.LeaseActive || b.state == core.LeaseDeclined) && !b.expiry.After(now):
			if b.state == core.LeaseDeclined {
				s.disown(b)
			}
			b.state = core.LeaseExpired
			// With several appliances, the one answering the client records
			// the expiry; the others would overwrite its renewals.
			if s.part == nil || b.key == "" || s.part.Serves(bucketOf(b.key)) {
				s.markDirty(b)
			}
		}
		if b.busy(now) {
			if b.sn.poolOf(b.ip) != nil {
				used[b.sn]++
			}
		} else {
			s.release(b.sn, b.ip)
			if b.key == "" && !b.dirty {
				delete(s.byIP, b.ip)
			}
		}
	}
	s.forgetDevices()
	for _, sn := range s.subnets {
		size := sn.poolSize()
		s.metrics.poolSize.WithLabelValues(sn.name).Set(float64(size))
		s.metrics.poolUsed.WithLabelValues(sn.name).Set(float64(used[sn]))
		if size > 0 {
			s.metrics.poolUtilization.WithLabelValues(sn.name).Set(float64(used[sn]) / float64(size))
		}
	}
}

// subnetFor returns the configured subnet containing a.
func (s *Server) subnetFor(a [4]byte) *subnet {
	ip := netip.AddrFrom4(a)
	for _, sn := range s.subnets {
		if sn.prefix.Contains(ip) {
			return sn
		}
	}
	return nil
}
