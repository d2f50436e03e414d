package etcdstore_test

// Engine tests the conformance suite cannot express: two appliances on one
// etcd prefix, the optimistic transactions' conflict detection, change
// counts across appliances, too-large transactions, copies and the schema
// guard.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/internal/store/etcdstore"
	"github.com/ztpd/ztpd/internal/store/kv"
)

// appliances opens two stores (two appliances) on one new prefix of cli.
func appliances(t *testing.T, cli *clientv3.Client, maxOps int) (a, b *etcdstore.Store) {
	t.Helper()
	p := fmt.Sprintf("/pair%d/", prefixes.Add(1))
	return openMetered(t, cli, p, true, maxOps, prometheus.WrapRegistererWith(prometheus.Labels{"appliance": p + "a"}, applianceMetrics)),
		openMetered(t, cli, p, true, maxOps, prometheus.WrapRegistererWith(prometheus.Labels{"appliance": p + "b"}, applianceMetrics))
}

// applianceMetrics holds the metrics of the stores appliances opens, each
// labelled with its appliance.
var applianceMetrics = prometheus.NewRegistry()

func mac(i int) string { return fmt.Sprintf("02:00:00:00:%02x:%02x", i/256, i%256) }

func device(i int, state core.DeviceState) core.Device {
	return core.Device{ID: mac(i), MAC: mac(i), Kind: core.KindSONiC, State: state, Serial: fmt.Sprintf("SN%04d", i)}
}

func update(t *testing.T, st core.Store, fn func(core.Tx) error) {
	t.Helper()
	if err := st.Update(fn); err != nil {
		t.Fatal(err)
	}
}

func setting(t *testing.T, st core.Store, name string) string {
	t.Helper()
	var v string
	err := st.View(func(tx core.Tx) error {
		var ok bool
		var err error
		v, ok, err = tx.Settings().Get(name)
		if err == nil && !ok {
			err = fmt.Errorf("setting %s is not set", name)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// conflicts is ztpd_store_conflicts_total over every store appliances
// opened.
func conflicts(t *testing.T) float64 {
	t.Helper()
	mfs, err := applianceMetrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "ztpd_store_conflicts_total" {
			var sum float64
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return sum
		}
	}
	t.Fatal("ztpd_store_conflicts_total is not registered")
	return 0
}

// openInit opens a store on prefix with the given InitMode.
func openInit(t *testing.T, cli *clientv3.Client, prefix string, maxOps int, init etcdstore.InitMode) (*etcdstore.Store, error) {
	t.Helper()
	s, err := etcdstore.Open(etcdstore.Options{Client: cli, Prefix: prefix, Name: "test", TempDir: t.TempDir(),
		LocalMember: true, MaxTxnOps: maxOps, Init: init})
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

// Two appliances incrementing one counter lose no update: every conflict
// runs the loser's fn again on the new value.
func TestTwoAppliancesNoLostUpdate(t *testing.T) {
	m := embeddedMember(t)
	a, b := appliances(t, m.Client, etcdstore.EmbeddedMaxTxnOps)
	update(t, a, func(tx core.Tx) error { return tx.Settings().Put("counter", "0") })
	const n, workers = 200, 4
	var runs atomic.Int64
	increment := func(tx core.Tx) error {
		runs.Add(1)
		v, ok, err := tx.Settings().Get("counter")
		if err != nil || !ok {
			return fmt.Errorf("counter: %v (present %v)", err, ok)
		}
		i, err := strconv.Atoi(v)
		if err != nil {
			return err
		}
		return tx.Settings().Put("counter", strconv.Itoa(i+1))
	}
	c0 := conflicts(t)
	var wg sync.WaitGroup
	errs := make(chan error, 2*workers)
	for _, st := range []*etcdstore.Store{a, b} {
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range n / workers {
					if err := st.Update(increment); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := setting(t, a, "counter"); got != strconv.Itoa(2*n) {
		t.Fatalf("counter is %s after %d increments by two appliances: updates were lost", got, 2*n)
	}
	reruns := runs.Load() - 2*n
	t.Logf("%d increments, %d runs of fn: %d re-runs after conflicts", 2*n, runs.Load(), reruns)
	if got := conflicts(t) - c0; got != float64(reruns) {
		t.Fatalf("ztpd_store_conflicts_total grew by %v, but fn ran again %d times", got, reruns)
	}
}

// A transaction whose scan another appliance changed before it committed
// runs again, and what it commits reflects the change.
func TestScanConflictsWithConcurrentChange(t *testing.T) {
	m := embeddedMember(t)
	listAll := func(tx core.Tx) (int, error) {
		n := 0
		err := tx.Devices().List("", func(core.Device) (bool, error) { n++; return true, nil })
		return n, err
	}
	listLeased := func(tx core.Tx) (int, error) {
		n := 0
		err := tx.Devices().ListState(core.StateLeased, "", func(core.Device) (bool, error) { n++; return true, nil })
		return n, err
	}
	setState := func(i int, st core.DeviceState) func(core.Tx) error {
		return func(tx core.Tx) error {
			d, err := tx.Devices().Get(mac(i))
			if err != nil {
				return err
			}
			d.State = st
			return tx.Devices().Put(d)
		}
	}
	// Devices 0-2 are leased, 3-4 discovered.
	cases := []struct {
		name   string
		scan   func(core.Tx) (int, error)
		change func(core.Tx) error
		want   int
	}{
		{"List/delete", listAll, func(tx core.Tx) error { return tx.Devices().Delete(mac(3)) }, 4},
		{"List/insert", listAll, func(tx core.Tx) error { return tx.Devices().Put(device(9, core.StateLeased)) }, 6},
		{"Count/delete", func(tx core.Tx) (int, error) { return tx.Devices().Count() },
			func(tx core.Tx) error { return tx.Devices().Delete(mac(0)) }, 4},
		{"ListState/leaves", listLeased, setState(1, core.StateZTPServed), 2},
		{"ListState/enters", listLeased, setState(4, core.StateLeased), 4},
		{"ListState/deleted", listLeased, func(tx core.Tx) error { return tx.Devices().Delete(mac(2)) }, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := appliances(t, m.Client, etcdstore.EmbeddedMaxTxnOps)
			update(t, b, func(tx core.Tx) error {
				for i := range 5 {
					st := core.StateLeased
					if i >= 3 {
						st = core.StateDiscovered
					}
					if err := tx.Devices().Put(device(i, st)); err != nil {
						return err
					}
				}
				return nil
			})
			runs := 0
			update(t, a, func(tx core.Tx) error {
				runs++
				n, err := c.scan(tx)
				if err != nil {
					return err
				}
				if runs == 1 {
					if err := b.Update(c.change); err != nil {
						return fmt.Errorf("the other appliance's change: %w", err)
					}
				}
				return tx.Settings().Put("summary", strconv.Itoa(n))
			})
			if runs != 2 {
				t.Errorf("the scanning transaction ran %d times, want 2 (once more after the other appliance's change)", runs)
			}
			if got := setting(t, b, "summary"); got != strconv.Itoa(c.want) {
				t.Errorf("committed summary %s, want %d (the count after the other appliance's change)", got, c.want)
			}
		})
	}
}

// A deletion in another index segment than the one a transaction scanned
// does not make it run again: delete markers are per bucket and first key
// segment ("pool", "member", "device-state", a token kind).
func TestDeleteInOtherSegmentDoesNotConflict(t *testing.T) {
	m := embeddedMember(t)
	pool := func(tx core.Tx) (int, error) {
		n := 0
		err := tx.Tokens().Pool("c1", func(string) (bool, error) { n++; return true, nil })
		return n, err
	}
	cases := []struct {
		name   string
		scan   func(core.Tx) (int, error)
		change func(core.Tx) error
		want   int
	}{
		// The device's serial and device-state index entries go, and the
		// device record: none is under "pool/".
		{"Pool/device delete", pool, func(tx core.Tx) error { return tx.Devices().Delete(mac(1)) }, 2},
		{"Pool/delist", pool, func(tx core.Tx) error { return tx.Memberships().Delist("c1", mac(1)) }, 2},
		{"Roster/pool remove", func(tx core.Tx) (int, error) {
			n := 0
			err := tx.Memberships().Roster("c1", func(string, string) (bool, error) { n++; return true, nil })
			return n, err
		}, func(tx core.Tx) error { return tx.Tokens().PoolRemove("c1", "t1") }, 2},
		{"ListKind/other kind delete", func(tx core.Tx) (int, error) {
			n := 0
			err := tx.Tokens().ListKind("join", func(core.Token) (bool, error) { n++; return true, nil })
			return n, err
		}, func(tx core.Tx) error { return tx.Tokens().Delete("bootstrap", "b1") }, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := appliances(t, m.Client, etcdstore.EmbeddedMaxTxnOps)
			update(t, b, func(tx core.Tx) error {
				for i := range 3 {
					if err := tx.Devices().Put(device(i, core.StateLeased)); err != nil {
						return err
					}
				}
				for _, id := range []string{"t1", "t2"} {
					if err := tx.Tokens().PoolAdd("c1", id); err != nil {
						return err
					}
					if err := tx.Tokens().Put(core.Token{Kind: "join", ID: id, Cluster: "c1"}); err != nil {
						return err
					}
				}
				if err := tx.Tokens().Put(core.Token{Kind: "bootstrap", ID: "b1"}); err != nil {
					return err
				}
				for i := range 2 {
					if err := tx.Memberships().Enlist("c1", mac(i), "worker"); err != nil {
						return err
					}
				}
				return nil
			})
			runs := 0
			update(t, a, func(tx core.Tx) error {
				runs++
				n, err := c.scan(tx)
				if err != nil {
					return err
				}
				if runs == 1 {
					if err := b.Update(c.change); err != nil {
						return fmt.Errorf("the other appliance's change: %w", err)
					}
				}
				return tx.Settings().Put("summary", strconv.Itoa(n))
			})
			if runs != 1 {
				t.Errorf("the scanning transaction ran %d times, want 1: a deletion outside what it scanned conflicted", runs)
			}
			if got := setting(t, b, "summary"); got != strconv.Itoa(c.want) {
				t.Errorf("committed summary %s, want %d", got, c.want)
			}
		})
	}
}

// Another appliance's write moves this one's change count of the
// aggregate written, within a watch delivery, and no other.
func TestGenerationsFollowOtherAppliance(t *testing.T) {
	m := embeddedMember(t)
	a, b := appliances(t, m.Client, etcdstore.EmbeddedMaxTxnOps)
	snapshot := func() (g [core.NumAggregates]uint64) {
		for i := range g {
			g[i] = a.Generation(core.Aggregate(i))
		}
		return g
	}
	for _, w := range []struct {
		agg   core.Aggregate
		write func(core.Tx) error
	}{
		{core.AggDevices, func(tx core.Tx) error { return tx.Devices().Put(device(1, core.StateDiscovered)) }},
		{core.AggLeases, func(tx core.Tx) error {
			return tx.Leases().Put(core.Lease{IP: "10.99.0.5", MAC: mac(1), State: core.LeaseActive})
		}},
	} {
		before := snapshot()
		bg := b.Generation(w.agg)
		update(t, b, w.write)
		if b.Generation(w.agg) == bg {
			t.Fatalf("the writer's own count of aggregate %d did not move when its Update returned", w.agg)
		}
		deadline := time.Now().Add(2 * time.Second)
		for a.Generation(w.agg) == before[w.agg] {
			if time.Now().After(deadline) {
				t.Fatalf("aggregate %d's count on the other appliance did not move within 2 s of the write", w.agg)
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond) // a stray delivery would land by now
		after := snapshot()
		for i := range after {
			if core.Aggregate(i) != w.agg && after[i] != before[i] {
				t.Errorf("a write of aggregate %d moved aggregate %d's count (%d -> %d)", w.agg, i, before[i], after[i])
			}
		}
	}
}

// A group commit over the cluster's --max-txn-ops is committed in halves,
// and every caller's write is there; a single transaction over it fails
// with an error that names the setting.
func TestTooLargeBatchSplits(t *testing.T) {
	m := embeddedMember(t)
	const maxOps, callers = 40, 50
	st := openOn(t, m.Client, true, maxOps)

	// Hold the committer until every caller is queued, so they are
	// committed together: 50 devices of 3 keys each are far past 40 ops.
	gate := make(chan struct{})
	gateDone := make(chan error, 1)
	go func() {
		gateDone <- st.Batch(func(tx core.Tx) error {
			<-gate
			return tx.Settings().Put("gate", "open")
		})
	}()
	var runs atomic.Int64
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = st.Batch(func(tx core.Tx) error {
				runs.Add(1)
				return tx.Devices().Put(device(i, core.StateDiscovered))
			})
		}()
	}
	time.Sleep(200 * time.Millisecond)
	close(gate)
	wg.Wait()
	if err := <-gateDone; err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("batch caller %d: %v", i, err)
		}
	}
	// Each caller's fn runs once per attempt its half was part of: more
	// than once for some means a too-large attempt was split.
	if runs.Load() <= callers {
		t.Fatalf("%d fn runs for %d callers: the callers were never committed as one too-large batch", runs.Load(), callers)
	}
	t.Logf("%d callers, %d fn runs", callers, runs.Load())
	err := st.View(func(tx core.Tx) error {
		for i := range callers {
			if _, err := tx.Devices().Get(mac(i)); err != nil {
				return err
			}
			if _, err := tx.Devices().BySerial(device(i, "").Serial); err != nil {
				return err
			}
		}
		n, err := tx.Devices().Count()
		if err == nil && n != callers {
			err = fmt.Errorf("%d devices, want %d", n, callers)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	err = st.Update(func(tx core.Tx) error {
		for i := range maxOps {
			if err := tx.Devices().Put(device(100+i, core.StateDiscovered)); err != nil {
				return err
			}
		}
		return nil
	})
	if !errors.Is(err, kv.ErrTxnTooLarge) {
		t.Fatalf("an Update of %d devices with --max-txn-ops %d returned %v, want kv.ErrTxnTooLarge", maxOps, maxOps, err)
	}
	if !strings.Contains(err.Error(), "--max-txn-ops") {
		t.Fatalf("the too-large error does not name --max-txn-ops: %v", err)
	}
	err = st.View(func(tx core.Tx) error {
		_, err := tx.Devices().Get(mac(100))
		return err
	})
	if !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("a device of the refused transaction: %v, want not found", err)
	}
}

// memLoader is a kv.Loader that keeps everything: what a copy carried.
type memLoader struct {
	recs map[kv.Bucket]map[string]string
	seqs map[kv.Bucket]uint64
}

func newMemLoader() *memLoader {
	return &memLoader{recs: map[kv.Bucket]map[string]string{}, seqs: map[kv.Bucket]uint64{}}
}

func (l *memLoader) Put(b kv.Bucket, key string, value []byte) error {
	if l.recs[b] == nil {
		l.recs[b] = map[string]string{}
	}
	l.recs[b][key] = string(value)
	return nil
}

func (l *memLoader) SetSequence(b kv.Bucket, n uint64) error { l.seqs[b] = n; return nil }

type copier interface {
	Copy(dst kv.Loader, progress func(b kv.Bucket, n int)) (int, error)
}

func dump(t *testing.T, src copier) *memLoader {
	t.Helper()
	l := newMemLoader()
	if _, err := src.Copy(l, nil); err != nil {
		t.Fatal(err)
	}
	return l
}

func sameDump(t *testing.T, what string, got, want *memLoader) {
	t.Helper()
	for _, b := range kv.Buckets {
		g, w := got.recs[b], want.recs[b]
		if len(g) != len(w) {
			t.Errorf("%s: bucket %s has %d records, want %d", what, b, len(g), len(w))
		}
		for k, v := range w {
			if g[k] != v {
				t.Errorf("%s: %s/%s is %q, want %q", what, b, k, g[k], v)
			}
		}
		if got.seqs[b] != want.seqs[b] {
			t.Errorf("%s: sequence of %s is %d, want %d", what, b, got.seqs[b], want.seqs[b])
		}
	}
}

// A backup of an etcd store is a bbolt store file with the same records;
// a copy through bbolt back into etcd carries every record and sequence.
func TestBackupAndCopyRoundTrip(t *testing.T) {
	m := embeddedMember(t)
	// A small --max-txn-ops, so that loading back takes several
	// transactions.
	src := openOn(t, m.Client, true, 64)
	const nDev, nLease, nEvent = 30, 20, 40
	// Ten records a transaction: each stays under the 64 operations.
	for i := range nDev {
		if i%10 == 0 {
			update(t, src, func(tx core.Tx) error {
				for j := i; j < i+10; j++ {
					if err := tx.Devices().Put(device(j, core.StateLeased)); err != nil {
						return err
					}
				}
				return nil
			})
		}
	}
	update(t, src, func(tx core.Tx) error {
		for i := range nLease {
			l := core.Lease{IP: fmt.Sprintf("10.99.2.%d", i), MAC: mac(i), Subnet: "s", State: core.LeaseActive,
				Start: time.Unix(1700000000, 0).UTC(), Expiry: time.Unix(1700003600, 0).UTC()}
			if err := tx.Leases().Put(l); err != nil {
				return err
			}
		}
		if err := tx.Tokens().PoolAdd("c1", "t1"); err != nil {
			return err
		}
		return tx.Settings().Put("zone", "z1")
	})
	for i := range nEvent {
		if i%10 == 0 {
			update(t, src, func(tx core.Tx) error {
				for j := i; j < i+10; j++ {
					if _, err := tx.Events().Append(core.Event{Type: "dhcp.ack", Device: mac(j % nDev), Message: fmt.Sprint("event ", j)}); err != nil {
						return err
					}
				}
				return nil
			})
		}
	}
	want := dump(t, src)
	// Event numbers are time-ordered on etcd (timeSequence): the sequence
	// a copy carries is the newest event's number.
	var newest uint64
	update(t, src, func(tx core.Tx) error {
		return tx.Events().ListBackward(core.DeviceEvents, 0, func(e core.Event) (bool, error) { newest = e.Seq; return false, nil })
	})
	if newest == 0 || want.seqs[kv.BucketEvents] != newest {
		t.Fatalf("the events sequence copies as %d, want the newest event's %d", want.seqs[kv.BucketEvents], newest)
	}

	// Backup: a bbolt file that boltstore opens.
	bdir := t.TempDir()
	f, err := os.Create(filepath.Join(bdir, boltstore.FileName))
	if err != nil {
		t.Fatal(err)
	}
	n, err := src.Backup(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil || n == 0 {
		t.Fatalf("backup: %d bytes, %v", n, err)
	}
	bs, err := boltstore.Open(bdir, boltstore.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("the backup does not open as a bbolt store: %v", err)
	}
	defer bs.Close()
	type records struct {
		devices, leases, events int
		device                  core.Device
		lease                   core.Lease
		event                   core.Event
	}
	read := func(st core.Store) (r records) {
		err := st.View(func(tx core.Tx) error {
			var err error
			if r.devices, err = tx.Devices().Count(); err != nil {
				return err
			}
			if r.leases, err = tx.Leases().Count(); err != nil {
				return err
			}
			if r.events, err = tx.Events().Count(core.DeviceEvents); err != nil {
				return err
			}
			if r.device, err = tx.Devices().Get(mac(7)); err != nil {
				return err
			}
			if r.lease, err = tx.Leases().Get("10.99.2.7"); err != nil {
				return err
			}
			return tx.Events().ListBackward(core.DeviceEvents, 0, func(e core.Event) (bool, error) { r.event = e; return false, nil })
		})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	got, orig := read(bs), read(src)
	if orig.devices != nDev || orig.leases != nLease || orig.events != nEvent || orig.event.Seq != newest {
		t.Fatalf("the source reads %+v", orig)
	}
	if !reflect.DeepEqual(got, orig) {
		t.Fatalf("the backup reads\n%+v\nthe store\n%+v", got, orig)
	}
	sameDump(t, "backup", dump(t, bs), want)

	// etcd -> bbolt (boltstore.Load) -> a fresh etcd prefix (Loader).
	ldir := t.TempDir()
	if err := boltstore.Load(ldir, func(l kv.Loader) error { _, err := src.Copy(l, nil); return err }); err != nil {
		t.Fatal(err)
	}
	mid, err := boltstore.Open(ldir, boltstore.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer mid.Close()
	sameDump(t, "bbolt copy", dump(t, mid), want)
	// The destination of a copy is left without a schema version
	// (InitNone): the loader writes it last.
	dst, err := openInit(t, m.Client, fmt.Sprintf("/copy%d/", prefixes.Add(1)), 64, etcdstore.InitNone)
	if err != nil {
		t.Fatal(err)
	}
	if empty, err := dst.Empty(); err != nil || !empty {
		t.Fatalf("a fresh prefix: empty %v, %v", empty, err)
	}
	ld := dst.Loader()
	if _, err := mid.Copy(ld, nil); err != nil {
		t.Fatal(err)
	}
	if err := ld.Finish(); err != nil {
		t.Fatal(err)
	}
	if ld.Written() <= 64 {
		t.Fatalf("the loader wrote %d keys: not enough to take several transactions", ld.Written())
	}
	sameDump(t, "etcd copy", dump(t, dst), want)
	if empty, err := dst.Empty(); err != nil || empty {
		t.Fatalf("the loaded prefix: empty %v, %v", empty, err)
	}
	var seq uint64
	update(t, dst, func(tx core.Tx) error {
		var err error
		seq, err = tx.Events().Append(core.Event{Type: "dhcp.ack"})
		return err
	})
	if seq <= newest {
		t.Fatalf("the copy's next event is %d, not after the copied sequence %d", seq, newest)
	}
}

// Open refuses a prefix that holds something else or a newer schema, and
// appliances starting together on an empty prefix all record the same
// schema.
func TestSchemaGuard(t *testing.T) {
	m := embeddedMember(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	open := func(prefix string) (*etcdstore.Store, error) {
		return openInit(t, m.Client, prefix, 0, etcdstore.InitCreate)
	}
	if _, err := m.Client.Put(ctx, "/foreign/app/config", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := open("/foreign/"); err == nil || !strings.Contains(err.Error(), "not a ztpd store") {
		t.Fatalf("Open on a prefix holding another application's key: %v, want a not-a-ztpd-store error", err)
	}
	if _, err := m.Client.Put(ctx, "/newer/meta/schema_version", "999"); err != nil {
		t.Fatal(err)
	}
	if _, err := open("/newer/"); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Open on a store of schema 999: %v, want an error saying it is newer", err)
	}
	if _, err := m.Client.Put(ctx, "/garbled/meta/schema_version", "v2"); err != nil {
		t.Fatal(err)
	}
	if _, err := open("/garbled/"); err == nil || !strings.Contains(err.Error(), "not a number") {
		t.Fatalf("Open on a store whose schema version is not a number: %v", err)
	}

	stores := make([]*etcdstore.Store, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range stores {
		wg.Add(1)
		go func() { defer wg.Done(); stores[i], errs[i] = open("/race/") }()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("appliance %d of three starting on an empty prefix: %v", i, err)
		}
		if v, err := stores[i].Schema(); err != nil || v != boltstore.SchemaVersion {
			t.Fatalf("appliance %d reads schema %d, %v; want %d", i, v, err, boltstore.SchemaVersion)
		}
	}
	resp, err := m.Client.Get(ctx, "/race/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, e := range resp.Kvs {
		keys = append(keys, string(e.Key))
	}
	if len(keys) != 1 || !bytes.Equal(resp.Kvs[0].Value, []byte(strconv.Itoa(boltstore.SchemaVersion))) {
		t.Fatalf("after three racing Opens the prefix holds %q, want only the schema version", keys)
	}
	update(t, stores[0], func(tx core.Tx) error { return tx.Settings().Put("from", "0") })
	if got := setting(t, stores[2], "from"); got != "0" {
		t.Fatalf("another appliance reads %q", got)
	}

	// InitWait opens only once another appliance created the store.
	waited := make(chan error, 1)
	go func() {
		s, err := openInit(t, m.Client, "/wait/", 0, etcdstore.InitWait)
		if err == nil {
			_, err = s.Schema()
		}
		waited <- err
	}()
	select {
	case err := <-waited:
		t.Fatalf("Open with InitWait returned (%v) before any appliance created the store", err)
	case <-time.After(700 * time.Millisecond):
	}
	if _, err := open("/wait/"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("Open with InitWait after the store was created: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Open with InitWait still waits 3 s after the store was created")
	}
}
