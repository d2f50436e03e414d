package devices

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// TestUserListingCostsItsOwnDevices: with 10,000 devices (and their
// leases) in other accounts' clusters and 3 in the user's, the user's
// device and lease listings read a handful of records, not the fleet.
func TestUserListingCostsItsOwnDevices(t *testing.T) {
	const fleet = 10000
	st := storetest.Store(t)
	storetest.Update(t, st, func(tx core.Tx) error {
		for _, c := range []core.Cluster{{ID: "c-mine", Name: "mine", Account: "acme"}, {ID: "c-other", Name: "other", Account: "other"}} {
			if err := tx.Clusters().Put(c); err != nil {
				return err
			}
		}
		for i := range fleet + 3 {
			id := fmt.Sprintf("02:00:00:%02x:%02x:%02x", i>>16, i>>8&255, i&255)
			d := core.Device{ID: id, MAC: id, Cluster: "c-other", State: core.StateJoined}
			if i%3400 == 1700 { // three of them, spread over the fleet's ID range
				d.Cluster = "c-mine"
			}
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
			if err := tx.Leases().Put(core.Lease{IP: fmt.Sprintf("10.%d.%d.%d", i>>16, i>>8&255, i&255), MAC: id}); err != nil {
				return err
			}
		}
		return nil
	})
	counted := &countingStore{Store: st}
	q := NewQueries(counted)
	user := core.Caller{APIKey: "k", Account: "acme"}
	var devs, states, leases []string
	err := q.Read(user, func(r Reader) error {
		counted.reads = 0 // the scope's clusters are read once per reader, not counted
		if err := r.Devices("", "", func(d core.Device) (bool, error) { devs = append(devs, d.ID); return true, nil }); err != nil {
			return err
		}
		if err := r.Devices(core.StateJoined, "", func(d core.Device) (bool, error) { states = append(states, d.ID); return true, nil }); err != nil {
			return err
		}
		return r.Leases("", func(l core.Lease) (bool, error) { leases = append(leases, l.IP); return true, nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"02:00:00:00:06:a4", "02:00:00:00:13:ec", "02:00:00:00:21:34"}; !slices.Equal(devs, want) || !slices.Equal(states, want) {
		t.Errorf("the user's devices %v, joined %v; want %v", devs, states, want)
	}
	if want := []string{"10.0.19.236", "10.0.33.52", "10.0.6.164"}; !slices.Equal(leases, want) {
		t.Errorf("the user's leases %v, want %v", leases, want)
	}
	// Devices twice (3 + 3), then the 3 devices whose MACs name the 3
	// leases (6); nothing of the other 10,000.
	if counted.reads > 12 {
		t.Errorf("the user's listings read %d records of a fleet of %d; want its own (12)", counted.reads, fleet+3)
	}
}

// TestUserListingMatchesTheFleetsFiltered: a user's listings through the
// indexes, over several clusters, with and without a state, after any
// cursor and stopped anywhere, are what filtering the fleet's listing by
// the scope gives.
func TestUserListingMatchesTheFleetsFiltered(t *testing.T) {
	st := storetest.Store(t)
	rng := rand.New(rand.NewPCG(1, 2))
	clusters := []core.Cluster{{ID: "c1", Name: "a", Account: "acme"}, {ID: "c2", Name: "b", Account: "acme"},
		{ID: "c3", Name: "c", Account: "acme"}, {ID: "c4", Name: "d", Account: "other"}}
	states := []core.DeviceState{core.StateJoined, core.StateLeased, core.StateFailed}
	storetest.Update(t, st, func(tx core.Tx) error {
		for _, c := range clusters {
			if err := tx.Clusters().Put(c); err != nil {
				return err
			}
		}
		for i := range 400 {
			id := fmt.Sprintf("02:00:00:00:%02x:%02x", i>>8, i&255)
			d := core.Device{ID: id, MAC: id, State: states[rng.IntN(len(states))]}
			if c := rng.IntN(len(clusters) + 1); c < len(clusters) {
				d.Cluster = clusters[c].ID
			}
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
			for range rng.IntN(3) {
				ip := fmt.Sprintf("10.99.%d.%d", rng.IntN(4), rng.IntN(256))
				if err := tx.Leases().Put(core.Lease{IP: ip, MAC: id}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	q := NewQueries(st)
	user := core.Caller{APIKey: "k", Account: "acme"}
	sc, err := q.ScopeOf(user)
	if err != nil {
		t.Fatal(err)
	}
	stopAt := func(n int) func() bool { seen := 0; return func() bool { seen++; return n == 0 || seen < n } }
	err = q.ReadScoped(AllScope, func(fleet Reader) error {
		return q.ReadScoped(sc, func(r Reader) error {
			for _, state := range append([]core.DeviceState{""}, states...) {
				for _, after := range []string{"", "02:00:00:00:00:00", "02:00:00:00:00:7f", "02:00:00:00:01:2c", "02:00:00:00:ff:ff"} {
					for _, limit := range []int{0, 1, 7, 100} {
						var want, got []string
						more := stopAt(limit)
						if err := fleet.Devices(state, after, func(d core.Device) (bool, error) {
							if !sc.SeesDevice(d) {
								return true, nil
							}
							want = append(want, d.ID)
							return more(), nil
						}); err != nil {
							return err
						}
						more = stopAt(limit)
						if err := r.Devices(state, after, func(d core.Device) (bool, error) {
							got = append(got, d.ID)
							return more(), nil
						}); err != nil {
							return err
						}
						if !slices.Equal(got, want) {
							t.Errorf("devices state %q after %q limit %d:\n got %v\nwant %v", state, after, limit, got, want)
						}
					}
				}
			}
			macs := map[string]bool{}
			if err := r.Devices("", "", func(d core.Device) (bool, error) { macs[d.MAC] = true; return true, nil }); err != nil {
				return err
			}
			for _, after := range []string{"", "10.99.1.1", "10.99.2.200", "10.99.9"} {
				for _, limit := range []int{0, 1, 10} {
					var want, got []string
					more := stopAt(limit)
					if err := fleet.Leases(after, func(l core.Lease) (bool, error) {
						if !macs[l.MAC] {
							return true, nil
						}
						want = append(want, l.IP)
						return more(), nil
					}); err != nil {
						return err
					}
					more = stopAt(limit)
					if err := r.Leases(after, func(l core.Lease) (bool, error) {
						got = append(got, l.IP)
						return more(), nil
					}); err != nil {
						return err
					}
					if !slices.Equal(got, want) {
						t.Errorf("leases after %q limit %d:\n got %v\nwant %v", after, limit, got, want)
					}
				}
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// countingStore counts the device and lease records its transactions'
// repositories hand out: every record a listing visits or a lookup
// returns.
type countingStore struct {
	core.Store
	reads int
}

func (s *countingStore) View(fn func(core.Tx) error) error {
	return s.Store.View(func(tx core.Tx) error { return fn(countingTx{Tx: tx, n: &s.reads}) })
}

type countingTx struct {
	core.Tx
	n *int
}

func (t countingTx) Devices() core.Devices { return countingDevices{Devices: t.Tx.Devices(), n: t.n} }
func (t countingTx) Leases() core.Leases   { return countingLeases{Leases: t.Tx.Leases(), n: t.n} }

type countingDevices struct {
	core.Devices
	n *int
}

func counting[T any](n *int, fn core.Visit[T]) core.Visit[T] {
	return func(v T) (bool, error) { *n++; return fn(v) }
}

func (r countingDevices) Get(id string) (core.Device, error) { *r.n++; return r.Devices.Get(id) }
func (r countingDevices) BySerial(s string) (core.Device, error) {
	*r.n++
	return r.Devices.BySerial(s)
}
func (r countingDevices) List(after string, fn core.Visit[core.Device]) error {
	return r.Devices.List(after, counting(r.n, fn))
}
func (r countingDevices) ListState(s core.DeviceState, after string, fn core.Visit[core.Device]) error {
	return r.Devices.ListState(s, after, counting(r.n, fn))
}
func (r countingDevices) ListCluster(c, after string, fn core.Visit[core.Device]) error {
	return r.Devices.ListCluster(c, after, counting(r.n, fn))
}
func (r countingDevices) ListStamps(after string, fn func(string, core.Stamp) (bool, error)) error {
	return r.Devices.ListStamps(after, func(id string, s core.Stamp) (bool, error) { *r.n++; return fn(id, s) })
}

type countingLeases struct {
	core.Leases
	n *int
}

func (r countingLeases) Get(ip string) (core.Lease, error) { *r.n++; return r.Leases.Get(ip) }
func (r countingLeases) List(after string, fn core.Visit[core.Lease]) error {
	return r.Leases.List(after, counting(r.n, fn))
}
func (r countingLeases) ListMAC(mac string, fn core.Visit[core.Lease]) error {
	return r.Leases.ListMAC(mac, counting(r.n, fn))
}
