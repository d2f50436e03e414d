package boltstore

import (
	"bytes"
	"strconv"

	bolt "go.etcd.io/bbolt"

	"github.com/ztpd/ztpd/internal/store/kv"
)

// Regress makes s look written at schema: it deletes the index entries
// drop names and records schema as the store's version, as a store written
// before an index existed (or a migration that never committed) is.
func (s *Store) Regress(schema int, drop func(key string) bool) error {
	return s.db.Update(func(btx *bolt.Tx) error {
		var doomed [][]byte
		err := btx.Bucket([]byte(kv.BucketIndex)).ForEach(func(k, _ []byte) error {
			if drop(string(k)) {
				doomed = append(doomed, bytes.Clone(k))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range doomed {
			if err := btx.Bucket([]byte(kv.BucketIndex)).Delete(k); err != nil {
				return err
			}
		}
		return btx.Bucket([]byte(kv.BucketMeta)).Put([]byte(schemaKey), []byte(strconv.Itoa(schema)))
	})
}

// TenancyIndexProblems is kv.TenancyIndexProblems of the store as it is
// (storetest.CheckTenancyIndexes asks it).
func (s *Store) TenancyIndexProblems() (problems []string, err error) {
	err = s.db.View(func(btx *bolt.Tx) error {
		problems, err = kv.TenancyIndexProblems(newRawTx(btx))
		return err
	})
	return problems, err
}
