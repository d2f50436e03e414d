package devices

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

const (
	// DefaultUnleasedExpiry and DefaultMaxUnleased are the configuration's
	// defaults (devices.unleased_expiry, devices.max_unleased).
	DefaultUnleasedExpiry = 24 * time.Hour
	DefaultMaxUnleased    = 10000
	// pruneChunk is the device records deleted per transaction.
	pruneChunk = 256
)

// unleased reports whether d is a record nothing vouches for any more: it
// never got past a lease (no content served, never joined), an operator
// never approved, bound, labelled or placed it, and it holds no active
// lease now (checked by holdsLease). Made-up hardware addresses leave such
// records; a real device that comes back gets a new one with its lease.
func unleased(d *core.Device) bool {
	return core.StateRank(d.State) >= 0 && core.StateRank(d.State) <= core.StateRank(core.StateLeased) &&
		!d.Approved && d.Cluster == "" && d.FixedIP == "" && d.Profile == "" && d.Role == "" && len(d.Labels) == 0
}

// holdsLease reports whether d holds its address by the identity rule's
// own test (core.LeaseHolds: a lease without an expiry holds for good).
func holdsLease(tx core.Tx, d *core.Device, now time.Time) (bool, error) {
	if d.IP == "" {
		return false, nil
	}
	l, err := tx.Leases().Get(d.IP)
	if errors.Is(err, core.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return l.MAC == d.MAC && core.LeaseHolds(l, now), nil
}

type pruneCandidate struct {
	id   string
	seen time.Time
}

// PruneDevices deletes the unleased records (see unleased) last seen
// before now minus the expiry, then the oldest beyond the cap; 0 disables
// either bound. It reports how many it deleted.
func (s *Service) PruneDevices(ctx context.Context, now time.Time) int {
	if s.unleasedExpiry <= 0 && s.maxUnleased <= 0 {
		return 0
	}
	var cands []pruneCandidate
	err := s.store.View(func(tx core.Tx) error {
		cands = cands[:0]
		for _, st := range []core.DeviceState{core.StateDiscovered, core.StateLeased} {
			err := tx.Devices().ListState(st, "", func(d core.Device) (bool, error) {
				if !unleased(&d) {
					return true, nil
				}
				held, err := holdsLease(tx, &d, now)
				if err != nil || held {
					return err == nil, err
				}
				cands = append(cands, pruneCandidate{d.ID, d.LastSeen})
				return ctx.Err() == nil, nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.log.Warn("listing unleased device records failed", "err", err)
		return 0
	}
	slices.SortFunc(cands, func(a, b pruneCandidate) int { return a.seen.Compare(b.seen) })
	expired := 0
	if s.unleasedExpiry > 0 {
		cut := now.Add(-s.unleasedExpiry)
		for expired < len(cands) && cands[expired].seen.Before(cut) {
			expired++
		}
	}
	over := 0
	if rest := len(cands) - expired; s.maxUnleased > 0 && rest > s.maxUnleased {
		over = rest - s.maxUnleased
	}
	n := s.deleteUnleased(ctx, cands[:expired], now, "expired")
	n += s.deleteUnleased(ctx, cands[expired:expired+over], now, "cap")
	if n > 0 {
		s.log.Info("pruned device records that never got past a lease", "deleted", n,
			"expired", expired, "over_cap", over, "kept", len(cands)-n, "max_unleased", s.maxUnleased)
	}
	return n
}

// deleteUnleased deletes cands in bounded transactions, each checked again
// inside (a device that leased or was approved meanwhile stays).
func (s *Service) deleteUnleased(ctx context.Context, cands []pruneCandidate, now time.Time, reason string) int {
	total := 0
	for len(cands) > 0 && ctx.Err() == nil {
		chunk := cands[:min(pruneChunk, len(cands))]
		cands = cands[len(chunk):]
		var n int
		err := s.store.Update(func(tx core.Tx) error {
			n = 0
			for _, c := range chunk {
				d, err := tx.Devices().Get(c.id)
				if errors.Is(err, core.ErrNotFound) {
					continue
				}
				if err != nil {
					return err
				}
				if !unleased(&d) {
					continue
				}
				if held, err := holdsLease(tx, &d, now); err != nil || held {
					if err != nil {
						return err
					}
					continue
				}
				if err := forgetConflicts(tx, &d, now); err != nil {
					return err
				}
				if err := tx.Devices().Delete(d.ID); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		if err != nil {
			s.log.Warn("pruning unleased device records failed", "err", err)
			return total
		}
		total += n
		s.metrics.devicesPruned.WithLabelValues(reason).Add(float64(n))
	}
	return total
}

// forgetConflicts removes d from the serial conflicts of the devices it
// shared a serial with, so that no record names a deleted device.
func forgetConflicts(tx core.Tx, d *core.Device, now time.Time) error {
	c := d.SerialConflict
	if c == nil {
		return nil
	}
	for _, id := range c.With {
		o, err := tx.Devices().Get(id)
		if errors.Is(err, core.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		oc := o.SerialConflict
		if oc == nil || !slices.Contains(oc.With, d.ID) {
			continue
		}
		with := slices.DeleteFunc(slices.Clone(oc.With), func(x string) bool { return x == d.ID })
		o.SerialConflict = nil
		if len(with) > 0 {
			o.SerialConflict = &core.SerialConflict{Serial: oc.Serial, With: with}
		}
		o.UpdatedAt = now
		if err := tx.Devices().Put(o); err != nil {
			return err
		}
	}
	return nil
}
