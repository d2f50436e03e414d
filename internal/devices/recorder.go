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
	return d, change(tx, &d, now, fn)
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
	return d, change(tx, &d, now, fn)
}

func change(tx core.Tx, d *core.Device, now time.Time, fn func(*core.Device) error) error {
	if err := fn(d); err != nil {
		return err
	}
	d.UpdatedAt = now
	return tx.Devices().Put(*d)
}

// Record implements Recorder.
func (s *Service) Record(tx core.Tx, e core.Event) error {
	_, err := tx.Events().Append(e)
	return err
}

// LearnJoin merges into cur what a device states about itself when it asks
// to join a cluster (stated: kind, serial, product, hostname, SONiC
// version, address) and notes it seen at now. The kind is taken only when
// nothing classified the device; a serial or product fills in a missing
// one and never replaces a recorded one: LearnJoin reports false, changing
// nothing, when either contradicts the record. The hostname, SONiC version
// and address follow the device.
func LearnJoin(cur *core.Device, stated *core.Device, now time.Time) bool {
	if stated.Serial != "" && cur.Serial != "" && stated.Serial != cur.Serial ||
		stated.Product != "" && cur.Product != "" && stated.Product != cur.Product {
		return false
	}
	if cur.Kind == "" || cur.Kind == core.KindUnknown {
		cur.Kind = stated.Kind
	}
	setEmpty(&cur.Serial, stated.Serial)
	setEmpty(&cur.Product, stated.Product)
	setIf(&cur.Hostname, stated.Hostname)
	setIf(&cur.SONiCVer, stated.SONiCVer)
	setIf(&cur.IP, stated.IP)
	cur.LastSeen, cur.UpdatedAt = now, now
	return true
}
