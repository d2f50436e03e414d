package dhcp6

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/ha"
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
// Rebind.

// Partition is this appliance's share of the work (internal/ha's
// Coordinator).
type Partition interface {
	// Serves reports whether this appliance answers clients of bucket b.
	Serves(b uint8) bool
	// Claim takes an address block for this appliance, if nobody holds
	// it; Holds and Holder report claims as this appliance sees them.
	Claim(ctx context.Context, name string) (bool, error)
	Holds(name string) bool
	Holder(name string) (string, bool)
	// Session is this appliance's live session, 0 when it has none.
	Session() int64
	// Fence fails unless session is still this appliance's live session in
	// tx; every lease commit calls it with the session its leases were
	// decided under.
	Fence(tx core.Tx, session int64) error
}

// LeaseFeed is the stored leases as a stream (the etcd store): every
// lease any appliance commits, in commit order.
type LeaseFeed interface {
	// Load visits every stored lease as of one revision, and returns it.
	Load(fn func(core.Lease)) (rev int64, err error)
	// Follow calls fn for every lease written or deleted after rev, in
	// order, until ctx ends (deleted leases carry only their IP).
	Follow(ctx context.Context, rev int64, fn func(l core.Lease, deleted bool)) error
}

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

// blockSize is how many addresses of p one claim gives an appliance, as
// for DHCPv4: a thirty-second of the pool, 16 to 1,024 (every IPv6 pool of
// a /64 gets 1,024: a boot storm needs few claims, and leases stay close
// together in the store).
func blockSize(p *pool) uint64 { return min(1024, max(16, p.size/32)) }

// lowWater is how few free addresses in its blocks of p make an appliance
// claim another block of it.
func lowWater(p *pool) int { return int(blockSize(p)) / 2 }

// blockName names the block of sn's pool p starting at offset first.
func blockName(sn *subnet, p *pool, first uint64) string {
	return sn.name + "/" + p.at(first).String()
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
	bs := blockSize(p)
	return s.part.Holds(blockName(sn, p, p.offset(a)/bs*bs))
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
		bs := blockSize(p)
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
	select { // the blocks held are used up: claim another now
	case s.needBlock <- struct{}{}:
	default:
	}
	return nil
}

// keepBlocks claims address blocks while the free addresses in the blocks
// this appliance holds run low, pool by pool, until ctx ends.
func (s *Server) keepBlocks(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		s.claimBlocks(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.needBlock:
		}
	}
}

// claimBlocks claims blocks for every pool whose held blocks have fewer
// than lowWater free addresses, until they have that many or nothing is
// left to claim.
func (s *Server) claimBlocks(ctx context.Context) {
	for _, sn := range s.subnets {
		for i := range sn.pools {
			p := &sn.pools[i]
			for ctx.Err() == nil && s.part.Session() != 0 {
				s.mu.Lock()
				low := s.freeInHeld(sn, p, time.Now()) < lowWater(p)
				s.mu.Unlock()
				if !low || !s.claimOne(ctx, sn, p) {
					break
				}
			}
		}
	}
}

// freeInHeld counts (up to lowWater) the addresses a new client could get
// in the blocks of p this appliance holds.
func (s *Server) freeInHeld(sn *subnet, p *pool, now time.Time) int {
	free, bs := 0, blockSize(p)
	for _, bl := range s.heldBlocks(p) {
		for off := bl.first; off < bl.first+bs && off < p.size; off++ {
			a := p.at(off)
			if sn.resByIP[a] != nil || sn.posByIP[a] != nil {
				continue
			}
			if b := s.byIP[a]; b == nil || !b.busy(now) {
				if free++; free >= lowWater(p) {
					return free
				}
			}
		}
	}
	return free
}

// claimOne claims the first block of p nobody holds. Blocks are looked at
// from the pool's start, so only the blocks already held are passed over
// (an IPv6 pool has far more blocks than the group will ever claim). It
// reports whether it claimed one.
func (s *Server) claimOne(ctx context.Context, sn *subnet, p *pool) bool {
	bs := blockSize(p)
	for first := uint64(0); first < p.size && ctx.Err() == nil; first += bs {
		name := blockName(sn, p, first)
		if _, held := s.part.Holder(name); held {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ok, err := s.part.Claim(cctx, name)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("could not claim an address block", "block", name, "err", err)
			}
			return false
		}
		if !ok {
			continue
		}
		s.mu.Lock()
		p.blocks = append(p.blocks, &block{name: name, first: first, next: first})
		s.mu.Unlock()
		s.metrics.blocksClaimed.Inc()
		s.log.Info("address block claimed", "block", name, "subnet", sn.name, "addresses", min(bs, p.size-first))
		return true
	}
	return false
}

// errFenced: this appliance's session is gone, so it may commit no lease.
var errFenced = errors.New("this appliance's session expired: no lease may be committed")

// fenceFor is what a lease commit of decisions made under session checks
// first when appliances share the store (nil on one box).
func (s *Server) fenceFor(session int64) func(core.Tx) error {
	if s.part == nil {
		return nil
	}
	return func(tx core.Tx) error {
		if err := s.part.Fence(tx, session); err != nil {
			return fmt.Errorf("%w: %v", errFenced, err)
		}
		return nil
	}
}

// session is the session decisions made now belong to (0 on one box).
func (s *Server) session() int64 {
	if s.part == nil {
		return 0
	}
	return s.part.Session()
}

// keepsLiveDecision reports whether cur holds this server's own decision,
// its write pending, made under its live session: it stands over the
// stored lease l (nil: deleted), which becomes what it goes back to should
// that session end first.
func (s *Server) keepsLiveDecision(cur *binding, l *core.Lease) bool {
	if cur == nil || !cur.dirty || cur.session != s.session() {
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
	defer close(done)
	for ctx.Err() == nil {
		err := s.feed.Follow(ctx, rev, s.applyRemote)
		if ctx.Err() != nil {
			return
		}
		// The feed lost its place (compaction): load everything again.
		s.log.Warn("lease feed interrupted; loading the leases again", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		if r, err := s.loadFeed(time.Now()); err == nil {
			rev = r
		}
	}
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
