package rollout

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// errWithdrawn: an aborted rollout took the node's operation back before
// its agent started it.
var errWithdrawn = errors.New("operation withdrawn: the rollout was aborted before the agent started it")

// node does the rollout's work on one node.
func (e *Engine) node(ctx context.Context, r core.Rollout, n core.RolloutNode) error {
	if e.aborted(r.ID) {
		e.done(r, n.Device, core.NodeWithdrawn, "rollout aborted before the node started")
		return nil
	}
	e.setNode(r.ID, n.Device, func(x *core.RolloutNode) string {
		if x.Started.IsZero() {
			x.Started = e.now()
		}
		return ""
	})
	return e.work(ctx, r, n, nil)
}

// work runs the node's kind of work; resume, when set, is the operation
// its agent was handed before ztpd stopped: the work carries on from it
// (awaited, never handed again) instead of from the start.
func (e *Engine) work(ctx context.Context, r core.Rollout, n core.RolloutNode, resume *core.AgentOperation) error {
	var err error
	switch r.Kind {
	case core.RolloutKubernetes:
		err = e.upgradeKubernetes(ctx, r, n, resume)
	case core.RolloutImage:
		err = e.upgradeImage(ctx, r, n, resume)
	case core.RolloutRemove:
		err = e.remove(ctx, r, n, resume)
	case core.RolloutJoin:
		err = e.join(ctx, r, n, resume)
	default:
		err = fmt.Errorf("unknown rollout kind %q", r.Kind)
	}
	if errors.Is(err, errWithdrawn) {
		e.setNode(r.ID, n.Device, func(x *core.RolloutNode) string {
			x.Phase, x.Reason, x.Finished = core.NodeWithdrawn, err.Error(), e.now()
			return "withdrawn"
		})
		return nil
	}
	return err
}

// resumeNode carries on with a node that was underway when the process
// running its rollout stopped. A node rolling back resumes its rollback
// (resumeRollback). A node whose agent holds an operation of this rollout
// (the one its record names, or one handed just before the stop and not
// yet recorded) awaits it and goes on from there: Ready, uncordon. A node
// whose agent was handed nothing redoes its steps before the agent: the
// cordon, the drain and the hooks' lookup are idempotent.
func (e *Engine) resumeNode(ctx context.Context, r core.Rollout, n core.RolloutNode) error {
	e.setNode(r.ID, n.Device, func(*core.RolloutNode) string { return "resumed from phase " + n.Phase })
	if n.Phase == core.NodeRollingBack {
		return e.resumeRollback(ctx, r, n)
	}
	op, err := e.handedOperation(r, n)
	if err != nil {
		return err
	}
	if op == nil {
		return e.node(ctx, r, n)
	}
	if op.ID != n.Operation {
		e.setNode(r.ID, n.Device, func(x *core.RolloutNode) string {
			x.Phase, x.Operation = core.NodeAgent, op.ID
			return fmt.Sprintf("operation %s found with its agent (handed before the restart)", op.ID)
		})
		n.Phase, n.Operation = core.NodeAgent, op.ID
	}
	return e.work(ctx, r, n, op)
}

// handedOperation is the operation of this rollout the node's agent was
// last handed (nil: none). The device holds one operation at a time, so
// one of this rollout is the node's latest. A node whose record names an
// operation its device no longer holds cannot be resumed safely: what the
// agent did is unknown.
func (e *Engine) handedOperation(r core.Rollout, n core.RolloutNode) (*core.AgentOperation, error) {
	d, err := e.opts.Agents.Get(n.Device)
	if err != nil && core.KindOf(err) != core.KindNotFound {
		return nil, err
	}
	if op := d.Operation; op != nil && op.Rollout == r.ID {
		return op, nil
	}
	if n.Operation != "" {
		now := "none"
		if d.Operation != nil {
			now = d.Operation.ID + " (" + d.Operation.Kind + ")"
		}
		return nil, fmt.Errorf("not resumed after a restart of ztpd: the device no longer holds the operation %s it was handed (it holds %s); check the device, then run the rollout again", n.Operation, now)
	}
	return nil, nil
}

// operate hands the node's agent an operation of kind and waits for it;
// when the node resumes with such an operation already handed, that one
// is awaited instead, its step timeout counting from when it was handed.
func (e *Engine) operate(ctx context.Context, r core.Rollout, n core.RolloutNode, resume *core.AgentOperation, kind string,
	steps []core.AgentStep, mutate func(*core.DesiredState)) error {
	if resume == nil {
		return e.runOperation(ctx, r, n, kind, steps, mutate)
	}
	if resume.Kind != kind {
		return fmt.Errorf("not resumed after a restart of ztpd: its agent holds operation %s (%s) where the rollout expects a %s", resume.ID, resume.Kind, kind)
	}
	return e.awaitOperation(ctx, r, n, resume.ID, len(resume.Steps), resume.Created)
}

func (e *Engine) phase(r core.Rollout, device, phase, why string) {
	e.setNode(r.ID, device, func(x *core.RolloutNode) string {
		x.Phase = phase
		return why
	})
}

func (e *Engine) done(r core.Rollout, device, phase, why string) {
	e.setNode(r.ID, device, func(x *core.RolloutNode) string {
		x.Phase, x.Reason, x.Finished = phase, why, e.now()
		return why
	})
}

// cordonDrain cordons and drains the node's Node.
func (e *Engine) cordonDrain(ctx context.Context, r core.Rollout, n core.RolloutNode) (ours bool, err error) {
	if ours, err = e.opts.Nodes.Cordon(ctx, r.Cluster, n.NodeName, r.ID); err != nil {
		return false, fmt.Errorf("cordon: %w", err)
	}
	e.setNode(r.ID, n.Device, func(x *core.RolloutNode) string {
		x.Phase, x.Cordoned = core.NodeCordoned, ours
		return "cordoned"
	})
	if err := e.opts.Nodes.Drain(ctx, r.Cluster, n.NodeName, time.Duration(r.DrainTimeout)); err != nil {
		return ours, err
	}
	e.phase(r, n.Device, core.NodeDrained, "drained")
	return ours, nil
}

// hookSteps are the steps running the hook for phase: the rollout's, else
// the device's desired one (none when neither names one).
func (e *Engine) hookSteps(r core.Rollout, device, phase string) []core.AgentStep {
	name := r.Hooks[phase]
	if name == "" {
		// The rollout names none: the device's own (its desired state,
		// its profile's defaults included).
		if d, err := e.opts.Agents.Get(device); err == nil {
			name = d.Hooks[phase]
		}
	}
	if name == "" {
		return nil
	}
	var args map[string]string
	e.st.View(func(tx core.Tx) error {
		sha, err := tx.Images().ByName(name)
		if err != nil {
			sha = name
		}
		args = map[string]string{"image": name, "sha256": sha, "timeout": strconv.Itoa(int(time.Duration(r.StepTimeout) / time.Second))}
		return nil
	})
	return []core.AgentStep{{Name: phase, Action: "hook", Args: args}}
}

// runOperation hands the agent its operation and waits for it. A failed
// hook is a *hookError; an operation the rollout's abort withdrew before
// the agent started it is errWithdrawn.
func (e *Engine) runOperation(ctx context.Context, r core.Rollout, n core.RolloutNode, kind string, steps []core.AgentStep,
	mutate func(*core.DesiredState)) error {
	id, err := randomName(12)
	if err != nil {
		return err
	}
	op := core.AgentOperation{ID: "op-" + id, Kind: kind, Rollout: r.ID, Steps: steps}
	if e.aborted(r.ID) {
		return errWithdrawn // aborted while the node was being drained
	}
	if err := e.opts.Agents.Assign(ctx, "rollout "+r.ID, n.Device, op, mutate); err != nil {
		return fmt.Errorf("hand the operation to the agent: %w", err)
	}
	e.setNode(r.ID, n.Device, func(x *core.RolloutNode) string {
		// A rollback's operations (the rollback, the rejoin) leave the
		// node rolling-back: a restart resumes it from that operation.
		if x.Phase != core.NodeRollingBack {
			x.Phase = core.NodeAgent
		}
		x.Operation = op.ID
		return fmt.Sprintf("operation %s handed to the agent (%s)", op.ID, stepNames(steps))
	})
	return e.awaitOperation(ctx, r, n, op.ID, len(steps), time.Now())
}

// awaitOperation waits for the outcome of the operation opID (of steps
// steps) handed to the node's agent at handed: the step timeouts count
// from then, so a restart of ztpd in between never extends them.
func (e *Engine) awaitOperation(ctx context.Context, r core.Rollout, n core.RolloutNode, opID string, steps int, handed time.Time) error {
	if handed.IsZero() {
		handed = time.Now()
	}
	deadline := handed.Add(time.Duration(r.StepTimeout) * time.Duration(steps))
	lookedFor := time.Now()
	for first := true; ; first = false {
		if time.Since(lookedFor) >= e.gonePoll() {
			lookedFor = time.Now()
			if err := e.nodeGone(ctx, r, n); err != nil {
				return err
			}
		}
		if e.runningHere(r.ID) {
			if owner, taken := e.takenOver(r.ID); taken {
				return fmt.Errorf("rollout %s taken over by appliance %s", r.ID, owner)
			}
		}
		if first && e.aborted(r.ID) {
			if err := e.opts.Agents.Withdraw(ctx, n.Device, opID, "rollout "+r.ID+" aborted"); err == nil {
				return errWithdrawn
			}
		}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		got, err := e.opts.Agents.WaitOperation(wctx, n.Device, opID)
		cancel()
		switch {
		case err == nil:
			return operationOutcome(got)
		case !errors.Is(err, context.DeadlineExceeded):
			return fmt.Errorf("agent operation %s: %w", opID, err)
		}
		if got != nil && got.State == core.StepPending && e.aborted(r.ID) {
			err := e.opts.Agents.Withdraw(ctx, n.Device, opID, "rollout "+r.ID+" aborted")
			if err == nil {
				return errWithdrawn
			}
			if core.KindOf(err) != core.KindState {
				return err
			}
			// Started meanwhile: the node finishes its operation.
		}
		if time.Now().After(deadline) {
			state := "never reported"
			if got != nil && got.State != core.StepPending {
				state = "still " + got.State
			}
			return fmt.Errorf("agent operation %s: no result within %s (%s; agent of %s last reachable?)",
				opID, time.Duration(r.StepTimeout)*time.Duration(steps), state, n.Device)
		}
	}
}

// runningHere reports whether the rollout runs in this process (not an
// operator's rollback of a node of an ended one).
func (e *Engine) runningHere(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runs[id] != nil
}

// aborted reports whether the rollout, running here, has been aborted (a
// rollback after it ended, or resumed after a restart, goes on).
func (e *Engine) aborted(id string) bool {
	if !e.runningHere(id) {
		return false
	}
	cur, err := e.Get(id)
	return err == nil && cur.State == core.RolloutAborted
}

func operationOutcome(op *core.AgentOperation) error {
	switch op.State {
	case core.StepSucceeded:
		return nil
	case core.OpWithdrawn:
		return errWithdrawn
	case core.OpRolledBack:
		return &rolledBackError{msg: op.Reason + operationFailureTail(op)}
	}
	for _, st := range op.Steps {
		if st.State != core.StepFailed {
			continue
		}
		msg := fmt.Sprintf("agent step %s (%s) failed with exit status %d", st.Name, st.Action, st.ExitCode)
		if tail := lastLine(st.Output); tail != "" {
			msg += ": " + tail
		}
		if st.Action == "hook" {
			return &hookError{msg: msg}
		}
		return errors.New(msg)
	}
	return fmt.Errorf("agent operation %s %s: %s", op.ID, op.State, op.Reason)
}

// operationFailureTail is ": <last output line>" of the operation's
// failed step (the one its rollback followed), or "".
func operationFailureTail(op *core.AgentOperation) string {
	for _, st := range op.Steps {
		if st.State == core.StepFailed && st.Action != core.ActionRollback {
			if tail := lastLine(st.Output); tail != "" {
				return ": " + tail
			}
		}
	}
	return ""
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 200 {
		s = s[len(s)-200:]
	}
	return s
}

func stepNames(steps []core.AgentStep) string {
	names := make([]string, len(steps))
	for i, s := range steps {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

// upgradeKubernetes: cordon, drain, the agent's kubeadm upgrade between
// the hooks, the Node Ready at the new kubelet version, uncordon.
func (e *Engine) upgradeKubernetes(ctx context.Context, r core.Rollout, n core.RolloutNode, resume *core.AgentOperation) error {
	if n.NodeName == "" {
		return fmt.Errorf("device %s has no Node name (never joined)", n.Device)
	}
	if resume != nil {
		// Cordoned (or not, ours) and its version before recorded when
		// the operation was handed.
		previous := n.Previous
		if previous == "" {
			previous = e.previousVersion(ctx, r, n)
		}
		return e.upgradeKubernetesOperation(ctx, r, n, resume, nil, n.Cordoned, previous)
	}
	info, ok, err := e.opts.Nodes.Node(ctx, r.Cluster, n.NodeName)
	if err != nil {
		return fmt.Errorf("read Node: %w", err)
	}
	if !ok {
		return fmt.Errorf("node %s is not in the cluster", n.NodeName)
	}
	if info.KubeletVersion == r.Target && info.Ready && !info.Unschedulable {
		e.done(r, n.Device, core.NodeSkipped, "already Ready at "+r.Target)
		return nil
	}
	phase := "node"
	if n.Role == "control-plane" && e.isFirst(r, n) {
		phase = "apply"
	}
	args := map[string]string{"version": r.Target, "phase": phase, "role": n.Role,
		"timeout": strconv.Itoa(int(time.Duration(r.StepTimeout) / time.Second))}
	previous := info.KubeletVersion
	e.setNode(r.ID, n.Device, func(x *core.RolloutNode) string {
		x.Previous = previous
		return ""
	})
	// The binaries before the cordon: a version whose binaries cannot be
	// served fails the node while it still runs its pods.
	if e.opts.Binaries != nil {
		u, sums, err := e.opts.Binaries(r.Target)
		if err != nil {
			return fmt.Errorf("binaries of %s: %w", r.Target, err)
		}
		if u != "" {
			args["binaries_url"] = u
			for _, name := range []string{"kubeadm", "kubelet"} {
				if sums[name] != "" {
					args[name+"_sha256"] = sums[name]
				}
			}
		} else {
			e.opts.Log.Warn("no binaries served for the version: the agent upgrades with the kubeadm the node has",
				"rollout", r.ID, "device", n.Device, "version", r.Target)
		}
	}
	ours, err := e.cordonDrain(ctx, r, n)
	if err != nil {
		return err
	}
	steps := e.hookSteps(r, n.Device, core.HookPreUpgrade)
	steps = append(steps, core.AgentStep{Name: "upgrade", Action: "kubeadm-upgrade", Args: args})
	steps = append(steps, e.hookSteps(r, n.Device, core.HookPostUpgrade)...)
	steps = append(steps, e.rollbackStep(r, n)...)
	return e.upgradeKubernetesOperation(ctx, r, n, nil, steps, ours, previous)
}

// upgradeKubernetesOperation is the node's upgrade from its agent's
// operation on (handed now with steps, or resumed): the Node Ready at the
// target, uncordon.
func (e *Engine) upgradeKubernetesOperation(ctx context.Context, r core.Rollout, n core.RolloutNode, resume *core.AgentOperation,
	steps []core.AgentStep, ours bool, previous string) error {
	back := e.kubernetesBack(ctx, r, n, ours, previous)
	if err := e.operate(ctx, r, n, resume, core.OpUpgradeKubernetes, steps, func(d *core.DesiredState) {
		d.KubernetesVersion = r.Target
	}); err != nil {
		return e.afterOperation(ctx, r, n, err, back)
	}
	e.phase(r, n.Device, core.NodeWaiting, "waiting for the Node Ready at "+r.Target)
	if err := e.waitReady(ctx, r, n, r.Target); err != nil {
		var gone *nodeGoneError
		if errors.As(err, &gone) {
			return err
		}
		return e.rollbackAfterTimeout(ctx, r, n, err, back)
	}
	if ours {
		if err := e.opts.Nodes.Uncordon(ctx, r.Cluster, n.NodeName); err != nil {
			return fmt.Errorf("uncordon: %w", err)
		}
	}
	e.done(r, n.Device, core.NodeDone, "Ready at "+r.Target+", uncordoned")
	return nil
}

// isFirst reports whether the node is the cluster's first control plane
// (the one kubeadm init ran on: kubeadm upgrade apply runs there).
func (e *Engine) isFirst(r core.Rollout, n core.RolloutNode) bool {
	first := false
	e.st.View(func(tx core.Tx) error {
		js, err := tx.Clusters().JoinState(r.Cluster)
		first = err == nil && js.FirstControlPlane == n.Device
		return nil
	})
	return first
}

// upgradeImage installs the target SONiC image. A cluster member is
// cordoned and drained and leaves (its Node deleted), then installs,
// reboots and rejoins through the same enrollment rules as a new Node; a
// standalone switch runs the hooks and the image only.
func (e *Engine) upgradeImage(ctx context.Context, r core.Rollout, n core.RolloutNode, resume *core.AgentOperation) error {
	var sha string
	e.st.View(func(tx core.Tx) error {
		if s, err := tx.Images().ByName(r.Target); err == nil {
			sha = s
		} else {
			sha = r.Target
		}
		return nil
	})
	install := []core.AgentStep{
		{Name: "install", Action: "sonic-install", Args: map[string]string{"image": r.Target, "sha256": sha,
			"timeout": strconv.Itoa(int(time.Duration(r.StepTimeout) / time.Second))}},
		{Name: "reboot", Action: "reboot"},
	}
	setImage := func(d *core.DesiredState) { d.Image = r.Target }
	// What a rollback puts the device's image target back to.
	if d, err := e.opts.Agents.Get(n.Device); err == nil && n.Previous == "" && d.Image != r.Target {
		n.Previous = d.Image
		e.setNode(r.ID, n.Device, func(x *core.RolloutNode) string {
			x.Previous = d.Image
			return ""
		})
	}
	if n.NodeName == "" {
		steps := e.hookSteps(r, n.Device, core.HookPreUpgrade)
		steps = append(steps, install...)
		steps = append(steps, e.hookSteps(r, n.Device, core.HookPostUpgrade)...)
		steps = append(steps, e.rollbackStep(r, n)...)
		if err := e.operate(ctx, r, n, resume, core.OpUpgradeImage, steps, setImage); err != nil {
			return e.afterOperation(ctx, r, n, err, e.imageBack(ctx, r, n))
		}
		e.done(r, n.Device, core.NodeDone, "image "+r.Target+" installed")
		return nil
	}
	if resume == nil {
		if _, err := e.cordonDrain(ctx, r, n); err != nil {
			return err
		}
	}
	if resume == nil || resume.Kind == core.OpLeave {
		// First it leaves: hooks, then its agent resets Kubernetes on it;
		// the Node is deleted and the membership ended, so the rejoin is
		// a new member through the same enrollment rules and a new Node.
		leave := e.hookSteps(r, n.Device, core.HookPreUpgrade)
		leave = append(leave, e.hookSteps(r, n.Device, core.HookPreLeave)...)
		leave = append(leave, core.AgentStep{Name: "leave", Action: "kube-reset", Args: map[string]string{"platform": "sonic"}})
		if err := e.operate(ctx, r, n, resume, core.OpLeave, leave, nil); err != nil {
			return err
		}
		// Both idempotent: a resume after them does them again.
		if err := e.opts.Nodes.DeleteNode(ctx, r.Cluster, n.NodeName); err != nil {
			return fmt.Errorf("delete Node: %w", err)
		}
		if _, err := e.opts.Members.ResetDevice(ctx, n.Device); err != nil {
			return fmt.Errorf("end the membership before the rejoin: %w", err)
		}
		resume = nil // the upgrade is handed now
	}
	// Then the image, the reboot, the rejoin and the remaining hooks.
	steps := append([]core.AgentStep{}, install...)
	steps = append(steps, core.AgentStep{Name: "join", Action: "join", Args: map[string]string{"cluster": r.Cluster}})
	steps = append(steps, e.hookSteps(r, n.Device, core.HookPostJoin)...)
	steps = append(steps, e.hookSteps(r, n.Device, core.HookPostUpgrade)...)
	steps = append(steps, e.rollbackStep(r, n)...)
	back := e.imageBack(ctx, r, n)
	if err := e.operate(ctx, r, n, resume, core.OpUpgradeImage, steps, setImage); err != nil {
		return e.afterOperation(ctx, r, n, err, back)
	}
	e.phase(r, n.Device, core.NodeWaiting, "waiting for the Node Ready again")
	if err := e.opts.Nodes.WaitReady(ctx, r.Cluster, n.NodeName, "", nodeTimeout(r)); err != nil {
		return e.rollbackAfterTimeout(ctx, r, n, err, back)
	}
	e.done(r, n.Device, core.NodeDone, "image "+r.Target+" installed, rejoined, Node Ready")
	return nil
}

// remove takes a member out of its cluster: cordon, drain, the agent's
// reset (a switch gives its features back to local ownership), the Node
// deleted, the membership ended; its agent credential is revoked unless
// the device stays managed standalone.
func (e *Engine) remove(ctx context.Context, r core.Rollout, n core.RolloutNode, resume *core.AgentOperation) error {
	exists := false
	if n.NodeName != "" {
		_, ok, err := e.opts.Nodes.Node(ctx, r.Cluster, n.NodeName)
		if err != nil {
			return fmt.Errorf("read Node: %w", err)
		}
		exists = ok
	}
	if exists && resume == nil {
		if _, err := e.cordonDrain(ctx, r, n); err != nil {
			return err
		}
	}
	platform := ""
	if e.isSONiC(n.Device) {
		platform = "sonic"
	}
	steps := e.hookSteps(r, n.Device, core.HookPreLeave)
	steps = append(steps, core.AgentStep{Name: "leave", Action: "kube-reset", Args: map[string]string{"platform": platform}})
	standalone := r.Mode == core.ModeStandalone
	if err := e.operate(ctx, r, n, resume, core.OpLeave, steps, func(d *core.DesiredState) {
		if standalone {
			d.Mode, d.Cluster, d.Role = core.ModeStandalone, "", ""
		}
	}); err != nil {
		return err
	}
	if exists {
		if err := e.opts.Nodes.DeleteNode(ctx, r.Cluster, n.NodeName); err != nil {
			return fmt.Errorf("delete Node: %w", err)
		}
	}
	reason := "removed by rollout " + r.ID
	if standalone {
		reason = "switched to standalone by rollout " + r.ID
	}
	if err := e.opts.Members.MemberLeft(ctx, n.Device, reason); err != nil {
		return fmt.Errorf("mark left: %w", err)
	}
	if !standalone {
		if err := e.opts.Members.RevokeAgent(ctx, n.Device, reason); err != nil {
			return fmt.Errorf("revoke the agent credential: %w", err)
		}
	}
	e.done(r, n.Device, core.NodeDone, "left the cluster")
	return nil
}

// join brings a standalone device into the cluster through the normal
// join path: its agent runs the join plugin with an enrollment the
// device's document carries; the rollout waits for its Node Ready.
func (e *Engine) join(ctx context.Context, r core.Rollout, n core.RolloutNode, resume *core.AgentOperation) error {
	steps := []core.AgentStep{{Name: "join", Action: "join", Args: map[string]string{"cluster": r.Cluster}}}
	steps = append(steps, e.hookSteps(r, n.Device, core.HookPostJoin)...)
	if err := e.operate(ctx, r, n, resume, core.OpJoin, steps, func(d *core.DesiredState) {
		d.Mode, d.Cluster = core.ModeCluster, r.Cluster
	}); err != nil {
		return err
	}
	var node string
	e.st.View(func(tx core.Tx) error {
		if m, err := tx.Memberships().Get(n.Device); err == nil && m.Cluster == r.Cluster {
			node = m.NodeName
		}
		return nil
	})
	if node == "" {
		return fmt.Errorf("the agent's join succeeded but %s is not a member of the cluster", n.Device)
	}
	e.setNode(r.ID, n.Device, func(x *core.RolloutNode) string {
		x.NodeName, x.Phase = node, core.NodeWaiting
		return "joined; waiting for its Node Ready"
	})
	if err := e.opts.Nodes.WaitReady(ctx, r.Cluster, node, "", time.Duration(r.StepTimeout)); err != nil {
		return err
	}
	e.done(r, n.Device, core.NodeDone, "joined, Node Ready")
	return nil
}

func (e *Engine) isSONiC(device string) bool {
	sonic := false
	e.st.View(func(tx core.Tx) error {
		d, err := tx.Devices().Get(device)
		sonic = err == nil && d.Kind == core.KindSONiC
		return nil
	})
	return sonic
}
