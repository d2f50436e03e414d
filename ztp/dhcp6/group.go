package dhcp6

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/ha"
	"github.com/ztpd/ztpd/ztp/dhcpgroup"
)

// Several appliances serving the same IPv6 subnets (a group on one etcd
// store) split the work exactly as their DHCPv4 servers do: each client's
// DUID hashes (RFC 3074, ha.Bucket) to one of 256 buckets and only the
// appliance holding the bucket answers it, relayed or not (the DUID is the
// innermost message's). New addresses come only from address blocks the
// appliance has claimed, so two appliances never hand out one address;
// every lease commit reads the appliance's session (the fence), so an
// appliance whose session expired makes nothing durable and hence sends no
// Reply that grants. The others' leases arrive through the lease feed, so
// the appliance that takes a dead one's buckets over renews its clients'
// addresses. The group answers with one server DUID (stored once in the
// shared settings), so a Renew sent to the appliance that died is taken
// by the one holding its bucket now, without waiting for the client's
// Rebind. What does not depend on the address family (the claim loop, the
// fence, the feed follower) is ztp/dhcpgroup, shared with DHCPv4.

// stepPartition leaves clients of other appliances' buckets to them. A
// message without a client identifier goes on to identify, which drops it.
func (s *Server) stepPartition(x *exchange) bool {
	if s.part == nil {
		return true
	}
	duid, ok := x.req.Opt(optClientID)
	if !ok || s.part.Serves(ha.Bucket(duid)) {
		return true
	}
	return s.drop("not_mine")
}

// servesDUID reports whether this appliance answers the client of duid
// (always on one box).
func (s *Server) servesDUID(duid string) bool {
	return s.part == nil || s.part.Serves(ha.Bucket([]byte(duid)))
}

// block is an address block of a pool this appliance claimed: blockSize
// addresses from first (an offset into the pool); next is where the
// search for a free one resumes.
type block struct {
	name        string
	first, next uint64
}

// blockOf names the address block of sn's pool p that a is in.
func blockOf(sn *subnet, p *pool, a netip.Addr) string {
	bs := dhcpgroup.BlockSize(p.size)
	return dhcpgroup.BlockName(sn.name, p.at(p.offset(a)/bs*bs))
}

// mayAllocate reports whether a client that does not hold a may get it:
// always on one box, and with several appliances only from a block this
// one holds (reservations are fixed to their client everywhere).
func (s *Server) mayAllocate(sn *subnet, a netip.Addr) bool {
	if s.part == nil || sn.resByIP[a] != nil {
		return true
	}
	p := sn.poolFor(a)
	if p == nil {
		return false
	}
	return s.part.Holds(blockOf(sn, p, a))
}

// heldBlocks is p's blocks this appliance still holds (a block whose claim
// ended with a session is forgotten).
func (s *Server) heldBlocks(p *pool) []*block {
	keep := p.blocks[:0]
	for _, b := range p.blocks {
		if s.part.Holds(b.name) {
			keep = append(keep, b)
		}
	}
	clear(p.blocks[len(keep):])
	p.blocks = keep
	return keep
}

// allocateHeld is the next free address of a block this appliance holds,
// pool by pool, or nil (and a block claimed soon).
func (s *Server) allocateHeld(x *exchange) *binding {
	for i := range x.sn.pools {
		p := &x.sn.pools[i]
		bs := dhcpgroup.BlockSize(p.size)
		for _, bl := range s.heldBlocks(p) {
			end := min(bl.first+bs, p.size)
			off := bl.next
			for range end - bl.first {
				a := p.at(off)
				if off++; off == end {
					off = bl.first
				}
				if s.free(x, a) {
					bl.next = off
					return s.claim(x, a)
				}
			}
		}
	}
	s.blocks.Need() // the blocks held are used up: claim another now
	return nil
}

// groupPools are the pools whose blocks this appliance claims.
func (s *Server) groupPools() []dhcpgroup.Pool {
	var pools []dhcpgroup.Pool
	for _, sn := range s.subnets {
		for i := range sn.pools {
			p := &sn.pools[i]
			pools = append(pools, dhcpgroup.Pool{
				Subnet:     sn.name,
				Size:       p.size,
				At:         p.at,
				FreeInHeld: func(now time.Time) int { return s.freeInHeld(sn, p, now) },
				Opened: func(first uint64) {
					p.blocks = append(p.blocks, &block{name: dhcpgroup.BlockName(sn.name, p.at(first)), first: first, next: first})
				},
			})
		}
	}
	return pools
}

// freeInHeld counts (up to the low water) the addresses a new client could get
// in the blocks of p this appliance holds.
func (s *Server) freeInHeld(sn *subnet, p *pool, now time.Time) int {
	free, bs, low := 0, dhcpgroup.BlockSize(p.size), dhcpgroup.LowWater(p.size)
	for _, bl := range s.heldBlocks(p) {
		for off := bl.first; off < bl.first+bs && off < p.size; off++ {
			a := p.at(off)
			if sn.resByIP[a] != nil || sn.posByIP[a] != nil {
				continue
			}
			if b := s.byIP[a]; b == nil || !b.busy(now) {
				if free++; free >= low {
					return free
				}
			}
		}
	}
	return free
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

// forget removes b from memory.
func (s *Server) forget(b *binding) {
	s.disown(b)
	if s.byIP[b.ip] == b {
		delete(s.byIP, b.ip)
	}
}

// loadFeed loads every stored lease from the feed (several appliances),
// over what memory holds, and returns the feed's revision.
func (s *Server) loadFeed(now time.Time) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	rev, err := s.feed.Load(func(l core.Lease) {
		a, err := netip.ParseAddr(l.IP)
		if err != nil || !a.Is6() || a.Is4In6() {
			return // the DHCPv4 server's
		}
		if s.keepsLiveDecision(s.byIP[a], &l) {
			return
		}
		if s.adoptStored(l, now) {
			n++
		}
	})
	if err != nil {
		return 0, fmt.Errorf("dhcp6: load leases: %w", err)
	}
	s.log.Info("leases loaded", "leases", n, "revision", rev)
	return rev, nil
}

// follow applies the leases the other appliances commit, from rev on.
func (s *Server) follow(ctx context.Context, rev int64, done chan<- struct{}) {
	dhcpgroup.Follow(ctx, s.feed, rev, s.applyRemote,
		func() (int64, error) { return s.loadFeed(time.Now()) }, s.log, done)
}

// applyRemote brings one stored lease into memory: another appliance's
// commit, or this one's own coming back (which changes nothing). A binding
// with a write of this server pending keeps what this server decided
// under its live session (the write follows); one decided under an ended
// session gives way to the store.
func (s *Server) applyRemote(l core.Lease, deleted bool) {
	a, err := netip.ParseAddr(l.IP)
	if err != nil || !a.Is6() || a.Is4In6() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.byIP[a]
	stored := &l
	if deleted {
		stored = nil
	}
	if s.keepsLiveDecision(cur, stored) {
		return
	}
	s.metrics.remoteLeases.Inc()
	if deleted {
		if cur != nil {
			s.forget(cur)
		}
		return
	}
	if cur != nil && cur.state == l.State && cur.expiry.Equal(l.Expiry) && hexColon([]byte(cur.duid)) == l.ClientID {
		// This server's own commit coming back: nothing changes.
		if l.State == core.LeaseActive {
			cur.durable = l.Expiry
		}
		cur.stored = &l
		return
	}
	s.adoptStored(l, time.Now())
}

// adoptStored binds a stored IPv6 lease of a configured subnet in memory
// (the caller holds s.mu); it reports whether it did.
func (s *Server) adoptStored(l core.Lease, now time.Time) bool {
	a, err := netip.ParseAddr(l.IP)
	if err != nil || !a.Is6() || a.Is4In6() {
		return false
	}
	sn := s.subnetFor(a)
	if sn == nil {
		return false
	}
	s.adopt(sn, a, l, now)
	return true
}
