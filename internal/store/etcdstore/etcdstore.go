// Package etcdstore implements core.Store on etcd, so several
// appliances share one store: an external etcd cluster, or one embedded
// member per appliance (embedded.go). The schema is kv's, as on bbolt;
// this package only supplies kv.Raw.
//
// Transactions are optimistic. A transaction reads one snapshot (the
// revision of its first read) and buffers its writes; the commit is one
// etcd Txn that succeeds only if nothing it read changed since:
//   - every key it read keeps the ModRevision it had (0 for a key that was
//     absent, so a key created meanwhile conflicts too);
//   - every range it scanned has no key modified after the snapshot
//     (a range compare, which catches inserts and updates);
//   - deletions leave no key to compare, so a delete also writes a marker,
//     _del/<bucket>/<key's directory>, and a scan compares the markers of
//     the directories of the keys it saw (a key it saw that is gone now was
//     deleted after the snapshot, so its directory's marker moved).
//
// A conflict runs the transaction again on a new snapshot, so Update and
// Batch callers' fns may run more than once (core.Store says so). One
// writer at a time per process, as on bbolt, so conflicts only come from
// other appliances.
//
// Durability: etcd answers a Txn once a quorum of members has it in their
// fsynced logs, so Update and Batch return nil only then.
//
// Change counts (core.Generations): a commit writes _gen/<aggregate> for
// every aggregate it changed, and every store watches _gen/, so another
// appliance's write moves this one's counts, a watch delivery later.
package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/internal/store/kv"
)

// DefaultPrefix is where ztpd's keys live in etcd.
const DefaultPrefix = "/ztpd/"

// DefaultMaxTxnOps is etcd's own default --max-txn-ops.
const DefaultMaxTxnOps = 128

// ErrConflict means a transaction kept conflicting with other appliances'
// writes and gave up.
var ErrConflict = errors.New("store transaction kept conflicting with other appliances' writes")

// metrics are the etcd engine's own, beside kv's commit metrics.
type metrics struct {
	commitResends  prometheus.Counter
	conflictsTotal prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) metrics {
	f := promauto.With(reg)
	return metrics{
		commitResends: f.NewCounter(prometheus.CounterOpts{
			Name: "ztpd_store_commit_resends_total",
			Help: "etcd commits sent again after a send whose outcome was unknown (a timeout, a lost leader); at most one send applies.",
		}),
		conflictsTotal: f.NewCounter(prometheus.CounterOpts{
			Name: "ztpd_store_conflicts_total",
			Help: "Store transactions run again because another appliance changed what they read (etcd backend).",
		}),
	}
}

// Options configure Open.
type Options struct {
	// Client is the connection to etcd (required; the caller closes it).
	Client *clientv3.Client
	// Prefix of every key (default DefaultPrefix), so one etcd cluster can
	// hold several ztpd installations.
	Prefix string
	// Name of this appliance, written with each change marker.
	Name string
	// TempDir holds a backup's temporary bbolt copy (the data directory).
	TempDir string
	// MaxTxnOps is the etcd cluster's --max-txn-ops: a transaction that
	// reads more keys than half of it compares whole buckets instead.
	MaxTxnOps int
	// MaxBatch bounds callers per group commit (default 512).
	MaxBatch int
	// Timeout bounds one etcd request (default 10 s).
	Timeout time.Duration
	// LocalMember says Client talks to this process's own member only
	// (embedded): reads are then served by it without a quorum round trip,
	// and see every write this process committed.
	LocalMember bool
	// Init says what Open does with a prefix that holds no store yet.
	Init InitMode
	// SequenceID (0..7) makes this appliance's event sequence numbers
	// distinct from the others' (see timeSequence).
	SequenceID int
	Log        *slog.Logger
	// Registerer takes the store's metrics (nil: kept, not exported).
	Registerer prometheus.Registerer
}

// InitMode is what Open does when the prefix holds no schema version.
type InitMode int

const (
	// InitCreate records the schema version in an empty prefix: the store
	// starts empty.
	InitCreate InitMode = iota
	// InitWait waits (logging) until another appliance has created the
	// store or loaded one into it (store migrate), so appliances started
	// together do not each write a first-start state.
	InitWait
	// InitNone leaves an empty prefix as it is: the destination of a copy,
	// which records the schema version last. It also opens a store of an
	// older schema, as the source of a copy: etcd stores are migrated
	// through bbolt (store migrate --to bolt, whose file boltstore
	// migrates when it opens it, then --to etcd), so that copy must read
	// what this ztpd refuses to serve.
	InitNone
)

// Store is an etcd-backed core.Store.
type Store struct {
	cli     *clientv3.Client
	p       string
	name    string
	tmpDir  string
	maxOps  int
	timeout time.Duration
	local   bool
	log     *slog.Logger
	commits *kv.CommitMetrics
	metrics metrics

	writeMu sync.Mutex // one writer per process
	// markRev is the commit marker's revision as this process last saw it
	// (0: no marker yet, -1: to be read again; writeMu).
	markRev int64
	group   *kv.Group
	caches  kv.Caches
	gens    [core.NumAggregates]atomic.Uint64

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once

	seqMu  sync.Mutex
	seqID  uint64
	seqTop uint64 // the last event sequence number handed out
}

// Open checks (or, on an empty prefix, records) the schema version and
// starts the change watch and the group committer.
func Open(opts Options) (*Store, error) {
	if opts.Client == nil {
		return nil, errors.New("etcdstore: no etcd client")
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(opts.Prefix, "/") {
		opts.Prefix += "/"
	}
	if opts.MaxTxnOps <= 0 {
		opts.MaxTxnOps = DefaultMaxTxnOps
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 512
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Store{cli: opts.Client, p: opts.Prefix, name: opts.Name, tmpDir: opts.TempDir, maxOps: opts.MaxTxnOps,
		timeout: opts.Timeout, local: opts.LocalMember, log: opts.Log, ctx: ctx, cancel: cancel, markRev: -1,
		commits: kv.NewCommitMetrics(opts.Registerer), metrics: newMetrics(opts.Registerer)}
	if opts.SequenceID < 0 || opts.SequenceID >= seqSlots {
		cancel()
		return nil, fmt.Errorf("etcdstore: sequence id %d is outside 0..%d", opts.SequenceID, seqSlots-1)
	}
	s.seqID = uint64(opts.SequenceID)
	rev, err := s.initSchema(opts.Init)
	if err != nil {
		cancel()
		return nil, err
	}
	if opts.Init != InitNone {
		if s.seqTop, err = s.newestEvent(); err != nil {
			cancel()
			return nil, err
		}
	}
	s.wg.Add(1)
	go s.watchChanges(rev)
	s.group = kv.NewGroup(opts.MaxBatch, s.commit, s.commits)
	return s, nil
}

const schemaKey = "schema_version"

// initSchema records the schema version in an empty prefix (InitCreate:
// once, even if several appliances start together), or waits for it
// (InitWait), and refuses a store of another schema. It returns the
// revision the change watch starts after.
func (s *Store) initSchema(mode InitMode) (int64, error) {
	key := s.key(kv.BucketMeta, schemaKey)
	start := time.Now()
	logged := start
	for {
		ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpGet(s.p, clientv3.WithPrefix(), clientv3.WithCountOnly())).
			Else(clientv3.OpGet(key)).Commit()
		cancel()
		if err != nil {
			return 0, fmt.Errorf("etcd store at %q: %w", s.p, err)
		}
		if !resp.Succeeded {
			kvs := resp.Responses[0].GetResponseRange().Kvs
			if len(kvs) == 0 {
				return 0, fmt.Errorf("etcd store at %q: schema version vanished", s.p)
			}
			if mode == InitNone {
				return resp.Header.Revision, checkCopySchema(kvs[0].Value)
			}
			return resp.Header.Revision, checkSchema(kvs[0].Value)
		}
		n := resp.Responses[0].GetResponseRange().Count
		switch mode {
		case InitNone:
			return resp.Header.Revision, nil
		case InitWait:
			if time.Since(logged) >= 5*time.Second {
				logged = time.Now()
				s.log.Info("waiting for the first appliance to create the store (ztpd serve or ztpd store migrate there)",
					"prefix", s.p, "waited", time.Since(start).Round(time.Second))
			}
			select {
			case <-s.ctx.Done():
				return 0, s.ctx.Err()
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		if n > 0 {
			return 0, fmt.Errorf("etcd prefix %q holds %d keys but no ztpd schema version: not a ztpd store, or a copy into it was interrupted (use another prefix, or clear it with etcdctl del --prefix)", s.p, n)
		}
		ctx, cancel = context.WithTimeout(s.ctx, s.timeout)
		put, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, strconv.Itoa(boltstore.SchemaVersion))).Commit()
		cancel()
		if err != nil {
			return 0, fmt.Errorf("etcd store at %q: record schema: %w", s.p, err)
		}
		if put.Succeeded {
			return put.Header.Revision, nil
		}
		// another appliance recorded it first: read it on the next turn
	}
}

func checkSchema(raw []byte) error {
	v, err := checkedSchema(raw)
	if err == nil && v < boltstore.SchemaVersion {
		return fmt.Errorf("etcd store schema version %d is older than this ztpd's (%d): migrate it through bbolt (ztpd store migrate --to bolt, then --to etcd)", v, boltstore.SchemaVersion)
	}
	return err
}

// checkCopySchema is checkSchema for the source of a copy (InitNone): an
// older schema is what a migration through bbolt copies out.
func checkCopySchema(raw []byte) error {
	_, err := checkedSchema(raw)
	return err
}

// checkedSchema is the schema version raw records, if this ztpd can read
// it (it is not newer).
func checkedSchema(raw []byte) (int, error) {
	v, err := strconv.Atoi(string(raw))
	if err != nil {
		return 0, fmt.Errorf("etcd store: schema version %q is not a number", raw)
	}
	if v > boltstore.SchemaVersion {
		return 0, fmt.Errorf("etcd store schema version %d is newer than this ztpd supports (%d); upgrade ztpd", v, boltstore.SchemaVersion)
	}
	return v, nil
}

// Schema returns the schema version recorded in the store: a quorum
// read, bounded by one attempt's time, so /healthz answers promptly when
// this appliance has no quorum.
func (s *Store) Schema() (int, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.attemptTimeout())
	defer cancel()
	resp, err := s.cli.Get(ctx, s.key(kv.BucketMeta, schemaKey))
	if err != nil {
		return 0, fmt.Errorf("etcd store: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return 0, errors.New("etcd store: no schema version")
	}
	return strconv.Atoi(string(resp.Kvs[0].Value))
}

// Close stops the committer (after what is queued) and the watch. The
// client stays open: it belongs to the caller.
func (s *Store) Close() error {
	s.once.Do(func() {
		s.group.Close()
		s.cancel()
		s.wg.Wait()
	})
	return nil
}

// Generation implements core.Generations.
func (s *Store) Generation(as ...core.Aggregate) uint64 {
	var n uint64
	for _, a := range as {
		if a >= 0 && a < core.NumAggregates {
			n += s.gens[a].Load()
		}
	}
	return n
}

func (s *Store) bump(dirty uint64) {
	for dirty != 0 {
		i := bits.TrailingZeros64(dirty)
		s.gens[i].Add(1)
		dirty &^= 1 << i
	}
}

func (s *Store) bumpAll() {
	for i := range s.gens {
		s.gens[i].Add(1)
	}
}

// watchChanges follows the change markers every appliance's commits write
// and counts them, from the revision after rev.
func (s *Store) watchChanges(rev int64) {
	defer s.wg.Done()
	prefix := s.p + genDir
	for s.ctx.Err() == nil {
		wch := s.cli.Watch(clientv3.WithRequireLeader(s.ctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for resp := range wch {
			if err := resp.Err(); err != nil {
				if resp.CompactRevision > rev {
					rev = resp.CompactRevision - 1
				}
				s.bumpAll() // what was missed is unknown
				break
			}
			for _, ev := range resp.Events {
				if a, err := strconv.Atoi(strings.TrimPrefix(string(ev.Kv.Key), prefix)); err == nil && a >= 0 && a < int(core.NumAggregates) {
					s.gens[a].Add(1)
				}
				rev = ev.Kv.ModRevision
			}
		}
		select {
		case <-s.ctx.Done():
		case <-time.After(200 * time.Millisecond):
			s.bumpAll() // a lost watch may have missed changes
		}
	}
}

// Keys under the prefix: <bucket>/<key> for records, and the engine's own
// bookkeeping in directories no bucket is named like.
const (
	genDir = "_gen/" // _gen/<aggregate>: written by every commit that changed it
	delDir = "_del/" // _del/<bucket>/<markerDir(key)>: written by deletes
	seqDir = "_seq/" // _seq/<bucket>: the bucket's sequence
)

func (s *Store) key(b kv.Bucket, k string) string { return s.p + string(b) + "/" + k }

// bucketEnd is the end of b's key range (exclusive): '0' follows '/'.
func (s *Store) bucketEnd(b kv.Bucket) string { return s.p + string(b) + "0" }

// markerDir is the directory whose delete marker a deletion of k moves: k
// up to its last '/', at most two segments deep ("" without a slash). So
// index keys "<index name>/<value>" and "<index name>/<group>/<id>" get
// one marker per index or per group (device state, cluster), and the
// markers stay few however many keys are deleted.
func markerDir(k string) string {
	i := strings.IndexByte(k, '/')
	if i < 0 {
		return ""
	}
	if j := strings.IndexByte(k[i+1:], '/'); j >= 0 {
		return k[:i+1+j]
	}
	return k[:i]
}

// maxMarkerCompares bounds the single-marker compares of one scan: past
// it the scan compares its bucket's whole marker directory.
const maxMarkerCompares = 8

// View implements core.Store: one consistent snapshot.
func (s *Store) View(fn func(core.Tx) error) error {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	return fn(kv.NewTx(s.newRaw(ctx, false), &s.caches))
}

// Update implements core.Store.
func (s *Store) Update(fn func(core.Tx) error) error {
	start := time.Now()
	_, err := s.commit([]func(core.Tx) error{fn})
	if err == nil {
		s.commits.ObserveCommit(1, start)
	}
	return err
}

// Batch implements core.Store with group commit.
func (s *Store) Batch(fn func(core.Tx) error) error { return s.group.Batch(fn) }

const maxAttempts = 64

// commit runs fns in one optimistic transaction and commits it, running
// them again on a new snapshot while another appliance's write conflicts
// (kv.CommitFunc).
func (s *Store) commit(fns []func(core.Tx) error) (int, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithCancel(s.ctx)
		raw := s.newRaw(ctx, true)
		t := kv.NewTx(raw, &s.caches)
		for i, fn := range fns {
			if err := fn(t); err != nil {
				cancel()
				return i, err
			}
		}
		ok, err := raw.commit(t.Dirty())
		cancel()
		if err != nil {
			return -1, err
		}
		if ok {
			s.bump(t.Dirty())
			return -1, nil
		}
		s.metrics.conflictsTotal.Inc()
		if attempt == maxAttempts {
			return -1, ErrConflict
		}
		// Back off a little, more each time, so two appliances that keep
		// colliding fall out of step.
		time.Sleep(time.Duration(rand.IntN(attempt*2)+1) * time.Millisecond)
	}
}

// rawTx is one transaction as kv.Raw.
type rawTx struct {
	s     *Store
	ctx   context.Context
	write bool
	rev   int64 // the snapshot: 0 until the first read

	// Only in write transactions: what was read, for the commit's compares,
	// and what is to be written.
	reads  map[string]int64 // full key -> ModRevision seen (0: absent)
	ranges []span           // full-key ranges scanned
	over   map[kv.Bucket]map[string]change
	seqs   map[kv.Bucket]*sequence
}

type span struct{ from, end string } // end "" means the single key from

type change struct {
	v   []byte
	del bool
}

type sequence struct{ read, next uint64 }

func (s *Store) newRaw(ctx context.Context, write bool) *rawTx {
	t := &rawTx{s: s, ctx: ctx, write: write}
	if write {
		t.reads = map[string]int64{}
		t.over = map[kv.Bucket]map[string]change{}
		t.seqs = map[kv.Bucket]*sequence{}
	}
	return t
}

func (t *rawTx) Writable() bool { return t.write }

// get reads from the snapshot (taking it on the first read).
func (t *rawTx) get(key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	ctx, cancel := context.WithTimeout(t.ctx, t.s.timeout)
	defer cancel()
	if t.rev > 0 {
		// Served by the member the client talks to, at the snapshot; if
		// that member has not applied it yet, ask for a quorum read.
		resp, err := t.s.cli.Get(ctx, key, append(opts, clientv3.WithRev(t.rev), clientv3.WithSerializable())...)
		if errors.Is(err, rpctypes.ErrFutureRev) {
			resp, err = t.s.cli.Get(ctx, key, append(opts, clientv3.WithRev(t.rev))...)
		}
		return resp, t.s.readErr(err)
	}
	if t.s.local {
		opts = append(opts, clientv3.WithSerializable())
	}
	resp, err := t.s.cli.Get(ctx, key, opts...)
	if err != nil {
		return nil, t.s.readErr(err)
	}
	t.rev = resp.Header.Revision
	return resp, nil
}

func (s *Store) readErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, rpctypes.ErrCompacted):
		return fmt.Errorf("etcd store: the transaction's snapshot was compacted away (a very long read): %w", err)
	}
	return fmt.Errorf("etcd store: %w", err)
}

func (t *rawTx) overlay(b kv.Bucket) map[string]change {
	m := t.over[b]
	if m == nil {
		m = map[string]change{}
		t.over[b] = m
	}
	return m
}

func (t *rawTx) Get(b kv.Bucket, key string) ([]byte, error) {
	if t.write {
		if c, ok := t.over[b][key]; ok {
			if c.del {
				return nil, nil
			}
			return c.v, nil
		}
	}
	full := t.s.key(b, key)
	resp, err := t.get(full)
	if err != nil {
		return nil, err
	}
	var v []byte
	var mod int64
	if len(resp.Kvs) > 0 {
		v, mod = resp.Kvs[0].Value, resp.Kvs[0].ModRevision
	}
	if t.write {
		if _, seen := t.reads[full]; !seen {
			t.reads[full] = mod
		}
	}
	return v, nil
}

func (t *rawTx) Put(b kv.Bucket, key string, value []byte) error {
	if !t.write {
		return errors.New("etcd store: write in a read-only transaction")
	}
	t.overlay(b)[key] = change{v: append([]byte(nil), value...)}
	return nil
}

func (t *rawTx) Delete(b kv.Bucket, key string) error {
	if !t.write {
		return errors.New("etcd store: write in a read-only transaction")
	}
	t.overlay(b)[key] = change{del: true}
	return nil
}

func (t *rawTx) Scan(b kv.Bucket, after string, fn func(string, []byte) (bool, error)) error {
	lo := ""
	if after != "" {
		lo = after + "\x00"
	}
	return t.scan(b, lo, "", false, "", fn)
}

func (t *rawTx) ScanReverse(b kv.Bucket, before string, fn func(string, []byte) (bool, error)) error {
	return t.scan(b, "", before, true, "", fn)
}

func (t *rawTx) ScanPrefix(b kv.Bucket, prefix string, fn func(string, []byte) (bool, error)) error {
	hi := ""
	if prefix != "" {
		hi = prefixEnd(prefix)
	}
	return t.scan(b, prefix, hi, false, prefix, fn)
}

// prefixEnd is the least key greater than every key starting with p ("" if
// none is: p is all 0xff bytes).
func prefixEnd(p string) string {
	b := []byte(p)
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] < 0xff {
			b[i]++
			return string(b[:i+1])
		}
	}
	return ""
}

const pageSize = 1000

// scan visits b's keys in [lo, hi) (hi "" is the bucket's end), ascending
// or descending, merging the transaction's own writes in. A write
// transaction records what it covered for the commit's compares.
func (t *rawTx) scan(b kv.Bucket, lo, hi string, desc bool, prefix string, fn func(string, []byte) (bool, error)) error {
	from, end := t.s.key(b, lo), t.s.bucketEnd(b)
	if hi != "" {
		end = t.s.key(b, hi)
	}
	base := len(t.s.key(b, ""))
	// This transaction's writes in range as the scan begins (mine), and
	// their keys in visiting order (pending): the visit may write into b,
	// and what it writes does not change the walk under way.
	var pending []string
	var mine map[string]change
	if t.write {
		for k, c := range t.over[b] {
			if k >= lo && (hi == "" || k < hi) {
				pending = append(pending, k)
				if mine == nil {
					mine = map[string]change{}
				}
				mine[k] = c
			}
		}
		sort.Strings(pending)
		if desc {
			for i, j := 0, len(pending)-1; i < j; i, j = i+1, j-1 {
				pending[i], pending[j] = pending[j], pending[i]
			}
		}
	}
	// covered is how far the visit got, for the recorded range; seen are
	// the marker directories of the stored keys it reached.
	covered := ""
	stopped := false
	seen := map[string]bool{}
	defer func() {
		if !t.write {
			return
		}
		r := span{from: from, end: end}
		if stopped && covered != "" {
			if desc {
				r.from = t.s.key(b, covered)
			} else {
				r.end = t.s.key(b, covered) + "\x00"
			}
		}
		t.ranges = append(t.ranges, r)
		t.noteDeletes(b, seen)
	}()
	// emit visits one key; it reports whether to go on.
	emit := func(k string, v []byte) (bool, error) {
		covered = k
		more, err := fn(k, v)
		if err != nil || !more {
			stopped = true
			return false, err
		}
		return true, nil
	}
	// flush visits this transaction's writes that come before k (all of
	// them when k is "" at the end).
	flush := func(k string, last bool) (bool, error) {
		for len(pending) > 0 {
			p := pending[0]
			if !last && (desc && p <= k || !desc && p >= k) {
				return true, nil
			}
			pending = pending[1:]
			if c := mine[p]; !c.del {
				if more, err := emit(p, c.v); !more {
					return false, err
				}
			}
		}
		return true, nil
	}
	opts := []clientv3.OpOption{clientv3.WithLimit(pageSize)}
	if desc {
		opts = append(opts, clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
	} else {
		opts = append(opts, clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	}
	for {
		resp, err := t.get(from, append(opts, clientv3.WithRange(end))...)
		if err != nil {
			return err
		}
		for _, e := range resp.Kvs {
			k := string(e.Key[base:])
			if t.write && len(seen) <= maxMarkerCompares {
				seen[markerDir(k)] = true
			}
			if more, err := flush(k, false); !more {
				return err
			}
			if c, ok := mine[k]; ok {
				pending = pending[1:] // flush stopped at it: this transaction's version wins
				if c.del {
					continue
				}
				if more, err := emit(k, c.v); !more {
					return err
				}
				continue
			}
			if more, err := emit(k, e.Value); !more {
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		lastKey := string(resp.Kvs[len(resp.Kvs)-1].Key)
		if desc {
			end = lastKey
		} else {
			from = lastKey + "\x00"
		}
	}
	_, err := flush("", true)
	return err
}

// noteDeletes records, for the commit, the delete markers a scan of b
// depends on: those of the directories of the stored keys it saw (seen),
// or, when they are many or unknown (nil: a count), all of b's.
func (t *rawTx) noteDeletes(b kv.Bucket, seen map[string]bool) {
	dir := t.s.p + delDir + string(b) + "/"
	if seen == nil || len(seen) > maxMarkerCompares {
		t.ranges = append(t.ranges, span{from: dir, end: prefixEnd(dir)})
		return
	}
	for d := range seen {
		t.ranges = append(t.ranges, span{from: dir + d})
	}
}

func (t *rawTx) Count(b kv.Bucket) (int, error) {
	if t.write && len(t.over[b]) > 0 {
		n := 0
		err := t.scan(b, "", "", false, "", func(string, []byte) (bool, error) { n++; return true, nil })
		return n, err
	}
	resp, err := t.get(t.s.key(b, ""), clientv3.WithRange(t.s.bucketEnd(b)), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	if t.write {
		t.ranges = append(t.ranges, span{from: t.s.key(b, ""), end: t.s.bucketEnd(b)})
		t.noteDeletes(b, nil)
	}
	return int(resp.Count), nil
}

func (t *rawTx) seqKey(b kv.Bucket) string { return t.s.p + seqDir + string(b) }

func (t *rawTx) loadSequence(b kv.Bucket) (*sequence, error) {
	if t.write {
		if sq := t.seqs[b]; sq != nil {
			return sq, nil
		}
	}
	full := t.seqKey(b)
	resp, err := t.get(full)
	if err != nil {
		return nil, err
	}
	sq := &sequence{}
	var mod int64
	if len(resp.Kvs) > 0 {
		mod = resp.Kvs[0].ModRevision
		if sq.read, err = strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64); err != nil {
			return nil, fmt.Errorf("etcd store: sequence of %s is %q", b, resp.Kvs[0].Value)
		}
	}
	sq.next = sq.read
	if t.write {
		t.reads[full] = mod
		t.seqs[b] = sq
	}
	return sq, nil
}

func (t *rawTx) NextSequence(b kv.Bucket) (uint64, error) {
	if !t.write {
		return 0, errors.New("etcd store: sequence in a read-only transaction")
	}
	if b == kv.BucketEvents {
		return t.s.timeSequence(), nil
	}
	sq, err := t.loadSequence(b)
	if err != nil {
		return 0, err
	}
	sq.next++
	return sq.next, nil
}

func (t *rawTx) Sequence(b kv.Bucket) (uint64, error) {
	sq, err := t.loadSequence(b)
	if err != nil {
		return 0, err
	}
	if b == kv.BucketEvents {
		// Event numbers come from timeSequence: the newest stored is the
		// sequence a copy must go on from.
		for _, eb := range []kv.Bucket{kv.BucketEvents, kv.BucketAudit} {
			err := t.ScanReverse(eb, "", func(k string, _ []byte) (bool, error) {
				if n, err := strconv.ParseUint(k, 10, 64); err == nil && n > sq.next {
					sq.next = n
				}
				return false, nil
			})
			if err != nil {
				return 0, err
			}
		}
	}
	return sq.next, nil
}

// Event sequence numbers. Every appliance appends events all the time, and
// one shared counter read by every commit made the appliances' commits
// conflict with each other (most of them, under a boot storm). So an event
// number is the time in microseconds since seqEpoch, times seqSlots, plus
// this appliance's slot: unique without coordination, increasing on each
// appliance, and across appliances ordered by their clocks. A reader that
// follows the log (the console's live stream) may therefore see an event
// appear a little below the newest it has read: it reads back LateWindow.
const seqSlots = 8

var seqEpoch = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// LateWindow bounds, in sequence numbers, how far below the newest event
// another appliance's event can still appear (clock skew plus commit time,
// 3 s): core.LateEvents.
func (s *Store) LateWindow() uint64 { return uint64(3*time.Second/time.Microsecond) * seqSlots }

func (s *Store) timeSequence() uint64 {
	s.seqMu.Lock()
	defer s.seqMu.Unlock()
	n := uint64(time.Since(seqEpoch)/time.Microsecond)*seqSlots + s.seqID
	if n <= s.seqTop {
		n = s.seqTop - s.seqTop%seqSlots + seqSlots + s.seqID
	}
	s.seqTop = n
	return n
}

// newestEvent is the highest event number stored, so this appliance's
// numbers go on above it even if its clock went back.
func (s *Store) newestEvent() (uint64, error) {
	raw := s.newRaw(s.ctx, false)
	var top uint64
	for _, b := range []kv.Bucket{kv.BucketEvents, kv.BucketAudit} {
		err := raw.ScanReverse(b, "", func(k string, _ []byte) (bool, error) {
			if n, err := strconv.ParseUint(k, 10, 64); err == nil {
				top = max(top, n)
			}
			return false, nil
		})
		if err != nil {
			return 0, err
		}
	}
	return top, nil
}

// commit sends the transaction: compares for everything read, then every
// write, delete marker, advanced sequence and change marker. ok is false on
// a conflict.
func (t *rawTx) commit(dirty uint64) (bool, error) {
	var ops []clientv3.Op
	dels := map[string]bool{}
	for b, m := range t.over {
		for k, c := range m {
			full := t.s.key(b, k)
			if c.del {
				ops = append(ops, clientv3.OpDelete(full))
				dels[t.s.p+delDir+string(b)+"/"+markerDir(k)] = true
			} else {
				ops = append(ops, clientv3.OpPut(full, string(c.v)))
			}
		}
	}
	for k := range dels {
		ops = append(ops, clientv3.OpPut(k, t.s.name))
	}
	for b, sq := range t.seqs {
		if sq.next != sq.read {
			ops = append(ops, clientv3.OpPut(t.seqKey(b), strconv.FormatUint(sq.next, 10)))
		}
	}
	if len(ops) == 0 {
		return true, nil // nothing to write: the reads were a consistent snapshot
	}
	for d := dirty; d != 0; {
		i := bits.TrailingZeros64(d)
		d &^= 1 << i
		ops = append(ops, clientv3.OpPut(t.s.p+genDir+strconv.Itoa(i), t.s.name))
	}
	if len(ops)+1 > t.s.maxOps {
		return false, fmt.Errorf("%w: a transaction of %d writes exceeds the etcd cluster's --max-txn-ops (%d): raise it (store.max_txn_ops must match)",
			kv.ErrTxnTooLarge, len(ops)+1, t.s.maxOps)
	}
	return t.s.send(t.ctx, t.compares(), ops)
}

// The commit marker _txn/<appliance>: every write transaction of this
// appliance compares its revision and replaces its value with an id of
// the transaction. Of several sends of one transaction (a resend after a
// send whose outcome is unknown: the etcd leader died, or the reply was
// lost) at most one applies, and a send that finds the marker holding its
// own id knows an earlier one did. So a commit is resent after a short
// attempt time rather than waiting out etcd's request timeout (7 s after
// a leader dies), and never applied twice.
const txnDir = "_txn/"

// attemptTimeout bounds one send of a commit.
func (s *Store) attemptTimeout() time.Duration { return min(s.timeout, 2*time.Second) }

// send commits ops if cmps hold, resending while the outcome is unknown,
// for up to the store's timeout. ok is false on a conflict. The caller
// holds writeMu (the marker's revision is this process's).
func (s *Store) send(ctx context.Context, cmps []clientv3.Cmp, ops []clientv3.Op) (bool, error) {
	return s.sendAs(ctx, cmps, ops, strconv.FormatUint(rand.Uint64(), 16))
}

// sendAs is send with the transaction's marker id given.
func (s *Store) sendAs(ctx context.Context, cmps []clientv3.Cmp, ops []clientv3.Op, id string) (bool, error) {
	mark := s.p + txnDir + s.name
	if s.markRev < 0 {
		rctx, cancel := context.WithTimeout(ctx, s.timeout)
		resp, err := s.cli.Get(rctx, mark)
		cancel()
		if err != nil {
			return false, fmt.Errorf("etcd store: commit: %w", err)
		}
		s.markRev = revOf(resp.Kvs)
	}
	cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(mark), "=", s.markRev))
	ops = append(ops, clientv3.OpPut(mark, id))
	first := time.Now()
	for {
		actx, cancel := context.WithTimeout(ctx, s.attemptTimeout())
		resp, err := s.cli.Txn(actx).If(cmps...).Then(ops...).Else(clientv3.OpGet(mark)).Commit()
		cancel()
		if err == nil {
			if resp.Succeeded {
				s.markRev = resp.Header.Revision
				return true, nil
			}
			kvs := resp.Responses[0].GetResponseRange().Kvs
			s.markRev = revOf(kvs)
			if len(kvs) == 1 && string(kvs[0].Value) == id {
				return true, nil // an earlier send of this transaction applied
			}
			return false, nil
		}
		if errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrRequestTooLarge) {
			return false, fmt.Errorf("%w: %v", kv.ErrTxnTooLarge, err)
		}
		if !unknownOutcome(err) || ctx.Err() != nil || time.Since(first)+s.attemptTimeout() > s.timeout {
			// An unanswered send may still apply: the next commit's
			// compare of the marker then fails, and it reads the marker
			// again.
			s.markRev = -1
			return false, fmt.Errorf("etcd store: commit: %w", err)
		}
		s.metrics.commitResends.Inc()
		s.log.Warn("etcd commit unanswered; sending it again", "after", time.Since(first).Round(time.Millisecond), "err", err)
		select {
		case <-ctx.Done():
			s.markRev = -1
			return false, fmt.Errorf("etcd store: commit: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// revOf is the revision of the one key kvs holds, 0 when it is absent.
func revOf(kvs []*mvccpb.KeyValue) int64 {
	if len(kvs) == 1 {
		return kvs[0].ModRevision
	}
	return 0
}

// unknownOutcome reports a commit error after which the transaction may
// or may not have applied, and a later send may succeed: a timeout, a lost
// connection or leader, a leader election under way.
func unknownOutcome(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	for _, e := range []error{rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail, rpctypes.ErrTimeoutDueToConnectionLost,
		rpctypes.ErrLeaderChanged, rpctypes.ErrNoLeader, rpctypes.ErrStopped} {
		if errors.Is(err, e) {
			return true
		}
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// compares are the conditions the commit needs. Past half of
// --max-txn-ops, the keys read in one directory are compared as one range
// (anything in it changed since the snapshot), which is coarser but still
// catches every change.
func (t *rawTx) compares() []clientv3.Cmp {
	next := t.rev + 1
	var cmps []clientv3.Cmp
	add := func(r span) {
		c := clientv3.Compare(clientv3.ModRevision(r.from), "<", next)
		if r.end != "" {
			c = c.WithRange(r.end)
		}
		cmps = append(cmps, c)
	}
	budget := t.s.maxOps / 2
	if len(t.reads)+len(t.ranges) <= budget {
		for k, mod := range t.reads {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", mod))
		}
		for _, r := range t.ranges {
			add(r)
		}
		return cmps
	}
	// Coarse: one range per directory (bucket, or engine directory) read.
	// A range compare does not see a key deleted since the snapshot, so a
	// bucket whose keys were read also compares its delete markers.
	dirs := map[string]bool{}
	for k := range t.reads {
		d := dirOf(t.s.p, k)
		dirs[d] = true
		if rest := d[len(t.s.p):]; !strings.HasPrefix(rest, "_") {
			dirs[t.s.p+delDir+rest] = true
		}
	}
	for _, r := range t.ranges {
		dirs[dirOf(t.s.p, r.from)] = true
	}
	for d := range dirs {
		add(span{from: d, end: prefixEnd(d)})
	}
	return cmps
}

// dirOf is the directory of a full key under prefix p: "<p><bucket>/", or
// "<p>_del/" etc.
func dirOf(p, full string) string {
	rest := full[len(p):]
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return p + rest[:i+1]
	}
	return full
}

// Client is the store's etcd client (the appliance group shares it).
func (s *Store) Client() *clientv3.Client { return s.cli }

// Prefix is the store's key prefix.
func (s *Store) Prefix() string { return s.p }
