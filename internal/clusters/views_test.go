package clusters

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// sumMembers lists Member's fields (and the Node's) by hand, for speed: a
// field added to either and left out of the sum would let a changed member
// keep a cached rendering. Every field must move the sum.
func TestMemberSumCoversEveryField(t *testing.T) {
	set := func(v reflect.Value) {
		switch v.Kind() {
		case reflect.String:
			v.SetString("x")
		case reflect.Bool:
			v.SetBool(true)
		default:
			if v.Type() != reflect.TypeOf(time.Time{}) {
				t.Fatalf("no test value for a %s: extend this test and sumMembers", v.Type())
			}
			v.Set(reflect.ValueOf(time.Unix(1, 2)))
		}
	}
	base := sumMembers([]Member{{Node: &core.NodeObservation{}}})
	mt := reflect.TypeOf(Member{})
	for i := range mt.NumField() {
		m := Member{Node: &core.NodeObservation{}}
		if f := mt.Field(i); f.Name == "Node" {
			if sumMembers([]Member{{}}) == base {
				t.Error("Member.Node: nil and present sum the same")
			}
			nt := reflect.TypeOf(core.NodeObservation{})
			for j := range nt.NumField() {
				n := core.NodeObservation{}
				set(reflect.ValueOf(&n).Elem().Field(j))
				if sumMembers([]Member{{Node: &n}}) == base {
					t.Errorf("NodeObservation.%s does not move the member sum", nt.Field(j).Name)
				}
			}
			continue
		}
		set(reflect.ValueOf(&m).Elem().Field(i))
		if sumMembers([]Member{m}) == base {
			t.Errorf("Member.%s does not move the sum", mt.Field(i).Name)
		}
	}
}

// A roster read again keeps the Members whose membership and device
// records are unchanged (the very values: nothing decoded) and reads the
// others: a device's new address, a member's new state, a device record
// gone, a member that left or lost its membership.
func TestRosterReadsOnlyChangedMembers(t *testing.T) {
	st := storetest.Store(t)
	ids := []string{"02:00:00:00:00:01", "02:00:00:00:00:02", "02:00:00:00:00:03", "02:00:00:00:00:04", "02:00:00:00:00:05"}
	update := func(fn func(tx core.Tx) error) {
		t.Helper()
		if err := st.Update(fn); err != nil {
			t.Fatal(err)
		}
	}
	update(func(tx core.Tx) error {
		for i, id := range ids {
			role := "worker"
			if i == 4 {
				role = "control-plane"
			}
			if err := tx.Devices().Put(core.Device{ID: id, MAC: id, IP: "10.99.1.1" + string(rune('0'+i)), State: core.StateJoined}); err != nil {
				return err
			}
			m := core.Membership{Device: id, Cluster: "cx", Role: role, State: core.StateJoined, Node: &core.NodeObservation{Ready: "True"}}
			if err := tx.Memberships().Put(m); err != nil {
				return err
			}
			if err := tx.Memberships().Enlist("cx", id, role); err != nil {
				return err
			}
		}
		return nil
	})
	read := func(base roster) roster {
		t.Helper()
		var r roster
		if err := st.View(func(tx core.Tx) (err error) { r, err = readMembers(tx, "cx", base); return err }); err != nil {
			t.Fatal(err)
		}
		return r
	}
	first := read(roster{})
	if len(first.members) != 5 || first.members[0].DeviceID != ids[4] || first.members[1].DeviceID != ids[0] {
		t.Fatalf("first reading: %+v", first.members)
	}
	if again := read(first); again.sum != first.sum || again.members[1].Node != first.members[1].Node {
		t.Fatal("an unchanged roster read again is not the same")
	}
	update(func(tx core.Tx) error {
		d, err := tx.Devices().Get(ids[1])
		if err != nil {
			return err
		}
		d.IP = "10.99.1.99"
		if err := tx.Devices().Put(d); err != nil {
			return err
		}
		m, err := tx.Memberships().Get(ids[2])
		if err != nil {
			return err
		}
		m.State = core.StateNotReady
		if err := tx.Memberships().Put(m); err != nil {
			return err
		}
		if err := tx.Devices().Delete(ids[3]); err != nil {
			return err
		}
		m, err = tx.Memberships().Get(ids[4])
		if err != nil {
			return err
		}
		m.State = core.StateLeft
		return tx.Memberships().Put(m)
	})
	second := read(first)
	byID := map[string]Member{}
	for _, m := range second.members {
		byID[m.DeviceID] = m
	}
	if len(second.members) != 4 || second.sum == first.sum {
		t.Fatalf("after the writes: %+v", second.members)
	}
	if m := byID[ids[0]]; m.Node != first.members[1].Node {
		t.Error("an unchanged member was read again")
	}
	if m := byID[ids[1]]; m.IP != "10.99.1.99" || m.Node == first.members[2].Node {
		t.Errorf("a changed device: %+v", m)
	}
	if m := byID[ids[2]]; m.State != core.StateNotReady {
		t.Errorf("a changed membership: %+v", m)
	}
	if m := byID[ids[3]]; m.DeviceKnown || m.IP != "" {
		t.Errorf("a member whose device is gone: %+v", m)
	}
	update(func(tx core.Tx) error { return tx.Memberships().Delete(ids[0]) })
	if third := read(second); len(third.members) != 3 || third.members[0].DeviceID != ids[1] {
		t.Fatalf("after a membership was deleted: %+v", third.members)
	}
}

// The first listing after a restart (generation 0: nothing written since
// the store opened) keeps the cluster's members: the next listing reads
// none of them again, and one after a device write only that device.
func TestRosterOfTheFirstListingAfterARestartIsKept(t *testing.T) {
	dir := t.TempDir()
	f := storetest.OpenIn(t, dir)
	s, err := New(f.Store, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	v := addVersion(t, s, "1.30.2")
	c, j, err := s.CreateCluster(context.Background(), user, ClusterSpec{Name: "c0", ZoneID: s.Zone().ID, VersionID: v.ID,
		ServiceOfferingID: Offerings[1].ID, Size: 2})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, s, j)
	storetest.Update(t, f.Store, func(tx core.Tx) error {
		for _, id := range []string{"02:00:00:00:00:01", "02:00:00:00:00:02"} {
			if err := tx.Devices().Put(core.Device{ID: id, MAC: id, State: core.StateJoined}); err != nil {
				return err
			}
			if err := tx.Memberships().Put(core.Membership{Device: id, Cluster: c.ID, Role: "worker", State: core.StateJoined,
				Node: &core.NodeObservation{Ready: "True"}}); err != nil {
				return err
			}
			if err := tx.Memberships().Enlist(c.ID, id, "worker"); err != nil {
				return err
			}
		}
		return nil
	})
	s.Close(context.Background())
	f.Store.Close()

	f = storetest.OpenIn(t, dir) // generation 0 again
	if g := f.Store.Generation(core.AggMemberships, core.AggDevices); g != 0 {
		t.Fatalf("a reopened store is at generation %d", g)
	}
	s, err = New(f.Store, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	list := func() []Member {
		t.Helper()
		vs, _, err := s.ListClusters(context.Background(), admin, ClusterFilter{ListAll: true}, 0, 0)
		if err != nil || len(vs) != 1 || len(vs[0].Members) != 2 {
			t.Fatalf("listing: %+v %v", vs, err)
		}
		return vs[0].Members
	}
	first := list()
	if _, current := s.members.get(c.ID, 0); !current {
		t.Fatal("the first listing after a restart did not keep its members")
	}
	if again := list(); again[0].Node != first[0].Node || again[1].Node != first[1].Node {
		t.Fatal("members read again without a write")
	}
	storetest.Update(t, f.Store, func(tx core.Tx) error {
		return tx.Devices().Put(core.Device{ID: "02:00:00:00:00:02", MAC: "02:00:00:00:00:02", IP: "10.99.1.2", State: core.StateJoined})
	})
	after := list()
	if after[0].Node != first[0].Node || after[1].IP != "10.99.1.2" || after[1].Node == first[1].Node {
		t.Fatalf("after one device's write: %+v", after)
	}
}
