package boltstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/kv"
)

func openTemp(t *testing.T) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

func TestSecondOpenFailsFastWithClearError(t *testing.T) {
	_, dir := openTemp(t)
	start := time.Now()
	_, err := Open(dir, Options{})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: got %v, want ErrLocked", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("second open took %v; it must not hang", d)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("error should name the holder pid: %v", err)
	}
}

func TestBatchCommitsEveryCallerAndIsolatesFailures(t *testing.T) {
	s, dir := openTemp(t)
	const n = 500
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = s.Batch(func(tx core.Tx) error {
				if i%50 == 7 {
					return fmt.Errorf("caller %d refuses", i)
				}
				return tx.Leases().Put(core.Lease{IP: fmt.Sprintf("10.99.%d.%d", i/250, i%250), MAC: "m"})
			})
		}(i)
	}
	wg.Wait()
	for i, err := range errs {
		if i%50 == 7 {
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("caller %d", i)) {
				t.Fatalf("caller %d: want its own error, got %v", i, err)
			}
		} else if err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
	}
	s.Close()
	// Reopen: what Batch acknowledged is on disk.
	s2, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	err = s2.View(func(tx core.Tx) error {
		c, err := tx.Leases().Count()
		if c != n-n/50 {
			return fmt.Errorf("count %d, want %d", c, n-n/50)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestBackupIsAConsistentOpenableCopy(t *testing.T) {
	s, _ := openTemp(t)
	for i := 0; i < 100; i++ {
		d := core.Device{ID: fmt.Sprintf("02:00:00:00:00:%02x", i), Serial: fmt.Sprintf("SN%d", i), State: core.StateDiscovered}
		if err := s.Update(func(tx core.Tx) error { return tx.Devices().Put(d) }); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "backup.db")
	if _, err := s.BackupToFile(out); err != nil {
		t.Fatal(err)
	}
	bdir := t.TempDir()
	if err := os.Rename(out, filepath.Join(bdir, FileName)); err != nil {
		t.Fatal(err)
	}
	b, err := Open(bdir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	err = b.View(func(tx core.Tx) error {
		d, err := tx.Devices().BySerial("SN42")
		if err != nil {
			return err
		}
		if d.ID != "02:00:00:00:00:2a" {
			return fmt.Errorf("serial index points at %s", d.ID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotRecordsMatchTheFile: what Snapshot's transaction reads is
// exactly what its file holds, even with a write committed in between, and
// writing it twice gives the same bytes (a backup hashes it, then sends it).
func TestSnapshotRecordsMatchTheFile(t *testing.T) {
	s, _ := openTemp(t)
	put := func(id string) {
		t.Helper()
		if err := s.Update(func(tx core.Tx) error { return tx.Devices().Put(core.Device{ID: id, State: core.StateDiscovered}) }); err != nil {
			t.Fatal(err)
		}
	}
	put("02:00:00:00:00:01")
	var first, second bytes.Buffer
	var seen int
	err := s.Snapshot(func(tx core.Tx, size int64, writeTo func(io.Writer) (int64, error)) error {
		put("02:00:00:00:00:02") // committed while the snapshot is open
		if err := tx.Devices().List("", func(core.Device) (bool, error) { seen++; return true, nil }); err != nil {
			return err
		}
		if n, err := writeTo(&first); err != nil || n != size {
			return fmt.Errorf("first write %d of %d: %v", n, size, err)
		}
		_, err := writeTo(&second)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != 1 || !bytes.Equal(first.Bytes(), second.Bytes()) {
		t.Fatalf("snapshot saw %d devices; writes equal: %v", seen, bytes.Equal(first.Bytes(), second.Bytes()))
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), first.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var inFile int
	b.View(func(tx core.Tx) error {
		return tx.Devices().List("", func(core.Device) (bool, error) { inFile++; return true, nil })
	})
	if inFile != 1 {
		t.Fatalf("snapshot file holds %d devices, its transaction saw 1", inFile)
	}
}

func TestNewerSchemaIsRefused(t *testing.T) {
	s, dir := openTemp(t)
	err := s.db.Update(func(btx *bolt.Tx) error {
		return btx.Bucket([]byte(kv.BucketMeta)).Put([]byte(schemaKey), []byte("999"))
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err = Open(dir, Options{})
	if err == nil || !strings.Contains(err.Error(), "newer than this ztpd supports") {
		t.Fatalf("want schema error, got %v", err)
	}
}

func TestSerialIndexFollowsChanges(t *testing.T) {
	s, _ := openTemp(t)
	put := func(serial string) {
		t.Helper()
		if err := s.Update(func(tx core.Tx) error {
			return tx.Devices().Put(core.Device{ID: "02:00:00:00:00:01", Serial: serial})
		}); err != nil {
			t.Fatal(err)
		}
	}
	put("A")
	put("B")
	err := s.View(func(tx core.Tx) error {
		if _, err := tx.Devices().BySerial("A"); !errors.Is(err, core.ErrNotFound) {
			return fmt.Errorf("old serial still indexed: %v", err)
		}
		_, err := tx.Devices().BySerial("B")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestClusterNamesAreUnique(t *testing.T) {
	s, _ := openTemp(t)
	err := s.Update(func(tx core.Tx) error {
		if err := tx.Clusters().Put(core.Cluster{ID: "c1", Name: "prod"}); err != nil {
			return err
		}
		return tx.Clusters().Put(core.Cluster{ID: "c2", Name: "prod"})
	})
	if err == nil || !strings.Contains(err.Error(), "already used") {
		t.Fatalf("want duplicate-name error, got %v", err)
	}
}

func BenchmarkBatchParallel(b *testing.B) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.SetParallelism(64)
	var seq sync.Mutex
	n := 0
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			seq.Lock()
			n++
			k := fmt.Sprintf("%08d", n)
			seq.Unlock()
			if err := s.Batch(func(tx core.Tx) error {
				return tx.Leases().Put(core.Lease{IP: k, State: core.LeaseActive})
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

var _ core.Generations = (*Store)(nil)

func TestGenerationCountsWritesPerAggregate(t *testing.T) {
	s, _ := openTemp(t)
	devs := func() uint64 { return s.Generation(core.AggDevices) }
	both := func() uint64 { return s.Generation(core.AggDevices, core.AggClusters) }
	d0, b0, l0 := devs(), both(), s.Generation(core.AggLeases)

	// Reads and writes to other buckets leave the generation alone.
	if err := s.View(func(tx core.Tx) error {
		_, err := tx.Devices().Get("x")
		if errors.Is(err, core.ErrNotFound) {
			err = nil
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(func(tx core.Tx) error { return tx.Leases().Put(core.Lease{IP: "10.99.0.1"}) }); err != nil {
		t.Fatal(err)
	}
	if devs() != d0 || both() != b0 {
		t.Fatalf("a leases write moved the devices/clusters generation")
	}
	if s.Generation(core.AggLeases) == l0 {
		t.Fatalf("a leases write did not move the leases generation")
	}

	// Update, Batch and Delete each count, and the count is visible when
	// the call returns.
	steps := []func() error{
		func() error {
			return s.Update(func(tx core.Tx) error { return tx.Devices().Put(core.Device{ID: "a"}) })
		},
		func() error {
			return s.Batch(func(tx core.Tx) error { return tx.Clusters().Put(core.Cluster{ID: "c", Name: "c"}) })
		},
		func() error { return s.Batch(func(tx core.Tx) error { return tx.Devices().Delete("a") }) },
	}
	for i, step := range steps {
		before := both()
		if err := step(); err != nil {
			t.Fatal(err)
		}
		if both() <= before {
			t.Fatalf("step %d: generation %d did not grow past %d", i, both(), before)
		}
	}

	// A failed write may count (conservative) but must not be lost for the
	// writes batched with it.
	var wg sync.WaitGroup
	before := devs()
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_ = s.Batch(func(tx core.Tx) error {
				if i == 3 {
					return errors.New("refused")
				}
				return tx.Devices().Put(core.Device{ID: fmt.Sprint("d", i)})
			})
		}(i)
	}
	wg.Wait()
	if devs() == before {
		t.Fatal("batched device writes did not move the generation")
	}
	if s.Generation() != 0 || s.Generation(core.NumAggregates) != 0 {
		t.Fatal("generation of no known aggregate must be 0")
	}
}

// TestFullDiskFailsCleanlyAndLosesNothing: on a full file system a write
// fails with the system's "no space left" error, everything committed before
// stays readable, writes work again once there is room, and all of it is
// there after a reopen.
func TestFullDiskFailsCleanlyAndLosesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := filepath.Join(t.TempDir(), "small")
	os.Mkdir(dir, 0o700)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Leave the store a little room, then fill it with leases.
	filler := filepath.Join(dir, "filler")
	if out, err := exec.Command("fallocate", "-l", "3m", filler).CombinedOutput(); err != nil {
		t.Fatalf("fallocate: %v %s", err, out)
	}
	value := core.Lease{MAC: "02:00:00:00:00:01", State: core.LeaseActive, Hostname: strings.Repeat("h", 200)}
	committed := 0
	var werr error
	for i := 0; i < 100000 && werr == nil; i++ {
		werr = s.Update(func(tx core.Tx) error {
			for j := 0; j < 50; j++ {
				l := value
				l.IP = fmt.Sprintf("10.99.%d.%d", (committed+j)/250, (committed+j)%250)
				if err := tx.Leases().Put(l); err != nil {
					return err
				}
			}
			return nil
		})
		if werr == nil {
			committed += 50
		}
	}
	if werr == nil || !strings.Contains(werr.Error(), "no space left") {
		t.Fatalf("write on a full disk: %v, want no space left on device", werr)
	}
	if committed == 0 {
		t.Fatal("nothing fit before the disk was full")
	}
	t.Logf("%d leases committed, then: %v", committed, werr)
	count := func(s *Store) int {
		n := 0
		if err := s.View(func(tx core.Tx) error {
			return tx.Leases().List("", func(core.Lease) (bool, error) { n++; return true, nil })
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(s); n != committed {
		t.Fatalf("%d leases readable after the failed write, %d committed", n, committed)
	}
	// Room again: the same open store takes writes without a restart.
	os.Remove(filler)
	if err := s.Update(func(tx core.Tx) error { v := value; v.IP = "10.99.251.1"; return tx.Leases().Put(v) }); err != nil {
		t.Fatalf("write once there is room again: %v", err)
	}
	committed++
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if n := count(s); n != committed {
		t.Fatalf("%d leases after reopen, %d committed", n, committed)
	}
}

// TestAuditEventsMoveToTheirBucket: a store written before the audit trail
// had a bucket of its own (schema 1) keeps every event; the audit ones move
// to the audit bucket under their keys, device events stay.
func TestAuditEventsMoveToTheirBucket(t *testing.T) {
	s, dir := openTemp(t)
	err := s.db.Update(func(btx *bolt.Tx) error {
		if err := btx.DeleteBucket([]byte(kv.BucketAudit)); err != nil {
			return err
		}
		ev := btx.Bucket([]byte(kv.BucketEvents))
		for i, typ := range []string{"dhcp.ack", "cluster.created", "ztp.json.served", "apikey.created", "device.approved"} {
			k := fmt.Sprintf("%020d", i+1)
			if err := ev.Put([]byte(k), []byte(fmt.Sprintf(`{"seq":%d,"type":%q}`, i+1, typ))); err != nil {
				return err
			}
		}
		return btx.Bucket([]byte(kv.BucketMeta)).Put([]byte(schemaKey), []byte("1"))
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	keys := func(st core.EventStream) (out []string) {
		s.View(func(tx core.Tx) error {
			return tx.Events().List(st, 0, func(e core.Event) (bool, error) {
				out = append(out, fmt.Sprintf("%d %s", e.Seq, e.Type))
				return true, nil
			})
		})
		return out
	}
	if got := strings.Join(keys(core.DeviceEvents), ","); got != "1 dhcp.ack,3 ztp.json.served" {
		t.Fatalf("device events %s", got)
	}
	if got := strings.Join(keys(core.AuditEvents), ","); got != "2 cluster.created,4 apikey.created,5 device.approved" {
		t.Fatalf("audit events %s", got)
	}
	if v, _ := s.Schema(); v != SchemaVersion {
		t.Fatalf("schema %d", v)
	}
}

// deviceIndex is every device event index key in the store.
func deviceIndex(t *testing.T, s *Store) (keys []string) {
	t.Helper()
	err := s.db.View(func(btx *bolt.Tx) error {
		return btx.Bucket([]byte(kv.BucketIndex)).ForEach(func(k, _ []byte) error {
			if strings.HasPrefix(string(k), "device-event/") {
				keys = append(keys, string(k))
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestPruneRemovesDeviceIndexEntries: pruned events leave no index entry
// behind (the index would otherwise grow without bound).
func TestPruneRemovesDeviceIndexEntries(t *testing.T) {
	s, _ := openTemp(t)
	err := s.Update(func(tx core.Tx) error {
		for i := range 10 {
			if _, err := tx.Events().Append(core.Event{Type: "dhcp.ack", Device: fmt.Sprintf("aa:%02d", i%3)}); err != nil {
				return err
			}
		}
		_, err := tx.Events().Append(core.Event{Type: "device.approved", Device: "aa:00"})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(deviceIndex(t, s)); n != 11 {
		t.Fatalf("%d index entries for 11 events", n)
	}
	err = s.Update(func(tx core.Tx) error {
		_, _, err := tx.Events().Prune(core.DeviceEvents, 4)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(deviceIndex(t, s), ",")
	// Events 7..10 remain (devices aa:00, aa:01, aa:02, aa:00) and the audit one.
	if want := "device-event/audit/aa:00/00000000000000000011,device-event/events/aa:00/00000000000000000007," +
		"device-event/events/aa:00/00000000000000000010,device-event/events/aa:01/00000000000000000008," +
		"device-event/events/aa:02/00000000000000000009"; got != want {
		t.Fatalf("index after prune: %s", got)
	}
}

// TestDeviceEventIndexIsBuiltAtOpen: a store of schema 2 (events, no
// device index) gets the index when it is opened, and opening it again
// (the migration run twice) changes nothing.
func TestDeviceEventIndexIsBuiltAtOpen(t *testing.T) {
	s, dir := openTemp(t)
	err := s.Update(func(tx core.Tx) error {
		for _, e := range []core.Event{{Type: "dhcp.ack", Device: "aa:01"}, {Type: "dhcp.ack", Device: "aa:02"},
			{Type: "device.approved", Device: "aa:01"}, {Type: "dhcp.ack"}, {Type: "ztp.served", Device: "aa:01"}} {
			if _, err := tx.Events().Append(e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join(deviceIndex(t, s), ",")
	keys := deviceIndex(t, s)
	err = s.db.Update(func(btx *bolt.Tx) error {
		for _, k := range keys {
			if err := btx.Bucket([]byte(kv.BucketIndex)).Delete([]byte(k)); err != nil {
				return err
			}
		}
		return btx.Bucket([]byte(kv.BucketMeta)).Put([]byte(schemaKey), []byte("2"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(deviceIndex(t, s)); n != 0 {
		t.Fatalf("%d index entries left", n)
	}
	for range 2 {
		s.Close()
		if s, err = Open(dir, Options{}); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(deviceIndex(t, s), ","); got != want {
			t.Fatalf("index after open:\n%s\nwant\n%s", got, want)
		}
		var seqs []uint64
		s.View(func(tx core.Tx) error {
			return tx.Events().ListDeviceBackward(core.DeviceEvents, "aa:01", 0, func(e core.Event) (bool, error) {
				seqs = append(seqs, e.Seq)
				return true, nil
			})
		})
		if fmt.Sprint(seqs) != "[5 1]" {
			t.Fatalf("aa:01 newest first: %v", seqs)
		}
		if v, _ := s.Schema(); v != SchemaVersion {
			t.Fatalf("schema %d", v)
		}
		// Run the migration once more over the migrated store: idempotent.
		s.db.Update(func(btx *bolt.Tx) error { return btx.Bucket([]byte(kv.BucketMeta)).Put([]byte(schemaKey), []byte("2")) })
	}
	s.Close()
}

// The repository contract every store must keep (storetest.Conformance)
// lives in storetest, which imports this package; conformance_test.go in
// package boltstore_test runs it.

// TestCorruptRecordCostsOnlyItself: a listing goes on past a record it
// cannot decode, visits every readable one, and then says which it skipped.
func TestCorruptRecordCostsOnlyItself(t *testing.T) {
	s, _ := openTemp(t)
	for _, ip := range []string{"10.99.0.1", "10.99.0.3"} {
		if err := s.Update(func(tx core.Tx) error { return tx.Leases().Put(core.Lease{IP: ip, MAC: "m"}) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.db.Update(func(btx *bolt.Tx) error {
		return btx.Bucket([]byte(kv.BucketLeases)).Put([]byte("10.99.0.2"), []byte(`{"ip":`))
	}); err != nil {
		t.Fatal(err)
	}
	var seen []string
	err := s.View(func(tx core.Tx) error {
		return tx.Leases().List("", func(l core.Lease) (bool, error) { seen = append(seen, l.IP); return true, nil })
	})
	var ce *core.CorruptError
	if !errors.As(err, &ce) || ce.Count != 1 || len(ce.Keys) != 1 || ce.Keys[0] != "10.99.0.2" {
		t.Fatalf("listing with a corrupt record: %v, want a CorruptError naming 10.99.0.2", err)
	}
	if strings.Join(seen, ",") != "10.99.0.1,10.99.0.3" {
		t.Fatalf("visited %v, want both readable leases", seen)
	}
	err = s.View(func(tx core.Tx) error { _, err := tx.Leases().Get("10.99.0.2"); return err })
	if err == nil || errors.Is(err, core.ErrNotFound) {
		t.Fatalf("get of a corrupt record: %v, want a decode error", err)
	}
}

// Appended events fill their pages: bbolt's default split at half a page
// left the append-only buckets half empty.
func TestAppendedEventsFillTheirPages(t *testing.T) {
	s, _ := openTemp(t)
	for i := 0; i < 20; i++ {
		if err := s.Update(func(tx core.Tx) error {
			for j := 0; j < 500; j++ {
				e := core.Event{Type: "dhcp.ack", Device: fmt.Sprintf("02:00:00:00:%02x:%02x", i, j%256), Message: "lease granted"}
				if _, err := tx.Events().Append(e); err != nil {
					return err
				}
				if _, err := tx.Events().Append(core.Event{Type: "apikey.created", Message: "API key created"}); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.db.View(func(tx *bolt.Tx) error {
		for _, b := range []kv.Bucket{kv.BucketEvents, kv.BucketAudit} {
			st := tx.Bucket([]byte(b)).Stats()
			if fill := float64(st.LeafInuse) / float64(st.LeafAlloc); fill < 0.85 {
				t.Errorf("bucket %s: leaf pages %.0f%% full (%d of %d bytes), want >= 85%%", b, 100*fill, st.LeafInuse, st.LeafAlloc)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestDeviceStateIndexIsBuiltAtOpen: a store of schema 3 (devices, no
// state index) gets the index when it is opened, twice over (idempotent).
func TestDeviceStateIndexIsBuiltAtOpen(t *testing.T) {
	s, dir := openTemp(t)
	err := s.Update(func(tx core.Tx) error {
		for i, st := range []core.DeviceState{core.StateJoined, core.StateLeased, core.StateJoined} {
			id := fmt.Sprintf("aa:%02d", i)
			if err := tx.Devices().Put(core.Device{ID: id, MAC: id, State: st}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	joined := func() string {
		var ids []string
		if err := s.View(func(tx core.Tx) error {
			return tx.Devices().ListState(core.StateJoined, "", func(d core.Device) (bool, error) {
				ids = append(ids, d.ID)
				return true, nil
			})
		}); err != nil {
			t.Fatal(err)
		}
		return strings.Join(ids, ",")
	}
	if got := joined(); got != "aa:00,aa:02" {
		t.Fatalf("joined: %s", got)
	}
	err = s.db.Update(func(btx *bolt.Tx) error {
		c := btx.Bucket([]byte(kv.BucketIndex)).Cursor()
		for k, _ := c.Seek([]byte("device-state/")); k != nil && bytes.HasPrefix(k, []byte("device-state/")); k, _ = c.Seek([]byte("device-state/")) {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return btx.Bucket([]byte(kv.BucketMeta)).Put([]byte(schemaKey), []byte("3"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := joined(); got != "" {
		t.Fatalf("joined without the index: %s", got)
	}
	for range 2 {
		s.Close()
		if s, err = Open(dir, Options{}); err != nil {
			t.Fatal(err)
		}
		if got := joined(); got != "aa:00,aa:02" {
			t.Fatalf("joined after open: %s", got)
		}
		s.db.Update(func(btx *bolt.Tx) error { return btx.Bucket([]byte(kv.BucketMeta)).Put([]byte(schemaKey), []byte("3")) })
	}
	s.Close()
}

// A transaction keeps the buckets it opened (a few, most recent first):
// reads and writes that move between more buckets than it keeps still reach
// the right one, in a read transaction and in a write.
func TestTransactionReachesEveryBucketItKeepsOrNot(t *testing.T) {
	s, _ := openTemp(t)
	buckets := []kv.Bucket{kv.BucketDevices, kv.BucketLeases, kv.BucketClusters, kv.BucketVersions,
		kv.BucketTokens, kv.BucketMemberships, kv.BucketImages}
	order := []int{0, 1, 0, 2, 3, 4, 5, 6, 0, 6, 1, 5, 2, 4, 3, 3, 0}
	err := s.db.Update(func(btx *bolt.Tx) error {
		raw := newRawTx(btx)
		for _, i := range order {
			if err := raw.Put(buckets[i], "k", []byte(buckets[i])); err != nil {
				return err
			}
			if v, err := raw.Get(buckets[i], "k"); err != nil || string(v) != string(buckets[i]) {
				return fmt.Errorf("write: %s holds %q %v", buckets[i], v, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.db.View(func(btx *bolt.Tx) error {
		raw := newRawTx(btx)
		for range 2 {
			for _, i := range order {
				if v, err := raw.Get(buckets[i], "k"); err != nil || string(v) != string(buckets[i]) {
					return fmt.Errorf("read: %s holds %q %v", buckets[i], v, err)
				}
			}
		}
		if _, err := raw.Get("no-such-bucket", "k"); err == nil {
			return errors.New("a missing bucket was opened")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
