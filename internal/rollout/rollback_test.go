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
	n.ready, n.deleted = true, false
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
