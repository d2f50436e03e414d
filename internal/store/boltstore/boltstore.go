// Package boltstore implements core.Store on one bbolt file.
//
// Durability promise: Update and Batch return nil only after the transaction's
// pages and meta page have been fsynced (bbolt's default commit). Batch joins
// every caller waiting at the moment a commit starts into that one commit, so
// throughput grows with concurrency without any added delay.
package boltstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/kv"
)

// FileName is the bbolt file inside the data directory.
const FileName = "ztpd.db"

const pidFileName = "ztpd.pid"

// ErrLocked means another process holds the data directory.
var ErrLocked = errors.New("data directory is in use by another ztpd")

const defaultLockTimeout = 200 * time.Millisecond

// Options tune Open.
type Options struct {
	// LockTimeout bounds the wait for the file lock; a held lock is reported as
	// ErrLocked instead of hanging. Default 200ms.
	LockTimeout time.Duration
	// ReadOnly opens the store for reading (shared lock).
	ReadOnly bool
	// MaxBatch bounds callers per group commit. Default 4096.
	MaxBatch int
	// Registerer takes the commit metrics (nil: kept, not exported).
	Registerer prometheus.Registerer
}

// Store is a bbolt-backed core.Store.
type Store struct {
	db       *bolt.DB
	dir      string
	group    *kv.Group // Batch's group committer (nil when read-only)
	metrics  *kv.CommitMetrics
	closeMu  sync.Once
	closeErr error

	// gens counts write transactions per core.Aggregate, bumped after
	// they end (see core.Generations).
	gens [core.NumAggregates]atomic.Uint64
	// caches are the decoded-record caches every transaction shares.
	caches kv.Caches
}

// Generation implements core.Generations: the sum of the write counts of
// as, which grows whenever a write transaction that changed any of them
// has ended.
func (s *Store) Generation(as ...core.Aggregate) uint64 {
	var n uint64
	for _, a := range as {
		if a >= 0 && a < core.NumAggregates {
			n += s.gens[a].Load()
		}
	}
	return n
}

// bump counts a write transaction for every aggregate it touched. It runs
// after bbolt's Update returned, so a reader that saw the new count opens
// a snapshot holding the write. Failed transactions count too: a spurious
// change costs a reader a rebuild, a missed one would serve stale data.
func (s *Store) bump(t *kv.Tx) {
	if t == nil {
		return
	}
	dirty := t.Dirty()
	for dirty != 0 {
		i := bits.TrailingZeros64(dirty)
		s.gens[i].Add(1)
		dirty &^= 1 << i
	}
}

// Open opens (creating if needed) the store in dir, takes its lock, and brings
// its schema up to date.
const initialMmapSize = 1 << 30

func Open(dir string, opts Options) (*Store, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = defaultLockTimeout
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 4096
	}
	if !opts.ReadOnly {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create data directory: %w", err)
		}
	}
	path := filepath.Join(dir, FileName)
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:        opts.LockTimeout,
		ReadOnly:       opts.ReadOnly,
		FreelistType:   bolt.FreelistMapType,
		NoFreelistSync: true,
		// Growing the file past the mapping remaps it, and a remap waits for
		// every open read transaction and blocks new ones: a stall on the
		// request path each time the store grows. Reserving 1 GiB of address
		// space up front (not memory) removes those stalls until then.
		InitialMmapSize: initialMmapSize,
	})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("%w: %s%s (stop it, or use another --data-dir)", ErrLocked, dir, holderHint(dir))
		}
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s := &Store{db: db, dir: dir, metrics: kv.NewCommitMetrics(opts.Registerer)}
	if !opts.ReadOnly {
		if err := s.migrate(); err != nil {
			db.Close()
			return nil, err
		}
		_ = os.WriteFile(filepath.Join(dir, pidFileName), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600)
		s.group = kv.NewGroup(opts.MaxBatch, s.commit, s.metrics)
	}
	return s, nil
}

func holderHint(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, pidFileName))
	if err != nil {
		return ""
	}
	return fmt.Sprintf(" (held by pid %s)", strings.TrimSpace(string(b)))
}

// Dir returns the data directory.
func (s *Store) Dir() string { return s.dir }

// Close stops the group committer, then closes the file and releases the lock.
func (s *Store) Close() error {
	s.closeMu.Do(func() {
		if s.group != nil {
			s.group.Close()
			_ = os.Remove(filepath.Join(s.dir, pidFileName))
		}
		s.closeErr = s.db.Close()
	})
	return s.closeErr
}

// View implements core.Store.
func (s *Store) View(fn func(core.Tx) error) error {
	return s.db.View(func(btx *bolt.Tx) error { return fn(kv.NewTx(newRawTx(btx), &s.caches)) })
}

// Update implements core.Store.
func (s *Store) Update(fn func(core.Tx) error) error {
	start := time.Now()
	_, err := s.commit([]func(core.Tx) error{fn})
	if err == nil {
		s.metrics.ObserveCommit(1, start)
	}
	return err
}

// Batch implements core.Store with group commit (kv.Group).
func (s *Store) Batch(fn func(core.Tx) error) error {
	if s.group == nil {
		return errors.New("store is open read-only")
	}
	return s.group.Batch(fn)
}

// commit runs fns in one bbolt write transaction (kv.CommitFunc).
func (s *Store) commit(fns []func(core.Tx) error) (int, error) {
	failed := -1
	var t *kv.Tx
	err := s.db.Update(func(btx *bolt.Tx) error {
		t = kv.NewTx(newRawTx(btx), &s.caches)
		for i, fn := range fns {
			if err := fn(t); err != nil {
				failed = i
				return err
			}
		}
		return nil
	})
	s.bump(t)
	return failed, err
}

// Backup implements core.Store: a consistent hot copy from one read transaction.
func (s *Store) Backup(w io.Writer) (int64, error) { return s.BackupSized(w, nil) }

// BackupSized is Backup that first tells size the exact byte count, so a
// streamed copy can carry a Content-Length and truncation is detectable.
func (s *Store) BackupSized(w io.Writer, size func(int64)) (int64, error) {
	var n int64
	err := s.db.View(func(btx *bolt.Tx) error {
		if size != nil {
			size(btx.Size())
		}
		var err error
		n, err = btx.WriteTo(w)
		return err
	})
	return n, err
}

// Snapshot runs fn in one read transaction: tx reads the records and
// writeTo writes that same state as a complete store file of size bytes
// (it may be called more than once, always writing the same bytes), so a
// backup's file and what it says about the records agree exactly.
func (s *Store) Snapshot(fn func(tx core.Tx, size int64, writeTo func(io.Writer) (int64, error)) error) error {
	return s.db.View(func(btx *bolt.Tx) error {
		return fn(kv.NewTx(newRawTx(btx), &s.caches), btx.Size(), btx.WriteTo)
	})
}

// BackupToFile writes a consistent copy to path atomically (temp file, fsync,
// rename), so an interrupted backup never leaves a truncated file under path.
func (s *Store) BackupToFile(path string) (int64, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".ztpd-backup-*")
	if err != nil {
		return 0, fmt.Errorf("backup: %w", err)
	}
	defer os.Remove(tmp.Name())
	n, err := s.Backup(tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o600)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return 0, fmt.Errorf("backup to %s: %w", path, err)
	}
	return n, nil
}

// rawTx is a bolt transaction as kv.Raw. It keeps the buckets it opened:
// bbolt keeps them only for writable transactions, so a read opened its
// bucket again for every Get (a seek in the root and a Bucket allocated:
// an events page of a device's 13 events opened 14).
type rawTx struct {
	b    *bolt.Tx
	open [4]openBucket // the most recently opened first
}

type openBucket struct {
	name kv.Bucket
	bk   *bolt.Bucket
}

func newRawTx(btx *bolt.Tx) *rawTx { return &rawTx{b: btx} }

func (t *rawTx) bucket(b kv.Bucket) (*bolt.Bucket, error) {
	for i, o := range t.open {
		if o.name == b && o.bk != nil {
			if i > 0 {
				copy(t.open[1:i+1], t.open[:i])
				t.open[0] = o
			}
			return o.bk, nil
		}
	}
	bk := t.b.Bucket([]byte(b))
	if bk == nil {
		return nil, fmt.Errorf("store has no bucket %q", b)
	}
	if b == kv.BucketEvents || b == kv.BucketAudit {
		// Keys are increasing sequences: a split page never gets another
		// key, so bbolt's default split at half a page left these buckets
		// half empty (events + audit were 26 of the 88 MB of pages at
		// 10,000 devices, for 11 MB of records).
		bk.FillPercent = appendFillPercent
	}
	copy(t.open[1:], t.open[:len(t.open)-1])
	t.open[0] = openBucket{b, bk}
	return bk, nil
}

// appendFillPercent is how full bbolt fills a page of an append-only bucket
// before splitting it.
const appendFillPercent = 0.95

func (t *rawTx) Writable() bool { return t.b.Writable() }

func (t *rawTx) Get(b kv.Bucket, key string) ([]byte, error) {
	bk, err := t.bucket(b)
	if err != nil {
		return nil, err
	}
	return bk.Get([]byte(key)), nil
}

func (t *rawTx) Put(b kv.Bucket, key string, value []byte) error {
	bk, err := t.bucket(b)
	if err != nil {
		return err
	}
	// bbolt keeps the slice until commit; callers reuse theirs.
	return bk.Put([]byte(key), bytes.Clone(value))
}

func (t *rawTx) Delete(b kv.Bucket, key string) error {
	bk, err := t.bucket(b)
	if err != nil {
		return err
	}
	return bk.Delete([]byte(key))
}

func (t *rawTx) Scan(b kv.Bucket, after string, fn func(string, []byte) (bool, error)) error {
	bk, err := t.bucket(b)
	if err != nil {
		return err
	}
	c := bk.Cursor()
	var k, v []byte
	if after == "" {
		k, v = c.First()
	} else {
		k, v = c.Seek([]byte(after))
		if k != nil && string(k) == after {
			k, v = c.Next()
		}
	}
	for ; k != nil; k, v = c.Next() {
		more, err := fn(string(k), v)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

func (t *rawTx) ScanReverse(b kv.Bucket, before string, fn func(string, []byte) (bool, error)) error {
	bk, err := t.bucket(b)
	if err != nil {
		return err
	}
	c := bk.Cursor()
	var k, v []byte
	if before == "" {
		k, v = c.Last()
	} else if k, _ = c.Seek([]byte(before)); k == nil {
		k, v = c.Last() // every key is below before
	} else {
		k, v = c.Prev() // Seek lands on the first key >= before
	}
	for ; k != nil; k, v = c.Prev() {
		more, err := fn(string(k), v)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

func (t *rawTx) ScanPrefix(b kv.Bucket, prefix string, fn func(string, []byte) (bool, error)) error {
	bk, err := t.bucket(b)
	if err != nil {
		return err
	}
	c := bk.Cursor()
	p := []byte(prefix)
	for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
		more, err := fn(string(k), v)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

func (t *rawTx) Count(b kv.Bucket) (int, error) {
	bk, err := t.bucket(b)
	if err != nil {
		return 0, err
	}
	return bk.Stats().KeyN, nil
}

func (t *rawTx) NextSequence(b kv.Bucket) (uint64, error) {
	bk, err := t.bucket(b)
	if err != nil {
		return 0, err
	}
	return bk.NextSequence()
}

func (t *rawTx) Sequence(b kv.Bucket) (uint64, error) {
	bk, err := t.bucket(b)
	if err != nil {
		return 0, err
	}
	return bk.Sequence(), nil
}

// PutRaw stores value at key of bucket b in the closed store in dir,
// bypassing the repositories. Tests use it (storetest.CorruptRecord) to
// damage a record on purpose.
func PutRaw(dir string, b kv.Bucket, key string, value []byte) error {
	db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return err
	}
	defer db.Close()
	return db.Update(func(btx *bolt.Tx) error {
		bk := btx.Bucket([]byte(b))
		if bk == nil {
			return fmt.Errorf("store has no bucket %q", b)
		}
		return bk.Put([]byte(key), value)
	})
}
