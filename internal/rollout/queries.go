package rollout

import (
	"errors"
	"slices"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/desired"
)

// ListFor visits the rollouts caller sees (admins all, others those of
// their account's clusters), newest first, until fn returns false.
func (e *Engine) ListFor(caller core.Caller, fn func(core.Rollout) bool) error {
	var all []core.Rollout
	err := e.st.View(func(tx core.Tx) error {
		sees, err := clusterSight(tx, caller)
		if err != nil {
			return err
		}
		return tx.Rollouts().List("", func(r core.Rollout) (bool, error) {
			if sees(r.Cluster) {
				all = append(all, r)
			}
			return true, nil
		})
	})
	if err != nil {
		return err
	}
	slices.SortFunc(all, func(a, b core.Rollout) int { return b.Created.Compare(a.Created) })
	for _, r := range all {
		if !fn(r) {
			break
		}
	}
	return nil
}

// GetFor is rollout id if caller sees it; one it does not see is not
// found, as one that does not exist.
func (e *Engine) GetFor(caller core.Caller, id string) (core.Rollout, error) {
	var r core.Rollout
	err := e.st.View(func(tx core.Tx) error {
		var err error
		r, err = tx.Rollouts().Get(id)
		if err != nil {
			return err
		}
		sees, err := clusterSight(tx, caller)
		if err == nil && !sees(r.Cluster) {
			err = core.ErrNotFound
		}
		return err
	})
	if errors.Is(err, core.ErrNotFound) {
		return core.Rollout{}, core.Errorf(core.KindNotFound, "rollout %s not found", id)
	}
	return r, err
}

// clusterSight tells which cluster IDs caller sees.
func clusterSight(tx core.Tx, caller core.Caller) (func(cluster string) bool, error) {
	if caller.Admin {
		return func(string) bool { return true }, nil
	}
	own := map[string]bool{}
	err := tx.Clusters().List("", func(c core.Cluster) (bool, error) {
		if caller.Sees(c) {
			own[c.ID] = true
		}
		return true, nil
	})
	return func(cluster string) bool { return own[cluster] }, err
}

// ClusterID is the ID of the cluster ref names (ID or name) that caller
// sees; ref itself when there is none (a filter that then matches
// nothing).
func (e *Engine) ClusterID(caller core.Caller, ref string) string {
	id := ref
	_ = e.st.View(func(tx core.Tx) error {
		if cl, err := clusters.ByRef(tx, ref); err == nil && caller.Sees(cl) {
			id = cl.ID
		}
		return nil
	})
	return id
}

// Placement is what a change of device's mode depends on: its membership
// now (nil without one, or after it left) and, with clusterRef set, the
// cluster it is to join (KindInvalid when caller sees no such cluster).
func (e *Engine) Placement(caller core.Caller, device, clusterRef string) (*core.Membership, core.Cluster, error) {
	var member *core.Membership
	var target core.Cluster
	err := e.st.View(func(tx core.Tx) error {
		m, err := tx.Memberships().Get(device)
		switch {
		case err == nil && m.State != core.StateLeft:
			member = &m
		case err != nil && !errors.Is(err, core.ErrNotFound):
			return err
		}
		if clusterRef != "" {
			target, err = clusters.ByRef(tx, clusterRef)
			if errors.Is(err, core.ErrNotFound) || (err == nil && !caller.Sees(target)) {
				return core.Errorf(core.KindInvalid, "cluster %q not found", clusterRef)
			}
			return err
		}
		return nil
	})
	return member, target, err
}

// Resolve resolves what a start request names for caller in one read:
// clusterRef (if set) to spec.Cluster's ID, an image rollout's target to
// the stored image (spec.Target, spec.TargetID), and checks spec.Hooks
// name stored images.
func (e *Engine) Resolve(caller core.Caller, spec *Spec, clusterRef, target string) error {
	return e.st.View(func(tx core.Tx) error {
		if clusterRef != "" {
			cl, err := clusters.ByRef(tx, clusterRef)
			if errors.Is(err, core.ErrNotFound) || (err == nil && !caller.Sees(cl)) {
				return core.Errorf(core.KindInvalid, "cluster %q not found", clusterRef)
			}
			if err != nil {
				return err
			}
			spec.Cluster = cl.ID
		}
		if spec.Kind == core.RolloutImage {
			im, err := desired.ResolveImage(tx, target)
			if err != nil {
				return err
			}
			spec.Target, spec.TargetID = target, im.SHA256
		}
		return desired.CheckHooks(tx, spec.Hooks)
	})
}
