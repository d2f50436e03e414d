package storetest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// tenancyIndexesContract: ListCluster and ListMAC follow every put, move
// (a device to another cluster, a lease to another MAC), delete and
// cursor, inside the writing transaction too.
func tenancyIndexesContract(t *testing.T, st core.Store) {
	dev := func(i int, cluster string) core.Device {
		id := fmt.Sprintf("02:00:00:00:02:%02x", i)
		return core.Device{ID: id, MAC: id, Cluster: cluster, State: core.StateJoined, FirstSeen: t0, LastSeen: t0, UpdatedAt: t0}
	}
	lease := func(ip string, mac int) core.Lease {
		return core.Lease{IP: ip, MAC: fmt.Sprintf("02:00:00:00:02:%02x", mac), Subnet: "s", State: core.LeaseActive,
			Start: t0, Expiry: t0.Add(time.Hour), UpdatedAt: t0}
	}
	Update(t, st, func(tx core.Tx) error {
		for i, c := range []string{"c1", "c2", "c1", "", "c1", "c2"} {
			must(t, tx.Devices().Put(dev(i, c)))
		}
		for _, l := range []core.Lease{lease("10.99.3.20", 0), lease("10.99.3.3", 0), lease("10.99.3.4", 1), lease("10.99.3.5", 3)} {
			must(t, tx.Leases().Put(l))
		}
		// Seen inside the writing transaction too.
		wantEqual(t, "cluster c1 in the writing transaction", ClusterDevices(t, tx, "c1", ""),
			[]string{"02:00:00:00:02:00", "02:00:00:00:02:02", "02:00:00:00:02:04"})
		wantEqual(t, "leases of 02:00:00:00:02:00 in the writing transaction", MACLeases(t, tx, "02:00:00:00:02:00"),
			[]string{"10.99.3.20", "10.99.3.3"})
		return nil
	})
	CheckTenancyIndexes(t, st)
	Update(t, st, func(tx core.Tx) error {
		// Moves: device 2 from c1 to c2, device 3 into c1, device 5 out of
		// any cluster; a lease to another MAC, a lease without a MAC.
		for _, d := range []core.Device{dev(2, "c2"), dev(3, "c1"), dev(5, "")} {
			must(t, tx.Devices().Put(d))
		}
		d, err := tx.Devices().Get("02:00:00:00:02:00")
		must(t, err)
		d.Hostname = "same cluster, other fields"
		must(t, tx.Devices().Put(d))
		must(t, tx.Devices().Delete("02:00:00:00:02:04"))
		must(t, tx.Leases().Put(lease("10.99.3.3", 1)))
		l := lease("10.99.3.5", 3)
		l.MAC = ""
		must(t, tx.Leases().Put(l))
		return tx.Leases().Delete("10.99.3.4")
	})
	View(t, st, func(tx core.Tx) error {
		wantEqual(t, "cluster c1", ClusterDevices(t, tx, "c1", ""), []string{"02:00:00:00:02:00", "02:00:00:00:02:03"})
		wantEqual(t, "cluster c2", ClusterDevices(t, tx, "c2", ""), []string{"02:00:00:00:02:01", "02:00:00:00:02:02"})
		wantEqual(t, "cluster c2 after a cursor", ClusterDevices(t, tx, "c2", "02:00:00:00:02:01"), []string{"02:00:00:00:02:02"})
		wantEqual(t, "no cluster", ClusterDevices(t, tx, "", ""), []string(nil))
		wantEqual(t, "a cluster with no devices", ClusterDevices(t, tx, "c3", ""), []string(nil))
		var first []string
		must(t, tx.Devices().ListCluster("c1", "", func(d core.Device) (bool, error) {
			first = append(first, d.ID)
			return false, nil
		}))
		wantEqual(t, "cluster c1, stopped after one", first, []string{"02:00:00:00:02:00"})
		wantEqual(t, "leases of device 0", MACLeases(t, tx, "02:00:00:00:02:00"), []string{"10.99.3.20"})
		wantEqual(t, "leases of device 1", MACLeases(t, tx, "02:00:00:00:02:01"), []string{"10.99.3.3"})
		wantEqual(t, "leases of device 3", MACLeases(t, tx, "02:00:00:00:02:03"), []string(nil))
		wantEqual(t, "leases of no MAC", MACLeases(t, tx, ""), []string(nil))
		return nil
	})
	CheckTenancyIndexes(t, st)
}

// ClusterDevices are the IDs ListCluster visits for cluster after after,
// each checked to be in the cluster.
func ClusterDevices(t testing.TB, tx core.Tx, cluster, after string) []string {
	t.Helper()
	var ids []string
	must(t, tx.Devices().ListCluster(cluster, after, func(d core.Device) (bool, error) {
		if d.Cluster != cluster {
			t.Errorf("ListCluster(%s) visited %s of cluster %q", cluster, d.ID, d.Cluster)
		}
		ids = append(ids, d.ID)
		return true, nil
	}))
	return ids
}

// MACLeases are the addresses ListMAC visits for mac, each checked to be
// bound to it.
func MACLeases(t testing.TB, tx core.Tx, mac string) []string {
	t.Helper()
	var ips []string
	must(t, tx.Leases().ListMAC(mac, func(l core.Lease) (bool, error) {
		if l.MAC != mac {
			t.Errorf("ListMAC(%s) visited %s of MAC %q", mac, l.IP, l.MAC)
		}
		ips = append(ips, l.IP)
		return true, nil
	}))
	return ips
}

// CheckTenancyIndexes fails the test unless ListCluster of every cluster
// a device names is exactly that cluster's devices in ID order, and
// ListMAC of every MAC a lease names exactly its leases in address order:
// the indexes agree with the records (after writes, a migration, a copy or
// a restore). A store that can list its index entries that are missing or
// left behind (the listings skip the latter) must list none.
func CheckTenancyIndexes(t testing.TB, st core.Store) {
	t.Helper()
	if v, ok := st.(interface{ TenancyIndexProblems() ([]string, error) }); ok {
		problems, err := v.TenancyIndexProblems()
		must(t, err)
		if len(problems) > 0 {
			t.Fatalf("the tenancy indexes disagree with the records:\n%s", strings.Join(problems, "\n"))
		}
	}
	View(t, st, func(tx core.Tx) error {
		byCluster := map[string][]string{}
		must(t, tx.Devices().List("", func(d core.Device) (bool, error) {
			if d.Cluster != "" {
				byCluster[d.Cluster] = append(byCluster[d.Cluster], d.ID)
			}
			return true, nil
		}))
		for _, c := range slices.Sorted(maps.Keys(byCluster)) {
			wantEqual(t, "devices of cluster "+c+" through the index", ClusterDevices(t, tx, c, ""), byCluster[c])
		}
		byMAC := map[string][]string{}
		must(t, tx.Leases().List("", func(l core.Lease) (bool, error) {
			if l.MAC != "" {
				byMAC[l.MAC] = append(byMAC[l.MAC], l.IP)
			}
			return true, nil
		}))
		for _, m := range slices.Sorted(maps.Keys(byMAC)) {
			wantEqual(t, "leases of "+m+" through the index", MACLeases(t, tx, m), byMAC[m])
		}
		return nil
	})
}
