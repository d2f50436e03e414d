package rollout

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/desired"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// These tests stop ztpd (env.restart: the store closed under the old
// engine, reopened, a new engine and new agents) with a rollout in each
// phase, and check the new engine carries it to its end without anyone
// starting it again: every node upgraded, none left cordoned, and no
// operation handed to an agent twice.

// handed counts, per device, the operations handed to its agent for the
// rollout id (the desired-state owner records each one as an event).
func (e *env) handed(id string) map[string]int {
	e.t.Helper()
	got := map[string]int{}
	err := e.st.View(func(tx core.Tx) error {
		return tx.Events().List(core.StreamOf("desired.operation"), 0, func(ev core.Event) (bool, error) {
			if ev.Type == "desired.operation" && ev.Fields["rollout"] == id {
				got[ev.Device]++
			}
			return true, nil
		})
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

// checkDone: the rollout succeeded, every node is at the target and
// schedulable, and each device's agent was handed ops operations.
func (e *env) checkDone(r core.Rollout, target string, ops int) {
	e.t.Helper()
	if r.State != core.RolloutSucceeded {
		e.t.Fatalf("rollout %s %q: %s", r.State, r.Reason, summary(r))
	}
	e.nodes.mu.Lock()
	defer e.nodes.mu.Unlock()
	for name, n := range e.nodes.nodes {
		if n.unschedulable || (target != "" && n.version != target) || !n.ready {
			e.t.Errorf("%s after the rollout: %+v", name, *n)
		}
	}
	if e.nodes.cordoned != 0 {
		e.t.Errorf("%d nodes left cordoned", e.nodes.cordoned)
	}
	for _, n := range r.Nodes {
		if n.Phase != core.NodeDone {
			e.t.Errorf("node %s: %s %q", n.NodeName, n.Phase, n.Reason)
		}
	}
	handed := e.handed(r.ID)
	for _, n := range r.Nodes {
		if k := handed[n.Device]; k != ops {
			e.t.Errorf("device %s was handed %d operations, want %d", n.Device, k, ops)
		}
	}
}

// waitResumed waits for the rollout's end on the engine after a restart.
func (e *env) waitResumed(id string) core.Rollout {
	e.t.Helper()
	r := e.wait(id)
	if !r.State.Ended() {
		e.t.Fatalf("rollout %s not running after the restart", r.State)
	}
	return r
}

func TestRestartWithNodesPendingAndDraining(t *testing.T) {
	fx := storetest.Open(t)
	e := newEnvOver(t, fx.Store, 2)
	// The drain of the first worker holds: it stays cordoned, the other
	// worker pending, until ztpd stops.
	r := e.startHeldAtDrain(1)
	if got, _ := e.eng.Get(r.ID); got.Nodes[2].Phase != core.NodePending {
		t.Fatalf("node-2 before the restart: %+v", got.Nodes[2])
	}
	e = e.restart(fx, 2)
	e.checkDone(e.waitResumed(r.ID), "v1.37.2", 1)
}

func TestRestartWithAnOperationHandedNotStarted(t *testing.T) {
	fx := storetest.Open(t)
	e := newEnvOver(t, fx.Store, 1)
	e.stopAgents()
	r := e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2"})
	n := e.waitHanded(r.ID)
	if !e.eng.Involved(device(0)) || !e.eng.Upcoming(device(0)) {
		t.Fatal("the node in flight is not involved before the restart")
	}
	e = e.restart(fx, -1) // no agent yet: the engine's bookkeeping first
	if !e.eng.Involved(device(0)) || !e.eng.Involved(device(1)) {
		t.Fatal("the resumed rollout's nodes are not involved: their agents would poll slowly")
	}
	for deadline := time.Now().Add(5 * time.Second); !e.eng.Upcoming(device(0)); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the resumed node in flight is not upcoming: its agent would not poll fast")
		}
	}
	if op, _ := e.des.Operation(device(0)); op == nil || op.ID != n.Operation || op.State != core.StepPending {
		t.Fatalf("operation after the restart: %+v, want %s pending", op, n.Operation)
	}
	e.startAgents(1)
	r = e.waitResumed(r.ID)
	e.checkDone(r, "v1.37.2", 1)
	if r.Nodes[0].Operation != n.Operation {
		t.Fatalf("node-0 ran operation %s, want the one handed before the restart %s", r.Nodes[0].Operation, n.Operation)
	}
	if e.eng.Involved(device(0)) || e.eng.Upcoming(device(1)) {
		t.Fatal("nodes still involved after the rollout")
	}
}

func TestRestartWithAnOperationStarted(t *testing.T) {
	fx := storetest.Open(t)
	e := newEnvOver(t, fx.Store, 1)
	e.stopAgents()
	r := e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2"})
	n := e.waitHanded(r.ID)
	// The agent starts its first step, then ztpd stops.
	addr := netip.MustParseAddr("10.99.0.10")
	if err := e.des.AgentReport(context.Background(), device(0), addr,
		desired.Report{Operation: n.Operation, Step: "upgrade", State: core.StepRunning}); err != nil {
		t.Fatal(err)
	}
	e = e.restart(fx, 1)
	e.checkDone(e.waitResumed(r.ID), "v1.37.2", 1)
}

func TestRestartWhileAwaitingReady(t *testing.T) {
	fx := storetest.Open(t)
	e := newEnvOver(t, fx.Store, 1)
	e.nodes.mu.Lock()
	e.nodes.nodes["node-1"].breaksOnUpgrade = true
	e.nodes.mu.Unlock()
	r := e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2"})
	e.waitNode(r.ID, 1, "waiting for its Node", func(n core.RolloutNode) bool { return n.Phase == core.NodeWaiting })
	e = e.restart(fx, 1)
	time.Sleep(50 * time.Millisecond)
	if got, _ := e.eng.Get(r.ID); got.Nodes[1].Phase != core.NodeWaiting || got.State != core.RolloutRunning {
		t.Fatalf("node-1 before its Node is Ready: %s %+v", got.State, got.Nodes[1])
	}
	e.nodes.mu.Lock()
	e.nodes.nodes["node-1"].ready = true
	e.nodes.mu.Unlock()
	e.checkDone(e.waitResumed(r.ID), "v1.37.2", 1)
}

func TestRestartOfAPausedRollout(t *testing.T) {
	fx := storetest.Open(t)
	e := newEnvOver(t, fx.Store, 2)
	r := e.startHeldAtDrain(0)
	if _, err := e.eng.Pause(r.ID, "admin"); err != nil {
		t.Fatal(err)
	}
	e = e.restart(fx, 2)
	// The node underway finishes; nothing else starts while paused.
	e.waitNode(r.ID, 0, "done", func(n core.RolloutNode) bool { return n.Phase == core.NodeDone })
	time.Sleep(50 * time.Millisecond)
	got, _ := e.eng.Get(r.ID)
	if got.State != core.RolloutPaused || got.Nodes[1].Phase != core.NodePending || got.Nodes[2].Phase != core.NodePending {
		t.Fatalf("paused rollout after the restart: %s %s", got.State, summary(got))
	}
	if _, err := e.eng.Resume(r.ID, "admin"); err != nil {
		t.Fatal(err)
	}
	e.checkDone(e.waitResumed(r.ID), "v1.37.2", 1)
}

func TestRestartOfAnImageRolloutBetweenLeaveAndInstall(t *testing.T) {
	fx := storetest.Open(t)
	e := newEnvOver(t, fx.Store, 1)
	e.sonic(1)
	e.stopAgents()
	r := e.start(Spec{Kind: core.RolloutImage, Target: "sonic-new.bin", Devices: []string{device(1)}})
	// The leave is handed; ztpd stops before the agent runs it.
	e.waitNode(r.ID, 0, "handed its leave", func(n core.RolloutNode) bool { return n.Phase == core.NodeAgent })
	e = e.restart(fx, 1)
	r = e.waitResumed(r.ID)
	if r.State != core.RolloutSucceeded || r.Nodes[0].Phase != core.NodeDone {
		t.Fatalf("image rollout after the restart: %s %q %+v", r.State, r.Reason, r.Nodes[0])
	}
	// One leave, one install: neither handed again.
	if got := e.handed(r.ID)[device(1)]; got != 2 {
		t.Fatalf("%d operations handed to the switch, want 2", got)
	}
	if n := e.nodes.nodes["node-1"]; n.unschedulable || n.deleted || !n.ready {
		t.Fatalf("node-1 after the rollout: %+v", *n)
	}
}

// sonic makes device i a SONiC switch.
func (e *env) sonic(i int) {
	storetest.Update(e.t, e.st, func(tx core.Tx) error {
		d, err := tx.Devices().Get(device(i))
		if err != nil {
			return err
		}
		d.Kind = core.KindSONiC
		return tx.Devices().Put(d)
	})
}

// A node whose record names an operation its device no longer holds
// cannot be resumed safely: the rollout fails with why.
func TestRestartWithALostOperationFailsTheRollout(t *testing.T) {
	fx := storetest.Open(t)
	e := newEnvOver(t, fx.Store, 1)
	storetest.Update(t, e.st, func(tx core.Tx) error {
		return tx.Rollouts().Put(core.Rollout{ID: "ro-old", Cluster: cluster, Kind: core.RolloutKubernetes, State: core.RolloutRunning,
			MaxUnavailable: 1, StepTimeout: core.Duration(time.Minute),
			Nodes: []core.RolloutNode{{Device: device(1), NodeName: "node-1", Role: "worker", Phase: core.NodeAgent, Operation: "op-gone", Cordoned: true}}})
	})
	e = e.restart(fx, 1)
	r := e.waitResumed("ro-old")
	if r.State != core.RolloutFailed || !strings.Contains(r.Reason, "no longer holds the operation op-gone") {
		t.Fatalf("rollout %s %q", r.State, r.Reason)
	}
}

// newAppliance is another appliance's engine over e's store.
func (e *env) newAppliance(name string) *Engine {
	e.t.Helper()
	eng, err := New(e.st, Options{Appliance: name, Nodes: e.nodes, Agents: e.des, Members: e.members})
	if err != nil {
		e.t.Fatal(err)
	}
	return eng
}

// waitHanded waits until the rollout's first node has been handed its
// agent operation, and returns that node.
func (e *env) waitHanded(id string) core.RolloutNode {
	e.t.Helper()
	return e.waitNode(id, 0, "handed its operation", func(n core.RolloutNode) bool { return n.Phase == core.NodeAgent && n.Operation != "" })
}

// startOnA1 starts a rollout on appliance a1 with its agents stopped and
// returns once the first node's operation is handed.
func startOnA1(t *testing.T, e *env) core.Rollout {
	t.Helper()
	e.stopAgents()
	a1 := e.newAppliance("a1")
	r, err := a1.Start(context.Background(), Spec{Cluster: cluster, Kind: core.RolloutKubernetes, Target: "v1.37.2", By: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	e.eng = a1
	e.waitHanded(r.ID)
	return r
}

// startOnA1ThenLose starts a rollout on appliance a1 (startOnA1), stops a1
// (ztpd's store closed under it) and reopens the store without any engine
// resuming it.
func startOnA1ThenLose(t *testing.T, fx *storetest.Fixture, e *env) (core.Rollout, *env) {
	r := startOnA1(t, e)
	// The restart's engine is appliance "": a1's rollout is not its own.
	return r, e.restart(fx, 1)
}

func TestLeaderAdoptsAGoneAppliancesRollout(t *testing.T) {
	fx := storetest.Open(t)
	e := newEnvOver(t, fx.Store, 1)
	r, e := startOnA1ThenLose(t, fx, e)
	time.Sleep(30 * time.Millisecond)
	if got, _ := e.eng.Get(r.ID); got.State != core.RolloutRunning || got.Appliance != "a1" || got.Nodes[0].Phase != core.NodeAgent {
		t.Fatalf("a1's rollout before its adoption: %s %s %s", got.State, got.Appliance, summary(got))
	}
	b := e.newAppliance("b")
	alive := func(a string) bool { return a == "b" }
	if n, err := b.AdoptOrphans(alive); err != nil || n != 1 {
		t.Fatalf("adopted %d: %v", n, err)
	}
	if n, err := b.AdoptOrphans(alive); err != nil || n != 0 {
		t.Fatalf("adopted again %d: %v", n, err)
	}
	e.eng = b
	got := e.waitResumed(r.ID)
	if got.Appliance != "b" {
		t.Fatalf("adopted rollout's appliance %q", got.Appliance)
	}
	e.checkDone(got, "v1.37.2", 1)
}

func TestTwoLeadersRacingAdoptOnce(t *testing.T) {
	fx := storetest.Open(t)
	e := newEnvOver(t, fx.Store, 1)
	r, e := startOnA1ThenLose(t, fx, e)
	engines := []*Engine{e.newAppliance("b1"), e.newAppliance("b2")}
	alive := func(a string) bool { return a == "b1" || a == "b2" }
	took := make([]int, 2)
	var wg sync.WaitGroup
	for i, eng := range engines {
		wg.Go(func() {
			n, err := eng.AdoptOrphans(alive)
			if err != nil {
				t.Error(err)
			}
			took[i] = n
		})
	}
	wg.Wait()
	if took[0]+took[1] != 1 {
		t.Fatalf("adopted by b1 %d, by b2 %d: want exactly one", took[0], took[1])
	}
	winner := engines[0]
	if took[1] == 1 {
		winner = engines[1]
	}
	e.eng = winner
	got := e.waitResumed(r.ID)
	if want := fmt.Sprintf("b%d", 1+took[1]); got.Appliance != want {
		t.Fatalf("rollout's appliance %q, want %s", got.Appliance, want)
	}
	e.checkDone(got, "v1.37.2", 1)
	for i, eng := range engines {
		eng.mu.Lock()
		running := len(eng.runs)
		eng.mu.Unlock()
		if running != 0 {
			t.Fatalf("b%d still runs %d rollouts", i+1, running)
		}
	}
}

// The step timeout of an operation handed before a restart counts from
// when it was handed (the operation's record): a restart never extends it.
func TestRestartKeepsTheStepTimeout(t *testing.T) {
	fx := storetest.Open(t)
	e := newEnvOver(t, fx.Store, 0)
	e.stopAgents()
	r := e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2", StepTimeout: time.Minute})
	e.waitHanded(r.ID)
	// Handed an hour ago, as far as its record says: its minute is over.
	storetest.Update(t, e.st, func(tx core.Tx) error {
		d, err := tx.Desired().Get(device(0))
		if err != nil {
			return err
		}
		d.Operation.Created = d.Operation.Created.Add(-time.Hour)
		return tx.Desired().Put(d)
	})
	e = e.restart(fx, -1)
	// Within e.wait's 20s: a minute counted from the restart would not.
	got := e.waitResumed(r.ID)
	if got.State != core.RolloutFailed || !strings.Contains(got.Reason, "no result within 1m0s") {
		t.Fatalf("rollout %s %q", got.State, got.Reason)
	}
}

// A rollout waiting at its canary gate keeps waiting through a restart:
// for an approval, or soaking again (its checks ran in the stopped
// process).
func TestRestartAtTheGate(t *testing.T) {
	fx := storetest.Open(t)
	e := newEnvOver(t, fx.Store, 2)
	r := e.waitState(e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2", Canary: core.RolloutCanary{Count: 1}}).ID, core.RolloutPaused)
	e = e.restart(fx, 2)
	time.Sleep(50 * time.Millisecond)
	if got, _ := e.eng.Get(r.ID); got.State != core.RolloutPaused || got.GateStatus.Phase != core.GateApproval || got.Nodes[1].Phase != core.NodePending {
		t.Fatalf("at the gate after the restart: %s %+v %s", got.State, got.GateStatus, summary(got))
	}
	if _, err := e.eng.Approve(r.ID, "admin"); err != nil {
		t.Fatal(err)
	}
	e.checkDone(e.waitResumed(r.ID), "v1.37.2", 1)

	fx2 := storetest.Open(t)
	e = newEnvOver(t, fx2.Store, 2)
	r = e.start(Spec{Cluster: cluster, Kind: core.RolloutKubernetes, Target: "v1.36.3", Canary: core.RolloutCanary{Count: 1},
		Gate: core.RolloutGate{Mode: core.GateAuto, Soak: core.Duration(time.Hour)}})
	soaking := func(r core.Rollout) bool { return r.GateStatus != nil && r.GateStatus.Phase == core.GateSoaking }
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		got, _ := e.eng.Get(r.ID)
		if soaking(got) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never soaking: %s %+v", got.State, got.GateStatus)
		}
	}
	restarted := time.Now()
	e = e.restart(fx2, 2)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		got, _ := e.eng.Get(r.ID)
		if soaking(got) && got.GateStatus.Since.After(restarted) {
			if got.State != core.RolloutRunning || got.Nodes[1].Phase != core.NodePending {
				t.Fatalf("soaking again: %s %s", got.State, summary(got))
			}
			break
		}
		if time.Now().After(deadline) || got.State.Ended() {
			t.Fatalf("the gate is not soaking again after the restart: %s %q %+v", got.State, got.Reason, got.GateStatus)
		}
	}
	if _, err := e.eng.Abort(r.ID, "admin"); err != nil {
		t.Fatal(err)
	}
}

// An appliance taken for gone that still runs the rollout (it was cut
// off, or slow) stops once it sees the adopter's name on it: the adopter
// ends it, and the first records nothing of the node's outcome.
func TestTakenOverRunStops(t *testing.T) {
	e := newEnv(t, 1)
	r := startOnA1(t, e)
	a1 := e.eng
	b := e.newAppliance("b")
	if n, err := b.AdoptOrphans(func(a string) bool { return a == "b" }); err != nil || n != 1 {
		t.Fatalf("adopted %d: %v", n, err)
	}
	// a1 stops awaiting the operation (within one of its 2 s polls).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for a1.runningHere(r.ID) {
		if ctx.Err() != nil {
			t.Fatal("a1 still runs the rollout b adopted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got, _ := b.Get(r.ID); got.State != core.RolloutRunning || got.Nodes[0].Phase != core.NodeAgent {
		t.Fatalf("after a1 stopped: %s %s", got.State, summary(got))
	}
	e.startAgents(1)
	e.eng = b
	e.checkDone(e.waitResumed(r.ID), "v1.37.2", 1)
}

// startHeldAtDrain starts a Kubernetes rollout to v1.37.2 whose drain of
// node-<i> never ends, and waits until that node is cordoned.
func (e *env) startHeldAtDrain(i int) core.Rollout {
	e.t.Helper()
	e.nodes.mu.Lock()
	e.nodes.gateNode, e.nodes.drainGate = fmt.Sprintf("node-%d", i), make(chan struct{})
	e.nodes.mu.Unlock()
	r := e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2"})
	e.waitNode(r.ID, i, "cordoned", func(n core.RolloutNode) bool { return n.Phase == core.NodeCordoned })
	return r
}
