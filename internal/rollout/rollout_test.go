package rollout

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/desired"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// These tests drive the engine with the real desired-state owner and
// store, a fake cluster (fakeNodes: what the API server would show) and
// fake agents that poll and report through the same calls the agents'
// HTTP endpoint makes. The real API server and the real agent are in the
// lab test (internal/app).

type fakeNode struct {
	version  string
	previous string // before the last upgrade: what a rollback restores
	// breaksOnUpgrade: the upgraded kubelet never gets Ready;
	// downAfterRollback: nor the one a rollback restored.
	breaksOnUpgrade, downAfterRollback bool
	rollbacks                          int
	ready                              bool
	unschedulable                      bool
	ours                               bool
	deleted                            bool
}

type fakeNodes struct {
	mu         sync.Mutex
	nodes      map[string]*fakeNode
	cordoned   int // now
	maxCordon  int // at once, ever
	log        []string
	drainBlock string // a drain of this node fails
	// drainGate, when set, holds the drain of gateNode until it is closed.
	gateNode  string
	drainGate chan struct{}
}

func (f *fakeNodes) Node(_ context.Context, _, node string) (NodeInfo, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.nodes[node]
	if !ok || n.deleted {
		return NodeInfo{}, false, nil
	}
	return NodeInfo{KubeletVersion: n.version, Ready: n.ready, Unschedulable: n.unschedulable}, true, nil
}

func (f *fakeNodes) Cordon(_ context.Context, _, node, _ string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.nodes[node]
	if !n.unschedulable {
		n.unschedulable, n.ours = true, true
		f.cordoned++
		f.maxCordon = max(f.maxCordon, f.cordoned)
	}
	f.log = append(f.log, "cordon "+node)
	return n.ours, nil
}

func (f *fakeNodes) Uncordon(_ context.Context, _, node string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.nodes[node]
	if n.unschedulable {
		n.unschedulable, n.ours = false, false
		f.cordoned--
	}
	f.log = append(f.log, "uncordon "+node)
	return nil
}

func (f *fakeNodes) Drain(_ context.Context, _, node string, _ time.Duration) error {
	f.mu.Lock()
	gate := f.drainGate
	if node != f.gateNode {
		gate = nil
	}
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, "drain "+node)
	if node == f.drainBlock {
		return fmt.Errorf("drain of node %s: eviction of pod default/web-1 blocked by PodDisruptionBudget web", node)
	}
	return nil
}

func (f *fakeNodes) WaitReady(ctx context.Context, _, node, version string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		f.mu.Lock()
		n := f.nodes[node]
		ok := n != nil && !n.deleted && n.ready && (version == "" || n.version == version)
		f.mu.Unlock()
		if ok {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("node %s not Ready at %s", node, version)
}

func (f *fakeNodes) DeleteNode(_ context.Context, _, node string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := f.nodes[node]; n != nil {
		if n.unschedulable {
			f.cordoned--
		}
		n.deleted = true
	}
	f.log = append(f.log, "delete "+node)
	return nil
}

type fakeMembers struct {
	mu      sync.Mutex
	left    []string
	revoked []string
}

func (m *fakeMembers) MemberLeft(_ context.Context, device, _ string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.left = append(m.left, device)
	return nil
}

func (m *fakeMembers) RevokeAgent(_ context.Context, device, _ string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.revoked = append(m.revoked, device)
	return nil
}

func (m *fakeMembers) ResetDevice(_ context.Context, device string) (core.Device, error) {
	return core.Device{ID: device}, nil
}

// credentialIsDevice: the fake agents' credential is their device ID.
type credentialIsDevice struct{}

func (credentialIsDevice) AuthenticateAgent(_ context.Context, cred string, _ netip.Addr) (string, error) {
	return cred, nil
}

type env struct {
	t       *testing.T
	st      core.Store
	nodes   *fakeNodes
	members *fakeMembers
	des     *desired.Service
	eng     *Engine
	// fail makes the agent fail a step: device -> step name.
	failMu sync.Mutex
	fail   map[string]string
	// stopAgents ends the fake agents.
	stopAgents context.CancelFunc
}

const cluster = "c1"

func device(i int) string { return fmt.Sprintf("02:00:00:00:00:%02x", i) }

// newEnv: a cluster of one control plane and workers workers at v1.36.3,
// each with an agent that upgrades its fake Node when told to.
func newEnv(t *testing.T, workers int) *env {
	return newEnvOver(t, storetest.Store(t), workers)
}

// newRerunningEnv is newEnv over a store that runs every transaction twice
// (storetest.Rerunning), as a store shared by several appliances may.
func newRerunningEnv(t *testing.T, workers int) *env {
	return newEnvOver(t, storetest.Rerunning(storetest.Store(t)), workers)
}

func newEnvOver(t *testing.T, st core.Store, workers int) *env {
	e := &env{t: t, st: st, nodes: &fakeNodes{nodes: map[string]*fakeNode{}}, members: &fakeMembers{}, fail: map[string]string{}}
	storetest.Update(t, e.st, func(tx core.Tx) error {
		if err := tx.Clusters().Put(core.Cluster{ID: cluster, Name: "prod", State: core.ClusterRunning}); err != nil {
			return err
		}
		if err := tx.Clusters().PutJoinState(cluster, core.JoinState{FirstControlPlane: device(0)}); err != nil {
			return err
		}
		for i := 0; i <= workers; i++ {
			role := "worker"
			if i == 0 {
				role = "control-plane"
			}
			id := device(i)
			if err := tx.Devices().Put(core.Device{ID: id, MAC: id, Kind: core.KindVM, State: core.StateJoined}); err != nil {
				return err
			}
			m := core.Membership{Device: id, Cluster: cluster, Role: role, State: core.StateJoined, NodeName: fmt.Sprintf("node-%d", i),
				Created: time.Unix(int64(i), 0)}
			if err := tx.Memberships().Put(m); err != nil {
				return err
			}
			if err := tx.Memberships().Enlist(cluster, id, role); err != nil {
				return err
			}
			e.nodes.nodes[m.NodeName] = &fakeNode{version: "v1.36.3", ready: true}
		}
		return nil
	})
	e.des = desired.New(e.st, desired.Options{Auth: credentialIsDevice{}})
	var err error
	e.eng, err = New(e.st, Options{Nodes: e.nodes, Agents: e.des, Members: e.members})
	if err != nil {
		t.Fatal(err)
	}
	e.startAgents(workers)
	return e
}

func (e *env) startAgents(workers int) {
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	e.stopAgents = cancel
	for i := 0; i <= workers; i++ {
		go e.agent(ctx, i)
	}
}

// agent polls its document and runs each step by reporting it, as the
// real agent does; kubeadm-upgrade moves its Node to the version.
func (e *env) agent(ctx context.Context, i int) {
	id := device(i)
	node := fmt.Sprintf("node-%d", i)
	addr := netip.MustParseAddr("10.99.0.10")
	for ctx.Err() == nil {
		time.Sleep(3 * time.Millisecond)
		doc, err := e.des.AgentDocument(ctx, id, addr)
		if err != nil || doc.Operation == nil {
			continue
		}
		op := doc.Operation
		for _, st := range op.Steps {
			if st.Action == core.ActionRollback && op.Kind != core.OpRollback {
				continue // only after a failure
			}
			rep := desired.Report{Operation: op.ID, Step: st.Name, State: core.StepRunning}
			if err := e.des.AgentReport(ctx, id, addr, rep); err != nil {
				break
			}
			e.failMu.Lock()
			failing := e.fail[id] == st.Name
			e.failMu.Unlock()
			if failing {
				rep.State, rep.ExitCode, rep.Output = core.StepFailed, 3, "snapshot of BGP state failed\nbgp: neighbor 10.0.0.1 down"
				e.des.AgentReport(ctx, id, addr, rep)
				for _, rb := range op.Steps {
					if rb.Action == core.ActionRollback {
						e.rollBack(ctx, id, node, op.ID, rb.Name)
					}
				}
				break
			}
			if st.Action == core.ActionRollback {
				e.rollBack(ctx, id, node, op.ID, st.Name)
				break
			}
			if st.Action == "join" { // a new registration of the same Node
				e.nodes.mu.Lock()
				e.nodes.nodes[node].deleted, e.nodes.nodes[node].ready = false, true
				e.nodes.nodes[node].unschedulable, e.nodes.nodes[node].ours = false, false
				e.nodes.mu.Unlock()
			}
			if st.Action == "kubeadm-upgrade" {
				e.nodes.mu.Lock()
				n := e.nodes.nodes[node]
				n.previous, n.version = n.version, st.Args["version"]
				if n.breaksOnUpgrade {
					n.ready = false
				}
				e.nodes.mu.Unlock()
			}
			rep.State, rep.Output = core.StepSucceeded, st.Action+" done"
			if e.des.AgentReport(ctx, id, addr, rep) != nil {
				break
			}
		}
	}
}

func (e *env) wait(id string) core.Rollout {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := e.eng.Wait(ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) start(spec Spec) core.Rollout {
	e.t.Helper()
	spec.By = "admin"
	if spec.Cluster == "" {
		spec.Cluster = cluster
	}
	r, err := e.eng.Start(context.Background(), spec)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func TestUpgradeOneNodeAtATimeControlPlaneFirst(t *testing.T) {
	e := newRerunningEnv(t, 3)
	r := e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2"})
	if len(r.Nodes) != 4 || r.Nodes[0].Device != device(0) || r.Nodes[0].Role != "control-plane" {
		t.Fatalf("plan is not the 4 nodes, control plane first: %+v", r.Nodes)
	}
	r = e.wait(r.ID)
	if r.State != core.RolloutSucceeded {
		t.Fatalf("rollout %s: %s", r.State, r.Reason)
	}
	for _, n := range r.Nodes {
		if n.Phase != core.NodeDone {
			t.Fatalf("node %+v", n)
		}
	}
	for name, n := range e.nodes.nodes {
		if n.version != "v1.37.2" || n.unschedulable {
			t.Fatalf("%s after the rollout: %+v", name, n)
		}
	}
	if e.nodes.maxCordon != 1 {
		t.Fatalf("%d nodes cordoned at once, want 1", e.nodes.maxCordon)
	}
	if !strings.HasPrefix(strings.Join(e.nodes.log, ","), "cordon node-0,drain node-0,uncordon node-0,") {
		t.Fatalf("control plane not first: %v", e.nodes.log)
	}
	// The first control plane ran kubeadm upgrade apply, the others node.
	for i, want := range []string{"apply", "node"} {
		d, _ := e.des.Get(device(i))
		if d.KubernetesVersion != "v1.37.2" || d.Operation.Steps[0].Args["phase"] != want {
			t.Fatalf("desired state of %s: %+v", device(i), d)
		}
	}
	// Running it again skips every node.
	r = e.wait(e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2"}).ID)
	if r.State != core.RolloutSucceeded || summary(r) != "4 skipped" {
		t.Fatalf("second rollout %s: %s", r.State, summary(r))
	}
}

func TestMaxUnavailable(t *testing.T) {
	e := newEnv(t, 6)
	r := e.wait(e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2", MaxUnavailable: 3}).ID)
	if r.State != core.RolloutSucceeded {
		t.Fatalf("rollout %s: %s", r.State, r.Reason)
	}
	if e.nodes.maxCordon > 3 || e.nodes.maxCordon < 2 {
		t.Fatalf("%d nodes cordoned at once with maxUnavailable 3", e.nodes.maxCordon)
	}
}

func TestBlockedDrainStopsTheRollout(t *testing.T) {
	e := newEnv(t, 3)
	e.nodes.drainBlock = "node-1"
	r := e.wait(e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2"}).ID)
	if r.State != core.RolloutFailed || !strings.Contains(r.Reason, "PodDisruptionBudget web") {
		t.Fatalf("rollout %s: %q", r.State, r.Reason)
	}
	if r.Nodes[1].Phase != core.NodeFailed || r.Nodes[2].Phase != core.NodePending || r.Nodes[3].Phase != core.NodePending {
		t.Fatalf("nodes after the failure: %+v", r.Nodes)
	}
	if !e.nodes.nodes["node-1"].unschedulable {
		t.Fatal("the failed node was uncordoned")
	}
	// Lifted: running it again continues where it stopped.
	e.nodes.drainBlock = ""
	r = e.wait(e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2"}).ID)
	if r.State != core.RolloutSucceeded || summary(r) != "3 done, 1 skipped" {
		t.Fatalf("rollout again %s: %s %s", r.State, r.Reason, summary(r))
	}
	if e.nodes.nodes["node-1"].unschedulable {
		t.Fatal("the node ztpd cordoned stayed cordoned")
	}
}

func TestFailingHookStopsTheRollout(t *testing.T) {
	e := newEnv(t, 2)
	storetest.Update(t, e.st, func(tx core.Tx) error {
		if err := tx.Images().Put(core.Image{SHA256: strings.Repeat("a", 64), Name: "snapshot-bgp", Kind: "file"}); err != nil {
			return err
		}
		return tx.Images().SetName("snapshot-bgp", strings.Repeat("a", 64))
	})
	e.fail[device(1)] = core.HookPreUpgrade
	r := e.wait(e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2", Hooks: map[string]string{core.HookPreUpgrade: "snapshot-bgp"}}).ID)
	if r.State != core.RolloutFailed || !strings.Contains(r.Reason, "pre_upgrade (hook) failed with exit status 3: bgp: neighbor 10.0.0.1 down") {
		t.Fatalf("rollout %s: %q", r.State, r.Reason)
	}
	if e.nodes.nodes["node-1"].version != "v1.36.3" || r.Nodes[2].Phase != core.NodePending {
		t.Fatalf("the rollout went past a failed hook: %+v", r.Nodes)
	}
	d, _ := e.des.Get(device(1))
	if st, _ := d.Operation.Step(core.HookPreUpgrade); st.State != core.StepFailed || !strings.Contains(st.Output, "snapshot") {
		t.Fatalf("hook step stored %+v", st)
	}
	// Told to continue past failed hooks: the other nodes are upgraded.
	r = e.wait(e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2", ContinueOnHookFailure: true,
		Hooks: map[string]string{core.HookPreUpgrade: "snapshot-bgp"}}).ID)
	if r.State != core.RolloutSucceeded || summary(r) != "1 done, 1 skipped, 1 failed" {
		t.Fatalf("continue on hook failure: %s %s", r.State, summary(r))
	}
}

func TestPauseResumeAbort(t *testing.T) {
	e := newEnv(t, 3)
	e.nodes.mu.Lock()
	e.nodes.drainBlock = ""
	e.nodes.mu.Unlock()
	r := e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2"})
	if _, err := e.eng.Pause(r.ID, "admin"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	got, _ := e.eng.Get(r.ID)
	done := 0
	for _, n := range got.Nodes {
		if n.Phase == core.NodeDone {
			done++
		}
	}
	if got.State != core.RolloutPaused || done > 1 {
		t.Fatalf("paused rollout %s with %d nodes done", got.State, done)
	}
	if _, err := e.eng.Pause(r.ID, "admin"); err == nil || core.KindOf(err) != core.KindState {
		t.Fatalf("pause of a paused rollout: %v", err)
	}
	if _, err := e.eng.Resume(r.ID, "admin"); err != nil {
		t.Fatal(err)
	}
	if r = e.wait(r.ID); r.State != core.RolloutSucceeded {
		t.Fatalf("resumed rollout %s: %s", r.State, r.Reason)
	}
	// Abort: no further node starts.
	r = e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.38.0"})
	if _, err := e.eng.Abort(r.ID, "admin"); err != nil {
		t.Fatal(err)
	}
	r = e.wait(r.ID)
	if r.State != core.RolloutAborted {
		t.Fatalf("aborted rollout %s", r.State)
	}
	pending := 0
	for _, n := range r.Nodes {
		if n.Phase == core.NodePending {
			pending++
		}
	}
	if pending < 3 {
		t.Fatalf("abort let nodes start: %s", summary(r))
	}
	if _, err := e.eng.Resume(r.ID, "admin"); err == nil {
		t.Fatal("an aborted rollout resumed")
	}
}

func TestRemoveAndStandalone(t *testing.T) {
	e := newEnv(t, 2)
	r := e.wait(e.start(Spec{Kind: core.RolloutRemove, Devices: []string{device(2)}}).ID)
	if r.State != core.RolloutSucceeded {
		t.Fatalf("remove: %s %s", r.State, r.Reason)
	}
	if !e.nodes.nodes["node-2"].deleted || len(e.members.left) != 1 || len(e.members.revoked) != 1 {
		t.Fatalf("removed node: %+v left %v revoked %v", e.nodes.nodes["node-2"], e.members.left, e.members.revoked)
	}
	d, _ := e.des.Get(device(2))
	if d.Operation.Kind != core.OpLeave || d.Operation.Steps[0].Action != "kube-reset" {
		t.Fatalf("leave operation %+v", d.Operation)
	}
	// Going standalone keeps the agent credential and records the mode.
	r = e.wait(e.start(Spec{Kind: core.RolloutRemove, Devices: []string{device(1)}, Mode: core.ModeStandalone}).ID)
	if r.State != core.RolloutSucceeded || len(e.members.revoked) != 1 {
		t.Fatalf("standalone: %s %s revoked %v", r.State, r.Reason, e.members.revoked)
	}
	if d, _ := e.des.Get(device(1)); d.Mode != core.ModeStandalone || d.Cluster != "" {
		t.Fatalf("desired state after going standalone: %+v", d)
	}
}

func TestOneRolloutPerCluster(t *testing.T) {
	e := newEnv(t, 1)
	e.nodes.drainBlock = "node-1"
	r := e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2"})
	_, err := e.eng.Start(context.Background(), Spec{Cluster: cluster, Kind: core.RolloutKubernetes, Target: "v1.37.2"})
	ended, _ := e.eng.Get(r.ID)
	if !ended.State.Ended() && (err == nil || core.KindOf(err) != core.KindState) {
		t.Fatalf("second rollout on a busy cluster: %v", err)
	}
	e.wait(r.ID)
	if _, err := e.eng.Start(context.Background(), Spec{Cluster: cluster, Kind: core.RolloutRemove, Devices: []string{"02:00:00:00:00:99"}}); err == nil {
		t.Fatal("a rollout over an unknown device started")
	}
}

func TestUnknownRollout(t *testing.T) {
	e := newEnv(t, 0)
	if _, err := e.eng.Get("ro-nope"); core.KindOf(err) != core.KindNotFound {
		t.Fatalf("unknown rollout: %v", err)
	}
}

func TestRolloutOfAnEmptyClusterSucceeds(t *testing.T) {
	e := newEnv(t, 0)
	storetest.Update(t, e.st, func(tx core.Tx) error {
		return tx.Clusters().Put(core.Cluster{ID: "c2", Name: "empty", State: core.ClusterRunning})
	})
	r := e.wait(e.start(Spec{Cluster: "c2", Kind: core.RolloutKubernetes, Target: "v1.37.2"}).ID)
	if r.State != core.RolloutSucceeded || len(r.Nodes) != 0 {
		t.Fatalf("rollout of an empty cluster: %s %s %d nodes", r.State, r.Reason, len(r.Nodes))
	}
}

// TestInvolved: a device is involved from the rollout's start until the
// engine finished its node; a node done, a device outside the rollout and
// every node of an ended rollout (even those it never started) are not.
// Upcoming are the nodes in flight and the next max_unavailable (1) to
// start.
func TestInvolved(t *testing.T) {
	e := newEnv(t, 4)
	gate := make(chan struct{})
	e.nodes.mu.Lock()
	e.nodes.gateNode, e.nodes.drainGate = "node-2", gate
	e.nodes.mu.Unlock()
	for i := 0; i <= 4; i++ {
		if e.eng.Involved(device(i)) {
			t.Fatalf("%s involved before any rollout", device(i))
		}
	}
	r := e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2"})
	for i := 0; i <= 4; i++ {
		if !e.eng.Involved(device(i)) {
			t.Fatalf("%s (pending) not involved once the rollout started", device(i))
		}
	}
	if e.eng.Involved("02:00:00:00:00:99") {
		t.Fatal("a device outside the rollout is involved")
	}
	// node-2 is held in its drain: nodes 0 and 1 are done by then.
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := e.eng.Get(r.ID)
		if got.Nodes[2].Phase == core.NodeCordoned {
			if got.Nodes[0].Phase != core.NodeDone || got.Nodes[1].Phase != core.NodeDone {
				t.Fatalf("nodes before node-2's drain: %+v", got.Nodes)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node-2 never reached its drain: %+v", got.Nodes)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i, want := range []bool{false, false, true, true, true} {
		if got := e.eng.Involved(device(i)); got != want {
			t.Fatalf("during node-2's drain: Involved(%s) = %v, want %v", device(i), got, want)
		}
	}
	for i, want := range []bool{false, false, true, true, false} {
		if got := e.eng.Upcoming(device(i)); got != want {
			t.Fatalf("during node-2's drain: Upcoming(%s) = %v, want %v", device(i), got, want)
		}
	}
	close(gate)
	if r = e.wait(r.ID); r.State != core.RolloutSucceeded {
		t.Fatalf("rollout %s: %s", r.State, r.Reason)
	}
	for i := 0; i <= 4; i++ {
		if e.eng.Involved(device(i)) || e.eng.Upcoming(device(i)) {
			t.Fatalf("%s involved or upcoming after the rollout ended", device(i))
		}
	}
	// A failed rollout lets go of the nodes it never started.
	e.nodes.mu.Lock()
	e.nodes.drainBlock = "node-1"
	e.nodes.mu.Unlock()
	r = e.wait(e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.38.0"}).ID)
	if r.State != core.RolloutFailed || r.Nodes[4].Phase != core.NodePending {
		t.Fatalf("rollout %s: %s", r.State, summary(r))
	}
	for i := 0; i <= 4; i++ {
		if e.eng.Involved(device(i)) || e.eng.Upcoming(device(i)) {
			t.Fatalf("%s involved or upcoming after the rollout failed", device(i))
		}
	}
}

func TestImageUpgradeOfASwitchInACluster(t *testing.T) {
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
	r := e.wait(e.start(Spec{Kind: core.RolloutImage, Target: "sonic-new", Devices: []string{device(1)}}).ID)
	if r.State != core.RolloutSucceeded {
		t.Fatalf("image rollout: %s %s", r.State, r.Reason)
	}
	if !strings.Contains(strings.Join(e.nodes.log, ","), "cordon node-1,drain node-1,delete node-1") {
		t.Fatalf("the switch was not drained and its Node deleted before the install: %v", e.nodes.log)
	}
	d, _ := e.des.Get(device(1))
	var steps []string
	for _, st := range d.Operation.Steps {
		steps = append(steps, st.Action)
	}
	if d.Image != "sonic-new" || strings.Join(steps, ",") != "sonic-install,reboot,join" || d.Operation.Steps[0].Args["sha256"] != sha {
		t.Fatalf("desired state after the image rollout: image %q steps %v", d.Image, steps)
	}
	if n := e.nodes.nodes["node-1"]; n.deleted || !n.ready {
		t.Fatalf("the switch's Node after rejoining: %+v", n)
	}
	if _, err := e.eng.Start(context.Background(), Spec{Cluster: cluster, Kind: core.RolloutImage, Target: "sonic-new", Devices: []string{device(0)}}); err == nil {
		t.Fatal("an image rollout over a VM started")
	}
}

func TestDeviceHooksApplyWhenTheRolloutNamesNone(t *testing.T) {
	e := newEnv(t, 2)
	storetest.Update(t, e.st, func(tx core.Tx) error {
		if err := tx.Images().Put(core.Image{SHA256: strings.Repeat("c", 64), Name: "drain-bgp", Kind: "file"}); err != nil {
			return err
		}
		return tx.Images().SetName("drain-bgp", strings.Repeat("c", 64))
	})
	if _, err := e.des.Set(context.Background(), "admin", device(2), desired.Change{Hooks: map[string]string{core.HookPreUpgrade: "drain-bgp"}}); err != nil {
		t.Fatal(err)
	}
	e.fail[device(2)] = core.HookPreUpgrade
	r := e.wait(e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2"}).ID)
	if r.State != core.RolloutFailed || !strings.Contains(r.Reason, "pre_upgrade (hook) failed") || r.Nodes[2].Device != device(2) {
		t.Fatalf("rollout with a device's own hook: %s %q", r.State, r.Reason)
	}
	d, _ := e.des.Get(device(1))
	if _, ok := d.Operation.Step(core.HookPreUpgrade); ok {
		t.Fatal("a device without hooks got one")
	}
}

// TestMetrics runs its transactions twice (storetest.Rerunning): a node
// is counted once it has committed, not per run.
func TestMetrics(t *testing.T) {
	e := newRerunningEnv(t, 1)
	before := metricValue(e.eng.metrics.rolloutsEnded.WithLabelValues("kubernetes", "succeeded"))
	done := metricValue(e.eng.metrics.nodesEnded.WithLabelValues("kubernetes", core.NodeDone))
	e.wait(e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2"}).ID)
	if got := metricValue(e.eng.metrics.rolloutsEnded.WithLabelValues("kubernetes", "succeeded")); got != before+1 {
		t.Fatalf("ztpd_rollouts_total{succeeded} %v, want %v", got, before+1)
	}
	if got := metricValue(e.eng.metrics.nodesEnded.WithLabelValues("kubernetes", core.NodeDone)); got != done+2 {
		t.Fatalf("ztpd_rollout_nodes_total{done} %v, want %v", got, done+2)
	}
	if got := metricValue(e.eng.metrics.rolloutsRunning); got < 0 {
		t.Fatalf("ztpd_rollouts_running %v", got)
	}
}

func metricValue(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

func TestSelectorPicksSwitchesByLabel(t *testing.T) {
	e := newEnv(t, 3)
	sha := strings.Repeat("d", 64)
	storetest.Update(t, e.st, func(tx core.Tx) error {
		for i := 1; i <= 3; i++ {
			d, err := tx.Devices().Get(device(i))
			if err != nil {
				return err
			}
			d.Kind = core.KindSONiC
			if i == 2 {
				d.Labels = map[string]string{"ztpd.io/hwsku": "as7712"}
			}
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
		}
		if err := tx.Images().Put(core.Image{SHA256: sha, Name: "sonic-as7712", Kind: "sonic-installer"}); err != nil {
			return err
		}
		return tx.Images().SetName("sonic-as7712", sha)
	})
	// Device 3's label is in its desired state, not its record.
	if _, err := e.des.Set(context.Background(), "admin", device(3), desired.Change{Labels: map[string]string{"ztpd.io/hwsku": "as7712"}}); err != nil {
		t.Fatal(err)
	}
	sel := map[string]string{"ztpd.io/hwsku": "as7712"}
	r := e.start(Spec{Kind: core.RolloutImage, Target: "sonic-as7712", Selector: sel})
	var got []string
	for _, n := range r.Nodes {
		got = append(got, n.Device)
	}
	if strings.Join(got, ",") != device(2)+","+device(3) || r.Selector["ztpd.io/hwsku"] != "as7712" {
		t.Fatalf("selected %v (selector %v)", got, r.Selector)
	}
	if r = e.wait(r.ID); r.State != core.RolloutSucceeded {
		t.Fatalf("rollout: %s %s", r.State, r.Reason)
	}
	if _, err := e.eng.Start(context.Background(), Spec{Cluster: cluster, Kind: core.RolloutImage, Target: "sonic-as7712",
		Selector: map[string]string{"ztpd.io/hwsku": "nope"}}); core.KindOf(err) != core.KindInvalid {
		t.Fatalf("a selector nothing matches: %v", err)
	}
}

// TestRolloutsBelongToTheirAppliance: with several appliances over one
// store, a restart resumes only the restarting appliance's rollouts, and
// AdoptOrphans takes over those of an appliance that is gone.
func TestRolloutsBelongToTheirAppliance(t *testing.T) {
	e := newRerunningEnv(t, 1) // the adoption's transaction may run twice
	storetest.Update(t, e.st, func(tx core.Tx) error {
		for _, a := range []string{"a1", "a2", "a3"} {
			err := tx.Rollouts().Put(core.Rollout{ID: "ro-" + a, Appliance: a, Cluster: cluster + a, Kind: core.RolloutKubernetes, State: core.RolloutRunning})
			if err != nil {
				return err
			}
		}
		return nil
	})
	eng, err := New(e.st, Options{Appliance: "a2", Nodes: e.nodes, Agents: e.des, Members: e.members})
	if err != nil {
		t.Fatal(err)
	}
	get := func(id string) core.Rollout {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := eng.Wait(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Its rollout (no nodes left) carries on to its end; the others'
	// are left to them.
	if get("ro-a2").State != core.RolloutSucceeded || get("ro-a1").State != core.RolloutRunning || get("ro-a3").State != core.RolloutRunning {
		t.Fatalf("after a2's restart: a1 %s a2 %s a3 %s", get("ro-a1").State, get("ro-a2").State, get("ro-a3").State)
	}
	if n, err := eng.AdoptOrphans(func(a string) bool { return a == "a1" || a == "a2" }); err != nil || n != 1 {
		t.Fatalf("orphans: %d %v", n, err)
	}
	if r := get("ro-a3"); r.State != core.RolloutSucceeded || r.Appliance != "a2" || get("ro-a1").State != core.RolloutRunning {
		t.Fatalf("after a3 went: a1 %s a3 %s (%s)", get("ro-a1").State, r.State, r.Appliance)
	}
}
