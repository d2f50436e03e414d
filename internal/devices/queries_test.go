package devices

import (
	"errors"
	"slices"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// TestQueriesScope: a user key reads its account's clusters' devices, their
// leases and its events; an admin the fleet; another account's device is
// not found, as one that does not exist.
func TestQueriesScope(t *testing.T) {
	f := storetest.Open(t)
	storetest.Update(t, f.Store, func(tx core.Tx) error {
		for _, c := range []core.Cluster{{ID: "c-a", Name: "a", Account: "acme"}, {ID: "c-b", Name: "b", Account: "other"}} {
			if err := tx.Clusters().Put(c); err != nil {
				return err
			}
		}
		for _, d := range []core.Device{
			{ID: "aa:00:00:00:00:01", MAC: "aa:00:00:00:00:01", Cluster: "c-a", State: core.StateWaiting},
			{ID: "aa:00:00:00:00:02", MAC: "aa:00:00:00:00:02", Cluster: "c-b", State: core.StateWaiting},
			{ID: "aa:00:00:00:00:03", MAC: "aa:00:00:00:00:03", State: core.StateDiscovered},
		} {
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
			l := core.Lease{IP: "10.0.0." + d.ID[len(d.ID)-1:], MAC: d.MAC}
			if err := tx.Leases().Put(l); err != nil {
				return err
			}
		}
		return nil
	})
	q := NewQueries(f.Store)
	user := core.Caller{APIKey: "k", Account: "acme"}
	admin := core.Caller{APIKey: "a", Admin: true}
	read := func(c core.Caller) (devs, leases []string, refErr error) {
		err := q.Read(c, func(r Reader) error {
			if err := r.Devices("", "", func(d core.Device) (bool, error) { devs = append(devs, d.ID); return true, nil }); err != nil {
				return err
			}
			if err := r.Leases("", func(l core.Lease) (bool, error) { leases = append(leases, l.MAC); return true, nil }); err != nil {
				return err
			}
			_, refErr = r.Device("aa-00-00-00-00-02")
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return devs, leases, refErr
	}
	devs, leases, refErr := read(user)
	if want := []string{"aa:00:00:00:00:01"}; !slices.Equal(devs, want) || !slices.Equal(leases, want) {
		t.Errorf("user sees devices %v leases %v, want %v", devs, leases, want)
	}
	if !errors.Is(refErr, core.ErrNotFound) {
		t.Errorf("another account's device: %v, want not found", refErr)
	}
	devs, leases, refErr = read(admin)
	if len(devs) != 3 || len(leases) != 3 || refErr != nil {
		t.Errorf("admin sees devices %v leases %v (%v)", devs, leases, refErr)
	}
	sc, err := q.ScopeOf(user)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		e    core.Event
		sees bool
	}{
		{core.Event{Cluster: "c-a"}, true},
		{core.Event{Cluster: "c-b"}, false},
		{core.Event{Fields: map[string]string{"account": "acme"}}, true},
		{core.Event{}, false},
	} {
		if got := sc.SeesEvent(tc.e); got != tc.sees {
			t.Errorf("SeesEvent(%+v) = %v", tc.e, got)
		}
	}
	if err := q.ReadScoped(sc, func(r Reader) error {
		return r.DeviceStamps(func(string, core.Stamp) (bool, error) { return true, nil })
	}); core.KindOf(err) != core.KindPermission {
		t.Errorf("a user's device stamps: %v, want a permission error", err)
	}
}
