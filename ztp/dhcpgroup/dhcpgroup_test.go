package dhcpgroup

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ztpd/ztpd/internal/core"
)

// claims stands in for internal/ha's claims (tested against real etcd
// there): who holds which block, this appliance being "me".
type claims struct {
	mu      sync.Mutex
	holder  map[string]string
	session int64
	fail    error // what Claim answers, when set
	asked   []string
}

func (c *claims) Serves(uint8) bool { return true }
func (c *claims) Claim(_ context.Context, name string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked = append(c.asked, name)
	if c.fail != nil {
		return false, c.fail
	}
	if _, taken := c.holder[name]; taken {
		return false, nil
	}
	c.holder[name] = "me"
	return true, nil
}
func (c *claims) Holds(name string) bool { h, _ := c.Holder(name); return h == "me" }
func (c *claims) Holder(name string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.holder[name]
	return h, ok
}
func (c *claims) Session() int64                 { c.mu.Lock(); defer c.mu.Unlock(); return c.session }
func (c *claims) Fence(_ core.Tx, s int64) error { return nil }

// testPool is a pool of size addresses from 10.99.0.0 where every address
// of a block this appliance holds is free.
type testPool struct {
	c      *claims
	size   uint64
	opened []uint64
}

func (p *testPool) pool() Pool {
	at := func(off uint64) netip.Addr { return netip.AddrFrom4([4]byte{10, 99, byte(off >> 8), byte(off)}) }
	return Pool{
		Subnet: "lab", Size: p.size, At: at,
		FreeInHeld: func(time.Time) int {
			free, bs := 0, BlockSize(p.size)
			for first := uint64(0); first < p.size; first += bs {
				if p.c.Holds(BlockName("lab", at(first))) {
					free += int(min(bs, p.size-first))
				}
			}
			return free
		},
		Opened: func(first uint64) { p.opened = append(p.opened, first) },
	}
}

func newBlocks(c *claims, pools ...*testPool) (*Blocks, prometheus.Counter) {
	var ps []Pool
	for _, p := range pools {
		ps = append(ps, p.pool())
	}
	n := prometheus.NewCounter(prometheus.CounterOpts{Name: "claimed"})
	return NewBlocks(c, &sync.Mutex{}, ps, slog.New(slog.NewTextHandler(io.Discard, nil)), n), n
}

func TestBlockSizeAndName(t *testing.T) {
	for _, c := range []struct {
		size, block uint64
		low         int
	}{{1, 16, 8}, {254, 16, 8}, {4096, 128, 64}, {65534, 1024, 512}, {1<<64 - 1, 1024, 512}} {
		if got := BlockSize(c.size); got != c.block || LowWater(c.size) != c.low {
			t.Errorf("pool of %d: block %d, low water %d; want %d, %d", c.size, got, LowWater(c.size), c.block, c.low)
		}
	}
	// The claims are stored under these names: they must not change.
	if got := BlockName("lab", netip.MustParseAddr("10.99.1.16")); got != "lab/10.99.1.16" {
		t.Errorf("block name %q", got)
	}
	if got := BlockName("v6", netip.MustParseAddr("fd99::400")); got != "v6/fd99::400" {
		t.Errorf("block name %q", got)
	}
}

// A pool claims blocks, passing over those held by others, until the
// blocks it holds have LowWater free addresses, and opens each.
func TestClaimLowClaimsUntilLowWaterPassingOverOthersBlocks(t *testing.T) {
	c := &claims{holder: map[string]string{"lab/10.99.0.0": "other"}, session: 1}
	p := &testPool{c: c, size: 254} // blocks of 16, low water 8
	b, n := newBlocks(c, p)
	b.ClaimLow(context.Background())
	if len(p.opened) != 1 || p.opened[0] != 16 {
		t.Fatalf("opened %v, want the block at 16 only (0 is another's; 16 free addresses pass low water)", p.opened)
	}
	var m dto.Metric
	if err := n.Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		t.Errorf("blocks claimed counted %v (%v), want 1", m.GetCounter().GetValue(), err)
	}
	b.ClaimLow(context.Background())
	if len(p.opened) != 1 {
		t.Errorf("claimed again with enough free addresses: %v", p.opened)
	}
}

// Every block held by someone: nothing more to claim, and ClaimLow ends.
func TestClaimLowEndsWhenEveryBlockIsHeld(t *testing.T) {
	c := &claims{holder: map[string]string{}, session: 1}
	for _, first := range []string{"0", "16", "32"} {
		c.holder["lab/10.99.0."+first] = "other"
	}
	p := &testPool{c: c, size: 40}
	b, _ := newBlocks(c, p)
	b.ClaimLow(context.Background())
	if len(p.opened) != 0 || len(c.asked) != 0 {
		t.Errorf("opened %v, asked %v; every block is another's", p.opened, c.asked)
	}
}

// Without a session, or when the claim fails, nothing is opened.
func TestClaimLowNeedsASessionAndAClaim(t *testing.T) {
	c := &claims{holder: map[string]string{}}
	p := &testPool{c: c, size: 254}
	b, _ := newBlocks(c, p)
	b.ClaimLow(context.Background())
	if len(c.asked) != 0 {
		t.Errorf("claimed %v without a session", c.asked)
	}
	c.session, c.fail = 1, errors.New("store unreachable")
	b.ClaimLow(context.Background())
	if len(c.asked) != 1 || len(p.opened) != 0 {
		t.Errorf("asked %v, opened %v; want one failed claim and nothing opened", c.asked, p.opened)
	}
}

// Need never waits, and Keep claims as soon as it is asked to.
func TestKeepClaimsWhenNeeded(t *testing.T) {
	c := &claims{holder: map[string]string{}, session: 1}
	p := &testPool{c: c, size: 254}
	b, _ := newBlocks(c, p)
	b.Need()
	b.Need()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go b.Keep(ctx, done)
	deadline := time.Now().Add(5 * time.Second)
	for !c.Holds("lab/10.99.0.0") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if !c.Holds("lab/10.99.0.0") {
		t.Fatal("Keep claimed no block")
	}
}

type fence struct{ err error }

func (fence) Serves(uint8) bool                           { return true }
func (fence) Claim(context.Context, string) (bool, error) { return false, nil }
func (fence) Holds(string) bool                           { return false }
func (fence) Holder(string) (string, bool)                { return "", false }
func (fence) Session() int64                              { return 7 }
func (f fence) Fence(core.Tx, int64) error                { return f.err }

func TestFenceForAndSession(t *testing.T) {
	if FenceFor(nil, 1) != nil || Session(nil) != 0 {
		t.Fatal("one box: want no fence and session 0")
	}
	if Session(fence{}) != 7 {
		t.Error("session not the partition's")
	}
	if err := FenceFor(fence{}, 7)(nil); err != nil {
		t.Errorf("live session fenced: %v", err)
	}
	if err := FenceFor(fence{errors.New("expired")}, 7)(nil); !errors.Is(err, ErrFenced) {
		t.Errorf("expired session: %v, want ErrFenced", err)
	}
}

// feed loses its place once, then follows until ctx ends.
type feed struct {
	mu    sync.Mutex
	calls []int64
}

func (f *feed) Load(func(core.Lease)) (int64, error) { return 0, nil }
func (f *feed) Follow(ctx context.Context, rev int64, fn func(core.Lease, bool)) error {
	f.mu.Lock()
	f.calls = append(f.calls, rev)
	first := len(f.calls) == 1
	f.mu.Unlock()
	if first {
		fn(core.Lease{IP: "10.99.0.5"}, false)
		return errors.New("compacted")
	}
	<-ctx.Done()
	return ctx.Err()
}

func TestFollowReloadsWhenTheFeedLosesItsPlace(t *testing.T) {
	f := &feed{}
	var applied []string
	reloaded := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go Follow(ctx, f, 3, func(l core.Lease, _ bool) { applied = append(applied, l.IP) },
		func() (int64, error) { reloaded <- struct{}{}; return 9, nil },
		slog.New(slog.NewTextHandler(io.Discard, nil)), done)
	select {
	case <-reloaded:
	case <-time.After(10 * time.Second):
		t.Fatal("no reload after the feed lost its place")
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		f.mu.Lock()
		n := len(f.calls)
		f.mu.Unlock()
		if n == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if len(f.calls) != 2 || f.calls[0] != 3 || f.calls[1] != 9 {
		t.Errorf("followed from %v, want 3 then the reloaded 9", f.calls)
	}
	if len(applied) != 1 || applied[0] != "10.99.0.5" {
		t.Errorf("applied %v", applied)
	}
}
