package rollout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
)

// ClusterMembers is the owner of memberships the cluster operations
// change (the joiner): the clusters service's Membership, with members
// named for a scale-down.
type ClusterMembers interface {
	clusters.Membership
	clusters.NamedRemover
}

// StopCordons is NodeOps with who cordoned a Node: a cluster's start
// uncordons only the Nodes its stop cordoned.
type StopCordons interface {
	NodeOps
	// CordonOwner is the owner a ztpd cordon recorded on the Node ("" when
	// ztpd did not cordon it).
	CordonOwner(ctx context.Context, cluster, node string) (string, error)
}

// ClusterMembership is the joiner as the clusters service's Membership,
// with the operations that change nodes carried out on them: an upgrade
// rolls the new version out node by node, a scale-down and a delete take
// their members out, a stop cordons the cluster's Nodes and a start
// uncordons them. Each job ends when its rollout does.
type ClusterMembership struct {
	ClusterMembers
	engine *Engine
	nodes  StopCordons
	log    *slog.Logger
}

var (
	_ clusters.Membership     = ClusterMembership{}
	_ clusters.NamedRemover   = ClusterMembership{}
	_ clusters.ForceDestroyer = ClusterMembership{}
)

// NewClusterMembership carries members' cluster operations out through
// engine's rollouts and on nodes (the engine's NodeOps).
func NewClusterMembership(members ClusterMembers, engine *Engine, nodes StopCordons, log *slog.Logger) ClusterMembership {
	if log == nil {
		log = slog.Default()
	}
	return ClusterMembership{ClusterMembers: members, engine: engine, nodes: nodes, log: log}
}

// afterRollout bounds what a job does once its rollout ended: the job's
// own deadline (clusters.Options.OpTimeout) bounds calls, not rollouts,
// which have per-node timeouts of their own.
func afterRollout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
}

// untilCancelled is the job's context (clusters.JobContext) without its
// deadline, for a job's wait for its rollout: a job's deadlines do not
// bound a rollout (its nodes have timeouts of their own), but the job's
// cancellation (ztpd stopping) ends the wait. The rollout itself carries
// on and its job is failed at the next start; a wait deaf to the stop held
// ztpd's stop for its whole grace.
func untilCancelled(ctx context.Context) (context.Context, context.CancelFunc) {
	job := clusters.JobContext(ctx)
	wctx, cancel := context.WithCancel(context.WithoutCancel(job))
	stop := context.AfterFunc(job, func() {
		if errors.Is(job.Err(), context.Canceled) {
			cancel()
		}
	})
	return wctx, func() { stop(); cancel() }
}

func (m ClusterMembership) SetVersion(ctx context.Context, c core.Cluster, v core.Version) error {
	r, err := m.engine.Start(ctx, Spec{Cluster: c.ID, Kind: core.RolloutKubernetes, Target: "v" + v.SemVer,
		TargetID: v.ID, By: "upgradeKubernetesCluster"})
	if err != nil {
		return err
	}
	if err := m.wait(ctx, r.ID); err != nil {
		return err
	}
	ctx, cancel := afterRollout(ctx)
	defer cancel()
	return m.ClusterMembers.SetVersion(ctx, c, v)
}

func (m ClusterMembership) Resize(ctx context.Context, c core.Cluster) error {
	if err := m.ClusterMembers.Resize(ctx, c); err != nil {
		return err
	}
	return m.removeMembers(ctx, c, core.StateLeaving, "scaleKubernetesCluster")
}

// RemoveMembers is a scale-down naming its members: they are marked
// leaving, then taken off their nodes like the newest are by Resize.
func (m ClusterMembership) RemoveMembers(ctx context.Context, c core.Cluster, devices []string) error {
	if err := m.ClusterMembers.RemoveMembers(ctx, c, devices); err != nil {
		return err
	}
	return m.removeMembers(ctx, c, core.StateLeaving, "scaleKubernetesCluster")
}

// Destroy takes the cluster's members off their nodes (a remove rollout),
// then destroys it. A cluster none of whose members joined (one that
// never started) has nothing on any node: the joiner's Destroy ends those
// memberships and revokes their credentials, with no rollout waiting for
// devices that may never boot.
func (m ClusterMembership) Destroy(ctx context.Context, c core.Cluster) error {
	joined, err := m.anyJoined(c)
	if err != nil {
		return err
	}
	if joined {
		if err := m.removeMembers(ctx, c, "", "deleteKubernetesCluster"); err != nil {
			return err
		}
	}
	ctx, cancel := afterRollout(ctx)
	defer cancel()
	return m.ClusterMembers.Destroy(ctx, c)
}

// DestroyForce is Destroy for a forced delete: the remove rollout is
// tried as for Destroy (bounded by its drain and step timeouts), and the
// members it did not take out are abandoned: the cluster is destroyed all
// the same (the joiner's Destroy ends their memberships and revokes their
// agents' credentials with the cluster's other tokens), their Nodes and
// devices left as they are. It returns them with why.
func (m ClusterMembership) DestroyForce(ctx context.Context, c core.Cluster) ([]core.AbandonedNode, error) {
	members, err := m.members(c, "")
	if err != nil {
		return nil, err
	}
	joined, err := m.anyJoined(c)
	if err != nil {
		return nil, err
	}
	var abandoned []core.AbandonedNode
	if len(members) > 0 && joined {
		abandoned, err = m.tryRemove(ctx, c, members)
		if err != nil {
			return nil, err
		}
	}
	ctx, cancel := afterRollout(ctx)
	defer cancel()
	if err := m.ClusterMembers.Destroy(ctx, c); err != nil {
		return nil, err
	}
	if len(abandoned) > 0 {
		m.log.Warn("cluster deleted with force; members abandoned on their nodes", "cluster", c.ID, "abandoned", len(abandoned))
	}
	return abandoned, nil
}

// tryRemove runs the remove rollout over members and returns those still
// in the cluster when it ended, with why: the node's failure, or that the
// rollout stopped before it (or never started).
func (m ClusterMembership) tryRemove(ctx context.Context, c core.Cluster, members []core.Membership) ([]core.AbandonedNode, error) {
	why := map[string]string{}
	r, err := m.engine.Start(ctx, Spec{Cluster: c.ID, Kind: core.RolloutRemove, Devices: devicesOf(members),
		By: "deleteKubernetesCluster --force", MaxUnavailable: len(members)})
	if err == nil {
		wctx, cancel := untilCancelled(ctx)
		r, err = m.engine.Wait(wctx, r.ID)
		cancel()
		if err != nil && errors.Is(clusters.JobContext(ctx).Err(), context.Canceled) {
			return nil, err // ztpd stopping: nothing is abandoned, the job is failed at the next start
		}
	}
	if err != nil {
		for _, ms := range members {
			why[ms.Device] = "the remove rollout did not run: " + err.Error()
		}
	} else {
		for _, n := range r.Nodes {
			switch n.Phase {
			case core.NodeDone, core.NodeSkipped:
			case core.NodeFailed, core.NodeWithdrawn:
				why[n.Device] = n.Reason
			default:
				why[n.Device] = fmt.Sprintf("not taken out (%s): rollout %s %s: %s", n.Phase, r.ID, r.State, r.Reason)
			}
		}
	}
	// Only members the cluster still has are abandoned (a node whose last
	// step failed after it left is not).
	still, err := m.members(c, "")
	if err != nil {
		return nil, err
	}
	var out []core.AbandonedNode
	for _, ms := range still {
		if reason, ok := why[ms.Device]; ok {
			out = append(out, core.AbandonedNode{Device: ms.Device, Node: ms.NodeName, Reason: reason})
		}
	}
	return out, nil
}

// removeMembers runs a remove rollout over the cluster's members in state
// (any state but left when ""), and waits for it.
func (m ClusterMembership) removeMembers(ctx context.Context, c core.Cluster, state core.DeviceState, by string) error {
	members, err := m.members(c, state)
	if err != nil || len(members) == 0 {
		return err
	}
	r, err := m.engine.Start(ctx, Spec{Cluster: c.ID, Kind: core.RolloutRemove, Devices: devicesOf(members), By: by,
		MaxUnavailable: len(members)})
	if err != nil {
		return err
	}
	return m.wait(ctx, r.ID)
}

// anyJoined reports whether any member of the cluster has joined (its
// Node registered: clusters.NodeRegistered).
func (m ClusterMembership) anyJoined(c core.Cluster) (bool, error) {
	members, err := m.members(c, "")
	for _, ms := range members {
		if clusters.NodeRegistered(ms.State) {
			return true, nil
		}
	}
	return false, err
}

// members are the cluster's memberships in state (any state but left
// when "").
func (m ClusterMembership) members(c core.Cluster, state core.DeviceState) ([]core.Membership, error) {
	var out []core.Membership
	err := m.engine.st.View(func(tx core.Tx) error {
		return tx.Memberships().List("", func(ms core.Membership) (bool, error) {
			if ms.Cluster == c.ID && ms.State != core.StateLeft && (state == "" || ms.State == state) {
				out = append(out, ms)
			}
			return true, nil
		})
	})
	return out, err
}

func devicesOf(ms []core.Membership) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Device
	}
	return out
}

func (m ClusterMembership) Stop(ctx context.Context, c core.Cluster) error {
	if err := m.ClusterMembers.Stop(ctx, c); err != nil {
		return err
	}
	return m.eachNode(ctx, c, func(node string) error {
		_, err := m.nodes.Cordon(ctx, c.ID, node, "stop")
		return err
	})
}

func (m ClusterMembership) Start(ctx context.Context, c core.Cluster) error {
	err := m.eachNode(ctx, c, func(node string) error {
		info, ok, err := m.nodes.Node(ctx, c.ID, node)
		if err != nil || !ok || !info.Unschedulable {
			return err
		}
		if owner, err := m.nodes.CordonOwner(ctx, c.ID, node); err != nil || owner != "stop" {
			return err
		}
		return m.nodes.Uncordon(ctx, c.ID, node)
	})
	if err != nil {
		return err
	}
	return m.ClusterMembers.Start(ctx, c)
}

// eachNode calls fn for the Node of every member with one; a cluster
// without an API endpoint yet has nothing to do.
func (m ClusterMembership) eachNode(ctx context.Context, c core.Cluster, fn func(node string) error) error {
	var nodes []string
	err := m.engine.st.View(func(tx core.Tx) error {
		return tx.Memberships().Roster(c.ID, func(device, _ string) (bool, error) {
			if ms, err := tx.Memberships().Get(device); err == nil && ms.Node != nil && !ms.Node.Deleted {
				nodes = append(nodes, ms.NodeName)
			}
			return true, nil
		})
	})
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if err := fn(n); err != nil {
			return fmt.Errorf("node %s: %w", n, err)
		}
	}
	return nil
}

// wait waits for a rollout the job started and turns its end into the
// job's outcome.
func (m ClusterMembership) wait(ctx context.Context, id string) error {
	wctx, cancel := untilCancelled(ctx)
	defer cancel()
	r, err := m.engine.Wait(wctx, id)
	if err != nil {
		return err
	}
	switch r.State {
	case core.RolloutSucceeded:
		return nil
	case core.RolloutAborted:
		return fmt.Errorf("rollout %s aborted: %s", r.ID, r.Reason)
	}
	return fmt.Errorf("rollout %s failed: %s", r.ID, r.Reason)
}
