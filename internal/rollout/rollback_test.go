package rollout

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/desired"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// rollBack is the fake agent's rollback step: the Node's kubelet goes
// back to its version before the upgrade and is Ready there.
func (e *env) rollBack(ctx context.Context, device, node, opID, step string) {
	addr := netip.MustParseAddr("10.99.0.10")
	rep := desired.Report{Operation: opID, Step: step, State: core.StepRunning}
	if e.des.AgentReport(ctx, device, addr, rep) != nil {
		return
	}
	e.nodes.mu.Lock()
	n := e.nodes.nodes[node]
	if n.previous != "" {
		n.version = n.previous
	}
	n.ready, n.deleted = !n.downAfterRollback, false
	n.rollbacks++
	e.nodes.mu.Unlock()
	rep.State, rep.Output = core.StepSucceeded, "ztpd-agent: rolled back"
	e.des.AgentReport(ctx, device, addr, rep)
}

func withHook(t *testing.T, e *env) map[string]string {
	storetest.Update(t, e.st, func(tx core.Tx) error {
		if err := tx.Images().Put(core.Image{SHA256: strings.Repeat("a", 64), Name: "check-bgp", Kind: "file"}); err != nil {
			return err
		}
		return tx.Images().SetName("check-bgp", strings.Repeat("a", 64))
	})
	return map[string]string{core.HookPostUpgrade: "check-bgp"}
}

// TestAutoRollbackStopsTheRollout: a worker's post_upgrade hook fails with
// rollback auto: its agent rolls it back, the engine waits for its Node
// Ready at the old version, uncordons it, records it rolled-back with the
// reason, and the rollout stops before the next worker.
func TestAutoRollbackStopsTheRollout(t *testing.T) {
	e := newEnv(t, 2)
	e.fail[device(1)] = core.HookPostUpgrade
	r := e.wait(e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2", Rollback: core.RollbackAuto, Hooks: withHook(t, e)}).ID)
	if r.State != core.RolloutFailed || !strings.Contains(r.Reason, "node node-1 rolled back to v1.36.3 after: step post_upgrade (hook) failed with exit status 3: bgp: neighbor 10.0.0.1 down; Ready, uncordoned") {
		t.Fatalf("rollout %s: %q", r.State, r.Reason)
	}
	if got := r.Nodes[1]; got.Phase != core.NodeRolledBack || got.Previous != "v1.36.3" {
		t.Fatalf("node-1 %+v", got)
	}
	if r.Nodes[2].Phase != core.NodePending {
		t.Fatalf("the rollout went past a rolled-back node: %+v", r.Nodes[2])
	}
	n := e.nodes.nodes["node-1"]
	if n.version != "v1.36.3" || n.unschedulable || !n.ready {
		t.Fatalf("node-1 after the rollback: %+v", n)
	}
	d, _ := e.des.Get(device(1))
	if d.Operation.State != core.OpRolledBack {
		t.Fatalf("operation %s: %s", d.Operation.State, d.Operation.Reason)
	}
	// The device's target is what it runs again.
	if d.KubernetesVersion != "v1.36.3" {
		t.Fatalf("desired kubernetes_version after the rollback: %q, want v1.36.3", d.KubernetesVersion)
	}
	if d2, _ := e.des.Get(device(2)); d2.KubernetesVersion == "v1.37.2" {
		t.Fatalf("the untouched worker's target moved to %s", d2.KubernetesVersion)
	}
	// The control plane has no rollback step: kubeadm rolls it back.
	d0, _ := e.des.Get(device(0))
	if d0.Operation.OnFailureRollback() != nil {
		t.Fatalf("control plane operation has a rollback step: %+v", d0.Operation.Steps)
	}
	// log order: the uncordon came after the rollback.
	log := strings.Join(e.nodes.log, ",")
	if !strings.Contains(log, "cordon node-1,drain node-1,uncordon node-1") {
		t.Fatalf("node log %s", log)
	}
}

// TestAutoRollbackContinues: with on_failure continue the rollout goes on
// past the rolled-back node and succeeds, saying so.
func TestAutoRollbackContinues(t *testing.T) {
	e := newEnv(t, 3)
	e.fail[device(2)] = core.HookPostUpgrade
	r := e.wait(e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2", Rollback: core.RollbackAuto,
		OnFailure: core.OnFailureContinue, Hooks: withHook(t, e)}).ID)
	if r.State != core.RolloutSucceeded || summary(r) != "3 done, 1 rolled-back" || r.Reason != "done; 1 nodes failed and were rolled back" {
		t.Fatalf("rollout %s %q: %s", r.State, r.Reason, summary(r))
	}
	if e.nodes.nodes["node-3"].version != "v1.37.2" || e.nodes.nodes["node-2"].version != "v1.36.3" {
		t.Fatal("versions after the rollout")
	}
}

// TestManualRollbackKeepsTodaysBehaviour: rollback manual (the default)
// leaves the node failed and cordoned; `ztpd rollout rollback` then takes
// it back and uncordons it once Ready.
func TestManualRollbackKeepsTodaysBehaviour(t *testing.T) {
	e := newEnv(t, 1)
	e.fail[device(1)] = core.HookPostUpgrade
	r := e.wait(e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2", Hooks: withHook(t, e)}).ID)
	if r.State != core.RolloutFailed || r.Nodes[1].Phase != core.NodeFailed || !e.nodes.nodes["node-1"].unschedulable {
		t.Fatalf("manual: %s %+v", r.State, r.Nodes[1])
	}
	if e.nodes.nodes["node-1"].version != "v1.37.2" {
		t.Fatalf("node-1 at %s", e.nodes.nodes["node-1"].version)
	}
	e.failMu.Lock()
	delete(e.fail, device(1))
	e.failMu.Unlock()
	if _, err := e.eng.Rollback(context.Background(), "node-1", "admin"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := e.eng.Get(r.ID)
		if got.Nodes[1].Phase == core.NodeRolledBack {
			if !strings.Contains(got.Nodes[1].Reason, "rolled back to v1.36.3 after: rollback asked by admin; Ready, uncordoned") {
				t.Fatalf("reason %q", got.Nodes[1].Reason)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node-1 %+v", got.Nodes[1])
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := e.nodes.nodes["node-1"]; n.version != "v1.36.3" || n.unschedulable {
		t.Fatalf("node-1 after the rollback: %+v", n)
	}
	if _, err := e.eng.Rollback(context.Background(), device(5), "admin"); core.KindOf(err) != core.KindNotFound {
		t.Fatalf("rollback of a device no rollout upgraded: %v", err)
	}
}

// TestNodeTimeoutTriggersRollback: the upgraded kubelet never gets Ready;
// after the node timeout the engine hands the agent a rollback operation
// and the node comes back Ready at its old version.
func TestNodeTimeoutTriggersRollback(t *testing.T) {
	e := newEnv(t, 1)
	e.nodes.mu.Lock()
	e.nodes.nodes["node-1"].breaksOnUpgrade = true
	e.nodes.mu.Unlock()
	r := e.wait(e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2", Rollback: core.RollbackAuto, NodeTimeout: 300 * time.Millisecond}).ID)
	if r.State != core.RolloutFailed || r.Nodes[1].Phase != core.NodeRolledBack || !strings.Contains(r.Nodes[1].Reason, "not Ready within the node timeout 300ms") {
		t.Fatalf("rollout %s: %+v", r.State, r.Nodes[1])
	}
	d, _ := e.des.Get(device(1))
	if d.Operation.Kind != core.OpRollback || d.Operation.State != core.StepSucceeded {
		t.Fatalf("last operation %s %s", d.Operation.Kind, d.Operation.State)
	}
	if n := e.nodes.nodes["node-1"]; n.version != "v1.36.3" || !n.ready || n.unschedulable || n.rollbacks != 1 {
		t.Fatalf("node-1 %+v", n)
	}
}

// TestImageAutoRollbackRejoins: a switch's post_upgrade hook fails on the
// new image; its agent rolls it back and the engine has it rejoin (Node
// deleted, membership ended, a join operation) before recording it.
func TestImageAutoRollbackRejoins(t *testing.T) {
	e := newEnv(t, 1)
	sha := strings.Repeat("b", 64)
	storetest.Update(t, e.st, func(tx core.Tx) error {
		d, err := tx.Devices().Get(device(1))
		if err != nil {
			return err
		}
		d.Kind = core.KindSONiC
		if err := tx.Devices().Put(d); err != nil {
			return err
		}
		if err := tx.Images().Put(core.Image{SHA256: sha, Name: "sonic-new", Kind: "sonic-installer"}); err != nil {
			return err
		}
		return tx.Images().SetName("sonic-new", sha)
	})
	e.fail[device(1)] = core.HookPostUpgrade
	r := e.wait(e.start(Spec{Kind: core.RolloutImage, Target: "sonic-new", Devices: []string{device(1)}, Rollback: core.RollbackAuto,
		Hooks: withHook(t, e)}).ID)
	if r.State != core.RolloutFailed || r.Nodes[0].Phase != core.NodeRolledBack ||
		!strings.Contains(r.Nodes[0].Reason, "rolled back to its previous image after: step post_upgrade (hook) failed with exit status 3: bgp: neighbor 10.0.0.1 down; rejoined, Node Ready") {
		t.Fatalf("rollout %s: %+v", r.State, r.Nodes[0])
	}
	if log := strings.Join(e.nodes.log, ","); !strings.Contains(log, "delete node-1,delete node-1") {
		t.Fatalf("node log %s", log)
	}
	d, _ := e.des.Get(device(1))
	if d.Operation.Kind != core.OpJoin || d.Operation.State != core.StepSucceeded {
		t.Fatalf("last operation %s %s", d.Operation.Kind, d.Operation.State)
	}
	// The image ztpd had set before the rollout (none) is the target again.
	if d.Image != "" || r.Nodes[0].Previous != "" {
		t.Fatalf("desired image after the rollback: %q (previous %q), want none again", d.Image, r.Nodes[0].Previous)
	}
}

func TestRollbackPolicyChecked(t *testing.T) {
	e := newEnv(t, 1)
	for _, spec := range []Spec{
		{Kind: core.RolloutKubernetes, Target: "v1.37.2", Rollback: "sometimes"},
		{Kind: core.RolloutKubernetes, Target: "v1.37.2", OnFailure: "retry"},
		{Kind: core.RolloutRemove, Rollback: core.RollbackAuto},
	} {
		spec.Cluster = cluster
		if _, err := e.eng.Start(context.Background(), spec); core.KindOf(err) != core.KindInvalid {
			t.Fatalf("%+v: %v", spec, err)
		}
	}
}

// restart is ztpd stopping and starting again over the same data
// directory: the agents stop, the store is closed under the old engine
// (whatever it still does fails from then on), reopened, and a new
// desired-state owner and engine are built on it, with new agents. The
// cluster's Nodes are carried over as copies (the old engine's goroutines
// keep theirs, so nothing they do reaches the new ones).
func (e *env) restart(fx *storetest.Fixture, workers int) *env {
	e.t.Helper()
	e.stopAgents()
	if err := fx.Store.Close(); err != nil {
		e.t.Fatal(err)
	}
	fx2 := storetest.OpenIn(e.t, fx.Dir)
	*fx = *fx2
	e.nodes.mu.Lock()
	nodes := &fakeNodes{nodes: map[string]*fakeNode{}, cordoned: e.nodes.cordoned}
	for name, n := range e.nodes.nodes {
		c := *n
		nodes.nodes[name] = &c
	}
	e.nodes.mu.Unlock()
	e2 := &env{t: e.t, st: fx.Store, nodes: nodes, members: e.members, fail: map[string]string{}}
	e2.des = desired.New(e2.st, desired.Options{Auth: credentialIsDevice{}})
	var err error
	if e2.eng, err = New(e2.st, Options{Nodes: e2.nodes, Agents: e2.des, Members: e2.members}); err != nil {
		e.t.Fatal(err)
	}
	e2.startAgents(workers)
	return e2
}

// waitNode waits until the rollout's node i satisfies ok.
func (e *env) waitNode(id string, i int, what string, ok func(core.RolloutNode) bool) core.RolloutNode {
	e.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		r, err := e.eng.Get(id)
		if err != nil {
			e.t.Fatal(err)
		}
		if ok(r.Nodes[i]) {
			return r.Nodes[i]
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("node %d never %s: %+v", i, what, r.Nodes[i])
		}
	}
}

// TestOneCommandRollbackResumesAfterRestart: ztpd restarts while an
// operator's `ztpd rollout rollback` waits for the agent to take the
// rollback operation. The new engine picks the node up: the agent takes
// the operation it was handed before the restart, and the node is brought
// back Ready at its old version, uncordoned and recorded rolled-back.
func TestOneCommandRollbackResumesAfterRestart(t *testing.T) {
	fx := storetest.Open(t)
	e := newEnvOver(t, fx.Store, 1)
	e.fail[device(1)] = core.HookPostUpgrade
	r := e.wait(e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2", Hooks: withHook(t, e)}).ID)
	if r.State != core.RolloutFailed || r.Nodes[1].Phase != core.NodeFailed || !e.nodes.nodes["node-1"].unschedulable {
		t.Fatalf("manual: %s %+v", r.State, r.Nodes[1])
	}
	// No agent takes the rollback before the restart.
	e.stopAgents()
	if _, err := e.eng.Rollback(context.Background(), "node-1", "admin"); err != nil {
		t.Fatal(err)
	}
	var handed string
	e.waitNode(r.ID, 1, "handed its rollback", func(n core.RolloutNode) bool {
		op, _ := e.des.Operation(device(1))
		if op != nil && op.Kind == core.OpRollback && n.Operation == op.ID {
			handed = op.ID
			return true
		}
		return false
	})

	e = e.restart(fx, 1)
	n := e.waitNode(r.ID, 1, "rolled back", func(n core.RolloutNode) bool { return n.Phase == core.NodeRolledBack })
	if !strings.Contains(n.Reason, "rolled back to v1.36.3 after: rollback asked by admin; Ready, uncordoned") {
		t.Fatalf("reason %q", n.Reason)
	}
	if got := e.nodes.nodes["node-1"]; got.version != "v1.36.3" || got.unschedulable || !got.ready {
		t.Fatalf("node-1 after the resumed rollback: %+v", got)
	}
	// The operation handed before the restart is the one that ran.
	d, _ := e.des.Get(device(1))
	if d.Operation.ID != handed || d.Operation.State != core.StepSucceeded {
		t.Fatalf("operation %s %s, want %s succeeded", d.Operation.ID, d.Operation.State, handed)
	}
	if d.KubernetesVersion != "v1.36.3" {
		t.Fatalf("desired version %q after the rollback", d.KubernetesVersion)
	}
}

// TestAutoRollbackResumesAfterRestart: ztpd restarts while a worker its
// agent rolled back (rollback auto) is waited for to come back Ready. The
// rollout resumes: the node is brought back Ready at its old version,
// uncordoned, rolled-back with its reason, and the rollout stops for it.
func TestAutoRollbackResumesAfterRestart(t *testing.T) {
	fx := storetest.Open(t)
	e := newEnvOver(t, fx.Store, 1)
	e.fail[device(1)] = core.HookPostUpgrade
	e.nodes.mu.Lock()
	e.nodes.nodes["node-1"].downAfterRollback = true
	e.nodes.mu.Unlock()
	r := e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2", Rollback: core.RollbackAuto, Hooks: withHook(t, e),
		NodeTimeout: 5 * time.Second})
	e.waitNode(r.ID, 1, "waited for after its rollback", func(n core.RolloutNode) bool {
		op, _ := e.des.Operation(device(1))
		return n.Phase == core.NodeRollingBack && op != nil && op.State == core.OpRolledBack
	})

	e = e.restart(fx, 1)
	time.Sleep(50 * time.Millisecond) // it waits for the Node
	if n, _ := e.eng.Get(r.ID); n.Nodes[1].Phase != core.NodeRollingBack {
		t.Fatalf("node-1 before its Node is Ready: %+v", n.Nodes[1])
	}
	e.nodes.mu.Lock()
	e.nodes.nodes["node-1"].ready = true
	e.nodes.mu.Unlock()
	n := e.waitNode(r.ID, 1, "rolled back", func(n core.RolloutNode) bool { return n.Phase == core.NodeRolledBack })
	if !strings.Contains(n.Reason, "rolled back to v1.36.3 after: step post_upgrade (hook) failed with exit status 3: bgp: neighbor 10.0.0.1 down; Ready, uncordoned") {
		t.Fatalf("reason %q", n.Reason)
	}
	if got := e.nodes.nodes["node-1"]; got.version != "v1.36.3" || got.unschedulable {
		t.Fatalf("node-1 after the resumed rollback: %+v", got)
	}
	// The rollout carried on after the restart and stops for the node's
	// real failure.
	if got := e.wait(r.ID); got.State != core.RolloutFailed || !strings.Contains(got.Reason, "node node-1 rolled back") {
		t.Fatalf("rollout %s %q", got.State, got.Reason)
	}
}
