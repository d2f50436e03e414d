package boltstore_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// TestTenancyIndexesAreBuiltAtOpen: a store of schema 5 (devices in
// clusters and leases, neither indexed) gets the devices-by-cluster and
// leases-by-MAC indexes when it is opened; so does one a migration left
// half done (some entries there, schema still 5), and opening it again
// (the migration run twice) changes nothing.
func TestTenancyIndexesAreBuiltAtOpen(t *testing.T) {
	dir := t.TempDir()
	s, err := boltstore.Open(dir, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Update(t, s, func(tx core.Tx) error {
		for i := range 12 {
			id := fmt.Sprintf("02:00:00:00:05:%02x", i)
			d := core.Device{ID: id, MAC: id, State: core.StateJoined}
			if i%4 != 3 {
				d.Cluster = fmt.Sprintf("c%d", i%4)
			}
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
			if err := tx.Leases().Put(core.Lease{IP: fmt.Sprintf("10.99.5.%d", i), MAC: id, State: core.LeaseActive}); err != nil {
				return err
			}
		}
		return tx.Leases().Put(core.Lease{IP: "10.99.5.100", MAC: "02:00:00:00:05:00", State: core.LeaseActive})
	})
	read := func(s *boltstore.Store) (c1, leases string) {
		storetest.View(t, s, func(tx core.Tx) error {
			c1 = strings.Join(storetest.ClusterDevices(t, tx, "c1", ""), ",")
			leases = strings.Join(storetest.MACLeases(t, tx, "02:00:00:00:05:00"), ",")
			return nil
		})
		return c1, leases
	}
	const wantC1, wantLeases = "02:00:00:00:05:01,02:00:00:00:05:05,02:00:00:00:05:09", "10.99.5.0,10.99.5.100"
	if c1, leases := read(s); c1 != wantC1 || leases != wantLeases {
		t.Fatalf("before: cluster c1 %s, leases %s", c1, leases)
	}
	tenancy := func(k string) bool {
		return strings.HasPrefix(k, "device-cluster/") || strings.HasPrefix(k, "lease-mac/")
	}
	if err := s.Regress(5, tenancy); err != nil {
		t.Fatal(err)
	}
	if c1, leases := read(s); c1 != "" || leases != "" {
		t.Fatalf("without the indexes: cluster c1 %q, leases %q", c1, leases)
	}
	for round := range 3 {
		s.Close()
		if s, err = boltstore.Open(dir, boltstore.Options{}); err != nil {
			t.Fatal(err)
		}
		if v, err := s.Schema(); err != nil || v != boltstore.SchemaVersion {
			t.Fatalf("schema after open: %d, %v", v, err)
		}
		if c1, leases := read(s); c1 != wantC1 || leases != wantLeases {
			t.Fatalf("after open %d: cluster c1 %s, leases %s", round, c1, leases)
		}
		storetest.CheckTenancyIndexes(t, s)
		switch round {
		case 0: // a migration that did not commit: some entries, schema 5
			n := 0
			if err := s.Regress(5, func(k string) bool { n++; return tenancy(k) && n%2 == 0 }); err != nil {
				t.Fatal(err)
			}
		case 1: // the migration run again over a whole index
			if err := s.Regress(5, func(string) bool { return false }); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.Close()
}

// TestTenancyMigrationPassesACorruptRecord: a record that does not decode
// (a torn write) does not keep a schema-5 store from opening; the others
// are indexed.
func TestTenancyMigrationPassesACorruptRecord(t *testing.T) {
	dir := t.TempDir()
	s, err := boltstore.Open(dir, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Update(t, s, func(tx core.Tx) error {
		if err := tx.Devices().Put(core.Device{ID: "02:00:00:00:05:01", MAC: "02:00:00:00:05:01", Cluster: "c1"}); err != nil {
			return err
		}
		return tx.Leases().Put(core.Lease{IP: "10.99.5.1", MAC: "02:00:00:00:05:01"})
	})
	if err := s.Regress(5, func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	storetest.CorruptRecord(t, dir, storetest.LeaseRecords, "10.99.5.2")
	storetest.CorruptRecord(t, dir, storetest.DeviceRecords, "02:00:00:00:05:02")
	if s, err = boltstore.Open(dir, boltstore.Options{}); err != nil {
		t.Fatalf("open a schema-5 store holding corrupt records: %v", err)
	}
	defer s.Close()
	storetest.View(t, s, func(tx core.Tx) error {
		if got := storetest.ClusterDevices(t, tx, "c1", ""); strings.Join(got, ",") != "02:00:00:00:05:01" {
			t.Errorf("cluster c1: %v", got)
		}
		if got := storetest.MACLeases(t, tx, "02:00:00:00:05:01"); strings.Join(got, ",") != "10.99.5.1" {
			t.Errorf("leases of 02:00:00:00:05:01: %v", got)
		}
		return nil
	})
}
