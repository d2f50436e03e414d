package ha_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/ha"
	"github.com/ztpd/ztpd/internal/store/etcdstore"
	"github.com/ztpd/ztpd/testenv/freeport"
)

// group is three embedded etcd members in this process and a coordinator
// on each.
type group struct {
	names   []string
	members []*etcdstore.Member
	coords  []*ha.Coordinator
}

func startGroup(t *testing.T, ttl time.Duration) *group {
	t.Helper()
	g := &group{names: []string{"a1", "a2", "a3"}}
	peers := map[string]string{}
	for _, n := range g.names {
		peers[n] = freeport.URL(t, "http")
	}
	dir := t.TempDir()
	g.members = make([]*etcdstore.Member, 3)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, n := range g.names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			g.members[i], errs[i] = etcdstore.StartMember(ctx, etcdstore.MemberConfig{Name: n, Dir: filepath.Join(dir, n),
				Peers: peers, ClientURL: freeport.URL(t, "http"), Token: "t-" + t.Name()})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %s: %v", g.names[i], err)
		}
	}
	for _, m := range g.members {
		t.Cleanup(func() { m.Close() })
	}
	for i, n := range g.names {
		c, err := ha.Start(context.Background(), ha.Config{Client: g.members[i].Client, Prefix: "/ztpd/", Name: n,
			Members: g.names, TTL: ttl, HandBack: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		g.coords = append(g.coords, c)
		t.Cleanup(func() { c.Close() })
	}
	return g
}

// owners maps each bucket to the coordinators that answer it now.
func (g *group) owners(alive []bool) [ha.Buckets][]string {
	var out [ha.Buckets][]string
	for i, c := range g.coords {
		if !alive[i] {
			continue
		}
		for b := 0; b < ha.Buckets; b++ {
			if c.Serves(uint8(b)) {
				out[b] = append(out[b], g.names[i])
			}
		}
	}
	return out
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	var err error
	for time.Since(start) < d {
		if err = cond(); err == nil {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s: %v", what, d, err)
	return 0
}

// everyBucketOnce checks that every bucket has exactly one answering
// appliance among the alive ones, and that each answers want buckets or
// more.
func (g *group) everyBucketOnce(alive []bool, atLeast int) error {
	count := map[string]int{}
	for b, os := range g.owners(alive) {
		if len(os) != 1 {
			return fmt.Errorf("bucket %d answered by %v", b, os)
		}
		count[os[0]]++
	}
	for i, n := range g.names {
		if alive[i] && count[n] < atLeast {
			return fmt.Errorf("%s answers %d buckets", n, count[n])
		}
	}
	return nil
}

func leaders(g *group, alive []bool) []string {
	var out []string
	for i, c := range g.coords {
		if alive[i] && c.Leader() {
			out = append(out, g.names[i])
		}
	}
	return out
}

func TestBucketsTakenOverWhenAnApplianceDies(t *testing.T) {
	ttl := 2 * time.Second
	g := startGroup(t, ttl)
	all := []bool{true, true, true}
	waitFor(t, 10*time.Second, "every bucket answered once", func() error { return g.everyBucketOnce(all, 85) })
	waitFor(t, 5*time.Second, "one leader", func() error {
		if l := leaders(g, all); len(l) != 1 {
			return fmt.Errorf("leaders %v", l)
		}
		return nil
	})
	for i, c := range g.coords {
		if st := c.Status(); len(st.Live) != 3 || !st.Alive {
			t.Fatalf("%s status %+v", g.names[i], st)
		}
	}
	// Kill the leader's etcd member: its coordinator loses its session.
	dead := -1
	for i, c := range g.coords {
		if c.Leader() {
			dead = i
		}
	}
	deadBuckets := map[int]bool{}
	for _, b := range g.coords[dead].Owned() {
		deadBuckets[b] = true
	}
	// As kill -9 of the appliance: the coordinator stops without giving
	// anything up, and its etcd member dies with it. (A stopped member
	// alone is not enough: etcd still forwards its lease renewals.)
	killed := time.Now()
	g.coords[dead].Kill()
	g.members[dead].Close()

	// Until the survivors take over, no bucket is ever answered twice
	// (the dead one stops at its deadline, before etcd expires it).
	survivors := []bool{true, true, true}
	stopAt := time.Now().Add(ttl + 6*time.Second)
	var takeover time.Duration
	for time.Now().Before(stopAt) {
		for b, os := range g.owners(survivors) {
			if len(os) > 1 {
				t.Fatalf("bucket %d answered by %v at %s after the kill", b, os, time.Since(killed))
			}
		}
		if takeover == 0 {
			survivors[dead] = false
			if err := g.everyBucketOnce(survivors, 100); err == nil {
				takeover = time.Since(killed)
			} else if time.Since(killed) > ttl+5*time.Second {
				t.Logf("at %s: %v", time.Since(killed), err)
			}
			if false {
				takeover = time.Since(killed)
			}
			survivors[dead] = true
		}
		if takeover > 0 && !g.coords[dead].Alive() {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if takeover == 0 {
		for i, c := range g.coords {
			t.Logf("%s: %+v", g.names[i], c.Status())
		}
		t.Fatalf("survivors did not take over every bucket within %s", ttl+6*time.Second)
	}
	if g.coords[dead].Alive() || len(g.coords[dead].Owned()) != 0 {
		t.Fatalf("the dead appliance still answers %d buckets", len(g.coords[dead].Owned()))
	}
	t.Logf("take-over of %d buckets %s after the kill (session TTL %s)", len(deadBuckets), takeover, ttl)
	if takeover > ttl+3*time.Second {
		t.Fatalf("take-over took %s, bound is TTL+3s", takeover)
	}
	survivors[dead] = false
	waitFor(t, 5*time.Second, "a new leader among the survivors", func() error {
		if l := leaders(g, survivors); len(l) != 1 {
			return fmt.Errorf("leaders %v", l)
		}
		return nil
	})
}

func TestGracefulCloseHandsOverAtOnce(t *testing.T) {
	g := startGroup(t, 5*time.Second)
	all := []bool{true, true, true}
	waitFor(t, 10*time.Second, "every bucket answered once", func() error { return g.everyBucketOnce(all, 85) })
	start := time.Now()
	if err := g.coords[1].Close(); err != nil {
		t.Fatal(err)
	}
	survivors := []bool{true, false, true}
	d := waitFor(t, 4*time.Second, "survivors answer every bucket", func() error { return g.everyBucketOnce(survivors, 100) })
	t.Logf("hand-over after a graceful stop: %s (waited %s; TTL 5s)", time.Since(start), d)
}

func TestClaimsAreExclusiveAndFollowTheSession(t *testing.T) {
	g := startGroup(t, 2*time.Second)
	ctx := context.Background()
	var wg sync.WaitGroup
	won := make([]bool, 3)
	for i, c := range g.coords {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := c.Claim(ctx, "net1/10.99.1.0")
			if err != nil {
				t.Error(err)
			}
			won[i] = ok
		}()
	}
	wg.Wait()
	winner := -1
	for i, w := range won {
		if w {
			if winner >= 0 {
				t.Fatalf("two winners: %v", won)
			}
			winner = i
		}
	}
	if winner < 0 || !g.coords[winner].Holds("net1/10.99.1.0") {
		t.Fatalf("no winner: %v", won)
	}
	other := (winner + 1) % 3
	if g.coords[other].Holds("net1/10.99.1.0") {
		t.Fatal("loser holds the claim")
	}
	waitFor(t, 2*time.Second, "the others see the holder", func() error {
		if h, ok := g.coords[other].Holder("net1/10.99.1.0"); !ok || h != g.names[winner] {
			return fmt.Errorf("holder %q %v", h, ok)
		}
		return nil
	})
	g.coords[winner].Kill()
	g.members[winner].Close()
	waitFor(t, 8*time.Second, "the claim is free again and taken", func() error {
		ok, err := g.coords[other].Claim(ctx, "net1/10.99.1.0")
		if err != nil || !ok {
			return fmt.Errorf("claim: %v %v", ok, err)
		}
		return nil
	})
	if g.coords[winner].Holds("net1/10.99.1.0") {
		t.Fatal("the dead appliance still holds the claim")
	}
}

func TestOwnerIsDeterministicAndSpreads(t *testing.T) {
	members := []string{"a1", "a2", "a3"}
	live := map[string]bool{"a1": true, "a3": true}
	count := map[string]int{}
	for b := 0; b < ha.Buckets; b++ {
		o := ha.Owner(members, live, b)
		if o != ha.Owner(members, map[string]bool{"a3": true, "a1": true}, b) {
			t.Fatal("owner depends on map order")
		}
		if ha.Primary(members, b) != "a2" && o != ha.Primary(members, b) {
			t.Fatalf("bucket %d moved from its live primary", b)
		}
		count[o]++
	}
	if count["a2"] != 0 || count["a1"] < 100 || count["a3"] < 100 {
		t.Fatalf("spread %v", count)
	}
	if ha.Owner(members, map[string]bool{}, 3) != "" {
		t.Fatal("owner with nobody alive")
	}
}

// TestFenceHoldsOnlyForTheSessionItNames: a commit fenced with a session
// fails once that session is gone from the store (before this appliance
// notices) and after a newer one replaced it, also in a transaction that
// runs again; the newer session's own fence passes.
func TestFenceHoldsOnlyForTheSessionItNames(t *testing.T) {
	g := startGroup(t, 2*time.Second)
	c := g.coords[0]
	st, err := etcdstore.Open(etcdstore.Options{Client: g.members[0].Client, Prefix: "/ztpd/", Name: "a1",
		TempDir: t.TempDir(), LocalMember: true, Init: etcdstore.InitNone})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fenced := func(session int64) error {
		return st.Update(func(tx core.Tx) error { return c.Fence(tx, session) })
	}
	first := c.Session()
	if first == 0 {
		t.Fatal("no session after Start")
	}
	if err := fenced(first); err != nil {
		t.Fatalf("fence with the live session: %v", err)
	}
	if err := fenced(0); err == nil {
		t.Fatal("fence with no session passed")
	}
	if _, err := g.members[0].Client.Revoke(context.Background(), clientv3.LeaseID(first)); err != nil {
		t.Fatal(err)
	}
	if err := fenced(first); err == nil || !strings.Contains(err.Error(), "expired in the store") {
		t.Fatalf("fence with a session revoked in the store: %v", err)
	}
	var second int64
	waitFor(t, 10*time.Second, "a new session", func() error {
		if second = c.Session(); second == 0 || second == first {
			return fmt.Errorf("session %x", second)
		}
		return nil
	})
	if err := fenced(first); err == nil || !strings.Contains(err.Error(), "replaced") {
		t.Fatalf("fence with the old session under the new one: %v", err)
	}
	if err := fenced(second); err != nil {
		t.Fatalf("fence with the new session: %v", err)
	}
}

// TestStatusSaysWhichBucketsAndSingletons: /healthz's group part lists the
// buckets each appliance answers (together every bucket once) and the
// singletons running on it (on the leader only, and on the next leader
// once it closes).
func TestStatusSaysWhichBucketsAndSingletons(t *testing.T) {
	g := startGroup(t, 2*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, c := range g.coords {
		go c.RunSingleton(ctx, "sweeper", func(ctx context.Context) error { <-ctx.Done(); return nil })
	}
	runner := func(alive []bool) (int, error) {
		at, seen := -1, map[int]bool{}
		for i, c := range g.coords {
			if !alive[i] {
				continue
			}
			st := c.Status()
			if len(st.Owned) != st.Buckets {
				return -1, fmt.Errorf("%s: %d owned buckets listed, %d counted", g.names[i], len(st.Owned), st.Buckets)
			}
			for _, b := range st.Owned {
				if seen[b] {
					return -1, fmt.Errorf("bucket %d listed twice", b)
				}
				seen[b] = true
			}
			switch {
			case len(st.Singletons) == 1 && st.Singletons[0] == "sweeper" && st.IsLeader:
				if at >= 0 {
					return -1, fmt.Errorf("the singleton runs on %s and %s", g.names[at], g.names[i])
				}
				at = i
			case len(st.Singletons) != 0:
				return -1, fmt.Errorf("%s: singletons %v (leader %v)", g.names[i], st.Singletons, st.IsLeader)
			}
		}
		if len(seen) != ha.Buckets {
			return -1, fmt.Errorf("%d buckets listed", len(seen))
		}
		if at < 0 {
			return -1, errors.New("the singleton runs nowhere")
		}
		return at, nil
	}
	alive := []bool{true, true, true}
	var first int
	waitFor(t, 10*time.Second, "the singleton on the leader, every bucket listed once", func() (err error) {
		first, err = runner(alive)
		return err
	})
	g.coords[first].Close()
	alive[first] = false
	waitFor(t, 10*time.Second, "the singleton on the next leader", func() error {
		_, err := runner(alive)
		return err
	})
}

// TestBucketSpreadsDUIDs: the DUIDs of a fleet bought together (DUID-LL
// and DUID-LLT of consecutive MACs, the same time) spread over three
// appliances' primary buckets evenly enough, and a DUID's bucket does not
// depend on anything but its bytes.
func TestBucketSpreadsDUIDs(t *testing.T) {
	members := []string{"a1", "a2", "a3"}
	for _, kind := range []string{"LL", "LLT"} {
		count := map[string]int{}
		const n = 3000
		for i := 0; i < n; i++ {
			mac := []byte{0x0c, 0x29, 0x3e, byte(i >> 16), byte(i >> 8), byte(i)}
			duid := append([]byte{0, 3, 0, 1}, mac...)
			if kind == "LLT" {
				duid = append([]byte{0, 1, 0, 1, 0x2e, 0x1f, 0x00, 0x10}, mac...)
			}
			b := ha.Bucket(duid)
			if ha.Bucket(append([]byte(nil), duid...)) != b {
				t.Fatal("bucket depends on more than the DUID's bytes")
			}
			count[ha.Primary(members, int(b))]++
		}
		for _, m := range members {
			if c := count[m]; c < n/3*7/10 || c > n/3*13/10 {
				t.Errorf("DUID-%s: %s is the primary of %d of %d clients (%v)", kind, m, c, n, count)
			}
		}
	}
}
