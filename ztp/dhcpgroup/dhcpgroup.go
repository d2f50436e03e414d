// Package dhcpgroup is what the DHCPv4 (ztp/dhcp) and DHCPv6 (ztp/dhcp6)
// servers share to serve as one of several appliances on one etcd store
// (internal/ha): the appliance's share of the work (Partition), the
// address blocks it claims so that two appliances never hand out one
// address (Blocks), the fence every lease commit passes, and the feed of
// the leases the others commit. The servers keep what depends on the
// address family: how a client hashes to a bucket, how a pool's addresses
// are counted free and opened to the allocator.
package dhcpgroup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/internal/core"
)

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

// BlockSize is how many addresses of a pool of size addresses one claim
// gives an appliance: a thirty-second of the pool, 16 to 1,024, so a /24
// still splits among several appliances, and a /16 (or an IPv6 pool) needs
// few claims in a boot storm and keeps its leases close together in the
// store.
func BlockSize(size uint64) uint64 { return min(1024, max(16, size/32)) }

// LowWater is how few free addresses in its blocks of a pool of size
// addresses make an appliance claim another block of it.
func LowWater(size uint64) int { return int(BlockSize(size)) / 2 }

// BlockName names the address block of subnet starting at first: the name
// its claim is stored under, "<subnet>/<first address>".
func BlockName(subnet string, first netip.Addr) string {
	return subnet + "/" + first.String()
}

// Pool is one pool of a server as Blocks sees it; offsets count addresses
// from the pool's first.
type Pool struct {
	Subnet string // the name of the pool's subnet
	Size   uint64 // how many addresses the pool has
	// At is the address at offset off.
	At func(off uint64) netip.Addr
	// FreeInHeld counts the addresses a new client could get in the blocks
	// of the pool this appliance holds; it may stop counting at LowWater.
	FreeInHeld func(now time.Time) int
	// Opened opens the block claimed at offset first to the allocator.
	Opened func(first uint64)
}

// Blocks keeps an appliance's address blocks: it claims blocks of a pool
// while the free addresses in those the appliance holds run low.
type Blocks struct {
	part    Partition
	mu      sync.Locker // the server's lock, held around FreeInHeld and Opened
	pools   []Pool
	log     *slog.Logger
	claimed prometheus.Counter
	need    chan struct{}
}

// NewBlocks keeps the blocks of pools for part; mu is the server's lock
// (FreeInHeld and Opened run under it), claimed counts the blocks claimed.
func NewBlocks(part Partition, mu sync.Locker, pools []Pool, log *slog.Logger, claimed prometheus.Counter) *Blocks {
	return &Blocks{part: part, mu: mu, pools: pools, log: log, claimed: claimed, need: make(chan struct{}, 1)}
}

// Need asks for a block to be claimed now: the allocator found the blocks
// held used up. It never waits.
func (b *Blocks) Need() {
	select {
	case b.need <- struct{}{}:
	default:
	}
}

// Keep claims blocks every second and whenever one is needed, until ctx
// ends; then it closes done.
func (b *Blocks) Keep(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		b.ClaimLow(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-b.need:
		}
	}
}

// ClaimLow claims blocks for every pool whose held blocks have fewer than
// LowWater free addresses, until they have that many or nothing is left
// to claim. Without a session there is nothing to claim with.
func (b *Blocks) ClaimLow(ctx context.Context) {
	for i := range b.pools {
		p := &b.pools[i]
		for ctx.Err() == nil && b.part.Session() != 0 {
			b.mu.Lock()
			low := p.FreeInHeld(time.Now()) < LowWater(p.Size)
			b.mu.Unlock()
			if !low || !b.claimOne(ctx, p) {
				break
			}
		}
	}
}

// claimOne claims the first block of p nobody holds and opens it to the
// allocator. Blocks are looked at from the pool's start, so only the
// blocks already held are passed over (an IPv6 pool has far more blocks
// than the group will ever claim). A pool whose every block is held by
// someone has nothing more for this appliance: its new clients then find
// it exhausted. It reports whether it claimed one.
func (b *Blocks) claimOne(ctx context.Context, p *Pool) bool {
	bs := BlockSize(p.Size)
	for first := uint64(0); first < p.Size && ctx.Err() == nil; first += bs {
		name := BlockName(p.Subnet, p.At(first))
		if _, held := b.part.Holder(name); held {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ok, err := b.part.Claim(cctx, name)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				b.log.Warn("could not claim an address block", "block", name, "err", err)
			}
			return false
		}
		if !ok {
			continue
		}
		b.mu.Lock()
		p.Opened(first)
		b.mu.Unlock()
		b.claimed.Inc()
		b.log.Info("address block claimed", "block", name, "subnet", p.Subnet, "addresses", min(bs, p.Size-first))
		return true
	}
	return false
}

// ErrFenced: this appliance's session is gone, so it may commit no lease.
var ErrFenced = errors.New("this appliance's session expired: no lease may be committed")

// Session is the session decisions made now belong to (0 on one box: part
// nil).
func Session(part Partition) int64 {
	if part == nil {
		return 0
	}
	return part.Session()
}

// FenceFor is what a lease commit of decisions made under session checks
// first when appliances share the store (nil on one box: part nil).
func FenceFor(part Partition, session int64) func(core.Tx) error {
	if part == nil {
		return nil
	}
	return func(tx core.Tx) error {
		if err := part.Fence(tx, session); err != nil {
			return fmt.Errorf("%w: %v", ErrFenced, err)
		}
		return nil
	}
}

// Follow applies every lease the feed reports after rev with apply, until
// ctx ends; then it closes done. When the feed loses its place (the store
// compacted) it waits a second and starts again from what reload returns:
// every stored lease loaded anew, and the feed's revision.
func Follow(ctx context.Context, feed LeaseFeed, rev int64, apply func(l core.Lease, deleted bool),
	reload func() (int64, error), log *slog.Logger, done chan<- struct{}) {
	defer close(done)
	for ctx.Err() == nil {
		err := feed.Follow(ctx, rev, apply)
		if ctx.Err() != nil {
			return
		}
		log.Warn("lease feed interrupted; loading the leases again", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		if r, err := reload(); err == nil {
			rev = r
		}
	}
}
