package dhcp

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/ztp/dhcpgroup"
)

// fakeGroup stands in for internal/ha (tested against real etcd there):
// this appliance answers every bucket and holds every block; local is the
// session as this appliance sees it, stored the one the store holds (what
// the real fence reads in the transaction).
type fakeGroup struct {
	mu            sync.Mutex
	local, stored int64
}

func (g *fakeGroup) set(local, stored int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.local, g.stored = local, stored
}

func (g *fakeGroup) Serves(uint8) bool                           { return g.Session() != 0 }
func (g *fakeGroup) Claim(context.Context, string) (bool, error) { return true, nil }
func (g *fakeGroup) Holds(string) bool                           { return g.Session() != 0 }
func (g *fakeGroup) Holder(string) (string, bool)                { return "a1", true }

func (g *fakeGroup) Session() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.local
}

func (g *fakeGroup) Fence(_ core.Tx, session int64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if session == 0 || session != g.local || session != g.stored {
		return errors.New("session not alive")
	}
	return nil
}

// storeFeed loads the harness's store; the tests apply remote leases by
// hand (applyRemote), as Follow would.
type storeFeed struct{ h *harness }

func (f storeFeed) Load(fn func(core.Lease)) (int64, error) {
	return 1, f.h.st.View(func(tx core.Tx) error {
		return tx.Leases().List("", func(l core.Lease) (bool, error) { fn(l); return true, nil })
	})
}

func (storeFeed) Follow(ctx context.Context, _ int64, _ func(core.Lease, bool)) error {
	<-ctx.Done()
	return ctx.Err()
}

func newGroupHarness(t *testing.T) (*harness, *fakeGroup) {
	t.Helper()
	g := &fakeGroup{local: 1, stored: 1}
	var h *harness
	h = newHarness(t, func(o *Options) {
		o.Partition, o.Feed = g, feedOf(func() *harness { return h })
	})
	return h, g
}

// feedOf defers to the harness once it exists (its first open runs
// before newHarness returns it).
type lazyFeed struct{ h func() *harness }

func feedOf(h func() *harness) dhcpgroup.LeaseFeed { return lazyFeed{h} }

func (f lazyFeed) Load(fn func(core.Lease)) (int64, error) {
	if f.h() == nil {
		return 1, nil // the first open: the store is new and empty
	}
	return storeFeed{f.h()}.Load(fn)
}
func (f lazyFeed) Follow(ctx context.Context, rev int64, fn func(core.Lease, bool)) error {
	return storeFeed{f.h()}.Follow(ctx, rev, fn)
}

// tryCommit runs one committer cycle and reports its error (the harness's
// commit fails the test on one); a failed snapshot is restored as flush
// does.
func (h *harness) tryCommit() ([]pendingAck, error) {
	snap := &snapshot{}
	h.s.mu.Lock()
	h.s.take(snap, h.now)
	h.s.mu.Unlock()
	h.s.handOver(snap)
	if err := h.s.commitSnapshot(snap); err != nil {
		h.s.mu.Lock()
		h.s.restore(snap)
		h.s.mu.Unlock()
		return nil, err
	}
	h.devs.Flush()
	return snap.acks, nil
}

// request decides a REQUEST for offer without committing it.
func (h *harness) decideOnly(req *dhcpv4.DHCPv4) *exchange {
	h.t.Helper()
	x := &exchange{ifc: h.ifc, req: &Packet{}, out: make([]byte, 0, 1500)}
	if err := x.req.Parse(req.ToBytes()); err != nil {
		h.t.Fatal(err)
	}
	x.now = h.now
	if !h.s.decide(x) || !x.commit {
		h.t.Fatalf("REQUEST not decided for a commit")
	}
	return x
}

func (h *harness) bindingOf(ip net.IP) *binding {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	return h.s.byIP[u32Addr4(ip)]
}

func u32Addr4(ip net.IP) uint32 {
	v := ip.To4()
	return uint32(v[0])<<24 | uint32(v[1])<<16 | uint32(v[2])<<8 | uint32(v[3])
}

// TestDecisionOfAnEndedSessionIsNeverCommitted is the HA partition
// defect in miniature: an appliance decides a lease, cannot commit it
// (cut off: the fence fails), and gets a new session after the heal. The
// old decision must not be committed under the new session; the address
// goes back to what the store holds, or to what another appliance gave
// meanwhile.
func TestDecisionOfAnEndedSessionIsNeverCommitted(t *testing.T) {
	h, g := newGroupHarness(t)

	// A new client: ACK decided under session 1, which expires in the
	// store before the commit.
	offer, _ := h.exchange(discover(mac(1)))
	if offer == nil {
		t.Fatal("no OFFER")
	}
	x := h.decideOnly(requestFor(offer))
	g.set(1, 0)
	if _, err := h.tryCommit(); !errors.Is(err, dhcpgroup.ErrFenced) {
		t.Fatalf("commit without a live session: %v, want the fence", err)
	}
	// Meanwhile another appliance gave the address to another client.
	other := core.Lease{IP: offer.YourIPAddr.String(), MAC: mac(2).String(), Subnet: "lab", State: core.LeaseActive,
		Start: h.now, Expiry: h.now.Add(time.Hour)}
	if err := h.st.Update(func(tx core.Tx) error { return tx.Leases().Put(other) }); err != nil {
		t.Fatal(err)
	}
	// The heal: a new session; the feed brings the other appliance's
	// lease before this one's commit loop runs again.
	g.set(2, 2)
	h.s.applyRemote(other, false)
	acks, err := h.tryCommit()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range acks {
		if a.b == x.b {
			t.Fatal("the ACK decided under the ended session was sent")
		}
	}
	if l, _ := h.lease(offer.YourIPAddr.String()); l.MAC != mac(2).String() {
		t.Fatalf("stored lease of %s: %+v, want the other appliance's (%s)", offer.YourIPAddr, l, mac(2))
	}
	if b := h.bindingOf(offer.YourIPAddr); b == nil || b.hw != string(mac(2)) {
		t.Fatalf("memory holds %+v for %s, want the other appliance's lease", b, offer.YourIPAddr)
	}

	// The same, with nothing written meanwhile: the decision is dropped at
	// the first commit under the new session, and the address is free.
	offer3, _ := h.exchange(discover(mac(3)))
	h.decideOnly(requestFor(offer3))
	g.set(2, 0)
	if _, err := h.tryCommit(); !errors.Is(err, dhcpgroup.ErrFenced) {
		t.Fatalf("commit without a live session: %v", err)
	}
	g.set(3, 3)
	if _, err := h.tryCommit(); err != nil {
		t.Fatal(err)
	}
	if l, ok := h.lease(offer3.YourIPAddr.String()); ok {
		t.Fatalf("a lease decided under session 2 was committed under session 3: %+v", l)
	}
	if b := h.bindingOf(offer3.YourIPAddr); b != nil && b.busy(h.now) {
		t.Fatalf("%s still bound in memory after its decision was dropped: %+v", offer3.YourIPAddr, b)
	}
}

// TestRenewalOfAnEndedSessionRevertsToTheStoredLease: a renewal decided
// under a session that ended goes back to the lease as stored (its old
// expiry), and the commit under the next session writes nothing for it.
func TestRenewalOfAnEndedSessionRevertsToTheStoredLease(t *testing.T) {
	h, g := newGroupHarness(t)
	ack := h.dora(mac(7))
	ip := ack.YourIPAddr
	before, ok := h.lease(ip.String())
	if !ok {
		t.Fatal("lease not committed under the live session")
	}
	h.now = h.now.Add(30 * time.Minute)
	r, _ := dhcpv4.New(dhcpv4.WithHwAddr(mac(7)), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithClientIP(ip))
	h.decideOnly(r)
	// The session is lost before the renewal is committed: the next
	// commit drops it at once, whether or not a new session exists yet.
	g.set(0, 0)
	if acks, err := h.tryCommit(); err != nil || len(acks) != 0 {
		t.Fatalf("commit without a session: %v, %d ACKs", err, len(acks))
	}
	after, _ := h.lease(ip.String())
	if !after.Expiry.Equal(before.Expiry) {
		t.Fatalf("stored expiry %s, want the one committed under the first session (%s)", after.Expiry, before.Expiry)
	}
	b := h.bindingOf(ip)
	if b == nil || b.hw != string(mac(7)) || !b.expiry.Equal(before.Expiry) || b.dirty || b.pending {
		t.Fatalf("memory %+v, want the stored lease of %s back", b, mac(7))
	}
	// The client renews again under a new session: committed normally.
	g.set(5, 5)
	h.now = h.now.Add(time.Minute)
	if ack, _ := h.exchange(r); ack == nil || ack.MessageType() != dhcpv4.MessageTypeAck {
		t.Fatalf("renewal under the new session: %v", ack)
	}
	if l, _ := h.lease(ip.String()); !l.Expiry.After(before.Expiry) {
		t.Fatalf("renewal under the new session not stored: %+v", l)
	}
}
