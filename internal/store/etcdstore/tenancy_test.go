package etcdstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/internal/store/etcdstore"
	"github.com/ztpd/ztpd/internal/store/kv"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// TestOlderSchemaMigratesThroughBolt: an etcd store written before the
// tenancy indexes (schema 5) is refused by an appliance, and migrated as
// the refusal says: copied out to a bbolt file (the copy source opens an
// older schema), which boltstore migrates when it opens it, and copied
// back into etcd with the indexes built. A backup of the etcd store at
// the new schema restores with them too.
func TestOlderSchemaMigratesThroughBolt(t *testing.T) {
	m := embeddedMember(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("/old%d/", prefixes.Add(1))
	old, err := openInit(t, m.Client, prefix, 64, etcdstore.InitCreate)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30; i += 10 {
		update(t, old, func(tx core.Tx) error {
			for j := i; j < i+10; j++ {
				d := device(j, core.StateJoined)
				d.Cluster = fmt.Sprintf("c%d", j%3)
				if err := tx.Devices().Put(d); err != nil {
					return err
				}
				l := core.Lease{IP: fmt.Sprintf("10.99.6.%d", j), MAC: mac(j), Subnet: "s", State: core.LeaseActive}
				if err := tx.Leases().Put(l); err != nil {
					return err
				}
			}
			return nil
		})
	}
	storetest.CheckTenancyIndexes(t, old)
	// What schema 5 wrote: the records without the tenancy indexes.
	for _, p := range []string{"device-cluster/", "lease-mac/"} {
		if resp, err := m.Client.Delete(ctx, prefix+string(kv.BucketIndex)+"/"+p, clientv3.WithPrefix()); err != nil || resp.Deleted == 0 {
			t.Fatalf("delete the %s index: %v (%d keys)", p, err, resp.Deleted)
		}
	}
	if _, err := m.Client.Put(ctx, prefix+string(kv.BucketMeta)+"/schema_version", "5"); err != nil {
		t.Fatal(err)
	}
	old.Close()

	if _, err := openInit(t, m.Client, prefix, 64, etcdstore.InitCreate); err == nil || !strings.Contains(err.Error(), "older") {
		t.Fatalf("an appliance opening a schema-5 store: %v, want an error saying it is older", err)
	}
	src, err := openInit(t, m.Client, prefix, 64, etcdstore.InitNone)
	if err != nil {
		t.Fatalf("the source of a copy opens a schema-5 store: %v", err)
	}
	// store migrate --to bolt, then the bbolt store opened to be copied
	// back (--to etcd) migrates.
	bdir := t.TempDir()
	if err := boltstore.Load(bdir, func(l kv.Loader) error { _, err := src.Copy(l, nil); return err }); err != nil {
		t.Fatal(err)
	}
	bs, err := boltstore.Open(bdir, boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()
	if v, err := bs.Schema(); err != nil || v != boltstore.SchemaVersion {
		t.Fatalf("the bbolt copy is at schema %d, %v", v, err)
	}
	want := []string{mac(1), mac(4), mac(7), mac(10), mac(13), mac(16), mac(19), mac(22), mac(25), mac(28)}
	storetest.View(t, bs, func(tx core.Tx) error {
		if got := storetest.ClusterDevices(t, tx, "c1", ""); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("cluster c1 in the migrated bbolt copy: %v", got)
		}
		return nil
	})
	storetest.CheckTenancyIndexes(t, bs)
	if _, err := m.Client.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil { // --replace
		t.Fatal(err)
	}
	ld := src.Loader()
	if _, err := bs.Copy(ld, nil); err != nil {
		t.Fatal(err)
	}
	if err := ld.Finish(); err != nil {
		t.Fatal(err)
	}
	src.Close()
	st, err := openInit(t, m.Client, prefix, 64, etcdstore.InitCreate)
	if err != nil {
		t.Fatalf("an appliance opening the migrated store: %v", err)
	}
	if v, err := st.Schema(); err != nil || v != boltstore.SchemaVersion {
		t.Fatalf("the migrated etcd store is at schema %d, %v", v, err)
	}
	storetest.View(t, st, func(tx core.Tx) error {
		if got := storetest.ClusterDevices(t, tx, "c1", ""); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("cluster c1 in the migrated etcd store: %v", got)
		}
		if got := storetest.MACLeases(t, tx, mac(7)); strings.Join(got, ",") != "10.99.6.7" {
			t.Errorf("leases of %s in the migrated etcd store: %v", mac(7), got)
		}
		return nil
	})
	storetest.CheckTenancyIndexes(t, st)
	// Moves after the migration keep the indexes.
	update(t, st, func(tx core.Tx) error {
		d, err := tx.Devices().Get(mac(7))
		if err != nil {
			return err
		}
		d.Cluster = "c2"
		if err := tx.Devices().Put(d); err != nil {
			return err
		}
		return tx.Leases().Put(core.Lease{IP: "10.99.6.7", MAC: mac(8), Subnet: "s", State: core.LeaseActive})
	})
	storetest.CheckTenancyIndexes(t, st)

	// A backup (a bbolt file) restores with the indexes.
	rdir := t.TempDir()
	if err := boltstore.Load(rdir, func(l kv.Loader) error { _, err := st.Copy(l, nil); return err }); err != nil {
		t.Fatal(err)
	}
	rs, err := boltstore.Open(rdir, boltstore.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	if v, err := rs.Schema(); err != nil || v != boltstore.SchemaVersion {
		t.Fatalf("the backup is at schema %s, %v", strconv.Itoa(v), err)
	}
	storetest.CheckTenancyIndexes(t, rs)
	storetest.View(t, rs, func(tx core.Tx) error {
		if got := storetest.MACLeases(t, tx, mac(8)); strings.Join(got, ",") != "10.99.6.7,10.99.6.8" {
			t.Errorf("leases of %s in the backup: %v", mac(8), got)
		}
		return nil
	})
}
