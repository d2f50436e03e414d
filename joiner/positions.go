package joiner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/positions"
)

// The cabling plan's rules for a join, decided in the admission
// transaction: a device at a planned position joins under the position's
// name; a new box where the position's member is known replaces it (at
// once, or once approved, by the plan's `replace`); a member of one
// position asking from another is refused or held (`moved`), never given
// the other slot's identity; and LLDP neighbours other than the plan's
// are recorded, and hold the join under `cabling: strict`.

// replacedMember is a member a replacement ended, whose Node is deleted
// after the admission commits.
type replacedMember struct {
	device, cluster, node string
}

// positionRule is what the plan decided for one join.
type positionRule struct {
	pos  *positions.Position // nil: the device is at no planned position
	wait string              // hold the join with this reason
}

// movedError is a member of one position asking to join from another.
type movedError struct {
	reason string
	wait   bool
	device string
	from   string
	to     string
}

func (e *movedError) Error() string { return ErrMoved.Error() + ": " + e.reason }
func (e *movedError) Unwrap() error { return ErrMoved }

// planned is the position of the plan in use that d's record names (the
// slot its lease was granted through), or nil.
func (s *Service) planned(d core.Device) *positions.Position {
	if s.opts.Plan == nil || d.Position == "" {
		return nil
	}
	return s.opts.Plan().Get(d.Position)
}

// nodeNameFor is the node name a member gets: its planned position's
// name, so that a replacement joins under its predecessor's, else the one
// its host name or MAC gives (memberNodeName).
func (s *Service) nodeNameFor(dev core.Device, method string) string {
	if p := s.planned(dev); p != nil {
		return p.Name
	}
	return memberNodeName(dev, method)
}

// positionRule applies the plan to a join by dev into cluster c; m is
// dev's membership (had: it has one). A replacement the policy allows is
// carried out here, in tx: the predecessor's membership ends, its
// credentials are revoked, and res names its Node for deletion.
func (s *Service) positionRule(tx core.Tx, dev core.Device, m core.Membership, had bool, c core.Cluster, req JoinRequest, now time.Time, res *joinResult) (positionRule, error) {
	pos := s.planned(dev)
	if pos == nil {
		return positionRule{}, nil
	}
	rule := positionRule{pos: pos}
	plan := s.opts.Plan()

	// A member of another position: the box was moved (or recabled).
	if had && m.State != core.StateLeft && m.NodeName != "" && m.NodeName != pos.Name {
		if from := plan.Get(m.NodeName); from != nil {
			serial := dev.Serial
			if serial == "" {
				serial = "?"
			}
			e := &movedError{device: dev.ID, from: from.Name, to: pos.Name, wait: pos.MovedPolicy() == positions.MovedWait}
			e.reason = fmt.Sprintf("device %s (serial %s) is the member of position %s (%s) but asks to join from position %s (%s): "+
				"it is not given %s's identity; plug it back into %s, or end its membership there (ztpd device reset %s)",
				dev.ID, serial, from.Name, from.Proof(), pos.Name, pos.Proof(), pos.Name, from.Name, dev.ID)
			return rule, e
		}
	}

	// The cabling: the neighbours reported against the plan's.
	if err := s.checkCabling(tx, &dev, pos, req, now, &rule); err != nil {
		return rule, err
	}

	// A new box where the position's member is known: a replacement.
	pred, ok, err := s.memberByNode(tx, c.ID, pos.Name)
	if err != nil || !ok || pred.Device == dev.ID || pred.State == core.StateLeft {
		return rule, err
	}
	predDev, err := tx.Devices().Get(pred.Device)
	if err != nil && !errors.Is(err, core.ErrNotFound) {
		return rule, err
	}
	predSerial := predDev.Serial
	if predSerial == "" {
		predSerial = "unknown"
	}
	if pos.ReplacePolicy() != positions.ReplaceAuto && !dev.Approved {
		if rule.wait == "" {
			rule.wait = fmt.Sprintf("replaces %s (serial %s): approve the replacement with ztpd device approve %s", pos.Name, predSerial, dev.ID)
		}
		return rule, nil
	}
	if rule.wait != "" {
		return rule, nil // the cabling holds it: the predecessor stays until it may join
	}
	serial := dev.Serial
	if serial == "" {
		serial = "unknown"
	}
	why := fmt.Sprintf("replaced at position %s by %s (serial %s)", pos.Name, dev.ID, serial)
	if err := s.leave(tx, pred, why, now); err != nil {
		return rule, err
	}
	if err := s.revokeAgent(tx, pred.Device, why, now); err != nil {
		return rule, err
	}
	if err := s.event(tx, now, "join.left", pred.Device, c.ID, "left cluster: "+why,
		map[string]string{"position": pos.Name, "replaced_by": dev.ID}); err != nil {
		return rule, err
	}
	policy := "replace: auto"
	if pos.ReplacePolicy() != positions.ReplaceAuto {
		policy = "approved by an operator"
	}
	res.replaced = &replacedMember{device: pred.Device, cluster: c.ID, node: pred.NodeName}
	return rule, s.event(tx, now, "position.replaced", dev.ID, c.ID,
		fmt.Sprintf("replaces %s (serial %s) at position %s (%s): its membership ended, its credentials revoked, node name %s taken over",
			pred.Device, predSerial, pos.Name, policy, pred.NodeName),
		map[string]string{"position": pos.Name, "predecessor": pred.Device, "predecessor_serial": predDev.Serial, "node": pred.NodeName})
}

// checkCabling compares the LLDP neighbours a join reports with those
// pos expects, records the outcome on the device (its CablingMismatch,
// set or cleared, and an event when it changes) and, under `cabling:
// strict`, holds the join while they differ. A join that reports no
// neighbours judges nothing new: the device's last mismatch at pos, if
// any, stands.
func (s *Service) checkCabling(tx core.Tx, dev *core.Device, pos *positions.Position, req JoinRequest, now time.Time, rule *positionRule) error {
	if len(pos.Neighbors) == 0 {
		return nil
	}
	if len(req.Neighbors) == 0 {
		if c := dev.CablingMismatch; c != nil && c.Position == pos.Name && pos.CablingPolicy() == positions.CablingStrict {
			rule.wait = fmt.Sprintf("cabling does not match position %s (cabling: strict): %s", pos.Name, strings.Join(c.Mismatches, "; "))
		}
		return nil
	}
	mism := positions.CablingMismatches(pos.Neighbors, req.Neighbors)
	cur := dev.CablingMismatch
	same := (cur == nil && len(mism) == 0) || (cur != nil && cur.Position == pos.Name && slices.Equal(cur.Mismatches, mism))
	if !same {
		var next *core.CablingMismatch
		if len(mism) > 0 {
			next = &core.CablingMismatch{Position: pos.Name, Mismatches: mism, At: now}
		}
		d, err := s.devices.Change(tx, dev.ID, now, func(rec *core.Device) error {
			rec.CablingMismatch = next
			return nil
		})
		if err != nil {
			return err
		}
		*dev = d
		if next != nil {
			err = s.event(tx, now, "device.cabling_mismatch", dev.ID, "",
				fmt.Sprintf("cabling differs from position %s's plan: %s", pos.Name, strings.Join(mism, "; ")),
				map[string]string{"position": pos.Name, "policy": pos.CablingPolicy()})
		} else {
			err = s.event(tx, now, "device.cabling_matched", dev.ID, "", fmt.Sprintf("cabling matches position %s's plan again", pos.Name),
				map[string]string{"position": pos.Name})
		}
		if err != nil {
			return err
		}
	}
	if len(mism) > 0 && pos.CablingPolicy() == positions.CablingStrict {
		rule.wait = fmt.Sprintf("cabling does not match position %s (cabling: strict): %s", pos.Name, strings.Join(mism, "; "))
	}
	return nil
}

// movedRefused records a moved member's refused (or held) join: an event
// and the device's refusal, once per reason.
func (s *Service) movedRefused(e *movedError, cluster string, now time.Time) {
	err := s.store.Batch(func(tx core.Tx) error {
		d, err := tx.Devices().Get(e.device)
		if err != nil {
			return err
		}
		kind := "mismatch"
		if e.wait {
			kind = core.RefusalWaiting
		}
		if d.Refusal.Reason == e.reason && d.Refusal.Kind == kind {
			return nil
		}
		if _, err := s.devices.Change(tx, e.device, now, func(rec *core.Device) error {
			rec.Refusal = core.Refusal{What: "join", Kind: kind, Reason: e.reason, At: now}
			return nil
		}); err != nil {
			return err
		}
		typ := "position.moved_refused"
		if e.wait {
			typ = "position.moved_waiting"
		}
		return s.event(tx, now, typ, e.device, cluster, e.reason, map[string]string{"position": e.to, "member_of": e.from})
	})
	if err != nil {
		s.log.Warn("record a moved member's join", "device", e.device, "err", err)
	}
}

// deleteReplacedNode deletes the Node of the member a replacement ended,
// before the new box gets its bundle: the new box registers the same node
// name. A failure is recorded, not fatal: the old Node stays NotReady
// until an operator deletes it, and the new kubelet takes the name over.
func (s *Service) deleteReplacedNode(ctx context.Context, r *replacedMember, now time.Time) {
	if s.opts.DeleteNode == nil || r.node == "" {
		return
	}
	err := s.opts.DeleteNode(ctx, r.cluster, r.node)
	msg := "Node " + r.node + " of the replaced member deleted"
	typ := "position.node_deleted"
	if err != nil {
		msg = "Node " + r.node + " of the replaced member could not be deleted: " + err.Error()
		typ = "position.node_delete_failed"
		s.log.Warn("delete the replaced member's Node", "cluster", r.cluster, "node", r.node, "err", err)
	}
	if err := s.store.Batch(func(tx core.Tx) error {
		return s.event(tx, now, typ, r.device, r.cluster, msg, map[string]string{"node": r.node})
	}); err != nil {
		s.log.Warn("record the replaced member's Node", "device", r.device, "err", err)
	}
}

// ObserveNeighbors takes the LLDP neighbours a device's agent reports
// after its join: compared with its planned position's, a mismatch is
// recorded (the device's CablingMismatch and an event when it changes),
// and a match clears it. A joined device is not held: `cabling: strict`
// holds joins only.
func (s *Service) ObserveNeighbors(ctx context.Context, device string, ns []positions.Neighbor) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := positions.CheckNeighbors(ns); err != nil {
		return fmt.Errorf("%w: lldp_neighbors: %v", ErrInvalid, err)
	}
	now := s.now().UTC()
	return s.store.Batch(func(tx core.Tx) error {
		d, err := tx.Devices().Get(device)
		if errors.Is(err, core.ErrNotFound) {
			return nil
		} else if err != nil {
			return err
		}
		pos := s.planned(d)
		if pos == nil {
			return nil
		}
		var rule positionRule
		return s.checkCabling(tx, &d, pos, JoinRequest{Neighbors: ns}, now, &rule)
	})
}
