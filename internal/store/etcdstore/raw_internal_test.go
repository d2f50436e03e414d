package etcdstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/kv"
	"github.com/ztpd/ztpd/testenv/freeport"
)

// rawStore opens a store on a one-member embedded cluster of its own.
func rawStore(t *testing.T) *Store {
	t.Helper()
	peerURL, clientURL := freeport.URL(t, "http"), freeport.URL(t, "http")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := StartMember(ctx, MemberConfig{Name: "r1", Dir: filepath.Join(t.TempDir(), "etcd"),
		Peers: map[string]string{"r1": peerURL}, ClientURL: clientURL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	s, err := Open(Options{Client: m.Client, Prefix: "/raw/", Name: "raw", TempDir: t.TempDir(), LocalMember: true,
		MaxTxnOps: EmbeddedMaxTxnOps})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// model is what a bucket should hold: a map, sorted on demand.
type model map[string]string

func (m model) keys() []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

type pair struct{ k, v string }

// expect is the first limit (all when limit < 0) of m's keys passing keep,
// descending when desc.
func (m model) expect(keep func(string) bool, desc bool, limit int) []pair {
	ks := m.keys()
	if desc {
		for i, j := 0, len(ks)-1; i < j; i, j = i+1, j-1 {
			ks[i], ks[j] = ks[j], ks[i]
		}
	}
	var out []pair
	for _, k := range ks {
		if limit >= 0 && len(out) == limit {
			break
		}
		if keep(k) {
			out = append(out, pair{k, m[k]})
		}
	}
	return out
}

// collect runs a scan whose visit stops after limit keys (never when
// limit < 0).
func collect(scan func(fn func(string, []byte) (bool, error)) error, limit int) ([]pair, error) {
	var out []pair
	err := scan(func(k string, v []byte) (bool, error) {
		out = append(out, pair{k, string(v)})
		return limit < 0 || len(out) < limit, nil
	})
	return out, err
}

func samePairs(got, want []pair) error {
	if len(got) != len(want) {
		n := min(len(got), len(want))
		for i := range n {
			if got[i] != want[i] {
				return fmt.Errorf("%d keys, want %d; first difference at %d: %q=%q, want %q=%q", len(got), len(want), i, got[i].k, got[i].v, want[i].k, want[i].v)
			}
		}
		return fmt.Errorf("%d keys, want %d (the common %d agree)", len(got), len(want), n)
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("at %d: %q=%q, want %q=%q", i, got[i].k, got[i].v, want[i].k, want[i].v)
		}
	}
	return nil
}

// Differential test of a write transaction's overlay: one transaction
// applies random puts and deletes over a committed bucket larger than a
// scan page, and every read (Get, Scan, ScanReverse, ScanPrefix, Count,
// stopped early or not) must agree with a sorted map; the commit must
// leave exactly the map.
func TestOverlayMatchesModel(t *testing.T) {
	s := rawStore(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 18))

	// Keys: a dense numbered range (p/0000 ... p/1499) so the bucket spans
	// two scan pages, and keys of several segments, including bytes on
	// either side of '/' and 0xff.
	var universe []string
	for i := range 1500 {
		universe = append(universe, fmt.Sprintf("p/%04d", i))
	}
	parts := []string{"a", "b", "a.b", "a0", "dev", "x", "z~", "\xff", "\xff\xff", "0", " "}
	for range 300 {
		n := 1 + rng.IntN(3)
		var segs []string
		for range n {
			segs = append(segs, parts[rng.IntN(len(parts))])
		}
		universe = append(universe, strings.Join(segs, "/"))
	}
	prefixes := []string{"", "p/", "p/0", "p/09", "p/14", "a", "a/", "a/b", "a.", "\xff", "\xff/", "x/", "zzz", "p/1499", "p/1500"}
	const big, small = kv.BucketDevices, kv.BucketLeases

	// Committed state: most of the numbered range (more than a page) and
	// some of the rest; a few keys in another bucket.
	want := map[kv.Bucket]model{big: {}, small: {}}
	pre := s.newRaw(s.ctx, true)
	for _, k := range universe {
		if strings.HasPrefix(k, "p/") && rng.IntN(4) != 0 || rng.IntN(2) == 0 {
			v := fmt.Sprintf("v0-%s", k)
			want[big][k] = v
			if err := pre.Put(big, k, []byte(v)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 20 {
		k, v := fmt.Sprintf("10.99.0.%d", i), "lease"
		want[small][k] = v
		if err := pre.Put(small, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := pre.commit(1<<core.AggDevices | 1<<core.AggLeases); err != nil || !ok {
		t.Fatalf("pre-commit: ok %v, %v", ok, err)
	}
	if len(want[big]) <= pageSize {
		t.Fatalf("only %d committed keys: the scans would not cross a page", len(want[big]))
	}

	tx := s.newRaw(s.ctx, true)
	var seq uint64
	randKey := func() string {
		if rng.IntN(8) == 0 {
			return universe[rng.IntN(len(universe))] + string([]byte{byte(rng.IntN(256))}) // next to a key
		}
		return universe[rng.IntN(len(universe))]
	}
	limit := func() int {
		switch rng.IntN(4) {
		case 0:
			return -1
		case 1:
			return 1 + rng.IntN(1200) // may cross a page
		}
		return 1 + rng.IntN(20)
	}
	check := func(step int, what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("after %d operations: %s: %v", step, what, err)
		}
	}
	verify := func(step int, full bool) {
		t.Helper()
		m := want[big]
		k := randKey()
		v, err := tx.Get(big, k)
		check(step, "Get", err)
		if w, ok := m[k]; ok != (v != nil) || string(v) != w {
			t.Fatalf("after %d operations: Get(%q) = %q (present %v), want %q (present %v)", step, k, v, v != nil, w, ok)
		}

		after := ""
		if rng.IntN(5) != 0 {
			after = randKey()
		}
		n := limit()
		if full {
			after, n = "", -1
		}
		got, err := collect(func(fn func(string, []byte) (bool, error)) error { return tx.Scan(big, after, fn) }, n)
		check(step, "Scan", err)
		check(step, fmt.Sprintf("Scan(after %q, %d keys)", after, n),
			samePairs(got, m.expect(func(k string) bool { return k > after }, false, n)))

		before := ""
		if rng.IntN(5) != 0 {
			before = randKey()
		}
		n = limit()
		if full {
			before, n = "", -1
		}
		got, err = collect(func(fn func(string, []byte) (bool, error)) error { return tx.ScanReverse(big, before, fn) }, n)
		check(step, "ScanReverse", err)
		check(step, fmt.Sprintf("ScanReverse(before %q, %d keys)", before, n),
			samePairs(got, m.expect(func(k string) bool { return before == "" || k < before }, true, n)))

		p := prefixes[rng.IntN(len(prefixes))]
		if rng.IntN(3) == 0 {
			r := randKey()
			p = r[:rng.IntN(len(r)+1)]
		}
		n = limit()
		got, err = collect(func(fn func(string, []byte) (bool, error)) error { return tx.ScanPrefix(big, p, fn) }, n)
		check(step, "ScanPrefix", err)
		check(step, fmt.Sprintf("ScanPrefix(%q, %d keys)", p, n),
			samePairs(got, m.expect(func(k string) bool { return strings.HasPrefix(k, p) }, false, n)))

		if full || rng.IntN(10) == 0 {
			c, err := tx.Count(big)
			check(step, "Count", err)
			if c != len(m) {
				t.Fatalf("after %d operations: Count = %d, want %d", step, c, len(m))
			}
		}
		if rng.IntN(10) == 0 {
			got, err := collect(func(fn func(string, []byte) (bool, error)) error { return tx.Scan(small, "", fn) }, -1)
			check(step, "Scan of the other bucket", err)
			check(step, "Scan of the other bucket", samePairs(got, want[small].expect(func(string) bool { return true }, false, -1)))
		}
	}

	const ops = 300
	for step := 1; step <= ops; step++ {
		switch r := rng.IntN(20); {
		case r < 10:
			k := randKey()
			v := fmt.Sprintf("v%d-%s", step, k)
			check(step, "Put", tx.Put(big, k, []byte(v)))
			want[big][k] = v
		case r < 18:
			k := randKey()
			if rng.IntN(3) != 0 && len(want[big]) > 0 { // mostly a present key
				ks := want[big].keys()
				k = ks[rng.IntN(len(ks))]
			}
			check(step, "Delete", tx.Delete(big, k))
			delete(want[big], k)
		case r < 19:
			k := fmt.Sprintf("10.99.1.%d", rng.IntN(30))
			if rng.IntN(2) == 0 {
				check(step, "Put", tx.Put(small, k, []byte("new")))
				want[small][k] = "new"
			} else {
				check(step, "Delete", tx.Delete(small, k))
				delete(want[small], k)
			}
		default:
			// (The events bucket's numbers are time-ordered, timeSequence;
			// every other bucket's sequence is a counter.)
			got, err := tx.NextSequence(kv.BucketJobs)
			check(step, "NextSequence", err)
			seq++
			if got != seq {
				t.Fatalf("NextSequence = %d, want %d", got, seq)
			}
			if cur, err := tx.Sequence(kv.BucketJobs); err != nil || cur != seq {
				t.Fatalf("Sequence = %d, %v; want %d", cur, err, seq)
			}
		}
		verify(step, step%50 == 0)
	}

	// A visit's error ends the scan and comes back as is.
	boom := errors.New("boom")
	if err := tx.Scan(big, "", func(string, []byte) (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Fatalf("a scan whose visit failed returned %v", err)
	}

	if ok, err := tx.commit(1<<core.AggDevices | 1<<core.AggLeases | 1<<core.AggEvents); err != nil || !ok {
		t.Fatalf("commit: ok %v, %v (nobody else wrote: it cannot conflict)", ok, err)
	}

	after := s.newRaw(s.ctx, false)
	for _, b := range []kv.Bucket{big, small} {
		got, err := collect(func(fn func(string, []byte) (bool, error)) error { return after.Scan(b, "", fn) }, -1)
		if err != nil {
			t.Fatal(err)
		}
		if err := samePairs(got, want[b].expect(func(string) bool { return true }, false, -1)); err != nil {
			t.Fatalf("committed %s: %v", b, err)
		}
		if n, err := after.Count(b); err != nil || n != len(want[b]) {
			t.Fatalf("committed %s: Count %d, %v; want %d", b, n, err, len(want[b]))
		}
	}
	if got, err := after.Sequence(kv.BucketJobs); err != nil || got != seq {
		t.Fatalf("committed sequence %d, %v; want %d", got, err, seq)
	}
	if !bytes.Equal([]byte(want[big]["p/0000"]), mustGet(t, after, big, "p/0000")) {
		t.Fatalf("committed p/0000 = %q, want %q", mustGet(t, after, big, "p/0000"), want[big]["p/0000"])
	}
}

func mustGet(t *testing.T, tx *rawTx, b kv.Bucket, k string) []byte {
	t.Helper()
	v, err := tx.Get(b, k)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestResendAppliesAtMostOnce: the commit marker lets a resend learn that
// an earlier send of the same transaction applied (its reply was lost), and
// keeps a resend from applying after another transaction of this
// appliance did.
func TestResendAppliesAtMostOnce(t *testing.T) {
	s := rawStore(t)
	ctx := context.Background()
	put := func(k, v string) []clientv3.Op { return []clientv3.Op{clientv3.OpPut(s.p+"x/"+k, v)} }
	get := func(k string) string {
		resp, err := s.cli.Get(ctx, s.p+"x/"+k)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return ""
		}
		return string(resp.Kvs[0].Value)
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if ok, err := s.sendAs(ctx, nil, put("a", "1"), "t1"); !ok || err != nil {
		t.Fatalf("first send: %v %v", ok, err)
	}
	mark := s.p + txnDir + s.name
	// An earlier send of transaction t2 applied, its reply lost: what
	// etcd holds then (the marker names t2).
	if _, err := s.cli.Txn(ctx).Then(append(put("b", "2"), clientv3.OpPut(mark, "t2"))...).Commit(); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.sendAs(ctx, nil, put("b", "2"), "t2"); !ok || err != nil {
		t.Fatalf("resend of an applied transaction: ok=%v err=%v, want it known as applied", ok, err)
	}
	// A resend of t3 after t4 applied (t3's own first send never did) is a
	// conflict: t3's writes must not land on top of t4's.
	if _, err := s.cli.Txn(ctx).Then(append(put("c", "t4"), clientv3.OpPut(mark, "t4"))...).Commit(); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.sendAs(ctx, nil, put("c", "t3"), "t3"); ok || err != nil {
		t.Fatalf("send after another transaction applied: ok=%v err=%v, want a conflict", ok, err)
	}
	if v := get("c"); v != "t4" {
		t.Fatalf("c = %q, want t4's", v)
	}
	// The conflict taught it the marker's revision: the next send applies.
	if ok, err := s.sendAs(ctx, nil, put("d", "5"), "t5"); !ok || err != nil {
		t.Fatalf("send after the conflict: %v %v", ok, err)
	}
	if v := get("d"); v != "5" {
		t.Fatalf("d = %q", v)
	}
	for _, e := range []error{context.DeadlineExceeded, rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrNoLeader} {
		if !unknownOutcome(e) {
			t.Errorf("%v: not taken for an unknown outcome", e)
		}
	}
	for _, e := range []error{rpctypes.ErrTooManyOps, rpctypes.ErrPermissionDenied, context.Canceled} {
		if unknownOutcome(e) {
			t.Errorf("%v: taken for an unknown outcome", e)
		}
	}
}
