package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
)

// Bucket names one typed collection in the store.
type Bucket string

const (
	BucketDevices     Bucket = "devices"     // Device by ID (MAC)
	BucketLeases      Bucket = "leases"      // Lease by IP
	BucketClusters    Bucket = "clusters"    // Cluster by ID
	BucketVersions    Bucket = "versions"    // Version by ID
	BucketTokens      Bucket = "tokens"      // Token by kind/ID
	BucketEvents      Bucket = "events"      // device Event by zero-padded sequence
	BucketAudit       Bucket = "audit"       // audit Event (operator actions, credential issues) by the same sequence
	BucketMemberships Bucket = "memberships" // Membership by device ID
	BucketImages      Bucket = "images"      // Image by sha256
	BucketAPIKeys     Bucket = "apikeys"     // API key records by key id
	BucketSecrets     Bucket = "secrets"     // encrypted key material by owner
	BucketJobs        Bucket = "jobs"        // async API jobs by id
	BucketIndex       Bucket = "index"       // secondary indexes, "<name>/<value>" -> primary key
	BucketMeta        Bucket = "meta"        // schema version and appliance settings
)

// Buckets is every bucket a store must provide.
var Buckets = []Bucket{
	BucketDevices, BucketLeases, BucketClusters, BucketVersions, BucketTokens,
	BucketEvents, BucketMemberships, BucketImages, BucketAPIKeys, BucketSecrets,
	BucketJobs, BucketIndex, BucketMeta, BucketAudit,
}

// ErrNotFound is returned by typed getters when a record does not exist.
var ErrNotFound = errors.New("not found")

// Store persists the domain. It is deliberately small so that bbolt can be
// swapped for a distributed store: key/value buckets, serialisable transactions,
// and a group-commit entry point for hot paths.
type Store interface {
	// View runs fn in a read-only, consistent snapshot.
	View(fn func(Tx) error) error
	// Update runs fn in a read-write transaction and makes it durable (fsync)
	// before returning nil.
	Update(fn func(Tx) error) error
	// Batch is Update for hot paths: concurrent callers share one durable
	// commit. fn may run more than once, so it must only touch the Tx.
	Batch(fn func(Tx) error) error
	// Backup writes a consistent copy of the whole store to w.
	Backup(w io.Writer) (int64, error)
	// Close flushes and releases the store and its lock.
	Close() error
}

// Generations is implemented by stores that count writes per bucket, so a
// reader can reuse what it derived from some buckets, exactly until one of
// them changes: note Generation(bs...) before reading them and treat the
// result as current while Generation(bs...) still returns that number. The
// number grows once a write transaction that touched any of bs has ended
// (a write still in progress may not be counted yet, as it may not be
// visible yet).
type Generations interface {
	Generation(bs ...Bucket) uint64
}

// Tx is one transaction. Values are JSON documents.
type Tx interface {
	// Get decodes the value at key into v and reports whether it existed.
	Get(b Bucket, key string, v any) (bool, error)
	// Put encodes v as JSON and stores it at key.
	Put(b Bucket, key string, v any) error
	// Delete removes key; deleting a missing key is not an error.
	Delete(b Bucket, key string) error
	// Scan calls fn for every key greater than after (all keys when after is
	// ""), in byte order, until fn returns false or an error.
	Scan(b Bucket, after string, fn func(key string, value []byte) (bool, error)) error
	// ScanPrefix calls fn for every key starting with prefix, in byte order.
	ScanPrefix(b Bucket, prefix string, fn func(key string, value []byte) (bool, error)) error
	// Count returns the number of keys in b.
	Count(b Bucket) (int, error)
	// NextSequence returns a new, monotonically increasing integer for b.
	NextSequence(b Bucket) (uint64, error)
	// Writable reports whether the transaction may write.
	Writable() bool
}

// RawGet returns the stored bytes of key without decoding them, or nil when
// the key is absent. The bytes are valid only inside tx; callers that cache
// decoded values compare them to skip a decode.
func RawGet(tx Tx, b Bucket, key string) ([]byte, error) {
	var out []byte
	err := tx.ScanPrefix(b, key, func(k string, v []byte) (bool, error) {
		if k == key {
			out = v
		}
		return false, nil
	})
	return out, err
}

// Decode unmarshals a value handed to a Scan callback.
func Decode(value []byte, v any) error {
	if err := json.Unmarshal(value, v); err != nil {
		return fmt.Errorf("corrupt record: %w", err)
	}
	return nil
}

// DeviceFinder answers from memory which device holds an address right now.
// The DHCP server knows a client's facts (kind, serial) the moment it ACKs,
// while the device record may reach the store a group commit later; content
// serving asks it when the store has the lease but not yet the device.
type DeviceFinder interface {
	DeviceByIP(ip netip.Addr) (Device, bool)
}
