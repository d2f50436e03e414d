package rollout

import (
	"context"
	"errors"
	"slices"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
)

var _ clusters.NodeAdder = ClusterMembership{}

// AddMembers admits named devices into c (addNodesToKubernetesCluster):
// a standalone device (one its agent keeps outside any cluster) joins by
// a join rollout, which this waits for: its agent joins and its Node is
// Ready; any other device is approved into c through the joiner, and
// joins when it next asks (a waiting device within its retry time). The
// size was grown by the caller, so there is room for each.
func (m ClusterMembership) AddMembers(ctx context.Context, c core.Cluster, devices []string) error {
	var standalone []string
	err := m.engine.st.View(func(tx core.Tx) error {
		for _, id := range devices {
			ms, err := tx.Memberships().Get(id)
			if err == nil && ms.State != core.StateLeft {
				continue // enrolled: waiting for approval or room
			}
			if err != nil && !errors.Is(err, core.ErrNotFound) {
				return err
			}
			ds, err := tx.Desired().Get(id)
			if err == nil && ds.Mode == core.ModeStandalone {
				standalone = append(standalone, id)
			} else if err != nil && !errors.Is(err, core.ErrNotFound) {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, id := range devices {
		if slices.Contains(standalone, id) {
			continue
		}
		if _, err := m.ClusterMembers.Approve(ctx, id, c.ID); err != nil {
			return err
		}
	}
	if len(standalone) == 0 {
		return nil
	}
	r, err := m.engine.Start(ctx, Spec{Cluster: c.ID, Kind: core.RolloutJoin, Devices: standalone, By: clusters.CmdAddNodes,
		MaxUnavailable: len(standalone)})
	if err != nil {
		return err
	}
	return m.wait(ctx, r.ID)
}
