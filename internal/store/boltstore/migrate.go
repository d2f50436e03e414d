package boltstore

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	bolt "go.etcd.io/bbolt"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/kv"
)

// SchemaVersion is the newest schema this build understands.
var SchemaVersion = len(migrations)

const schemaKey = "schema_version"

// migrations[i] brings a store from schema i to schema i+1. Append only: a
// released migration is never edited.
var migrations = []func(*bolt.Tx) error{
	// 0 -> 1: the initial typed buckets.
	func(btx *bolt.Tx) error {
		for _, b := range kv.Buckets {
			if _, err := btx.CreateBucketIfNotExists([]byte(b)); err != nil {
				return err
			}
		}
		return nil
	},
	// 1 -> 2: the audit trail gets a bucket of its own (core.IsAudit), so
	// device events cannot evict it; audit events already stored move there
	// under their keys.
	func(btx *bolt.Tx) error {
		audit, err := btx.CreateBucketIfNotExists([]byte(kv.BucketAudit))
		if err != nil {
			return err
		}
		events := btx.Bucket([]byte(kv.BucketEvents))
		if events == nil {
			return nil
		}
		var moved [][]byte
		err = events.ForEach(func(k, v []byte) error {
			var e struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(v, &e) != nil || !core.IsAudit(e.Type) {
				return nil
			}
			moved = append(moved, bytes.Clone(k))
			return audit.Put(bytes.Clone(k), bytes.Clone(v))
		})
		if err != nil {
			return err
		}
		for _, k := range moved {
			if err := events.Delete(k); err != nil {
				return err
			}
		}
		return nil
	},
	// 2 -> 3: events are indexed by the device they name (a device's events page
	// reads only its own). The
	// whole migration is one transaction (migrate), and it only adds
	// entries, so a crash leaves schema 2 and running it again is safe.
	func(btx *bolt.Tx) error { return kv.IndexDeviceEvents(newRawTx(btx)) },
	// 3 -> 4: devices are indexed by state (a state's page walks only
	// its range); adds entries only.
	func(btx *bolt.Tx) error { return kv.IndexDeviceStates(newRawTx(btx)) },
	// 4 -> 5: devices' desired states and rollouts (day-2 operations).
	func(btx *bolt.Tx) error {
		for _, b := range []kv.Bucket{kv.BucketDesired, kv.BucketRollouts} {
			if _, err := btx.CreateBucketIfNotExists([]byte(b)); err != nil {
				return err
			}
		}
		return nil
	},
	// 5 -> 6: devices indexed by cluster and leases by MAC (a user's
	// listing reads only its clusters' devices and their leases); adds
	// entries only, so a crash leaves schema 5 and running it again is
	// safe.
	func(btx *bolt.Tx) error { return kv.IndexTenancy(newRawTx(btx)) },
}

func (s *Store) migrate() error {
	return s.db.Update(func(btx *bolt.Tx) error {
		meta, err := btx.CreateBucketIfNotExists([]byte(kv.BucketMeta))
		if err != nil {
			return err
		}
		cur := 0
		if raw := meta.Get([]byte(schemaKey)); raw != nil {
			if cur, err = strconv.Atoi(string(raw)); err != nil {
				return fmt.Errorf("store schema version %q is not a number", raw)
			}
		}
		if cur > SchemaVersion {
			return fmt.Errorf("store schema version %d is newer than this ztpd supports (%d); upgrade ztpd", cur, SchemaVersion)
		}
		for v := cur; v < SchemaVersion; v++ {
			if err := migrations[v](btx); err != nil {
				return fmt.Errorf("migrate store schema %d -> %d: %w", v, v+1, err)
			}
		}
		return meta.Put([]byte(schemaKey), []byte(strconv.Itoa(SchemaVersion)))
	})
}

// Schema returns the schema version recorded in the store.
func (s *Store) Schema() (int, error) {
	var v int
	err := s.db.View(func(btx *bolt.Tx) error {
		raw := btx.Bucket([]byte(kv.BucketMeta)).Get([]byte(schemaKey))
		var err error
		v, err = strconv.Atoi(string(raw))
		return err
	})
	return v, err
}
