package dhcp6

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/ha"
)

// fakeClaims is the group's claim table (internal/ha keeps it in etcd and
// is tested against real etcd there).
type fakeClaims struct {
	mu     sync.Mutex
	holder map[string]string
}

// fakeMember stands in for one appliance's ha.Coordinator: the buckets it
// answers, its claims, and its session as it sees it (local) and as the
// store holds it (stored, what the real fence reads in the transaction).
type fakeMember struct {
	name   string
	claims *fakeClaims

	mu            sync.Mutex
	serves        func(b uint8) bool
	local, stored int64
}

func (m *fakeMember) Serves(b uint8) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.local != 0 && m.serves(b)
}

func (m *fakeMember) Claim(_ context.Context, name string) (bool, error) {
	m.claims.mu.Lock()
	defer m.claims.mu.Unlock()
	if h, ok := m.claims.holder[name]; ok {
		return h == m.name, nil
	}
	m.claims.holder[name] = m.name
	return true, nil
}

func (m *fakeMember) Holds(name string) bool {
	m.claims.mu.Lock()
	defer m.claims.mu.Unlock()
	return m.claims.holder[name] == m.name && m.Session() != 0
}

func (m *fakeMember) Holder(name string) (string, bool) {
	m.claims.mu.Lock()
	defer m.claims.mu.Unlock()
	h, ok := m.claims.holder[name]
	return h, ok
}

func (m *fakeMember) Session() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.local
}

func (m *fakeMember) Fence(_ core.Tx, session int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if session == 0 || session != m.local || session != m.stored {
		return errors.New("session not alive")
	}
	return nil
}

func (m *fakeMember) set(local, stored int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.local, m.stored = local, stored
}

// die ends m's session and gives up its claims, as etcd does when its
// lease expires.
func (m *fakeMember) die() {
	m.set(0, 0)
	m.claims.mu.Lock()
	defer m.claims.mu.Unlock()
	for n, h := range m.claims.holder {
		if h == m.name {
			delete(m.claims.holder, n)
		}
	}
}

// storeFeed loads the leases of a store; the tests deliver the others'
// commits by hand (sync), as Follow would.
type storeFeed struct{ st func() core.Store }

func (f storeFeed) Load(fn func(core.Lease)) (int64, error) {
	st := f.st()
	if st == nil {
		return 1, nil
	}
	return 1, st.View(func(tx core.Tx) error {
		return tx.Leases().List("", func(l core.Lease) (bool, error) { fn(l); return true, nil })
	})
}

func (storeFeed) Follow(ctx context.Context, _ int64, _ func(core.Lease, bool)) error {
	<-ctx.Done()
	return ctx.Err()
}

// appliance is one DHCPv6 server of a two-appliance group on the
// harness's store.
type appliance struct {
	m    *fakeMember
	s    *Server
	ifc  *iface
	conn *fakeConn
}

// newGroupPair builds appliances a1 (the harness's server) and a2 on one
// store, a1 answering the even buckets and a2 the odd ones. The relayed
// subnet's pool is widened to ::10-::1ff, so it splits into blocks for
// both (17 addresses are one block of 16 and one of a single address).
func newGroupPair(t *testing.T) (*harness, [2]*appliance) {
	t.Helper()
	claims := &fakeClaims{holder: map[string]string{}}
	m1 := &fakeMember{name: "a1", claims: claims, serves: func(b uint8) bool { return b%2 == 0 }, local: 1, stored: 1}
	m2 := &fakeMember{name: "a2", claims: claims, serves: func(b uint8) bool { return b%2 == 1 }, local: 7, stored: 7}
	var h *harness
	feed := storeFeed{func() core.Store {
		if h == nil {
			return nil
		}
		return h.st
	}}
	h = newHarness(t, func(o *Options) {
		o.Partition, o.Feed = m1, feed
		o.Subnets[1].Pools = []Range{{addr("fd99:0:0:5::10"), addr("fd99:0:0:5::1ff")}}
	})
	a1 := &appliance{m: m1, s: h.s, ifc: h.ifc, conn: h.conn}
	opt := h.opt
	opt.Store, opt.Devices, opt.Log = h.st, h.devs, h.s.log
	opt.Partition, opt.Feed = m2, feed
	s2, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	c2 := &fakeConn{}
	ifc2 := &iface{name: "test0", mac: []byte{2, 0, 0, 0, 0, 2}, conn: c2}
	ifc2.direct = s2.directSubnet(ifc2)
	s2.ifaces = []*iface{ifc2}
	if err := s2.loadDUID(time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s2.load(time.Now()); err != nil {
		t.Fatal(err)
	}
	a2 := &appliance{m: m2, s: s2, ifc: ifc2, conn: c2}
	for _, a := range []*appliance{a1, a2} {
		a.s.blocks.ClaimLow(context.Background())
	}
	return h, [2]*appliance{a1, a2}
}

// send hands one packet to a (as a relay broadcasting to every appliance
// would) and returns its reply, after the commit when it waits for one.
func (a *appliance) send(t *testing.T, m dhcpv6.DHCPv6) *dhcpv6.Message {
	t.Helper()
	x := newExchange(a.ifc)
	x.src = netip.AddrPortFrom(addr("fe80::1"), 546)
	out := a.s.handle(x, m.ToBytes())
	if out == nil {
		var last time.Time
		a.s.flush(&snapshot{}, &last)
		got := a.conn.take()
		if len(got) == 0 {
			return nil
		}
		out = got[len(got)-1].pkt
	}
	r, err := dhcpv6.MessageFromBytes(out)
	if err != nil {
		t.Fatalf("reply does not parse: %v", err)
	}
	return r
}

// sync delivers every stored lease to every appliance, as the lease feed
// does (each one's own commits come back unchanged).
func syncFeed(t *testing.T, h *harness, apps [2]*appliance) {
	t.Helper()
	err := h.st.View(func(tx core.Tx) error {
		return tx.Leases().List("", func(l core.Lease) (bool, error) {
			for _, a := range apps {
				a.s.applyRemote(l, false)
			}
			return true, nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// broadcast sends m to both appliances and returns the one reply and who
// sent it; more than one reply fails the test.
func broadcast(t *testing.T, apps [2]*appliance, m dhcpv6.DHCPv6) (*dhcpv6.Message, *appliance) {
	t.Helper()
	var got *dhcpv6.Message
	var from *appliance
	for _, a := range apps {
		if r := a.send(t, m); r != nil {
			if got != nil {
				t.Fatalf("%s and %s both answered %s", from.m.name, a.m.name, m.Type())
			}
			got, from = r, a
		}
	}
	return got, from
}

func bucketOfClient(c *client) uint8 { return ha.Bucket(c.duid.ToBytes()) }

// TestGroupSplitsClientsByDUIDBucket: two appliances on one store, each
// answering half the buckets; every client is answered by the one holding
// the bucket of its DUID, gets an address from that appliance's claimed
// block, and no address goes to two clients. Then a1 dies: a2 answers
// every bucket, renews a1's clients' addresses (known through the feed,
// the Renew naming the group's one server DUID) and gives new clients
// addresses no one holds.
func TestGroupSplitsClientsByDUIDBucket(t *testing.T) {
	h, apps := newGroupPair(t)
	if a, b := apps[0].s.ServerDUID(), apps[1].s.ServerDUID(); string(a) != string(b) {
		t.Fatalf("the appliances answer with server DUIDs %x and %x; the group has one", a, b)
	}
	blockAt := func(a netip.Addr) string {
		sn := apps[0].s.subnets[0]
		return blockOf(sn, sn.poolFor(a), a)
	}
	type held struct {
		c   *client
		ip  string
		by  string
		sid dhcpv6.DUID
	}
	var clients []held
	byIP := map[string]string{}
	answered := map[string]int{}
	for i := 0; i < 24; i++ {
		c := newClient(fmt.Sprintf("02:00:00:00:10:%02x", i))
		want := "a1"
		if bucketOfClient(c)%2 == 1 {
			want = "a2"
		}
		adv, from := broadcast(t, apps, c.msg(dhcpv6.MessageTypeSolicit, c.ia()))
		if adv == nil || adv.MessageType != dhcpv6.MessageTypeAdvertise || from.m.name != want {
			t.Fatalf("client %d (bucket %d): Solicit answered by %v with %v, want an Advertise from %s", i, bucketOfClient(c), from, adv, want)
		}
		ip := addrOf(adv)
		rep, from := broadcast(t, apps, c.msg(dhcpv6.MessageTypeRequest, c.ia(ip), serverID(adv.Options.ServerID())))
		if rep == nil || addrOf(rep) != ip || from.m.name != want {
			t.Fatalf("client %d: Request for %s: %v from %v", i, ip, rep, from)
		}
		if holder, _ := apps[0].m.Holder(blockAt(addr(ip))); holder != want {
			t.Errorf("%s gave %s from block %s, held by %q", want, ip, blockAt(addr(ip)), holder)
		}
		if other, dup := byIP[ip]; dup {
			t.Errorf("%s granted to %s and to client %d", ip, other, i)
		}
		byIP[ip] = fmt.Sprint(i)
		answered[want]++
		clients = append(clients, held{c: c, ip: ip, by: want, sid: rep.Options.ServerID()})
		syncFeed(t, h, apps)
	}
	t.Logf("answers %v", answered)
	if answered["a1"] == 0 || answered["a2"] == 0 {
		t.Fatalf("answers %v: the buckets did not split the clients", answered)
	}
	for _, c := range clients {
		l, ok := h.storedLease(c.ip)
		if !ok || l.State != core.LeaseActive || !strings.EqualFold(l.ClientID, hexColon(c.c.duid.ToBytes())) {
			t.Fatalf("store has %+v for %s, want the active lease of %x", l, c.ip, c.c.duid.ToBytes())
		}

	}

	// a1 dies: its session and claims end; a2 takes every bucket.
	apps[0].m.die()
	apps[1].m.mu.Lock()
	apps[1].m.serves = func(uint8) bool { return true }
	apps[1].m.mu.Unlock()
	for _, c := range clients {
		before, _ := h.storedLease(c.ip)
		rep, from := broadcast(t, apps, c.c.msg(dhcpv6.MessageTypeRenew, c.c.ia(c.ip), serverID(c.sid)))
		if rep == nil || from.m.name != "a2" || addrOf(rep) != c.ip {
			t.Fatalf("Renew of %s (held from %s) after a1 died: %v from %v", c.ip, c.by, rep, from)
		}
		after, _ := h.storedLease(c.ip)
		if !after.Expiry.After(before.Expiry) || !strings.EqualFold(after.ClientID, before.ClientID) {
			t.Errorf("Renew of %s: stored expiry %s -> %s, client %s -> %s", c.ip, before.Expiry, after.Expiry, before.ClientID, after.ClientID)
		}
	}
	// New clients after the take-over: addresses nobody holds, from a2's
	// blocks (it claims a1's former ones once its own run low).
	for i := 0; i < 40; i++ {
		c := newClient(fmt.Sprintf("02:00:00:00:20:%02x", i))
		adv, from := broadcast(t, apps, c.msg(dhcpv6.MessageTypeSolicit, c.ia()))
		if adv == nil || from.m.name != "a2" || addrOf(adv) == "" {
			apps[1].s.blocks.ClaimLow(context.Background())
			adv, from = broadcast(t, apps, c.msg(dhcpv6.MessageTypeSolicit, c.ia()))
		}
		ip := addrOf(adv)
		if ip == "" || from.m.name != "a2" {
			t.Fatalf("new client %d after the take-over: %v from %v", i, adv, from)
		}
		rep, _ := broadcast(t, apps, c.msg(dhcpv6.MessageTypeRequest, c.ia(ip), serverID(adv.Options.ServerID())))
		if addrOf(rep) != ip {
			t.Fatalf("new client %d: Request for %s: %v", i, ip, rep)
		}
		if other, dup := byIP[ip]; dup {
			t.Errorf("%s granted to new client %d while client %s holds it", ip, i, other)
		}
		byIP[ip] = "new" + fmt.Sprint(i)
		apps[1].s.blocks.ClaimLow(context.Background())
	}
	if n := h.leaseCount(); n != len(byIP) {
		t.Errorf("store holds %d leases, %d granted", n, len(byIP))
	}
}

// TestFencedApplianceCommitsNothing: a Reply waits for its commit; when
// the appliance's session expires in the store before the commit (cut
// off), the commit fails and no Reply goes out; when a newer session
// replaced the one the lease was decided under, the decision is dropped
// (never committed under the next session) and the address goes back to
// nobody. An appliance without a session answers nothing at all.
func TestFencedApplianceCommitsNothing(t *testing.T) {
	h, apps := newGroupPair(t)
	a1 := apps[0]
	var c *client
	for i := 0; ; i++ {
		c = newClient(fmt.Sprintf("02:00:00:00:30:%02x", i))
		if bucketOfClient(c)%2 == 0 {
			break
		}
	}
	adv := a1.send(t, c.msg(dhcpv6.MessageTypeSolicit, c.ia()))
	ip := addrOf(adv)
	if ip == "" {
		t.Fatalf("no Advertise: %v", adv)
	}
	req := c.msg(dhcpv6.MessageTypeRequest, c.ia(ip), serverID(adv.Options.ServerID()))

	decide := func() {
		t.Helper()
		x := newExchange(a1.ifc)
		x.src = netip.AddrPortFrom(addr("fe80::1"), 546)
		if out := a1.s.handle(x, req.ToBytes()); out != nil || !x.commit {
			t.Fatalf("the Request was not held for its commit")
		}
	}
	commit := func() int {
		var last time.Time
		a1.s.flush(&snapshot{}, &last)
		return len(a1.conn.take())
	}

	// Cut off: the store's session key is gone, this appliance has not
	// noticed yet.
	decide()
	a1.m.set(1, 0)
	if n := commit(); n != 0 {
		t.Fatalf("%d replies sent while the session had expired in the store", n)
	}
	if _, ok := h.storedLease(ip); ok {
		t.Fatalf("a lease of %s was committed without a live session", ip)
	}
	// It opens a new session after the heal: the old decision is dropped.
	a1.m.set(2, 2)
	if n := commit(); n != 0 {
		t.Fatalf("%d replies sent for a decision of the ended session", n)
	}
	if _, ok := h.storedLease(ip); ok {
		t.Fatalf("the decision of the ended session was committed under the next one")
	}
	a1.s.mu.Lock()
	b := a1.s.byIP[addr(ip)]
	a1.s.mu.Unlock()
	if b != nil && b.state == core.LeaseActive {
		t.Fatalf("%s still bound active in memory after its decision was dropped", ip)
	}
	// Without a session it answers nothing.
	a1.m.die()
	if r := a1.send(t, c.msg(dhcpv6.MessageTypeSolicit, c.ia())); r != nil {
		t.Fatalf("an appliance without a session answered: %v", r)
	}
}

// TestRelayedClientBucketedByInnerDUID: a relayed Solicit, nested twice,
// is answered only by the appliance holding the bucket of the client's
// DUID inside the relay messages (not of anything a relay added), and the
// address comes from that appliance's block of the relayed subnet.
func TestRelayedClientBucketedByInnerDUID(t *testing.T) {
	_, apps := newGroupPair(t)
	for i := 0; i < 8; i++ {
		c := newClient(fmt.Sprintf("02:00:00:00:40:%02x", i))
		want := "a1"
		if bucketOfClient(c)%2 == 1 {
			want = "a2"
		}
		m := relayed(t, c.msg(dhcpv6.MessageTypeSolicit, c.ia()),
			relayHopSpec{link: "fd99:0:0:5::1", peer: "fe80::40:1", opts: []dhcpv6.Option{dhcpv6.OptInterfaceID([]byte("Ethernet4"))}},
			relayHopSpec{link: "::", peer: "fd99:0:0:6::9"})
		answered := ""
		for _, a := range apps {
			x := newExchange(a.ifc)
			x.src = netip.AddrPortFrom(addr("fd99:0:0:5::1"), 547)
			out := a.s.handle(x, m.ToBytes())
			if out == nil {
				continue
			}
			if answered != "" {
				t.Fatalf("relayed client %d answered by %s and %s", i, answered, a.m.name)
			}
			answered = a.m.name
			r, err := dhcpv6.RelayMessageFromBytes(out)
			if err != nil {
				t.Fatal(err)
			}
			inner, err := r.GetInnerMessage()
			if err != nil {
				t.Fatal(err)
			}
			ip := addrOf(inner)
			if !a.s.mayAllocate(a.s.subnets[1], addr(ip)) || !strings.HasPrefix(ip, "fd99:0:0:5::") {
				t.Errorf("%s advertised %s to relayed client %d, not from its block of the relayed subnet", a.m.name, ip, i)
			}
		}
		if answered != want {
			t.Errorf("relayed client %d (bucket %d) answered by %q, want %s", i, bucketOfClient(c), answered, want)
		}
	}
}
