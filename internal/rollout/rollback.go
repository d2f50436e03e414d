package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/desired"
)

// Rollback of a node whose upgrade failed. The agent records what it goes
// back to (the running image and a config checkpoint before an install,
// the kubeadm, kubelet and kubelet config before a Kubernetes upgrade) and
// restores it: at once when a step of its operation fails (the operation's
// rollback step, with rollback: auto), or when handed a rollback operation
// (the Node not Ready within the node timeout, or an operator's
// `ztpd rollout rollback`). The engine then brings the node back: a
// switch rejoins through the normal enrollment rules, a worker's kubelet
// comes back Ready at its old version, and the node is uncordoned only
// once Ready.

// rolledBackError: the node failed and is back where it was, Ready and
// uncordoned; the rollout stops unless its on_failure is continue.
type rolledBackError struct{ msg string }

func (e *rolledBackError) Error() string { return e.msg }

// rollbackStep is the automatic rollback step added to a node's operation
// (none with rollback: manual, or on a control plane: kubeadm rolls a
// failed control plane upgrade back itself).
func (e *Engine) rollbackStep(r core.Rollout, n core.RolloutNode) []core.AgentStep {
	if r.Rollback != core.RollbackAuto || (r.Kind == core.RolloutKubernetes && n.Role == "control-plane") {
		return nil
	}
	return []core.AgentStep{{Name: "rollback", Action: core.ActionRollback,
		Args: map[string]string{"timeout": strconv.Itoa(int(time.Duration(r.StepTimeout) / time.Second))}}}
}

// nodeTimeout bounds a node's return to Ready after its operation.
func nodeTimeout(r core.Rollout) time.Duration {
	if r.NodeTimeout > 0 {
		return time.Duration(r.NodeTimeout)
	}
	return time.Duration(r.StepTimeout)
}

// afterOperation handles what a node's operation ended as: a rolled-back
// operation (the agent's automatic rollback) is brought back by back; a
// failure is returned as it is.
func (e *Engine) afterOperation(ctx context.Context, r core.Rollout, n core.RolloutNode, opErr error, back func(reason string) error) error {
	var rb *rolledBackError
	if !errors.As(opErr, &rb) {
		return opErr
	}
	e.opts.Log.Info("rollout node rolled back by its agent", "rollout", r.ID, "device", n.Device, "reason", rb.msg)
	return back(rb.msg)
}

// rollbackAfterTimeout: the node's operation succeeded but its Node did
// not come back Ready within the node timeout. With rollback: auto the
// agent is handed a rollback operation and the node brought back by back;
// otherwise the timeout is the node's failure.
func (e *Engine) rollbackAfterTimeout(ctx context.Context, r core.Rollout, n core.RolloutNode, waitErr error, back func(reason string) error) error {
	if r.Rollback != core.RollbackAuto || (r.Kind == core.RolloutKubernetes && n.Role == "control-plane") {
		return waitErr
	}
	reason := fmt.Sprintf("not Ready within the node timeout %s: %v", nodeTimeout(r), waitErr)
	if err := e.handRollback(ctx, r, n, reason); err != nil {
		return fmt.Errorf("%s; rollback: %w", reason, err)
	}
	return back(reason)
}

// handRollback hands the device's agent a rollback operation and waits
// for it. While a node rolls back its Reason is why (a restart resumes the
// rollback with it).
func (e *Engine) handRollback(ctx context.Context, r core.Rollout, n core.RolloutNode, reason string) error {
	e.setNode(r.ID, n.Device, func(x *core.RolloutNode) string {
		x.Phase, x.Reason = core.NodeRollingBack, reason
		return "rolling back: " + reason
	})
	steps := []core.AgentStep{{Name: "rollback", Action: core.ActionRollback,
		Args: map[string]string{"timeout": strconv.Itoa(int(time.Duration(r.StepTimeout) / time.Second))}}}
	return e.runOperation(ctx, r, n, core.OpRollback, steps, nil)
}

// kubernetesBack: the worker's agent restored its kubelet and kubeadm; the
// Node must be Ready at the version it had before (then it is uncordoned
// when ztpd cordoned it).
func (e *Engine) kubernetesBack(ctx context.Context, r core.Rollout, n core.RolloutNode, ours bool, previous string) func(string) error {
	return func(reason string) error {
		e.setNode(r.ID, n.Device, func(x *core.RolloutNode) string {
			x.Phase, x.Reason = core.NodeRollingBack, reason
			return "rolled back by its agent after: " + reason + "; waiting for the Node Ready at " + previous
		})
		if err := e.opts.Nodes.WaitReady(ctx, r.Cluster, n.NodeName, previous, nodeTimeout(r)); err != nil {
			return fmt.Errorf("rolled back after: %s; but not Ready at %s again: %w", reason, previous, err)
		}
		if ours {
			if err := e.opts.Nodes.Uncordon(ctx, r.Cluster, n.NodeName); err != nil {
				return fmt.Errorf("rolled back after: %s; uncordon: %w", reason, err)
			}
		}
		if previous != "" {
			semver := strings.TrimPrefix(previous, "v") // what the desired state takes
			e.restoreTarget(ctx, r, n, func(d core.DesiredState) (bool, desired.Change) {
				return d.KubernetesVersion == r.Target, desired.Change{KubernetesVersion: &semver}
			})
		}
		return e.rolledBack(r, n, fmt.Sprintf("rolled back to %s after: %s; Ready, uncordoned", previous, reason))
	}
}

// imageBack: the switch runs its previous image and config again. A
// cluster member rejoins as a new member (its Node deleted, the
// membership ended, a join operation) and must be Ready; a standalone
// switch is done.
func (e *Engine) imageBack(ctx context.Context, r core.Rollout, n core.RolloutNode) func(string) error {
	return func(reason string) error {
		if n.NodeName == "" {
			e.restoreImage(ctx, r, n)
			return e.rolledBack(r, n, "rolled back to its previous image after: "+reason)
		}
		e.setNode(r.ID, n.Device, func(x *core.RolloutNode) string {
			x.Phase, x.Reason = core.NodeRollingBack, reason
			return "back on its previous image after: " + reason + "; rejoining"
		})
		if err := e.opts.Nodes.DeleteNode(ctx, r.Cluster, n.NodeName); err != nil {
			return fmt.Errorf("rolled back after: %s; delete Node before the rejoin: %w", reason, err)
		}
		if _, err := e.opts.Members.ResetDevice(ctx, n.Device); err != nil {
			return fmt.Errorf("rolled back after: %s; end the membership before the rejoin: %w", reason, err)
		}
		steps := []core.AgentStep{{Name: "join", Action: "join", Args: map[string]string{"cluster": r.Cluster}}}
		if err := e.runOperation(ctx, r, n, core.OpJoin, steps, nil); err != nil {
			return fmt.Errorf("rolled back after: %s; rejoin: %w", reason, err)
		}
		return e.rejoined(ctx, r, n, reason)
	}
}

// rejoined: a switch back on its previous image has rejoined; its Node
// must be Ready again.
func (e *Engine) rejoined(ctx context.Context, r core.Rollout, n core.RolloutNode, reason string) error {
	e.phase(r, n.Device, core.NodeRollingBack, "rejoined on its previous image; waiting for the Node Ready")
	if err := e.opts.Nodes.WaitReady(ctx, r.Cluster, n.NodeName, "", nodeTimeout(r)); err != nil {
		return fmt.Errorf("rolled back after: %s; but not Ready again: %w", reason, err)
	}
	e.restoreImage(ctx, r, n)
	return e.rolledBack(r, n, "rolled back to its previous image after: "+reason+"; rejoined, Node Ready")
}

// restoreImage puts the device's target back to the image ztpd had set
// before (none: none), as the switch runs it again.
func (e *Engine) restoreImage(ctx context.Context, r core.Rollout, n core.RolloutNode) {
	e.restoreTarget(ctx, r, n, func(d core.DesiredState) (bool, desired.Change) {
		return d.Image == r.Target, desired.Change{Image: &n.Previous}
	})
}

// targetSetter is an Agents that can change a device's targets outside
// an operation (the desired-state service).
type targetSetter interface {
	Set(ctx context.Context, by, device string, ch desired.Change) (core.DesiredState, error)
}

// restoreTarget puts the device's desired target back to what the node
// runs again after a rollback, when change says the target is still the
// rollout's (an operator's newer target is left alone). A failure is
// logged: the node is rolled back either way.
func (e *Engine) restoreTarget(ctx context.Context, r core.Rollout, n core.RolloutNode, change func(core.DesiredState) (bool, desired.Change)) {
	ts, ok := e.opts.Agents.(targetSetter)
	if !ok {
		return
	}
	d, err := e.opts.Agents.Get(n.Device)
	if err != nil {
		e.opts.Log.Warn("rollback: desired state not read", "rollout", r.ID, "device", n.Device, "err", err)
		return
	}
	ours, ch := change(d)
	if !ours {
		return
	}
	if _, err := ts.Set(ctx, "rollout "+r.ID+" (rolled back)", n.Device, ch); err != nil {
		e.opts.Log.Warn("rollback: desired target not restored", "rollout", r.ID, "device", n.Device, "err", err)
	}
}

// rolledBack records the node rolled back and returns the error that
// tells the loop so.
func (e *Engine) rolledBack(r core.Rollout, n core.RolloutNode, why string) error {
	e.done(r, n.Device, core.NodeRolledBack, why)
	return &rolledBackError{msg: why}
}

// Rollback takes one device back to what its agent recorded before the
// last rollout that upgraded it (`ztpd rollout rollback NODE`), when that
// rollout has ended or has finished the node: its agent restores the
// previous image and config, or kubelet and kubeadm, and the node comes
// back as after an automatic rollback. It runs on in the background; the
// rollout's record shows its progress. by is who asked.
func (e *Engine) Rollback(ctx context.Context, device, by string) (core.Rollout, error) {
	r, n, err := e.lastUpgrade(device)
	if err != nil {
		return core.Rollout{}, err
	}
	device = n.Device // it may have been named by its Node
	e.mu.Lock()
	running := e.runs[r.ID] != nil && !r.State.Ended()
	e.mu.Unlock()
	finished := slices.Contains([]string{core.NodeDone, core.NodeFailed, core.NodeRolledBack}, n.Phase)
	if running && !finished {
		return core.Rollout{}, core.Errorf(core.KindState, "node %s of rollout %s is %s: wait for it, or abort the rollout first", nodeName(r, device), r.ID, n.Phase)
	}
	if !finished {
		return core.Rollout{}, core.Errorf(core.KindState, "node %s of rollout %s is %s: nothing it changed to roll back", nodeName(r, device), r.ID, n.Phase)
	}
	if err := e.st.View(func(tx core.Tx) error { return busyOther(tx, r) }); err != nil {
		return core.Rollout{}, err
	}
	reason := "rollback asked by " + by
	e.opts.Log.Info("rollout node rollback", "rollout", r.ID, "device", device, "by", by)
	if err := e.setNode(r.ID, device, func(x *core.RolloutNode) string {
		x.Phase, x.Reason, x.Finished = core.NodeRollingBack, reason, time.Time{}
		return "rolling back: " + reason
	}); err != nil {
		return core.Rollout{}, err
	}
	release := e.involve(device)
	go func() {
		defer release()
		ctx := context.WithoutCancel(ctx)
		err := e.handRollback(ctx, r, n, reason)
		if err == nil {
			err = e.back(ctx, r, n)(reason)
		}
		e.rollbackEnded(r, device, err)
	}()
	return e.Get(r.ID)
}

// back is what brings the node back once its agent rolled it back.
func (e *Engine) back(ctx context.Context, r core.Rollout, n core.RolloutNode) func(string) error {
	if r.Kind == core.RolloutImage {
		return e.imageBack(ctx, r, n)
	}
	return e.kubernetesBack(ctx, r, n, n.Cordoned, e.previousVersion(ctx, r, n))
}

// rollbackEnded records a rollback that failed (one that succeeded
// recorded itself rolled-back).
func (e *Engine) rollbackEnded(r core.Rollout, device string, err error) {
	var rb *rolledBackError
	if err == nil || errors.As(err, &rb) {
		return
	}
	msg := err.Error()
	e.setNode(r.ID, device, func(x *core.RolloutNode) string {
		x.Phase, x.Reason, x.Finished = core.NodeFailed, msg, e.now()
		return "rollback failed: " + msg
	})
}

// involve has device's agent poll as a rollout's next node's does
// (Involved, Upcoming) until release is called: a rollback outside a
// running rollout.
func (e *Engine) involve(device string) (release func()) {
	e.involvedMu.Lock()
	e.involved[device]++
	e.upcoming[device]++
	e.involvedMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			e.involvedMu.Lock()
			for _, m := range []map[string]int{e.involved, e.upcoming} {
				if m[device]--; m[device] <= 0 {
					delete(m, device)
				}
			}
			e.involvedMu.Unlock()
		})
	}
}

// resumeRollbacks picks up the rollbacks of an ended rollout that the
// stop of the process running it interrupted (an operator's one-command
// rollback, or an automatic one in a rollout that failed): every node it
// left rolling back is brought back from where its operations are, in
// the background. A rollout still running resumes its own (resumeNode).
func (e *Engine) resumeRollbacks(r core.Rollout) {
	if r.Kind != core.RolloutImage && r.Kind != core.RolloutKubernetes {
		return
	}
	for _, n := range r.Nodes {
		if n.Phase != core.NodeRollingBack {
			continue
		}
		e.opts.Log.Info("rollout node rollback resumed", "rollout", r.ID, "device", n.Device, "reason", n.Reason)
		e.setNode(r.ID, n.Device, func(*core.RolloutNode) string {
			return "rollback resumed after the process running it stopped"
		})
		release := e.involve(n.Device)
		go func() {
			defer release()
			e.rollbackEnded(r, n.Device, e.resumeRollback(context.Background(), r, n))
		}()
	}
}

// resumeRollback brings a node that was rolling back when ztpd stopped
// back, from the operation it had last handed its agent (the node's
// Operation): a rejoin on the previous image is waited for; a rollback
// operation is waited for, the agent taking it now if it had not; an
// upgrade its agent rolled back goes on to the Node's return; anything
// else (the rollback was asked but never handed, or was withdrawn) hands
// the rollback again.
func (e *Engine) resumeRollback(ctx context.Context, r core.Rollout, n core.RolloutNode) error {
	reason := n.Reason
	if reason == "" {
		reason = "a rollback interrupted by a restart of ztpd"
	}
	d, err := e.opts.Agents.Get(n.Device)
	if err != nil && core.KindOf(err) != core.KindNotFound {
		return err
	}
	op := d.Operation
	if op == nil || op.ID != n.Operation || op.State == core.OpWithdrawn {
		if err := e.handRollback(ctx, r, n, reason); err != nil {
			return err
		}
		return e.back(ctx, r, n)(reason)
	}
	switch {
	case op.Kind == core.OpJoin:
		if err := e.awaitOperation(ctx, r, n, op.ID, len(op.Steps), op.Created); err != nil {
			return fmt.Errorf("rolled back after: %s; rejoin: %w", reason, err)
		}
		return e.rejoined(ctx, r, n, reason)
	case op.Kind == core.OpRollback:
		if err := e.awaitOperation(ctx, r, n, op.ID, len(op.Steps), op.Created); err != nil {
			return err
		}
		return e.back(ctx, r, n)(reason)
	}
	// The node's upgrade: rolled back by its agent, or (still running,
	// or ended without its rollback) rolled back now.
	err = e.awaitOperation(ctx, r, n, op.ID, len(op.Steps), op.Created)
	var rb *rolledBackError
	if !errors.As(err, &rb) {
		if err := e.handRollback(ctx, r, n, reason); err != nil {
			return err
		}
	}
	return e.back(ctx, r, n)(reason)
}

// previousVersion is the Kubernetes version a worker goes back to: the
// version before the rollout's target that its Node reported, as the
// rollout recorded it (else the Node's version now, when it is not the
// target).
func (e *Engine) previousVersion(ctx context.Context, r core.Rollout, n core.RolloutNode) string {
	if n.Previous != "" {
		return n.Previous
	}
	if info, ok, err := e.opts.Nodes.Node(ctx, r.Cluster, n.NodeName); err == nil && ok && info.KubeletVersion != r.Target {
		return info.KubeletVersion
	}
	return ""
}

// lastUpgrade is the newest image or Kubernetes rollout over device and
// its node there.
func (e *Engine) lastUpgrade(device string) (core.Rollout, core.RolloutNode, error) {
	var (
		found core.Rollout
		node  core.RolloutNode
		ok    bool
	)
	err := e.List(func(r core.Rollout) bool {
		if r.Kind != core.RolloutImage && r.Kind != core.RolloutKubernetes {
			return true
		}
		for _, n := range r.Nodes {
			if n.Device == device || (n.NodeName != "" && n.NodeName == device) {
				found, node, ok = r, n, true
				return false
			}
		}
		return true
	})
	if err != nil {
		return found, node, err
	}
	if !ok {
		return found, node, core.Errorf(core.KindNotFound, "no image or Kubernetes rollout upgraded %s: nothing to roll back", device)
	}
	return found, node, nil
}

// busyOther refuses a rollback while another rollout runs on the cluster
// (two rollouts on the same nodes).
func busyOther(tx core.Tx, r core.Rollout) error {
	return tx.Rollouts().List("", func(o core.Rollout) (bool, error) {
		if o.ID != r.ID && !o.State.Ended() && r.Cluster != "" && o.Cluster == r.Cluster {
			return false, core.Errorf(core.KindState, "rollout %s (%s) is %s on this cluster; a rollback waits for it", o.ID, o.Kind, o.State)
		}
		return true, nil
	})
}
