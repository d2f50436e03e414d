package devices

import (
	"errors"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// Recorder is how a part that changes device records inside its own
// transactions (the joiner: admission, join reports, reset, approval)
// reports them, so that a membership and its device commit together while
// the record's rules stay here. The Service implements it.
type Recorder interface {
	// Change applies fn to device id's record inside tx and stores it with
	// UpdatedAt = now. It returns an error wrapping core.ErrNotFound when
	// the device has no record; an error from fn aborts without a write.
	Change(tx core.Tx, id string, now time.Time, fn func(*core.Device) error) (core.Device, error)
	// ChangeOrCreate is Change for a device that may have no record yet
	// (DHCP and content serving write theirs behind, so a device can reach
	// the caller first): fn then starts from NewRecord(id, now).
	ChangeOrCreate(tx core.Tx, id string, now time.Time, fn func(*core.Device) error) (core.Device, error)
	// Record appends e to the event log inside tx.
	Record(tx core.Tx, e core.Event) error
}

var _ Recorder = (*Service)(nil)

// NewRecord is the record a device known only by its MAC address id starts
// with: kind unknown, discovered, first seen now.
func NewRecord(id string, now time.Time) core.Device {
	return core.Device{ID: id, MAC: id, Kind: core.KindUnknown, State: core.StateDiscovered, FirstSeen: now}
}

// Change implements Recorder.
func (s *Service) Change(tx core.Tx, id string, now time.Time, fn func(*core.Device) error) (core.Device, error) {
	d, err := tx.Devices().Get(id)
	if err != nil {
		return d, err
	}
	return d, s.change(tx, &d, now, fn)
}

// ChangeOrCreate implements Recorder.
func (s *Service) ChangeOrCreate(tx core.Tx, id string, now time.Time, fn func(*core.Device) error) (core.Device, error) {
	d, err := tx.Devices().Get(id)
	if errors.Is(err, core.ErrNotFound) {
		d, err = NewRecord(id, now), nil
	}
	if err != nil {
		return d, err
	}
	return d, s.change(tx, &d, now, fn)
}

func (s *Service) change(tx core.Tx, d *core.Device, now time.Time, fn func(*core.Device) error) error {
	prev, serial := d.State, d.Serial
	if err := fn(d); err != nil {
		return err
	}
	d.UpdatedAt = now
	conf := conflicts{counted: s.metrics.factConflicts}
	if err := settleSerial(tx, d, serial, now, &conf); err != nil {
		return err
	}
	if err := tx.Devices().Put(*d); err != nil {
		return err
	}
	for _, e := range conf.events {
		if _, err := tx.Events().Append(e); err != nil {
			return err
		}
	}
	if rt, ok := tx.(*recTx); ok && d.State != prev {
		rt.trans = append(rt.trans, transition{device: d.ID, from: prev, to: d.State, ip: d.IP,
			cluster: clusterName(rt.Tx, d.Cluster)})
	}
	return nil
}

// Record implements Recorder.
func (s *Service) Record(tx core.Tx, e core.Event) error {
	if _, err := tx.Events().Append(e); err != nil {
		return err
	}
	if rt, ok := tx.(*recTx); ok && e.Device != "" {
		// The event that comes with a change of state is its reason.
		for i := range rt.trans {
			if t := &rt.trans[i]; t.device == e.Device && t.event == "" {
				t.event, t.reason = e.Type, e.Message
			}
		}
	}
	return nil
}

// Store wraps st for a part that changes device records through the
// Recorder inside transactions of its own (the joiner): the state changes
// a transaction makes are logged at info once it has committed, never for
// one that failed or was run again. Without info logging st is returned
// as it is.
func (s *Service) Store(st core.Store) core.Store {
	if s.states == nil {
		return st
	}
	r := recStore{Store: st, states: s.states}
	if g, ok := st.(core.Generations); ok {
		return recGenStore{recStore: r, g: g}
	}
	return r
}

// recStore runs transactions with a recTx and logs their state changes
// after the commit.
type recStore struct {
	core.Store
	states *stateLog
}

func (r recStore) Update(fn func(core.Tx) error) error {
	var last *recTx
	err := r.Store.Update(func(tx core.Tx) error { last = &recTx{Tx: tx}; return fn(last) })
	if err == nil && last != nil {
		r.states.add(last.trans)
	}
	return err
}

// Batch: fn may run more than once; the run that committed is the last.
func (r recStore) Batch(fn func(core.Tx) error) error {
	var last *recTx
	err := r.Store.Batch(func(tx core.Tx) error { last = &recTx{Tx: tx}; return fn(last) })
	if err == nil && last != nil {
		r.states.add(last.trans)
	}
	return err
}

// recGenStore keeps the store's write generations visible (core.Generations).
type recGenStore struct {
	recStore
	g core.Generations
}

func (r recGenStore) Generation(as ...core.Aggregate) uint64 { return r.g.Generation(as...) }

// recTx is a transaction of a recStore: the state changes made in it.
type recTx struct {
	core.Tx
	trans []transition
}
