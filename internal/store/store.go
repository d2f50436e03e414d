// Package store names what the application needs of a store engine beyond
// core.Store: bbolt (internal/store/boltstore, one box) and etcd
// (internal/store/etcdstore, several appliances) both provide it.
package store

import (
	"io"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/kv"
)

// Store is an opened store engine.
type Store interface {
	core.Store
	core.Generations
	// Schema is the schema version the store records.
	Schema() (int, error)
	// Snapshot runs fn over one consistent state: tx reads it and writeTo
	// writes it as a complete bbolt store file of size bytes (a backup).
	Snapshot(fn func(tx core.Tx, size int64, writeTo func(io.Writer) (int64, error)) error) error
	// Copy writes every record, as of one state, to dst (store migrate).
	Copy(dst kv.Loader, progress func(b kv.Bucket, n int)) (int, error)
}

// Backends a configuration can name.
const (
	BackendBolt         = "bolt"
	BackendEtcd         = "etcd"
	BackendEtcdEmbedded = "etcd-embedded"
)
