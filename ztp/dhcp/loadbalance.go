package dhcp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/ha"
)

// Several appliances serving the same subnets (a group on one etcd store) split the work as
// Kea's HA load balancing does: each client hashes (RFC 3074) to one of 256
// buckets, and only the appliance that holds the bucket answers it. New
// addresses come only from address blocks the appliance has claimed, so two
// appliances never offer one address, and every lease commit reads the
// appliance's session (the fence), so an appliance whose session expired
// can make nothing durable and hence ACKs nothing. Leases committed by the
// others reach this server through the lease feed, so a survivor knows
// every lease a dead appliance gave.

// Partition is this appliance's share of the work (internal/ha).
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
	// tx: every lease commit calls it with the session its leases were
	// decided under, so an appliance cut off commits nothing, and nothing
	// decided before it lost a session is committed under the next one.
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

// LBHash is RFC 3074's hash of a client's key: its client identifier when
// it sends one, else its hardware address (what Kea hashes too).
func LBHash(key []byte) uint8 { return ha.Bucket(key) }

// bucketOf is the bucket of a client key ('i'+client id or 'h'+hardware
// address).
func bucketOf(key string) uint8 { return LBHash([]byte(key[1:])) }

// stepPartition leaves clients of other appliances' buckets to them.
func (s *Server) stepPartition(x *exchange) bool {
	if s.part == nil {
		return true
	}
	if s.part.Serves(LBHash(x.key[1:])) {
		return true
	}
	s.metrics.dropNotMine.Inc()
	return false
}

// blockSize is how many addresses of pool p one claim gives an appliance:
// a thirty-second of the pool, 16 to 1,024, so a /24 still splits among
// several appliances and a /16 needs few claims in a boot storm.
func blockSize(p *pool) uint32 { return min(1024, max(16, p.size()/32)) }

// lowWater is how few free addresses in its blocks of p make an appliance
// claim another block of it.
func lowWater(p *pool) int { return int(blockSize(p)) / 2 }

// blockOf names ip's address block in pool p of sn: "<subnet>/<first address>".
func blockOf(sn *subnet, p *pool, ip uint32) (name string, first uint32) {
	bs := blockSize(p)
	first = p.start + (ip-p.start)/bs*bs
	return sn.name + "/" + addrOf(first).String(), first
}

// mayAllocate reports whether a new client may get ip: always on one box,
// and with several appliances only from a block this one holds.
func (s *Server) mayAllocate(sn *subnet, ip uint32) bool {
	if s.part == nil {
		return true
	}
	p := sn.poolOf(ip)
	if p == nil {
		return true // a reservation: fixed to its client everywhere
	}
	name, _ := blockOf(sn, p, ip)
	return s.part.Holds(name)
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
		for _, p := range sn.pools {
			for ctx.Err() == nil {
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

// freeInHeld counts the addresses a new client could get in pool p.
func (s *Server) freeInHeld(sn *subnet, p *pool, now time.Time) int {
	free, bs := 0, blockSize(p)
	for first := p.start; first <= p.end && first >= p.start; first += bs {
		name, _ := blockOf(sn, p, first)
		if !s.part.Holds(name) {
			continue
		}
		for ip := first; ip < first+bs && ip <= p.end; ip++ {
			if sn.fixed(ip) {
				continue
			}
			if b := s.byIP[ip]; b == nil || !b.busy(now) {
				free++
			}
		}
		if free >= lowWater(p) {
			return free
		}
	}
	return free
}

// claimOne claims the first block of p nobody holds and opens its free
// addresses to the allocator. A pool whose every block is held by someone
// has nothing more for this appliance: its DISCOVERs then count as
// exhausted. It reports whether it claimed one.
func (s *Server) claimOne(ctx context.Context, sn *subnet, p *pool) bool {
	bs := blockSize(p)
	for first := p.start; first <= p.end && first >= p.start; first += bs {
		name, _ := blockOf(sn, p, first)
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
		now := time.Now()
		for ip := first; ip < first+bs && ip <= p.end; ip++ {
			if b := s.byIP[ip]; !sn.fixed(ip) && (b == nil || !b.busy(now)) {
				p.clear(ip)
			}
		}
		s.mu.Unlock()
		s.metrics.blocksClaimed.Inc()
		s.log.Info("address block claimed", "block", name, "subnet", sn.name)
		return true
	}
	return false
}

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

// errFenced: this appliance's session is gone, so it may commit no lease.
var errFenced = errors.New("this appliance's session expired: no lease may be committed")

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
		time.Sleep(time.Second)
		if r, err := s.loadFeed(time.Now()); err == nil {
			rev = r
		}
	}
}

func hwOf(l core.Lease) string {
	hw, _ := parseHexColon(l.MAC)
	return string(hw)
}

// applyRemote brings one stored lease into memory: another appliance's
// commit, or this one's own coming back (which changes nothing). A binding
// with a write of this server pending keeps what this server decided
// under its live session (the write follows); one decided under an ended
// session gives way to the store.
func (s *Server) applyRemote(l core.Lease, deleted bool) {
	a, err := netip.ParseAddr(l.IP)
	if err != nil || !a.Is4() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ip := u32Addr(a)
	cur := s.byIP[ip]
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
	if cur != nil && cur.state == l.State && cur.expiry.Equal(l.Expiry) && cur.hw == hwOf(l) {
		// This server's own commit coming back: nothing changes.
		if l.State == core.LeaseActive {
			cur.durable = l.Expiry
		}
		cur.stored = &l
		return
	}
	s.adoptStored(l, time.Now())
}
