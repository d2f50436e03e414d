package content

import (
	"fmt"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/positions"
	"github.com/ztpd/ztpd/internal/profile"
)

// SetPlan swaps in the cabling plan (nil: none); every profile it names
// must be loaded.
func (s *Service) SetPlan(pl *positions.Plan) error {
	if err := CheckPlanProfiles(pl, s.profiles.Load()); err != nil {
		return err
	}
	s.plan.Store(pl)
	return nil
}

// Plan returns the cabling plan in use, nil without one.
func (s *Service) Plan() *positions.Plan { return s.plan.Load() }

// CheckPlanProfiles reports a position of pl that names a profile set
// lacks.
func CheckPlanProfiles(pl *positions.Plan, set *profile.Set) error {
	for _, p := range pl.List() {
		if p.Profile != "" && set.Get(p.Profile) == nil {
			return fmt.Errorf("%s: position %q: profile %q is not loaded", p.Where(), p.Name, p.Profile)
		}
	}
	return nil
}

// facts are the template facts of d, its planned position included.
func (s *Service) facts(d *core.Device) *profile.Facts {
	f := FactsAt(d, s.plan.Load())
	s.nodeShape(f, d)
	return f
}

// nodeShape sets on f what the cluster d is a member of gives d's role
// (its node template's profile, its offering). A store that cannot be
// read leaves them unset: the device then gets the profile it matches,
// as before the cluster named any.
func (s *Service) nodeShape(f *profile.Facts, d *core.Device) {
	if d.Cluster == "" {
		return
	}
	err := s.opt.Store.View(func(tx core.Tx) error {
		var err error
		f.ClusterProfile, f.ClusterOffering, err = clusters.NodeShape(tx, d.Cluster, d.Role)
		return err
	})
	if err != nil {
		s.log.Warn("reading the node shape of a cluster member", "device", d.ID, "cluster", d.Cluster, "err", err)
	}
}

// FactsAt is Facts with the position of pl that d's record names (the
// slot its lease was granted through), as templates see it.
func FactsAt(d *core.Device, pl *positions.Plan) *profile.Facts {
	f := Facts(d)
	if p := pl.Get(d.Position); p != nil {
		f.Position = PositionOf(p)
	}
	return f
}

// PositionOf is a planned position as templates see it.
func PositionOf(p *positions.Position) *profile.Position {
	pf := &profile.Position{Name: p.Name, CircuitID: p.CircuitID, RemoteID: p.RemoteID, Rack: p.Rack, Port: p.Port,
		Fields: p.Fields, Role: p.Role, Cluster: p.Cluster, Labels: p.Labels, Profile: p.Profile}
	if p.Address.IsValid() {
		pf.Address = p.Address.String()
	}
	if pf.Fields == nil {
		pf.Fields = map[string]string{}
	}
	return pf
}

// placed refuses a box whose serial the plan expects at another position
// than the one it is plugged into, and a box other than the one a position
// expects: either is a cabling mistake the operator must see, never a
// reason to hand one slot's identity to another box. The reason names
// both positions.
func placed(pl *positions.Plan, d *core.Device) error {
	if pl == nil || d.Position == "" || d.Serial == "" {
		return nil
	}
	at := pl.Get(d.Position)
	if at == nil {
		return nil
	}
	if home := pl.ExpectingSerial(d.Serial); home != nil && home != at {
		return &Error{Status: 403, Kind: RefusedMismatch, Reason: fmt.Sprintf(
			"serial %s is planned at position %s (%s) but is plugged into position %s (%s): recable it, or move its serial in the plan",
			d.Serial, home.Name, home.Proof(), at.Name, at.Proof())}
	}
	if at.Serial != "" && at.Serial != d.Serial {
		return &Error{Status: 403, Kind: RefusedMismatch, Reason: fmt.Sprintf(
			"position %s (%s) expects serial %s, not %s: plug that box in, or change the position's serial in the plan",
			at.Name, at.Proof(), at.Serial, d.Serial)}
	}
	return nil
}
