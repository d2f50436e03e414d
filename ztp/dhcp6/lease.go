package dhcp6

import (
	"net/netip"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/ztp/dhcpgroup"
)

// binding is one address and the client it is bound to. A client (DUID)
// has at most one binding per subnet, owned (sn.clients); the binding of
// an address is s.byIP's.
type binding struct {
	ip       netip.Addr
	sn       *subnet
	duid     string // raw
	mac      string // raw 6 bytes, "" when unknown
	hostname string
	state    core.LeaseState
	start    time.Time
	expiry   time.Time
	hold     time.Time // advertised, held until then
	reserved bool
	owned    bool // sn.clients[duid] is this binding
	dirty    bool // changed since the last commit took it
	durable  time.Time
	// pending: the binding carries a decision not yet known to be durable
	// (dirty, or in a commit under way). With several appliances it was
	// decided under session, and is committed only under that session;
	// stored is the lease as the store last showed it (nil: none), what
	// the binding goes back to when that session ends first.
	pending bool
	session int64
	stored  *core.Lease
	// ipText, duidText and macText are ip, duid and mac as the store
	// keeps them, made once (macText again when mac changes, macTextOf
	// saying from which): every commit of the lease writes them.
	ipText, duidText, macText, macTextOf string
}

// busy reports whether the address is taken at now: a live lease, a
// held advertisement or a decline quarantine.
func (b *binding) busy(now time.Time) bool {
	switch {
	case b.hold.After(now):
		return true
	case b.state == core.LeaseActive, b.state == core.LeaseDeclined:
		return b.expiry.After(now)
	}
	return false
}

// lease is the binding as the store keeps it.
// The caller holds Server.mu.
func (b *binding) lease(now time.Time) core.Lease {
	if b.ipText == "" {
		b.ipText, b.duidText = b.ip.String(), hexColon([]byte(b.duid))
	}
	if b.macTextOf != b.mac {
		b.macText, b.macTextOf = "", b.mac
		if b.mac != "" {
			b.macText = hexColon([]byte(b.mac))
		}
	}
	return core.Lease{IP: b.ipText, MAC: b.macText, ClientID: b.duidText, Hostname: b.hostname, Subnet: b.sn.name,
		State: b.state, Start: b.start, Expiry: b.expiry, Reserved: b.reserved, UpdatedAt: now}
}

// lookup is the client's binding in its subnet (not a declined one).
func (s *Server) lookup(x *exchange) *binding {
	b := x.sn.clients[string(x.duid)]
	if b == nil || b.state == core.LeaseDeclined || s.byIP[b.ip] != b {
		return nil
	}
	return b
}

// free reports whether a may go to the exchange's client: not reserved for
// another client and not busy with another's binding.
func (s *Server) free(x *exchange, a netip.Addr) bool {
	if r := x.sn.resByIP[a]; r != nil && r != x.res || x.sn.positionHeld(x, a) {
		return false
	}
	b := s.byIP[a]
	return b == nil || b.duid == string(x.duid) && b.state != core.LeaseDeclined || !b.busy(x.now) || s.replacesAtPosition(x, a, b)
}

// replacesAtPosition reports whether the client takes a, its planned
// position's address, over from b, the box that holds it
// (positions.TakesAddress says when).
func (s *Server) replacesAtPosition(x *exchange, a netip.Addr, b *binding) bool {
	if x.slot == nil || x.slot.res != x.res || x.res.ip != a || b.state == core.LeaseDeclined {
		return false
	}
	sameBox := x.mac != nil && b.mac == string(x.mac)
	if !x.slot.pos.TakesAddress(sameBox) {
		return false
	}
	if !sameBox {
		s.logDrop(x, "replaced "+x.slot.pos.Name, "position's address taken over by a replacement box (replace: auto): the relay proves it is cabled to the slot",
			"position", x.slot.pos.Name, "address", a, "duid", hexColon(x.duid), "previous_duid", hexColon([]byte(b.duid)))
	}
	return true
}

// allocate finds the client's address: its reservation, its binding, a
// free hint inside a pool, else the next free pool address after the
// last one given. Handing addresses out in order (Kea's iterative
// allocator does too) keeps a storm's new leases on a few pages of the
// store's lease index: addresses spread over a /64 dirtied a page per
// lease, and the commit before each Reply wrote them all.
func (s *Server) allocate(x *exchange, hints [][16]byte) *binding {
	if x.res != nil {
		if s.free(x, x.res.ip) {
			return s.claim(x, x.res.ip)
		}
		if x.slot == nil || x.slot.res != x.res {
			return nil
		}
		// A new box at a position whose failed box still holds the
		// address (replace: approve): the ordinary pool meanwhile.
	}
	if b := s.lookup(x); b != nil && s.free(x, b.ip) && x.sn.poolFor(b.ip) != nil {
		return b
	}
	for _, h := range hints {
		a := netip.AddrFrom16(h)
		if x.sn.poolFor(a) != nil && s.free(x, a) && s.mayAllocate(x.sn, a) {
			return s.claim(x, a)
		}
	}
	if s.part != nil {
		return s.allocateHeld(x)
	}
	for i := range x.sn.pools {
		p := &x.sn.pools[i]
		off := p.next
		tries := min(p.size, maxProbe)
		for range tries {
			a := p.at(off)
			if off++; off == p.size {
				off = 0
			}
			if s.free(x, a) {
				p.next = off
				return s.claim(x, a)
			}
		}
		p.next = off
	}
	return nil
}

// maxProbe bounds the addresses one allocation looks at in a pool: pools
// of IPv6 size are sparse, a small pool is scanned whole.
const maxProbe = 1 << 16

// claim makes a the client's binding, if it may have it: the binding it
// had elsewhere in the subnet lets go (released, written behind).
func (s *Server) claim(x *exchange, a netip.Addr) *binding {
	if !s.free(x, a) {
		return nil
	}
	sn, duid := x.sn, string(x.duid)
	b := s.byIP[a]
	if b != nil && (b.duid != duid || b.sn != sn) {
		s.disown(b)
		b = nil
	}
	if b == nil {
		b = &binding{ip: a, sn: sn, duid: duid, state: core.LeaseExpired}
		s.byIP[a] = b
	}
	if cur := sn.clients[duid]; cur != nil && cur != b {
		s.disown(cur)
		if cur.state == core.LeaseActive && cur.expiry.After(x.now) {
			cur.state, cur.expiry = core.LeaseReleased, x.now
			s.markDirty(cur)
		} else if !cur.dirty && s.byIP[cur.ip] == cur {
			delete(s.byIP, cur.ip)
		}
		cur.hold = time.Time{}
	}
	sn.clients[duid] = b
	b.owned = true
	return b
}

// bind makes b an active lease of the exchange's client for the subnet's
// lease time; it reports whether the lease is new (not an extension).
func (s *Server) bind(x *exchange, b *binding) bool {
	fresh := b.state != core.LeaseActive || !b.expiry.After(x.now)
	if fresh {
		b.start = x.now
	}
	b.state, b.expiry, b.hold = core.LeaseActive, x.now.Add(x.sn.leaseTime), time.Time{}
	if x.mac != nil {
		b.mac = string(x.mac)
	}
	if x.res != nil && x.res.hostname != "" {
		b.hostname = x.res.hostname
	}
	// Only a reservation by MAC marks the lease reserved (what approval
	// rules take as network proof); a DUID is the client's word.
	b.reserved = x.resByMAC && x.res.ip == b.ip
	s.markDirty(b)
	return fresh
}

func (s *Server) markDirty(b *binding) {
	if !b.dirty {
		b.dirty = true
		s.dirty = append(s.dirty, b)
	}
	if !b.pending {
		// A binding already pending keeps the session of its first
		// undurable decision: what it holds now builds on that one.
		b.pending, b.session = true, dhcpgroup.Session(s.part)
	}
}

// disown removes b as its client's binding.
func (s *Server) disown(b *binding) {
	if b.owned && b.sn.clients[b.duid] == b {
		delete(b.sn.clients, b.duid)
	}
	b.owned = false
}

// sweep expires leases whose time is up (written behind) and forgets
// bindings that hold nothing any more, and device views no binding names.
func (s *Server) sweep(now time.Time) {
	for ip, b := range s.byIP {
		if b.busy(now) || b.dirty {
			continue
		}
		switch b.state {
		case core.LeaseActive:
			b.state = core.LeaseExpired
			// With several appliances, the one answering the client
			// records the expiry; the others would overwrite its renewals.
			if s.servesDUID(b.duid) {
				s.markDirty(b)
			}
		case core.LeaseDeclined:
			b.state = core.LeaseExpired
			if s.servesDUID(b.duid) {
				s.markDirty(b)
			}
		default:
			// Advertised, released or expired and written: nothing to
			// keep.
			s.disown(b)
			delete(s.byIP, ip)
		}
	}
	if len(s.devs) > len(s.byIP) {
		named := make(map[string]struct{}, len(s.byIP))
		for _, b := range s.byIP {
			named[b.mac] = struct{}{}
		}
		for mac, dv := range s.devs {
			if _, ok := named[mac]; !ok && !dv.queued {
				delete(s.devs, mac)
			}
		}
	}
}
