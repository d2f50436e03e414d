package devices

import (
	"errors"
	"slices"
	"strings"

	"github.com/ztpd/ztpd/internal/core"
)

// Queries answers the API doors' reads of devices, their leases, the
// event log and the fleet's device counts, for a caller: admins see the
// fleet, a user key its account's clusters' devices, their leases, and the
// events of those clusters or naming its account. Tenancy is decided here,
// once, so no door filters what a key may see.
//
// Leases are read here, not by the DHCP server that writes them: the DHCP
// server is a door (it answers clients and commits what they bound), and
// what an API caller may see of a lease is decided by the device that
// holds it, which this package owns.
type Queries struct{ st core.Store }

// NewQueries returns the reads over st.
func NewQueries(st core.Store) *Queries { return &Queries{st: st} }

// Scope is what a caller sees: everything (admins), or the clusters of its
// account and the events naming the account.
type Scope struct {
	all     bool
	own     map[string]bool
	account string
}

// AllScope is an admin's scope: the whole fleet.
var AllScope = Scope{all: true}

// ScopeOf is caller's scope, reading its account's clusters. An admin's
// needs no read: every cached API answer starts here, and a transaction
// per request was a tenth of an admin's devices page.
func (q *Queries) ScopeOf(caller core.Caller) (Scope, error) {
	if caller.Admin {
		return AllScope, nil
	}
	var sc Scope
	err := q.st.View(func(tx core.Tx) error {
		var err error
		sc, err = scopeIn(tx, caller)
		return err
	})
	return sc, err
}

func scopeIn(tx core.Tx, caller core.Caller) (Scope, error) {
	if caller.Admin {
		return AllScope, nil
	}
	sc := Scope{own: map[string]bool{}, account: caller.AccountName()}
	err := tx.Clusters().List("", func(c core.Cluster) (bool, error) {
		if caller.Sees(c) {
			sc.own[c.ID] = true
		}
		return true, nil
	})
	return sc, err
}

// All reports whether the scope is the whole fleet.
func (sc Scope) All() bool { return sc.all }

// Clusters are the IDs of the clusters the scope sees; nil for the whole
// fleet.
func (sc Scope) Clusters() map[string]bool {
	if sc.all {
		return nil
	}
	return sc.own
}

// SeesCluster reports whether the scope sees cluster ID id.
func (sc Scope) SeesCluster(id string) bool { return sc.all || sc.own[id] }

// SeesDevice reports whether the scope sees d: a user key the devices of
// its clusters.
func (sc Scope) SeesDevice(d core.Device) bool { return sc.all || sc.own[d.Cluster] }

// SeesEvent reports whether the scope sees e: a user key the events of its
// clusters and those naming its account (its own writes, also of clusters
// since deleted).
func (sc Scope) SeesEvent(e core.Event) bool {
	return sc.all || (e.Cluster != "" && sc.own[e.Cluster]) || e.Fields["account"] == sc.account
}

// Read runs fn with a reader of one consistent snapshot, in caller's
// scope.
func (q *Queries) Read(caller core.Caller, fn func(r Reader) error) error {
	return q.st.View(func(tx core.Tx) error {
		sc, err := scopeIn(tx, caller)
		if err != nil {
			return err
		}
		return fn(Reader{tx: tx, scope: sc})
	})
}

// ReadScoped is Read with a scope already read (ScopeOf): a door that
// reads several times for one caller reads its clusters once.
func (q *Queries) ReadScoped(sc Scope, fn func(r Reader) error) error {
	return q.st.View(func(tx core.Tx) error { return fn(Reader{tx: tx, scope: sc}) })
}

// Reader reads one snapshot in a scope. It is valid only inside the fn
// handed to Read.
type Reader struct {
	tx    core.Tx
	scope Scope
}

// Scope is the reader's scope.
func (r Reader) Scope() Scope { return r.scope }

// Device is the device ref names (its ID, MAC or serial number);
// core.ErrNotFound when there is none or the scope does not see it.
func (r Reader) Device(ref string) (core.Device, error) {
	id := ref
	if mac, err := core.NormalizeMAC(ref); err == nil {
		id = mac
	}
	d, err := r.tx.Devices().Get(id)
	if errors.Is(err, core.ErrNotFound) {
		d, err = r.tx.Devices().BySerial(ref)
	}
	if err == nil && !r.scope.SeesDevice(d) {
		return core.Device{}, core.ErrNotFound
	}
	return d, err
}

// Devices visits the devices the scope sees in ID order after after; with
// state set only those in state. The fleet's listing walks every device,
// or with state the state's range of the devices-by-state index; a user's
// walks the devices-by-cluster index of its clusters (ownDevices), so it
// costs its own devices, however large the fleet.
func (r Reader) Devices(state core.DeviceState, after string, fn core.Visit[core.Device]) error {
	if r.scope.all {
		if state != "" {
			return r.tx.Devices().ListState(state, after, fn)
		}
		return r.tx.Devices().List(after, fn)
	}
	visit := fn
	if state != "" {
		visit = func(d core.Device) (bool, error) {
			if d.State != state {
				return true, nil
			}
			return fn(d)
		}
	}
	return r.ownDevices(after, visit)
}

// mergeChunk is how many devices ownDevices reads ahead of one cluster
// while merging several: a page reads about its own devices plus a chunk
// per cluster.
const mergeChunk = 64

// ownDevices visits the devices of the scope's clusters in ID order after
// after: one cluster's index range as it is, several merged (each read a
// chunk at a time, so a page does not read all of them).
func (r Reader) ownDevices(after string, fn core.Visit[core.Device]) error {
	if len(r.scope.own) == 1 {
		var only string
		for c := range r.scope.own {
			only = c
		}
		return r.tx.Devices().ListCluster(only, after, fn)
	}
	heads := make([]*clusterHead, 0, len(r.scope.own))
	for c := range r.scope.own {
		heads = append(heads, &clusterHead{cluster: c, after: after})
	}
	for {
		var next *clusterHead
		for _, h := range heads {
			if err := h.fill(r.tx); err != nil {
				return err
			}
			if h.i < len(h.buf) && (next == nil || h.buf[h.i].ID < next.buf[next.i].ID) {
				next = h
			}
		}
		if next == nil {
			return nil
		}
		d := next.buf[next.i]
		next.i++
		if more, err := fn(d); err != nil || !more {
			return err
		}
	}
}

// clusterHead is where a merge of several clusters' devices stands in one
// cluster: the devices read ahead (buf, the next at i), and the cursor
// past them.
type clusterHead struct {
	cluster, after string
	buf            []core.Device
	i              int
	done           bool
}

// fill reads the cluster's next chunk once the last is used up.
func (h *clusterHead) fill(tx core.Tx) error {
	if h.i < len(h.buf) || h.done {
		return nil
	}
	clear(h.buf)
	h.buf, h.i = h.buf[:0], 0
	err := tx.Devices().ListCluster(h.cluster, h.after, func(d core.Device) (bool, error) {
		h.buf = append(h.buf, d)
		return len(h.buf) < mergeChunk, nil
	})
	if err != nil {
		return err
	}
	if len(h.buf) < mergeChunk {
		h.done = true
	}
	if len(h.buf) > 0 {
		h.after = h.buf[len(h.buf)-1].ID
	}
	return nil
}

// DeviceStamps visits every device's ID and Stamp in ID order (the fleet's
// counts are kept from them, decoding only devices that changed); fleet
// wide, so only in the whole fleet's scope.
func (r Reader) DeviceStamps(fn func(id string, s core.Stamp) (bool, error)) error {
	if !r.scope.all {
		return core.Errorf(core.KindPermission, "the fleet's device stamps need an admin")
	}
	return r.tx.Devices().ListStamps("", fn)
}

// DeviceByID is device id as stored (no lookup by MAC or serial);
// core.ErrNotFound when the scope does not see it.
func (r Reader) DeviceByID(id string) (core.Device, error) {
	d, err := r.tx.Devices().Get(id)
	if err == nil && !r.scope.SeesDevice(d) {
		return core.Device{}, core.ErrNotFound
	}
	return d, err
}

// Leases visits the leases the scope sees (those of its devices' MACs) in
// address order after after. A user's are gathered through the
// devices-by-cluster and leases-by-MAC indexes and sorted: the cost is its
// devices and their leases, not every lease.
func (r Reader) Leases(after string, fn core.Visit[core.Lease]) error {
	if r.scope.all {
		return r.tx.Leases().List(after, fn)
	}
	var own []core.Lease
	macs := map[string]bool{}
	for c := range r.scope.own {
		err := r.tx.Devices().ListCluster(c, "", func(d core.Device) (bool, error) {
			if macs[d.MAC] {
				return true, nil
			}
			macs[d.MAC] = true
			return true, r.tx.Leases().ListMAC(d.MAC, func(l core.Lease) (bool, error) {
				if l.IP > after {
					own = append(own, l)
				}
				return true, nil
			})
		})
		if err != nil {
			return err
		}
	}
	slices.SortFunc(own, func(a, b core.Lease) int { return strings.Compare(a.IP, b.IP) })
	for _, l := range own {
		if more, err := fn(l); err != nil || !more {
			return err
		}
	}
	return nil
}

// Events visits stream's events after sequence number after, oldest
// first: all of them, or with device set those naming it (through the
// events-by-device index). Events are visited whatever the scope (a
// listing's last_seq counts those it skips); fn skips those the scope
// does not see with Scope().SeesEvent.
func (r Reader) Events(stream core.EventStream, device string, after uint64, fn core.Visit[core.Event]) error {
	if device == "" {
		return r.tx.Events().List(stream, after, fn)
	}
	return r.tx.Events().ListDevice(stream, device, after, fn)
}

// EventsBackward visits stream's events below before (0: all), newest
// first: all of them, or with device set those naming it.
func (r Reader) EventsBackward(stream core.EventStream, device string, before uint64, fn core.Visit[core.Event]) error {
	if device == "" {
		return r.tx.Events().ListBackward(stream, before, fn)
	}
	return r.tx.Events().ListDeviceBackward(stream, device, before, fn)
}
