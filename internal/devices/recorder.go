package devices

import (
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
	// Record appends e to the event log inside tx.
	Record(tx core.Tx, e core.Event) error
}

var _ Recorder = (*Service)(nil)

// Change implements Recorder.
func (s *Service) Change(tx core.Tx, id string, now time.Time, fn func(*core.Device) error) (core.Device, error) {
	d, err := tx.Devices().Get(id)
	if err != nil {
		return d, err
	}
	if err := fn(&d); err != nil {
		return d, err
	}
	d.UpdatedAt = now
	return d, tx.Devices().Put(d)
}

// Record implements Recorder.
func (s *Service) Record(tx core.Tx, e core.Event) error {
	_, err := tx.Events().Append(e)
	return err
}
