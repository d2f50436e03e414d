package boltstore_test

import (
	"testing"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Conformance(t, func(t *testing.T) core.Store {
		s, err := boltstore.Open(t.TempDir(), boltstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// TestConformanceRerunning: the contract holds when every transaction runs
// twice (the first run thrown away), as on a store shared by appliances.
func TestConformanceRerunning(t *testing.T) {
	storetest.Conformance(t, func(t *testing.T) core.Store {
		s, err := boltstore.Open(t.TempDir(), boltstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return storetest.Rerunning(s)
	})
}
