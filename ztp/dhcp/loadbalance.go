package dhcp

import (
	"context"
	"net/netip"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/ha"
	"github.com/ztpd/ztpd/ztp/dhcpgroup"
)

// Several appliances serving the same subnets (a group on one etcd store) split the work as
// Kea's HA load balancing does: each client hashes (RFC 3074) to one of 256
// buckets, and only the appliance that holds the bucket answers it. New
// addresses come only from address blocks the appliance has claimed, so two
// appliances never offer one address, and every lease commit reads the
// appliance's session (the fence), so an appliance whose session expired
// can make nothing durable and hence ACKs nothing. Leases committed by the
// others reach this server through the lease feed, so a survivor knows
// every lease a dead appliance gave. What does not depend on the address
// family (the claim loop, the fence, the feed follower) is ztp/dhcpgroup,
// shared with the DHCPv6 server.

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

// blockOf names ip's address block in pool p of sn.
func blockOf(sn *subnet, p *pool, ip uint32) string {
	bs := uint32(dhcpgroup.BlockSize(uint64(p.size())))
	return dhcpgroup.BlockName(sn.name, addrOf(p.start+(ip-p.start)/bs*bs))
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
	return s.part.Holds(blockOf(sn, p, ip))
}

// groupPools are the pools whose blocks this appliance claims.
func (s *Server) groupPools() []dhcpgroup.Pool {
	var pools []dhcpgroup.Pool
	for _, sn := range s.subnets {
		for _, p := range sn.pools {
			pools = append(pools, dhcpgroup.Pool{
				Subnet:     sn.name,
				Size:       uint64(p.size()),
				At:         func(off uint64) netip.Addr { return addrOf(p.start + uint32(off)) },
				FreeInHeld: func(now time.Time) int { return s.freeInHeld(sn, p, now) },
				Opened:     func(first uint64) { s.openBlock(sn, p, p.start+uint32(first)) },
			})
		}
	}
	return pools
}

// freeInHeld counts (up to the low water) the addresses a new client could get
// in the blocks of p this appliance holds.
func (s *Server) freeInHeld(sn *subnet, p *pool, now time.Time) int {
	free, low := 0, dhcpgroup.LowWater(uint64(p.size()))
	bs := uint32(dhcpgroup.BlockSize(uint64(p.size())))
	for first := p.start; first <= p.end && first >= p.start; first += bs {
		if !s.part.Holds(blockOf(sn, p, first)) {
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
		if free >= low {
			return free
		}
	}
	return free
}

// openBlock opens the free addresses of the block of p claimed from first
// to the allocator.
func (s *Server) openBlock(sn *subnet, p *pool, first uint32) {
	bs := uint32(dhcpgroup.BlockSize(uint64(p.size())))
	now := time.Now()
	for ip := first; ip < first+bs && ip <= p.end; ip++ {
		if b := s.byIP[ip]; !sn.fixed(ip) && (b == nil || !b.busy(now)) {
			p.clear(ip)
		}
	}
}

// follow applies the leases the other appliances commit, from rev on.
func (s *Server) follow(ctx context.Context, rev int64, done chan<- struct{}) {
	dhcpgroup.Follow(ctx, s.feed, rev, s.applyRemote,
		func() (int64, error) { return s.loadFeed(time.Now()) }, s.log, done)
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
