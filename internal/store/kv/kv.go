// Package kv implements ztpd's typed repositories (core.Tx) once, over any
// ordered key/value engine with named buckets and per-bucket sequences. It
// owns the storage schema: bucket names, key formats, secondary indexes and
// record encodings. An engine (boltstore today, a distributed store later)
// supplies only Raw.
package kv

import (
	"encoding/json"
	"fmt"
	"hash/maphash"
	"sync"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/jsontext"
)

// Bucket names one collection of the schema.
type Bucket string

const (
	BucketDevices     Bucket = "devices"     // Device by ID (MAC)
	BucketLeases      Bucket = "leases"      // Lease by IP
	BucketClusters    Bucket = "clusters"    // Cluster by ID
	BucketVersions    Bucket = "versions"    // Version by ID
	BucketTokens      Bucket = "tokens"      // Token by kind/ID
	BucketEvents      Bucket = "events"      // device Event by zero-padded sequence; owns the shared sequence
	BucketAudit       Bucket = "audit"       // audit Event by the same sequence
	BucketMemberships Bucket = "memberships" // Membership by device ID
	BucketImages      Bucket = "images"      // Image by sha256
	BucketAPIKeys     Bucket = "apikeys"     // APIKey by key
	BucketSecrets     Bucket = "secrets"     // sealed key material by owner
	BucketJobs        Bucket = "jobs"        // Job by ID
	BucketIndex       Bucket = "index"       // secondary indexes, "<name>/<value>" -> primary key
	BucketMeta        Bucket = "meta"        // schema version, settings, join states
	BucketDesired     Bucket = "desired"     // DesiredState by device ID
	BucketRollouts    Bucket = "rollouts"    // Rollout by ID
)

// Buckets is every bucket an engine must provide.
var Buckets = []Bucket{BucketDevices, BucketLeases, BucketClusters, BucketVersions, BucketTokens, BucketEvents, BucketMemberships,
	BucketImages, BucketAPIKeys, BucketSecrets, BucketJobs, BucketIndex, BucketMeta, BucketAudit, BucketDesired, BucketRollouts}

// Raw is one engine transaction: byte values in named buckets.
type Raw interface {
	// Get returns the value at key, or nil when absent; the bytes are valid
	// only until the transaction ends and must not be changed.
	Get(b Bucket, key string) ([]byte, error)
	// Put stores a copy of value at key.
	Put(b Bucket, key string, value []byte) error
	// Delete removes key; deleting a missing key is not an error.
	Delete(b Bucket, key string) error
	// Scan calls fn for every key greater than after (all keys when after
	// is ""), in byte order, until fn returns false or an error.
	Scan(b Bucket, after string, fn func(key string, value []byte) (bool, error)) error
	// ScanReverse calls fn for every key less than before (all keys when
	// before is ""), in reverse byte order, until fn returns false or an
	// error: the newest events first, without reading the older ones.
	ScanReverse(b Bucket, before string, fn func(key string, value []byte) (bool, error)) error
	// ScanPrefix calls fn for every key starting with prefix, in byte order.
	ScanPrefix(b Bucket, prefix string, fn func(key string, value []byte) (bool, error)) error
	// Count returns the number of keys in b.
	Count(b Bucket) (int, error)
	// NextSequence returns a new, monotonically increasing integer for b.
	NextSequence(b Bucket) (uint64, error)
	// Sequence returns b's sequence as it is, without advancing it
	// (copying a store carries it over).
	Sequence(b Bucket) (uint64, error)
	Writable() bool
}

// Caches are the decoded-record caches of one store, shared by all its
// transactions.
type Caches struct {
	devices decodeCache[core.Device]
	leases  decodeCache[core.Lease]
	// memberships: a cluster listing reads every member's
	// (decoding them was 39 % of listKubernetesClusters' rendering).
	memberships decodeCache[core.Membership]
	// clusters and their join states: every ZTP fetch, join and report
	// resolves its cluster (decoding them was 6 % of a boot
	// storm's CPU).
	clusters   decodeCache[core.Cluster]
	joinStates decodeCache[core.JoinState]
	// events never change once written, and API pages read the newest
	// over and over.
	events decodeCache[core.Event]
}

// Tx implements core.Tx over a Raw transaction.
type Tx struct {
	raw   Raw
	c     *Caches
	dirty uint64 // bit per core.Aggregate written
	buf   []byte // encoding scratch (the engine copies on Put)
	// devRead is the device record (raw; nil: none) a read of this
	// transaction last found at devReadKey: every merge reads a record
	// and then writes it, and the write needs the old record for its
	// indexes. Any write of the devices bucket forgets it.
	devRead    []byte
	devReadKey string
	devReadOK  bool
}

// NewTx wraps raw; c may be shared by every transaction of one store.
func NewTx(raw Raw, c *Caches) *Tx {
	if c == nil {
		c = &Caches{}
	}
	return &Tx{raw: raw, c: c}
}

// Dirty reports the aggregates this transaction wrote, one bit per
// core.Aggregate, for the engine's change counters.
func (t *Tx) Dirty() uint64 { return t.dirty }

func (t *Tx) Writable() bool { return t.raw.Writable() }

func (t *Tx) Devices() core.Devices         { return devices{t} }
func (t *Tx) Leases() core.Leases           { return leases{t} }
func (t *Tx) Clusters() core.Clusters       { return clusters{t} }
func (t *Tx) Versions() core.Versions       { return versions{t} }
func (t *Tx) Memberships() core.Memberships { return memberships{t} }
func (t *Tx) Tokens() core.Tokens           { return tokens{t} }
func (t *Tx) Secrets() core.Secrets         { return secrets{t} }
func (t *Tx) Events() core.Events           { return events{t} }
func (t *Tx) Images() core.Images           { return images{t} }
func (t *Tx) APIKeys() core.APIKeys         { return apiKeys{t} }
func (t *Tx) Jobs() core.Jobs               { return jobs{t} }
func (t *Tx) Settings() core.Settings       { return settings{t} }
func (t *Tx) Desired() core.DesiredStates   { return desired{t} }
func (t *Tx) Rollouts() core.Rollouts       { return rollouts{t} }

func (t *Tx) mark(a core.Aggregate) { t.dirty |= 1 << a }

// get decodes the record at key into v; ok is false when there is none.
func (t *Tx) get(b Bucket, key string, v any) (bool, error) {
	raw, err := t.raw.Get(b, key)
	if err != nil || raw == nil {
		return false, err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return true, fmt.Errorf("corrupt record %s/%s: %w", b, key, err)
	}
	return true, nil
}

// put encodes v as JSON at key, counting a write of a.
func (t *Tx) put(a core.Aggregate, b Bucket, key string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s/%s: %w", b, key, err)
	}
	return t.putRaw(a, b, key, raw)
}

func (t *Tx) putRaw(a core.Aggregate, b Bucket, key string, raw []byte) error {
	t.mark(a)
	if b == BucketDevices {
		t.devReadOK = false
	}
	return t.raw.Put(b, key, raw)
}

func (t *Tx) del(a core.Aggregate, b Bucket, key string) error {
	t.mark(a)
	if b == BucketDevices {
		t.devReadOK = false
	}
	return t.raw.Delete(b, key)
}

// getRaw is raw.Get, remembering the last device record read (devRead).
func (t *Tx) getRaw(b Bucket, key string) ([]byte, error) {
	if b != BucketDevices {
		return t.raw.Get(b, key)
	}
	if t.devReadOK && t.devReadKey == key {
		return t.devRead, nil
	}
	raw, err := t.raw.Get(b, key)
	if err == nil {
		t.devRead, t.devReadKey, t.devReadOK = raw, key, true
	}
	return raw, err
}

// scan visits decoded records of b after a key; scanPrefix those with a
// key prefix. Both go on past a record they cannot decode (see corrupt).
func scan[T any](t *Tx, b Bucket, after string, fn core.Visit[T]) error {
	var bad corrupt
	return bad.result(b, t.raw.Scan(b, after, decodeEach(b, &bad, fn)))
}

func scanPrefix[T any](t *Tx, b Bucket, prefix string, fn core.Visit[T]) error {
	var bad corrupt
	return bad.result(b, t.raw.ScanPrefix(b, prefix, decodeEach(b, &bad, fn)))
}

// decodeEach is the raw visitor of a listing: it decodes each record for
// fn and notes the ones it cannot decode in bad.
func decodeEach[T any](b Bucket, bad *corrupt, fn core.Visit[T]) func(string, []byte) (bool, error) {
	return func(k string, raw []byte) (bool, error) {
		var v T
		if err := json.Unmarshal(raw, &v); err != nil {
			bad.add(k, err)
			return true, nil
		}
		return fn(v)
	}
}

// corrupt collects the records a listing could not decode: it goes on past
// them and reports them at the end (core.CorruptError).
type corrupt struct {
	keys  []string
	count int
	first error
}

func (c *corrupt) add(key string, err error) {
	if c.count == 0 {
		c.first = err
	}
	c.count++
	if len(c.keys) < 16 {
		c.keys = append(c.keys, key)
	}
}

func (c *corrupt) result(b Bucket, err error) error {
	if err != nil || c.count == 0 {
		return err
	}
	return &core.CorruptError{Collection: string(b), Keys: c.keys, Count: c.count, Err: c.first}
}

// Secondary indexes map "<name>/<value>" to a primary key (a JSON string).

func (t *Tx) indexGet(key string) (string, bool, error) {
	var id string
	ok, err := t.get(BucketIndex, key, &id)
	return id, ok, err
}

func (t *Tx) indexPut(a core.Aggregate, key, id string) error {
	// Encoded into the scratch buffer, as encoding/json would: every
	// lease and device write puts index entries.
	t.buf = jsontext.AppendString(t.buf[:0], id)
	return t.putRaw(a, BucketIndex, key, t.buf)
}

func (t *Tx) indexDel(a core.Aggregate, key string) error { return t.del(a, BucketIndex, key) }

// indexScan visits the index entries under prefix, with the rest of the key.
func (t *Tx) indexScan(prefix string, fn func(rest, value string) (bool, error)) error {
	return t.raw.ScanPrefix(BucketIndex, prefix, func(k string, raw []byte) (bool, error) {
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			return false, fmt.Errorf("corrupt index %s: %w", k, err)
		}
		return fn(k[len(prefix):], v)
	})
}

// notFound is the error of a missing record, "<what> <id>: not found",
// wrapping core.ErrNotFound. Hot paths look up records that do not exist
// yet (every new device), so it is built without fmt.
func notFound(what, id string) error { return &notFoundError{what: what, id: id} }

// stamp is the core.Stamp of the record at key in b, or notFound(what, id).
func (t *Tx) stamp(b Bucket, key, what, id string) (core.Stamp, error) {
	raw, err := t.raw.Get(b, key)
	if err != nil {
		return core.Stamp{}, err
	}
	if raw == nil {
		return core.Stamp{}, notFound(what, id)
	}
	return sumRecord(raw), nil
}

type notFoundError struct{ what, id string }

func (e *notFoundError) Error() string { return e.what + " " + e.id + ": " + core.ErrNotFound.Error() }
func (e *notFoundError) Unwrap() error { return core.ErrNotFound }

// decodeCache keeps decoded records of one bucket keyed by what their
// stored bytes hash to: a lookup still reads the record in the caller's
// transaction (never stale) but decodes JSON only when the bytes changed,
// which on the ZTP request path (every fetch reads its lease and its
// device) is most of a lookup's cost.
//
// It holds a working set, not the fleet: at most decodeCacheMax records,
// and a new one past that evicts one at random. Readers of every record
// (rosters, counts) keep what they derive by core.Stamp instead
// (at 100,000 devices decoded copies of every device, membership and lease
// were a third of the heap, and the collector marking them on the pinned
// API core set its p99).
//
// A hash rather than a copy of the bytes: the copies were a fifth of the
// heap. The hash is 128 bits under seeds drawn at start and
// never shown, so a stale hit needs a record's new encoding to collide with
// its old one in 128 bits that nobody can compute outside the process.
type decodeCache[T any] struct {
	mu sync.RWMutex
	m  map[string]cachedRecord[T]
}

type cachedRecord[T any] struct {
	sum core.Stamp
	v   T
}

var recordSeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// sumRecord is the core.Stamp of a record's stored bytes (see decodeCache).
func sumRecord(raw []byte) core.Stamp {
	return core.Stamp{maphash.Bytes(recordSeeds[0], raw), maphash.Bytes(recordSeeds[1], raw)}
}

// decodeCacheMax bounds each decode cache: the records a boot storm has in
// flight (256 switches onboarding, each reading its lease, device,
// membership and cluster a few times), an API page's, the newest events'.
// A miss costs one decode (a few microseconds); a boot storm spends over a
// millisecond of CPU per switch.
const decodeCacheMax = 4096

func (c *decodeCache[T]) get(t *Tx, b Bucket, key string) (v T, ok bool, err error) {
	raw, err := t.getRaw(b, key)
	if err != nil || raw == nil {
		return v, false, err
	}
	v, err = c.decode(b, key, raw)
	return v, err == nil, err
}

// getFresh is a repository's Get through the cache: the record at key,
// made safe for the caller to change by fresh (nil for records without
// references), or notFound(what, id).
func (c *decodeCache[T]) getFresh(t *Tx, b Bucket, key, what, id string, fresh func(T) T) (T, error) {
	v, ok, err := c.get(t, b, key)
	switch {
	case err != nil:
		var zero T
		return zero, err
	case !ok:
		return v, notFound(what, id)
	case fresh != nil:
		return fresh(v), nil // the cached value is shared
	}
	return v, nil
}

// decode is the record raw, stored at key, decoded: from the cache when
// raw is what was decoded for key last.
func (c *decodeCache[T]) decode(b Bucket, key string, raw []byte) (T, error) {
	sum := sumRecord(raw)
	c.mu.RLock()
	e, hit := c.m[key]
	c.mu.RUnlock()
	if hit && e.sum == sum {
		return e.v, nil
	}
	return c.decodeMiss(b, key, raw, sum)
}

// decodeMiss decodes and keeps raw. (Apart from decode, so that the value
// a hit returns is not moved to the heap for json.Unmarshal's sake.)
func (c *decodeCache[T]) decodeMiss(b Bucket, key string, raw []byte, sum core.Stamp) (v T, err error) {
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, fmt.Errorf("corrupt record %s/%s: %w", b, key, err)
	}
	internStrings(&v)
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[string]cachedRecord[T])
	} else if _, had := c.m[key]; !had && len(c.m) >= decodeCacheMax {
		for k := range c.m { // map iteration starts anywhere: a random victim
			delete(c.m, k)
			break
		}
	}
	c.m[key] = cachedRecord[T]{sum: sum, v: v}
	c.mu.Unlock()
	return v, nil
}

// scanCached is scan through a decode cache: listings (API pages, a
// user's devices) read the same records over and over. fresh makes the
// shared cached value safe to hand out (clones its maps).
func scanCached[T any](t *Tx, c *decodeCache[T], b Bucket, after string, fresh func(T) T, fn core.Visit[T]) error {
	return decodeScan(t.raw.Scan, c, b, after, fresh, fn)
}

// scanCachedReverse is scanCached newest first, below before.
func scanCachedReverse[T any](t *Tx, c *decodeCache[T], b Bucket, before string, fresh func(T) T, fn core.Visit[T]) error {
	return decodeScan(t.raw.ScanReverse, c, b, before, fresh, fn)
}

// decodeScan runs scan over b from bound and visits the decoded values;
// undecodable records are collected into one corruption error.
func decodeScan[T any](scan func(Bucket, string, func(string, []byte) (bool, error)) error,
	c *decodeCache[T], b Bucket, bound string, fresh func(T) T, fn core.Visit[T]) error {
	var bad corrupt
	err := scan(b, bound, func(k string, raw []byte) (bool, error) {
		v, err := c.decode(b, k, raw)
		if err != nil {
			bad.add(k, err)
			return true, nil
		}
		return fn(fresh(v))
	})
	return bad.result(b, err)
}
