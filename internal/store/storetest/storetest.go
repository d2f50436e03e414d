// Package storetest gives tests a real store and keyring in a temporary
// directory, and a conformance suite that any core.Store implementation runs
// to prove it keeps the repositories' contract.
package storetest

import (
	"path/filepath"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/secretbox"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/internal/store/kv"
)

// Fixture is a store and keyring in one data directory, closed when the
// test ends.
type Fixture struct {
	Dir   string
	Store *boltstore.Store
	Keys  *secretbox.Keyring
}

// Open returns a fresh fixture in t.TempDir().
func Open(t testing.TB) *Fixture {
	t.Helper()
	return OpenIn(t, t.TempDir())
}

// OpenIn opens (or reopens) the fixture in dir.
func OpenIn(t testing.TB, dir string) *Fixture {
	t.Helper()
	st, err := boltstore.Open(dir, boltstore.Options{})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	kr, err := secretbox.OpenKeyring(filepath.Join(dir, "secret.key"))
	if err != nil {
		t.Fatalf("open keyring: %v", err)
	}
	return &Fixture{Dir: dir, Store: st, Keys: kr}
}

// Store is Open(t).Store, for tests that need no keyring.
func Store(t testing.TB) *boltstore.Store {
	t.Helper()
	return Open(t).Store
}

// Update runs fn in a write transaction and fails the test on error.
func Update(t testing.TB, st core.Store, fn func(core.Tx) error) {
	t.Helper()
	if err := st.Update(fn); err != nil {
		t.Fatalf("store update: %v", err)
	}
}

// View runs fn in a read transaction and fails the test on error.
func View(t testing.TB, st core.Store, fn func(core.Tx) error) {
	t.Helper()
	if err := st.View(fn); err != nil {
		t.Fatalf("store view: %v", err)
	}
}

// Collection names a repository for CorruptRecord.
type Collection string

// Collections CorruptRecord can damage.
const (
	LeaseRecords  Collection = "leases"
	DeviceRecords Collection = "devices"
)

// CorruptRecord writes undecodable bytes as the record at key of c in the
// closed store in dir, as a torn write or a disk fault might leave it.
func CorruptRecord(t testing.TB, dir string, c Collection, key string) {
	t.Helper()
	if err := boltstore.PutRaw(dir, kv.Bucket(c), key, []byte(`{"truncated":`)); err != nil {
		t.Fatalf("corrupt %s/%s: %v", c, key, err)
	}
}
