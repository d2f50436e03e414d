package content

import (
	"errors"
	"fmt"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/positions"
)

// moved refuses content to a box that is the member of one planned
// position (its membership's node name) while its lease comes through
// another: rendering the other slot's identity for it would hand it that
// slot's name and configuration. The joiner refuses its join the same
// way; both name the two positions. Plugged back, or its membership ended
// (ztpd device reset), it is served again.
func moved(tx core.Tx, pl *positions.Plan, d *core.Device) error {
	if pl == nil || d.Position == "" {
		return nil
	}
	at := pl.Get(d.Position)
	if at == nil {
		return nil
	}
	m, err := tx.Memberships().Get(d.ID)
	if errors.Is(err, core.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	if m.State == core.StateLeft || m.NodeName == "" || m.NodeName == at.Name {
		return nil
	}
	home := pl.Get(m.NodeName)
	if home == nil {
		return nil
	}
	return &Error{Status: 403, Kind: RefusedMismatch, Reason: fmt.Sprintf(
		"device %s is the member of position %s (%s) but is plugged into position %s (%s): it is not given %s's identity; "+
			"plug it back into %s, or end its membership there (ztpd device reset %s)",
		d.ID, home.Name, home.Proof(), at.Name, at.Proof(), at.Name, home.Name, d.ID)}
}
