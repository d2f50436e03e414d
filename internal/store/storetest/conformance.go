package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// Conformance runs the repository contract against stores from open (a
// fresh, empty store per call). A second backend proves itself by passing
// it; boltstore runs it in its tests.
func Conformance(t *testing.T, open func(t *testing.T) core.Store) {
	cases := []struct {
		name string
		fn   func(*testing.T, core.Store)
	}{
		{"Devices", devicesContract},
		{"SerialIndex", serialIndexContract},
		{"Leases", leasesContract},
		{"TenancyIndexes", tenancyIndexesContract},
		{"Clusters", clustersContract},
		{"Versions", versionsContract},
		{"Memberships", membershipsContract},
		{"Tokens", tokensContract},
		{"Secrets", secretsContract},
		{"Events", eventsContract},
		{"DeviceEvents", deviceEventsContract},
		{"Images", imagesContract},
		{"APIKeys", apiKeysContract},
		{"Jobs", jobsContract},
		{"Settings", settingsContract},
		{"DesiredStates", desiredContract},
		{"Rollouts", rolloutsContract},
		{"Atomicity", atomicityContract},
		{"Batch", batchContract},
		{"Generations", generationsContract},
		{"Stamps", stampsContract},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, open(t)) })
	}
}

var t0 = time.Date(2026, 12, 3, 4, 5, 6, 789000000, time.UTC)

func wantNotFound(t testing.TB, what string, err error) {
	t.Helper()
	if !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("%s: got %v, want ErrNotFound", what, err)
	}
}

func wantEqual(t testing.TB, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func devicesContract(t *testing.T, st core.Store) {
	d := core.Device{ID: "02:00:00:00:00:01", Kind: core.KindSONiC, MAC: "02:00:00:00:00:01", Serial: "SN1",
		State: core.StateLeased, Labels: map[string]string{"rack": "r1"}, FirstSeen: t0, LastSeen: t0, UpdatedAt: t0}
	Update(t, st, func(tx core.Tx) error {
		wantNotFound(t, "missing device", func() error { _, err := tx.Devices().Get(d.ID); return err }())
		return tx.Devices().Put(d)
	})
	View(t, st, func(tx core.Tx) error {
		got, err := tx.Devices().Get(d.ID)
		must(t, err)
		wantEqual(t, "device", got, d)
		got.Labels["rack"] = "changed" // a caller's change must not reach the store or its cache
		again, err := tx.Devices().Get(d.ID)
		must(t, err)
		wantEqual(t, "device after caller changed its copy", again, d)
		for range 2 { // listed devices are the caller's own copies too
			must(t, tx.Devices().List("", func(l core.Device) (bool, error) {
				wantEqual(t, "listed device", l, d)
				l.Labels["rack"] = "changed"
				return true, nil
			}))
		}
		bs, err := tx.Devices().BySerial("SN1")
		must(t, err)
		wantEqual(t, "device by serial", bs.ID, d.ID)
		return nil
	})
	// A new serial moves the index; a fixed address is unique.
	Update(t, st, func(tx core.Tx) error {
		d.Serial, d.FixedIP, d.Approved = "SN2", "10.99.7.7", true
		must(t, tx.Devices().Put(d))
		_, err := tx.Devices().BySerial("SN1")
		wantNotFound(t, "old serial", err)
		other := core.Device{ID: "02:00:00:00:00:02", MAC: "02:00:00:00:00:02", FixedIP: "10.99.7.7", FirstSeen: t0, LastSeen: t0, UpdatedAt: t0}
		if err := tx.Devices().Put(other); core.KindOf(err) != core.KindConflict {
			t.Fatalf("second device on a bound fixed address: %v, want a conflict", err)
		}
		other.FixedIP = ""
		return tx.Devices().Put(other)
	})
	View(t, st, func(tx core.Tx) error {
		f, err := tx.Devices().ByFixedIP("10.99.7.7")
		must(t, err)
		wantEqual(t, "device by fixed address", f.ID, d.ID)
		n, err := tx.Devices().Count()
		must(t, err)
		wantEqual(t, "device count", n, 2)
		var ids []string
		must(t, tx.Devices().List("", func(d core.Device) (bool, error) { ids = append(ids, d.ID); return true, nil }))
		wantEqual(t, "device list", ids, []string{"02:00:00:00:00:01", "02:00:00:00:00:02"})
		ids = nil
		must(t, tx.Devices().List("02:00:00:00:00:01", func(d core.Device) (bool, error) { ids = append(ids, d.ID); return true, nil }))
		wantEqual(t, "device list after a cursor", ids, []string{"02:00:00:00:00:02"})
		return nil
	})
	Update(t, st, func(tx core.Tx) error { return tx.Devices().Delete(d.ID) })
	View(t, st, func(tx core.Tx) error {
		_, err := tx.Devices().BySerial("SN2")
		wantNotFound(t, "serial of a deleted device", err)
		_, err = tx.Devices().ByFixedIP("10.99.7.7")
		wantNotFound(t, "fixed address of a deleted device", err)
		return nil
	})
	Update(t, st, func(tx core.Tx) error { // its address is free again
		return tx.Devices().Put(core.Device{ID: "02:00:00:00:00:02", MAC: "02:00:00:00:00:02", FixedIP: "10.99.7.7"})
	})
	devicesByStateContract(t, st)
}

// devicesByStateContract: ListState follows every state change, delete
// and cursor.
func devicesByStateContract(t *testing.T, st core.Store) {
	byState := func(tx core.Tx, s core.DeviceState, after string) []string {
		var ids []string
		must(t, tx.Devices().ListState(s, after, func(d core.Device) (bool, error) {
			if d.State != s {
				t.Errorf("ListState(%s) visited %s in state %s", s, d.ID, d.State)
			}
			ids = append(ids, d.ID)
			return true, nil
		}))
		return ids
	}
	Update(t, st, func(tx core.Tx) error {
		for i, s := range []core.DeviceState{core.StateLeased, core.StateJoined, core.StateLeased, core.StateJoined, core.StateLeased} {
			id := fmt.Sprintf("02:00:00:00:01:%02x", i)
			must(t, tx.Devices().Put(core.Device{ID: id, MAC: id, State: s, FirstSeen: t0, LastSeen: t0, UpdatedAt: t0}))
		}
		// Seen inside the writing transaction too.
		wantEqual(t, "leased devices in the writing transaction", byState(tx, core.StateLeased, ""),
			[]string{"02:00:00:00:01:00", "02:00:00:00:01:02", "02:00:00:00:01:04"})
		return nil
	})
	Update(t, st, func(tx core.Tx) error {
		d, err := tx.Devices().Get("02:00:00:00:01:02")
		must(t, err)
		d.State = core.StateJoined
		must(t, tx.Devices().Put(d))
		d, err = tx.Devices().Get("02:00:00:00:01:00")
		must(t, err)
		d.Hostname = "same state, other fields"
		must(t, tx.Devices().Put(d))
		return tx.Devices().Delete("02:00:00:00:01:04")
	})
	Update(t, st, func(tx core.Tx) error {
		// A write after a read of the record, and one after a write: each
		// moves the index from what the record held just before it.
		id := "02:00:00:00:01:05"
		if _, err := tx.Devices().Get(id); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("Get of a device never stored: %v", err)
		}
		must(t, tx.Devices().Put(core.Device{ID: id, MAC: id, State: core.StateLeased, FirstSeen: t0, LastSeen: t0, UpdatedAt: t0}))
		must(t, tx.Devices().Put(core.Device{ID: id, MAC: id, State: core.StateFailed, FirstSeen: t0, LastSeen: t0, UpdatedAt: t0}))
		d, err := tx.Devices().Get(id)
		must(t, err)
		d.State = core.StateJoined
		must(t, tx.Devices().Put(d))
		return nil
	})
	View(t, st, func(tx core.Tx) error {
		wantEqual(t, "leased devices", byState(tx, core.StateLeased, ""), []string{"02:00:00:00:01:00"})
		wantEqual(t, "failed devices after a read and two writes", byState(tx, core.StateFailed, ""), []string(nil))
		wantEqual(t, "joined devices", byState(tx, core.StateJoined, ""),
			[]string{"02:00:00:00:01:01", "02:00:00:00:01:02", "02:00:00:00:01:03", "02:00:00:00:01:05"})
		wantEqual(t, "joined devices after a cursor", byState(tx, core.StateJoined, "02:00:00:00:01:01"),
			[]string{"02:00:00:00:01:02", "02:00:00:00:01:03", "02:00:00:00:01:05"})
		wantEqual(t, "failed devices", byState(tx, core.StateFailed, ""), []string(nil))
		var first []string
		must(t, tx.Devices().ListState(core.StateJoined, "", func(d core.Device) (bool, error) {
			first = append(first, d.ID)
			return false, nil
		}))
		wantEqual(t, "joined devices, stopped after one", first, []string{"02:00:00:00:01:01"})
		return nil
	})
}

func leasesContract(t *testing.T, st core.Store) {
	ls := []core.Lease{
		{IP: "10.99.0.10", MAC: "02:00:00:00:00:0a", ClientID: "01:02:00:00:00:00:0a", Hostname: "sw-<1>", Subnet: "mgmt",
			State: core.LeaseActive, Start: t0, Expiry: t0.Add(time.Hour), UpdatedAt: t0},
		{IP: "10.99.0.11", MAC: "02:00:00:00:00:0b", Subnet: "mgmt", State: core.LeaseActive, Start: t0, Expiry: t0, Reserved: true, UpdatedAt: t0},
	}
	Update(t, st, func(tx core.Tx) error {
		for _, l := range ls {
			must(t, tx.Leases().Put(l))
		}
		return nil
	})
	View(t, st, func(tx core.Tx) error {
		for _, l := range ls {
			got, err := tx.Leases().Get(l.IP)
			must(t, err)
			wantEqual(t, "lease", got, l)
		}
		_, err := tx.Leases().Get("10.99.0.99")
		wantNotFound(t, "missing lease", err)
		n, err := tx.Leases().Count()
		must(t, err)
		wantEqual(t, "lease count", n, 2)
		var got []core.Lease
		must(t, tx.Leases().List("", func(l core.Lease) (bool, error) { got = append(got, l); return true, nil }))
		wantEqual(t, "lease list", got, ls)
		return nil
	})
	// A changed lease is read back changed (through any cache).
	Update(t, st, func(tx core.Tx) error {
		ls[0].State = core.LeaseReleased
		return tx.Leases().Put(ls[0])
	})
	View(t, st, func(tx core.Tx) error {
		got, err := tx.Leases().Get(ls[0].IP)
		must(t, err)
		wantEqual(t, "changed lease", got.State, core.LeaseReleased)
		return nil
	})
	Update(t, st, func(tx core.Tx) error { return tx.Leases().Delete(ls[1].IP) })
	View(t, st, func(tx core.Tx) error {
		_, err := tx.Leases().Get(ls[1].IP)
		wantNotFound(t, "deleted lease", err)
		return nil
	})
}

func clustersContract(t *testing.T, st core.Store) {
	c := core.Cluster{ID: "c1", Name: "prod", VersionID: "v1", Size: 2, ControlNodes: 1, State: core.ClusterRunning, Created: t0, UpdatedAt: t0}
	Update(t, st, func(tx core.Tx) error {
		must(t, tx.Clusters().Put(c))
		if err := tx.Clusters().Put(core.Cluster{ID: "c2", Name: "prod"}); core.KindOf(err) != core.KindConflict {
			t.Fatalf("second cluster named prod: %v, want a conflict", err)
		}
		if err := tx.Clusters().Put(core.Cluster{ID: "c3"}); err == nil {
			t.Fatal("a cluster without a name was stored")
		}
		return nil
	})
	View(t, st, func(tx core.Tx) error {
		got, err := tx.Clusters().ByName("prod")
		must(t, err)
		wantEqual(t, "cluster by name", got, c)
		return nil
	})
	// An observation is read back whole, and a caller's change to its copy
	// reaches neither the store nor a cache; a changed record reads back
	// changed.
	c.Observed = &core.ClusterObservation{APIReachable: true, Nodes: 3, ReadyNodes: 2, LastSeen: t0}
	Update(t, st, func(tx core.Tx) error { return tx.Clusters().Put(c) })
	for range 2 {
		View(t, st, func(tx core.Tx) error {
			got, err := tx.Clusters().Get("c1")
			must(t, err)
			wantEqual(t, "observed cluster", got, c)
			got.Observed.ReadyNodes, got.Name = 0, "changed"
			must(t, tx.Clusters().List("", func(l core.Cluster) (bool, error) {
				if l.ID == "c1" {
					wantEqual(t, "listed cluster", l, c)
					l.Observed.Nodes = 0
				}
				return true, nil
			}))
			return nil
		})
	}
	c.Observed.ReadyNodes = 3
	Update(t, st, func(tx core.Tx) error { return tx.Clusters().Put(c) })
	View(t, st, func(tx core.Tx) error {
		got, err := tx.Clusters().Get("c1")
		must(t, err)
		wantEqual(t, "cluster after its observation changed", got, c)
		return nil
	})
	Update(t, st, func(tx core.Tx) error { // rename frees the old name
		c.Name = "prod2"
		must(t, tx.Clusters().Put(c))
		_, err := tx.Clusters().ByName("prod")
		wantNotFound(t, "old cluster name", err)
		must(t, tx.Clusters().Put(core.Cluster{ID: "c2", Name: "prod"}))
		js := core.JoinState{KubernetesVersion: "1.31.0", Algorithm: "ecdsa-p256", ControlPlanes: 1, Workers: 2}
		must(t, tx.Clusters().PutJoinState("c1", js))
		got, err := tx.Clusters().JoinState("c1")
		must(t, err)
		wantEqual(t, "join state", got, js)
		js.Workers, js.Suspended = 3, true // a changed join state reads back changed
		must(t, tx.Clusters().PutJoinState("c1", js))
		got, err = tx.Clusters().JoinState("c1")
		must(t, err)
		wantEqual(t, "changed join state", got, js)
		_, err = tx.Clusters().JoinState("c2")
		wantNotFound(t, "missing join state", err)
		var ids []string
		must(t, tx.Clusters().JoinStates(func(id string, _ core.JoinState) (bool, error) { ids = append(ids, id); return true, nil }))
		wantEqual(t, "clusters with a join state", ids, []string{"c1"})
		ids = nil
		must(t, tx.Clusters().List("", func(c core.Cluster) (bool, error) { ids = append(ids, c.ID); return true, nil }))
		wantEqual(t, "cluster list", ids, []string{"c1", "c2"})
		must(t, tx.Clusters().Delete("c1"))
		must(t, tx.Clusters().DeleteJoinState("c1"))
		_, err = tx.Clusters().ByName("prod2")
		wantNotFound(t, "deleted cluster's name", err)
		_, err = tx.Clusters().JoinState("c1")
		wantNotFound(t, "deleted join state", err)
		wantNotFound(t, "delete a missing cluster", tx.Clusters().Delete("c1"))
		return nil
	})
}

func versionsContract(t *testing.T, st core.Store) {
	v := core.Version{ID: "v1", Name: "v1.31.0", SemVer: "1.31.0", State: "Enabled", MinCPU: 2, MinMemoryMB: 2048, Created: t0, UpdatedAt: t0}
	Update(t, st, func(tx core.Tx) error { return tx.Versions().Put(v) })
	View(t, st, func(tx core.Tx) error {
		got, err := tx.Versions().Get("v1")
		must(t, err)
		wantEqual(t, "version", got, v)
		return nil
	})
	Update(t, st, func(tx core.Tx) error { return tx.Versions().Delete("v1") })
	View(t, st, func(tx core.Tx) error {
		_, err := tx.Versions().Get("v1")
		wantNotFound(t, "deleted version", err)
		return nil
	})
}

func membershipsContract(t *testing.T, st core.Store) {
	m := core.Membership{Device: "d1", Cluster: "c1", Role: "worker", State: core.StateJoinIssued,
		History: []core.StateTransition{{State: core.StateJoinIssued, At: t0, Reason: "approved"}},
		Created: t0, UpdatedAt: t0, Method: "kubeadm", TokenID: "abcdef", IssuedAt: t0,
		Node: &core.NodeObservation{Ready: "True", Seen: t0}}
	Update(t, st, func(tx core.Tx) error {
		must(t, tx.Memberships().Put(m))
		must(t, tx.Memberships().Enlist("c1", "d2", "control-plane"))
		must(t, tx.Memberships().Enlist("c1", "d1", "worker"))
		must(t, tx.Memberships().Enlist("c10", "d3", "worker")) // a cluster ID that extends c1
		return nil
	})
	View(t, st, func(tx core.Tx) error {
		got, err := tx.Memberships().Get("d1")
		must(t, err)
		wantEqual(t, "membership", got, m)
		// A caller's change must not reach the store or its cache.
		got.History[0].Reason = "changed"
		got.History = append(got.History, core.StateTransition{State: core.StateJoined})
		got.Node.Ready = "False"
		again, err := tx.Memberships().Get("d1")
		must(t, err)
		wantEqual(t, "membership after caller changed its copy", again, m)
		for range 2 {
			must(t, tx.Memberships().List("", func(l core.Membership) (bool, error) {
				wantEqual(t, "listed membership", l, m)
				l.History[0].Reason = "changed"
				return true, nil
			}))
		}
		var roster []string
		must(t, tx.Memberships().Roster("c1", func(d, r string) (bool, error) { roster = append(roster, d+"="+r); return true, nil }))
		wantEqual(t, "roster", roster, []string{"d1=worker", "d2=control-plane"})
		return nil
	})
	Update(t, st, func(tx core.Tx) error {
		must(t, tx.Memberships().Delist("c1", "d1"))
		return tx.Memberships().Delete("d1")
	})
	View(t, st, func(tx core.Tx) error {
		_, err := tx.Memberships().Get("d1")
		wantNotFound(t, "deleted membership", err)
		var roster []string
		must(t, tx.Memberships().Roster("c1", func(d, r string) (bool, error) { roster = append(roster, d); return true, nil }))
		wantEqual(t, "roster after delist", roster, []string{"d2"})
		return nil
	})
}

func tokensContract(t *testing.T, st core.Store) {
	toks := []core.Token{
		{ID: "abcdef", Kind: "kubeadm", SecretHash: "h1", Cluster: "c1", Usages: []string{"authentication"}, Expires: t0.Add(time.Hour), Created: t0, InitIssued: true},
		{ID: "e1", Kind: "enrollment", SecretHash: "h2", Device: "d1", BindMAC: "02:00:00:00:00:01", Created: t0},
		{ID: "r1", Kind: "report", SecretHash: "h3", Cluster: "c1", Created: t0, UsedAt: t0, Revoked: true},
	}
	Update(t, st, func(tx core.Tx) error {
		for _, tok := range toks {
			must(t, tx.Tokens().Put(tok))
		}
		must(t, tx.Tokens().PoolAdd("c1", "abcdef"))
		must(t, tx.Tokens().PoolAdd("c1", "bbbbbb"))
		must(t, tx.Tokens().PoolAdd("c2", "cccccc"))
		must(t, tx.Tokens().SetEnrollment(core.EnrollmentKey{MAC: "02:00:00:00:00:01"}, "e1"))
		must(t, tx.Tokens().SetEnrollment(core.EnrollmentKey{Serial: "SN9"}, "e9"))
		return nil
	})
	View(t, st, func(tx core.Tx) error {
		for _, tok := range toks {
			got, err := tx.Tokens().Get(tok.Kind, tok.ID)
			must(t, err)
			wantEqual(t, "token", got, tok)
		}
		_, err := tx.Tokens().Get("kubeadm", "e1")
		wantNotFound(t, "token of another kind", err)
		var all []string
		must(t, tx.Tokens().List("", func(tok core.Token) (bool, error) { all = append(all, core.TokenCursor(tok)); return true, nil }))
		wantEqual(t, "token list", all, []string{"enrollment/e1", "kubeadm/abcdef", "report/r1"})
		all = nil
		must(t, tx.Tokens().List("enrollment/e1", func(tok core.Token) (bool, error) { all = append(all, core.TokenCursor(tok)); return true, nil }))
		wantEqual(t, "token list after a cursor", all, []string{"kubeadm/abcdef", "report/r1"})
		all = nil
		must(t, tx.Tokens().ListKind("kubeadm", func(tok core.Token) (bool, error) { all = append(all, tok.ID); return true, nil }))
		wantEqual(t, "kubeadm tokens", all, []string{"abcdef"})
		var pool []string
		must(t, tx.Tokens().Pool("c1", func(id string) (bool, error) { pool = append(pool, id); return true, nil }))
		wantEqual(t, "pool", pool, []string{"abcdef", "bbbbbb"})
		id, ok, err := tx.Tokens().Enrollment(core.EnrollmentKey{MAC: "02:00:00:00:00:01", Serial: "SN9"})
		must(t, err)
		wantEqual(t, "enrollment by MAC (MAC wins)", fmt.Sprintf("%s %v", id, ok), "e1 true")
		id, ok, err = tx.Tokens().Enrollment(core.EnrollmentKey{Serial: "SN9"})
		must(t, err)
		wantEqual(t, "enrollment by serial", fmt.Sprintf("%s %v", id, ok), "e9 true")
		return nil
	})
	Update(t, st, func(tx core.Tx) error {
		must(t, tx.Tokens().PoolRemove("c1", "abcdef"))
		must(t, tx.Tokens().ClearEnrollment(core.EnrollmentKey{MAC: "02:00:00:00:00:01"}))
		return tx.Tokens().Delete("enrollment", "e1")
	})
	View(t, st, func(tx core.Tx) error {
		var pool []string
		must(t, tx.Tokens().Pool("c1", func(id string) (bool, error) { pool = append(pool, id); return true, nil }))
		wantEqual(t, "pool after remove", pool, []string{"bbbbbb"})
		_, ok, err := tx.Tokens().Enrollment(core.EnrollmentKey{MAC: "02:00:00:00:00:01"})
		must(t, err)
		wantEqual(t, "cleared enrollment", ok, false)
		_, err = tx.Tokens().Get("enrollment", "e1")
		wantNotFound(t, "deleted token", err)
		return nil
	})
}

func secretsContract(t *testing.T, st core.Store) {
	sealed := []byte(`{"ca":"c2VhbGVk"}`)
	Update(t, st, func(tx core.Tx) error {
		if err := tx.Secrets().Put("cluster/c2", []byte("not json")); err == nil {
			t.Fatal("secrets that are not a JSON document were stored")
		}
		return tx.Secrets().Put("cluster/c1", sealed)
	})
	View(t, st, func(tx core.Tx) error {
		got, ok, err := tx.Secrets().Get("cluster/c1")
		must(t, err)
		wantEqual(t, "secret", string(got), string(sealed))
		wantEqual(t, "secret found", ok, true)
		_, ok, err = tx.Secrets().Get("cluster/c2")
		must(t, err)
		wantEqual(t, "missing secret", ok, false)
		var owners []string
		must(t, tx.Secrets().List(func(owner string, doc []byte) (bool, error) {
			owners = append(owners, owner+"="+string(doc))
			return true, nil
		}))
		wantEqual(t, "listed secrets", strings.Join(owners, ","), "cluster/c1="+string(sealed))
		return nil
	})
	Update(t, st, func(tx core.Tx) error { return tx.Secrets().Delete("cluster/c1") })
	View(t, st, func(tx core.Tx) error {
		_, ok, err := tx.Secrets().Get("cluster/c1")
		must(t, err)
		wantEqual(t, "deleted secret", ok, false)
		return nil
	})
}

func eventsContract(t *testing.T, st core.Store) {
	var seqs []uint64
	Update(t, st, func(tx core.Tx) error {
		seqs = nil // fn may run again (core.Store)
		for i, typ := range []string{"dhcp.ack", "cluster.created", "ztp.served", "join.issued", "dhcp.release"} {
			seq, err := tx.Events().Append(core.Event{Time: t0.Add(time.Duration(i) * time.Second), Type: typ, Device: "d1",
				Fields: map[string]string{"ip": "10.99.0.10", "b": "<&>"}})
			must(t, err)
			seqs = append(seqs, seq)
		}
		return nil
	})
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Fatalf("sequence numbers not increasing across streams: %v", seqs)
		}
	}
	list := func(tx core.Tx, s core.EventStream, after uint64) (out []string) {
		must(t, tx.Events().List(s, after, func(e core.Event) (bool, error) { out = append(out, e.Type); return true, nil }))
		return out
	}
	View(t, st, func(tx core.Tx) error {
		wantEqual(t, "device stream", list(tx, core.DeviceEvents, 0), []string{"dhcp.ack", "ztp.served", "dhcp.release"})
		wantEqual(t, "audit stream", list(tx, core.AuditEvents, 0), []string{"cluster.created", "join.issued"})
		wantEqual(t, "device stream after a sequence", list(tx, core.DeviceEvents, seqs[2]), []string{"dhcp.release"})
		back := func(s core.EventStream, before uint64, max int) (out []string) {
			must(t, tx.Events().ListBackward(s, before, func(e core.Event) (bool, error) {
				out = append(out, e.Type)
				return len(out) < max, nil
			}))
			return out
		}
		wantEqual(t, "device stream newest first", back(core.DeviceEvents, 0, 10), []string{"dhcp.release", "ztp.served", "dhcp.ack"})
		wantEqual(t, "audit stream newest first", back(core.AuditEvents, 0, 10), []string{"join.issued", "cluster.created"})
		wantEqual(t, "newest first below a sequence of the stream", back(core.DeviceEvents, seqs[4], 10), []string{"ztp.served", "dhcp.ack"})
		wantEqual(t, "newest first below another stream's sequence", back(core.DeviceEvents, seqs[3], 10), []string{"ztp.served", "dhcp.ack"})
		wantEqual(t, "newest first below the first", back(core.DeviceEvents, seqs[0], 10), []string(nil))
		wantEqual(t, "newest first below a sequence past the end", back(core.DeviceEvents, seqs[4]+100, 10), []string{"dhcp.release", "ztp.served", "dhcp.ack"})
		wantEqual(t, "newest first, stopped after one", back(core.DeviceEvents, 0, 1), []string{"dhcp.release"})
		for range 2 { // listed events are the caller's own copies
			var first core.Event
			must(t, tx.Events().List(core.DeviceEvents, 0, func(e core.Event) (bool, error) { first = e; return false, nil }))
			wantEqual(t, "event", first, core.Event{Seq: seqs[0], Time: t0, Type: "dhcp.ack", Device: "d1",
				Fields: map[string]string{"ip": "10.99.0.10", "b": "<&>"}})
			first.Fields["ip"] = "changed"
		}
		return nil
	})
	Update(t, st, func(tx core.Tx) error {
		n, more, err := tx.Events().Prune(core.DeviceEvents, 1)
		must(t, err)
		wantEqual(t, "pruned", fmt.Sprint(n, more), "2 false")
		return nil
	})
	View(t, st, func(tx core.Tx) error {
		wantEqual(t, "device stream after prune (newest kept)", list(tx, core.DeviceEvents, 0), []string{"dhcp.release"})
		n, err := tx.Events().Count(core.AuditEvents)
		must(t, err)
		wantEqual(t, "audit stream untouched by a device prune", n, 2)
		return nil
	})
}

// deviceEventsContract: a device's events, listed through the device
// index, are exactly the events naming it, in either direction, from
// either cursor; pruned events leave the listings.
func deviceEventsContract(t *testing.T, st core.Store) {
	type ev struct{ typ, device string }
	var seqs []uint64
	Update(t, st, func(tx core.Tx) error {
		seqs = nil // fn may run again (core.Store)
		// "aa:01/x" starts with "aa:01" and a "/": it must never show up
		// as aa:01's.
		for _, e := range []ev{{"dhcp.ack", "aa:01"}, {"dhcp.ack", "aa:02"}, {"ztp.served", "aa:01"}, {"dhcp.ack", ""},
			{"device.approved", "aa:01"}, {"ztp.served", "aa:01/x"}, {"ztp.served", "aa:0"}, {"dhcp.release", "aa:01"}} {
			seq, err := tx.Events().Append(core.Event{Time: t0, Type: e.typ, Device: e.device})
			must(t, err)
			seqs = append(seqs, seq)
		}
		return nil
	})
	type listing func(tx core.Tx) []string
	fwd := func(s core.EventStream, device string, after uint64, max int) listing {
		return func(tx core.Tx) (out []string) {
			must(t, tx.Events().ListDevice(s, device, after, func(e core.Event) (bool, error) {
				if e.Device != device {
					t.Errorf("ListDevice(%q) visited an event of %q", device, e.Device)
				}
				out = append(out, fmt.Sprint(e.Seq, " ", e.Type))
				return len(out) < max, nil
			}))
			return out
		}
	}
	back := func(s core.EventStream, device string, before uint64, max int) listing {
		return func(tx core.Tx) (out []string) {
			must(t, tx.Events().ListDeviceBackward(s, device, before, func(e core.Event) (bool, error) {
				if e.Device != device {
					t.Errorf("ListDeviceBackward(%q) visited an event of %q", device, e.Device)
				}
				out = append(out, fmt.Sprint(e.Seq, " ", e.Type))
				return len(out) < max, nil
			}))
			return out
		}
	}
	at := func(i int, typ string) string { return fmt.Sprint(seqs[i], " ", typ) }
	View(t, st, func(tx core.Tx) error {
		wantEqual(t, "aa:01 device stream", fwd(core.DeviceEvents, "aa:01", 0, 100)(tx),
			[]string{at(0, "dhcp.ack"), at(2, "ztp.served"), at(7, "dhcp.release")})
		wantEqual(t, "aa:01 audit stream", fwd(core.AuditEvents, "aa:01", 0, 100)(tx), []string{at(4, "device.approved")})
		wantEqual(t, "aa:01 after a cursor", fwd(core.DeviceEvents, "aa:01", seqs[2], 100)(tx), []string{at(7, "dhcp.release")})
		wantEqual(t, "aa:01 after another device's sequence", fwd(core.DeviceEvents, "aa:01", seqs[1], 100)(tx),
			[]string{at(2, "ztp.served"), at(7, "dhcp.release")})
		wantEqual(t, "aa:01 stopped after one", fwd(core.DeviceEvents, "aa:01", 0, 1)(tx), []string{at(0, "dhcp.ack")})
		wantEqual(t, "aa:01 after the last", fwd(core.DeviceEvents, "aa:01", seqs[7], 100)(tx), []string(nil))
		wantEqual(t, "aa:01 newest first", back(core.DeviceEvents, "aa:01", 0, 100)(tx),
			[]string{at(7, "dhcp.release"), at(2, "ztp.served"), at(0, "dhcp.ack")})
		wantEqual(t, "aa:01 newest first below a cursor", back(core.DeviceEvents, "aa:01", seqs[7], 100)(tx),
			[]string{at(2, "ztp.served"), at(0, "dhcp.ack")})
		wantEqual(t, "aa:01 newest first, stopped after two", back(core.DeviceEvents, "aa:01", 0, 2)(tx),
			[]string{at(7, "dhcp.release"), at(2, "ztp.served")})
		wantEqual(t, "aa:01 newest first below the first", back(core.DeviceEvents, "aa:01", seqs[0], 100)(tx), []string(nil))
		wantEqual(t, "aa:01/x", fwd(core.DeviceEvents, "aa:01/x", 0, 100)(tx), []string{at(5, "ztp.served")})
		wantEqual(t, "aa:0 (a prefix of aa:01)", back(core.DeviceEvents, "aa:0", 0, 100)(tx), []string{at(6, "ztp.served")})
		wantEqual(t, "unknown device", fwd(core.DeviceEvents, "aa:03", 0, 100)(tx), []string(nil))
		wantEqual(t, "unknown device newest first", back(core.AuditEvents, "aa:03", 0, 100)(tx), []string(nil))
		return nil
	})
	Update(t, st, func(tx core.Tx) error {
		n, more, err := tx.Events().Prune(core.DeviceEvents, 2)
		must(t, err)
		wantEqual(t, "pruned", fmt.Sprint(n, more), "5 false")
		return nil
	})
	View(t, st, func(tx core.Tx) error {
		wantEqual(t, "aa:01 after prune", fwd(core.DeviceEvents, "aa:01", 0, 100)(tx), []string{at(7, "dhcp.release")})
		wantEqual(t, "aa:01 newest first after prune", back(core.DeviceEvents, "aa:01", 0, 100)(tx), []string{at(7, "dhcp.release")})
		wantEqual(t, "aa:02 after prune", fwd(core.DeviceEvents, "aa:02", 0, 100)(tx), []string(nil))
		wantEqual(t, "aa:01 audit untouched by a device prune", back(core.AuditEvents, "aa:01", 0, 100)(tx), []string{at(4, "device.approved")})
		return nil
	})
	Update(t, st, func(tx core.Tx) error {
		_, err := tx.Events().Append(core.Event{Time: t0, Type: "dhcp.ack", Device: "aa:02"})
		return err
	})
	View(t, st, func(tx core.Tx) error {
		wantEqual(t, "aa:02 appended after prune", len(fwd(core.DeviceEvents, "aa:02", 0, 100)(tx)), 1)
		return nil
	})
}

func imagesContract(t *testing.T, st core.Store) {
	a := core.Image{SHA256: "aa11", Name: "sonic.bin", Kind: "sonic-installer", Size: 10, Created: t0}
	b := core.Image{SHA256: "ab22", Name: "onie.bin", Kind: "onie-installer", Size: 20, Created: t0}
	Update(t, st, func(tx core.Tx) error {
		must(t, tx.Images().Put(a))
		must(t, tx.Images().Put(b))
		must(t, tx.Images().SetName("sonic.bin", "aa11"))
		must(t, tx.Images().SetName("onie.bin", "ab22"))
		return nil
	})
	View(t, st, func(tx core.Tx) error {
		sha, err := tx.Images().ByName("sonic.bin")
		must(t, err)
		wantEqual(t, "image by name", sha, "aa11")
		_, err = tx.Images().ByName("nope")
		wantNotFound(t, "missing image name", err)
		var names []string
		must(t, tx.Images().Names(func(n, s string) (bool, error) { names = append(names, n+"="+s); return true, nil }))
		wantEqual(t, "image names", names, []string{"onie.bin=ab22", "sonic.bin=aa11"})
		var got []core.Image
		must(t, tx.Images().WithPrefix("ab", func(im core.Image) (bool, error) { got = append(got, im); return true, nil }))
		wantEqual(t, "images by prefix", got, []core.Image{b})
		n, err := tx.Images().Count()
		must(t, err)
		wantEqual(t, "image count", n, 2)
		return nil
	})
	Update(t, st, func(tx core.Tx) error {
		must(t, tx.Images().DeleteName("sonic.bin"))
		return tx.Images().Delete("aa11")
	})
	View(t, st, func(tx core.Tx) error {
		_, err := tx.Images().Get("aa11")
		wantNotFound(t, "deleted image", err)
		_, err = tx.Images().ByName("sonic.bin")
		wantNotFound(t, "deleted image name", err)
		return nil
	})
}

func apiKeysContract(t *testing.T, st core.Store) {
	k := core.APIKey{APIKey: "key1", Name: "ops", Role: "admin", SecretSealed: []byte{1, 2, 3}, SecretHash: "ff", Created: t0}
	Update(t, st, func(tx core.Tx) error { return tx.APIKeys().Put(k) })
	View(t, st, func(tx core.Tx) error {
		got, err := tx.APIKeys().Get("key1")
		must(t, err)
		wantEqual(t, "api key", got, k)
		n, err := tx.APIKeys().Count()
		must(t, err)
		wantEqual(t, "api key count", n, 1)
		return nil
	})
	Update(t, st, func(tx core.Tx) error { return tx.APIKeys().Delete("key1") })
	View(t, st, func(tx core.Tx) error {
		_, err := tx.APIKeys().Get("key1")
		wantNotFound(t, "deleted api key", err)
		return nil
	})
}

func jobsContract(t *testing.T, st core.Store) {
	c := core.Cluster{ID: "c1", Name: "x", State: core.ClusterRunning, Created: t0, UpdatedAt: t0}
	j := core.Job{ID: "j1", Command: "scaleKubernetesCluster", InstanceType: "KubernetesCluster", InstanceID: "c1",
		Status: core.JobFailed, ErrorKind: core.KindState, Error: "no", Cluster: &c, Created: t0, Completed: t0,
		Params: core.JobParams{Size: 3, Target: core.ClusterRunning}, FailState: core.ClusterAlert}
	Update(t, st, func(tx core.Tx) error { return tx.Jobs().Put(j) })
	View(t, st, func(tx core.Tx) error {
		got, err := tx.Jobs().Get("j1")
		must(t, err)
		wantEqual(t, "job", got, j)
		var n int
		must(t, tx.Jobs().List(func(core.Job) (bool, error) { n++; return true, nil }))
		wantEqual(t, "jobs listed", n, 1)
		return nil
	})
	Update(t, st, func(tx core.Tx) error { return tx.Jobs().Delete("j1") })
	View(t, st, func(tx core.Tx) error {
		_, err := tx.Jobs().Get("j1")
		wantNotFound(t, "deleted job", err)
		return nil
	})
}

func desiredContract(t *testing.T, st core.Store) {
	d := core.DesiredState{Device: "02:00:00:00:00:01", Mode: core.ModeCluster, Cluster: "c1", Role: "worker",
		Image: "sonic-202411", KubernetesVersion: "v1.37.2", Labels: map[string]string{"rack": "r1"},
		Hooks: map[string]string{core.HookPreUpgrade: "snapshot-bgp"}, Generation: 3, UpdatedAt: t0, UpdatedBy: "admin",
		Operation: &core.AgentOperation{ID: "op-1", Kind: core.OpUpgradeKubernetes, Rollout: "r1", State: core.StepRunning,
			Created: t0, Steps: []core.AgentStep{
				{Name: "upgrade", Action: "kubeadm-upgrade", Args: map[string]string{"version": "v1.37.2"}, State: core.StepSucceeded,
					ExitCode: 0, Output: "ok", Started: t0, Finished: t0, Attempts: 2},
				{Name: "post_upgrade", Action: "hook", State: core.StepPending}}},
		Agent: core.AgentStatus{LastSeen: t0, IP: "10.99.0.10", BootID: "b", Version: "1"}}
	d2 := core.DesiredState{Device: "02:00:00:00:00:02", Mode: core.ModeStandalone, Generation: 1, UpdatedAt: t0}
	Update(t, st, func(tx core.Tx) error {
		if err := tx.Desired().Put(core.DesiredState{}); err == nil {
			t.Fatal("a desired state without a device was stored")
		}
		must(t, tx.Desired().Put(d2))
		return tx.Desired().Put(d)
	})
	View(t, st, func(tx core.Tx) error {
		got, err := tx.Desired().Get(d.Device)
		must(t, err)
		wantEqual(t, "desired state", got, d)
		var ids []string
		must(t, tx.Desired().List("", func(x core.DesiredState) (bool, error) { ids = append(ids, x.Device); return true, nil }))
		wantEqual(t, "desired states listed", ids, []string{d.Device, d2.Device})
		ids = nil
		must(t, tx.Desired().List(d.Device, func(x core.DesiredState) (bool, error) { ids = append(ids, x.Device); return true, nil }))
		wantEqual(t, "desired states after a cursor", ids, []string{d2.Device})
		return nil
	})
	Update(t, st, func(tx core.Tx) error { return tx.Desired().Delete(d.Device) })
	View(t, st, func(tx core.Tx) error {
		_, err := tx.Desired().Get(d.Device)
		wantNotFound(t, "deleted desired state", err)
		return nil
	})
}

func rolloutsContract(t *testing.T, st core.Store) {
	r := core.Rollout{ID: "ro-1", Cluster: "c1", Kind: core.RolloutKubernetes, State: core.RolloutPaused, Reason: "paused by admin",
		Target: "v1.37.2", TargetID: "v2", MaxUnavailable: 10, DrainTimeout: core.Duration(2 * time.Minute),
		StepTimeout: core.Duration(15 * time.Minute), Hooks: map[string]string{core.HookPostUpgrade: "compare-bgp"},
		ContinueOnHookFailure: true, Job: "j1", CreatedBy: "admin", Created: t0, UpdatedAt: t0,
		Selector: map[string]string{"ztpd.io/hwsku": "as7712"},
		Nodes: []core.RolloutNode{{Device: "02:00:00:00:00:01", NodeName: "n1", Role: "control-plane", Phase: core.NodeDone,
			Operation: "op-1", Cordoned: true, Started: t0, Finished: t0}, {Device: "02:00:00:00:00:02", Phase: core.NodePending}}}
	Update(t, st, func(tx core.Tx) error {
		if err := tx.Rollouts().Put(core.Rollout{}); err == nil {
			t.Fatal("a rollout without an id was stored")
		}
		must(t, tx.Rollouts().Put(r))
		return tx.Rollouts().Put(core.Rollout{ID: "ro-2", Kind: core.RolloutRemove, State: core.RolloutSucceeded, Created: t0})
	})
	View(t, st, func(tx core.Tx) error {
		got, err := tx.Rollouts().Get("ro-1")
		must(t, err)
		wantEqual(t, "rollout", got, r)
		var ids []string
		must(t, tx.Rollouts().List("", func(x core.Rollout) (bool, error) { ids = append(ids, x.ID); return true, nil }))
		wantEqual(t, "rollouts listed", ids, []string{"ro-1", "ro-2"})
		return nil
	})
	Update(t, st, func(tx core.Tx) error { return tx.Rollouts().Delete("ro-1") })
	View(t, st, func(tx core.Tx) error {
		_, err := tx.Rollouts().Get("ro-1")
		wantNotFound(t, "deleted rollout", err)
		return nil
	})
}

func settingsContract(t *testing.T, st core.Store) {
	Update(t, st, func(tx core.Tx) error {
		_, ok, err := tx.Settings().Get("zone")
		must(t, err)
		wantEqual(t, "missing setting", ok, false)
		if err := tx.Settings().Put("schema_version", "99"); err == nil {
			t.Fatal("a setting overwrote the schema version")
		}
		return tx.Settings().Put("zone", "z-1")
	})
	View(t, st, func(tx core.Tx) error {
		v, ok, err := tx.Settings().Get("zone")
		must(t, err)
		wantEqual(t, "setting", fmt.Sprintf("%s %v", v, ok), "z-1 true")
		return nil
	})
}

// A failed transaction leaves nothing behind, across repositories.
func atomicityContract(t *testing.T, st core.Store) {
	boom := errors.New("boom")
	err := st.Update(func(tx core.Tx) error {
		must(t, tx.Devices().Put(core.Device{ID: "d1", MAC: "d1", Serial: "S1"}))
		must(t, tx.Clusters().Put(core.Cluster{ID: "c1", Name: "n1"}))
		_, err := tx.Events().Append(core.Event{Type: "dhcp.ack"})
		must(t, err)
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("update returned %v, want the callback's error", err)
	}
	View(t, st, func(tx core.Tx) error {
		_, err := tx.Devices().Get("d1")
		wantNotFound(t, "device of a failed transaction", err)
		_, err = tx.Devices().BySerial("S1")
		wantNotFound(t, "serial index of a failed transaction", err)
		_, err = tx.Clusters().ByName("n1")
		wantNotFound(t, "cluster of a failed transaction", err)
		n, err := tx.Events().Count(core.DeviceEvents)
		must(t, err)
		wantEqual(t, "events of a failed transaction", n, 0)
		if tx.Writable() {
			t.Fatal("a View transaction says it is writable")
		}
		return nil
	})
}

// Concurrent Batch callers all commit; a failing one fails alone.
func batchContract(t *testing.T, st core.Store) {
	var wg sync.WaitGroup
	errs := make([]error, 50)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = st.Batch(func(tx core.Tx) error {
				if i == 7 {
					return errors.New("refused")
				}
				return tx.Leases().Put(core.Lease{IP: fmt.Sprintf("10.99.1.%d", i), MAC: "m", State: core.LeaseActive})
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if (i == 7) != (err != nil) {
			t.Fatalf("batch caller %d: %v", i, err)
		}
	}
	View(t, st, func(tx core.Tx) error {
		n, err := tx.Leases().Count()
		must(t, err)
		wantEqual(t, "leases after batch", n, 49)
		return nil
	})
}

func generationsContract(t *testing.T, st core.Store) {
	g, ok := st.(core.Generations)
	if !ok {
		t.Skip("store does not count generations (optional)")
	}
	d0, c0 := g.Generation(core.AggDevices), g.Generation(core.AggClusters)
	Update(t, st, func(tx core.Tx) error { return tx.Devices().Put(core.Device{ID: "d", MAC: "d"}) })
	if g.Generation(core.AggDevices) == d0 {
		t.Fatal("device generation did not move after a device write")
	}
	if g.Generation(core.AggClusters) != c0 {
		t.Fatal("cluster generation moved after a device write")
	}
	l0 := g.Generation(core.AggLeases)
	View(t, st, func(tx core.Tx) error { _, _ = tx.Leases().Get("x"); return nil })
	if g.Generation(core.AggLeases) != l0 {
		t.Fatal("a read moved the lease generation")
	}
}

// stampsContract: a record's Stamp stays while the record does (reads and
// writes of other records leave it) and moves when it is rewritten with a
// change; a missing record has none; ListStamps gives every device's, in
// ID order, equal to Stamp's.
func stampsContract(t *testing.T, st core.Store) {
	ids := []string{"02:00:00:00:00:01", "02:00:00:00:00:02", "02:00:00:00:00:03"}
	Update(t, st, func(tx core.Tx) error {
		for _, id := range ids {
			must(t, tx.Devices().Put(core.Device{ID: id, MAC: id, State: core.StateLeased, UpdatedAt: t0}))
		}
		return tx.Memberships().Put(core.Membership{Device: ids[0], Cluster: "c1", Role: "worker", State: core.StateJoined, Created: t0})
	})
	stamps := func() (map[string]core.Stamp, core.Stamp) {
		got := map[string]core.Stamp{}
		var ms core.Stamp
		View(t, st, func(tx core.Tx) error {
			var order []string
			must(t, tx.Devices().ListStamps("", func(id string, s core.Stamp) (bool, error) {
				order = append(order, id)
				got[id] = s
				one, err := tx.Devices().Stamp(id)
				must(t, err)
				if one != s || s == (core.Stamp{}) {
					t.Fatalf("device %s: listed stamp %x, Stamp %x", id, s, one)
				}
				return true, nil
			}))
			wantEqual(t, "stamped devices", order, ids)
			var after []string
			must(t, tx.Devices().ListStamps(ids[0], func(id string, _ core.Stamp) (bool, error) {
				after = append(after, id)
				return true, nil
			}))
			wantEqual(t, "stamped devices after the first", after, ids[1:])
			var err error
			ms, err = tx.Memberships().Stamp(ids[0])
			must(t, err)
			_, err = tx.Devices().Stamp("02:00:00:00:00:09")
			wantNotFound(t, "stamp of a missing device", err)
			_, err = tx.Memberships().Stamp(ids[1])
			wantNotFound(t, "stamp of a missing membership", err)
			_, err = tx.Devices().Get(ids[1]) // a read moves nothing
			return err
		})
		return got, ms
	}
	before, mBefore := stamps()
	Update(t, st, func(tx core.Tx) error {
		d, err := tx.Devices().Get(ids[1])
		must(t, err)
		d.IP = "10.99.0.2"
		must(t, tx.Devices().Put(d))
		m, err := tx.Memberships().Get(ids[0])
		must(t, err)
		m.State = core.StateNotReady
		return tx.Memberships().Put(m)
	})
	after, mAfter := stamps()
	for _, id := range ids {
		if changed := id == ids[1]; (before[id] != after[id]) != changed {
			t.Errorf("device %s: stamp %x -> %x; changed: %v", id, before[id], after[id], changed)
		}
	}
	if mBefore == mAfter {
		t.Error("a membership's stamp stayed when it changed")
	}
	Update(t, st, func(tx core.Tx) error { return tx.Devices().Delete(ids[2]) })
	View(t, st, func(tx core.Tx) error {
		_, err := tx.Devices().Stamp(ids[2])
		wantNotFound(t, "stamp of a deleted device", err)
		return nil
	})
}

// serialIndexContract: the serial index stays with the device whose record
// holds the serial; another device put with the same serial never moves it
// and, deleted or changed, never removes it. A serial in conflict
// (Device.SerialConflict) is refused by BySerial, naming the candidates.
func serialIndexContract(t *testing.T, st core.Store) {
	a := core.Device{ID: "02:00:00:00:00:0a", MAC: "02:00:00:00:00:0a", Serial: "S1", IP: "10.99.0.10", FirstSeen: t0, LastSeen: t0, UpdatedAt: t0}
	b := core.Device{ID: "02:00:00:00:00:0b", MAC: "02:00:00:00:00:0b", Serial: "S1", FirstSeen: t0, LastSeen: t0, UpdatedAt: t0}
	Update(t, st, func(tx core.Tx) error {
		must(t, tx.Devices().Put(a))
		must(t, tx.Devices().Put(b))
		id, held, err := tx.Devices().SerialHolder("S1")
		must(t, err)
		if !held || id != a.ID {
			t.Fatalf("serial holder %q (%v), want %s", id, held, a.ID)
		}
		b.Serial = "S2"
		must(t, tx.Devices().Put(b)) // b's old serial was never indexed to it
		must(t, tx.Devices().Delete(b.ID))
		d, err := tx.Devices().BySerial("S1")
		must(t, err)
		wantEqual(t, "device by serial", d.ID, a.ID)
		return nil
	})
	Update(t, st, func(tx core.Tx) error {
		b.Serial = ""
		must(t, tx.Devices().Put(b))
		a.SerialConflict = &core.SerialConflict{Serial: "S1", With: []string{b.ID}}
		must(t, tx.Devices().Put(a))
		_, err := tx.Devices().BySerial("S1")
		if core.KindOf(err) != core.KindConflict || !strings.Contains(err.Error(), a.ID) || !strings.Contains(err.Error(), b.ID) {
			t.Fatalf("ambiguous serial: %v", err)
		}
		got, err := tx.Devices().Get(a.ID)
		must(t, err)
		wantEqual(t, "device with a serial conflict", got, a)
		return nil
	})
}
