package boltstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"

	"github.com/ztpd/ztpd/internal/store/kv"
)

// ErrNotEmpty means a copy's destination already holds a store.
var ErrNotEmpty = errors.New("destination store is not empty")

// Load creates a store in dir, which must hold none, and fills it through
// fill in one transaction: `ztpd store migrate --to bolt` and the backup of
// a distributed store (an etcd snapshot written as a bbolt file). Nothing
// is left in dir when fill fails.
func Load(dir string, fill func(kv.Loader) error) error {
	path := filepath.Join(dir, FileName)
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("%w: %s", ErrNotEmpty, path)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: defaultLockTimeout, FreelistType: bolt.FreelistMapType, NoFreelistSync: true})
	if err != nil {
		return fmt.Errorf("create store %s: %w", path, err)
	}
	err = db.Update(func(btx *bolt.Tx) error {
		for _, b := range kv.Buckets {
			if _, err := btx.CreateBucketIfNotExists([]byte(b)); err != nil {
				return err
			}
		}
		return fill(loader{newRawTx(btx)})
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// loader is a bbolt write transaction as kv.Loader.
type loader struct{ t *rawTx }

func (l loader) Put(b kv.Bucket, key string, value []byte) error { return l.t.Put(b, key, value) }

func (l loader) SetSequence(b kv.Bucket, n uint64) error {
	bk, err := l.t.bucket(b)
	if err != nil {
		return err
	}
	return bk.SetSequence(n)
}

// Copy writes every record of the store to dst (kv.Copy) from one read
// transaction.
func (s *Store) Copy(dst kv.Loader, progress func(b kv.Bucket, n int)) (int, error) {
	var n int
	err := s.db.View(func(btx *bolt.Tx) error {
		var err error
		n, err = kv.Copy(newRawTx(btx), dst, progress)
		return err
	})
	return n, err
}
