package rollout

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// predictingNodes is fakeNodes that also predicts drain blocks and
// shows crash looping pods, as KubeNodes reads them from the API server.
type predictingNodes struct {
	*fakeNodes
	blocks  map[string][]DrainBlock
	crashes map[string][]string
}

func (p *predictingNodes) DrainBlockers(_ context.Context, _ string, nodes []string) (map[string][]DrainBlock, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string][]DrainBlock{}
	for _, n := range nodes {
		if b := p.blocks[n]; b != nil {
			out[n] = b
		}
	}
	return out, nil
}

// CrashLooping: the pods in crashes crash loop once the Node runs
// v1.37.2; "default/old-crash" crash loops on node-0 all along.
func (p *predictingNodes) CrashLooping(_ context.Context, _, node string) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := []string{}
	if node == "node-0" {
		out = append(out, "default/old-crash")
	}
	if n := p.nodes[node]; n != nil && n.version == "v1.37.2" {
		out = append(out, p.crashes[node]...)
	}
	return out, nil
}

// waitState waits until the rollout is in state.
func (e *env) waitState(id string, state core.RolloutState) core.Rollout {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := e.eng.Get(id)
		if err != nil {
			e.t.Fatal(err)
		}
		if r.State == state {
			return r
		}
		if time.Now().After(deadline) || r.State.Ended() {
			e.t.Fatalf("rollout %s %q, want %s", r.State, r.Reason, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// predicting swaps the engine's NodeOps for predictingNodes over the same
// fake cluster.
func (e *env) predicting(opts func(*Options)) *predictingNodes {
	e.t.Helper()
	p := &predictingNodes{fakeNodes: e.nodes, blocks: map[string][]DrainBlock{}, crashes: map[string][]string{}}
	o := Options{Nodes: p, Agents: e.des, Members: e.members, GateInterval: 10 * time.Millisecond, GonePoll: 20 * time.Millisecond}
	if opts != nil {
		opts(&o)
	}
	var err error
	if e.eng, err = New(e.st, o); err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *env) addHookImage(name string) {
	storetest.Update(e.t, e.st, func(tx core.Tx) error {
		sha := strings.Repeat("c", 64)
		if err := tx.Images().Put(core.Image{SHA256: sha, Name: name, Kind: "file"}); err != nil {
			return err
		}
		return tx.Images().SetName(name, sha)
	})
}

func planNames(p Plan) [][]string {
	var out [][]string
	for _, b := range p.Batches {
		var names []string
		for _, n := range b.Nodes {
			names = append(names, n.NodeName)
		}
		out = append(out, names)
	}
	return out
}

// TestPlanIsWhatTheRolloutDoes: the plan's batches, skips (at target,
// manualupgrade, not selected), hooks, drain blocks and estimate; the
// rollout started from its fingerprint goes in the plan's order and meets
// the predicted PodDisruptionBudget block.
func TestPlanIsWhatTheRolloutDoes(t *testing.T) {
	e := newEnv(t, 5)
	p := e.predicting(nil)
	e.addHookImage("check-bgp")
	storetest.Update(t, e.st, func(tx core.Tx) error {
		c, err := tx.Clusters().Get(cluster)
		if err != nil {
			return err
		}
		c.ManualUpgrade = []string{device(5)}
		return tx.Clusters().Put(c)
	})
	e.nodes.nodes["node-2"].version = "v1.37.2"
	p.blocks["node-4"] = []DrainBlock{{Pod: "default/web-1", Budget: "web"}}
	e.nodes.drainBlock = "node-4"
	spec := Spec{Cluster: cluster, Kind: core.RolloutKubernetes, Target: "v1.37.2", MaxUnavailable: 2,
		Hooks: map[string]string{core.HookPostUpgrade: "check-bgp"}, Canary: core.RolloutCanary{Count: 2}}
	plan, err := e.eng.Plan(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if got := planNames(plan); !slices.EqualFunc(got, [][]string{{"node-0"}, {"node-1"}, {"node-3", "node-4"}}, slices.Equal) {
		t.Fatalf("batches %v", got)
	}
	if !plan.Batches[0].Canary || !plan.Batches[1].Canary || plan.Batches[2].Canary {
		t.Fatalf("canary batches: %+v", plan.Batches)
	}
	n1 := plan.Batches[1].Nodes[0]
	if n1.Current != "v1.36.3" || n1.Target != "v1.37.2" || n1.Hooks[core.HookPostUpgrade] != "check-bgp" ||
		strings.Join(n1.Steps, ",") != "cordon,drain,kubeadm upgrade node,post_upgrade hook check-bgp,wait Ready at v1.37.2,uncordon" {
		t.Fatalf("node-1 in the plan: %+v", n1)
	}
	if b := plan.Batches[2].Nodes[1].Blocks; len(b) != 1 || b[0].Budget != "web" {
		t.Fatalf("node-4's predicted drain blocks: %+v", b)
	}
	skips := map[string]string{}
	for _, n := range plan.Skipped {
		skips[n.NodeName] = n.Skip
	}
	if skips["node-2"] != SkipAtTarget || skips["node-5"] != clusters.ManualUpgradeReason || len(skips) != 2 {
		t.Fatalf("skipped %v", skips)
	}
	if plan.Estimate != 0 || plan.Fingerprint == "" {
		t.Fatalf("estimate with nothing measured %s, fingerprint %q", plan.Estimate, plan.Fingerprint)
	}
	again, _ := e.eng.Plan(context.Background(), spec)
	if again.Fingerprint != plan.Fingerprint {
		t.Fatal("the same cluster planned twice has two fingerprints")
	}

	spec.Fingerprint, spec.By = plan.Fingerprint, "admin"
	spec.Gate = core.RolloutGate{Mode: core.GateAuto}
	if _, err := e.eng.Start(context.Background(), spec); core.KindOf(err) != core.KindConflict {
		t.Fatalf("a start whose gate differs from the plan's: %v", err)
	}
	spec.Gate = core.RolloutGate{}
	r, err := e.eng.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if r.Fingerprint != plan.Fingerprint {
		t.Fatalf("the rollout's fingerprint %s, the plan's %s", r.Fingerprint, plan.Fingerprint)
	}
	r = e.waitState(r.ID, core.RolloutPaused)
	if r.State != core.RolloutPaused || r.GateStatus.Phase != core.GateApproval {
		t.Fatalf("after the canary: %s %q gate %+v", r.State, r.Reason, r.GateStatus)
	}
	if _, err := e.eng.Approve(r.ID, "admin"); err != nil {
		t.Fatal(err)
	}
	r = e.wait(r.ID)
	if r.State != core.RolloutFailed || !strings.Contains(r.Reason, "node-4") || !strings.Contains(r.Reason, "PodDisruptionBudget web") {
		t.Fatalf("the rollout did not meet the predicted block: %s %q", r.State, r.Reason)
	}
	var order []string
	for _, l := range e.nodes.log {
		if strings.HasPrefix(l, "cordon ") {
			order = append(order, strings.TrimPrefix(l, "cordon "))
		}
	}
	if !slices.Equal(order[:2], []string{"node-0", "node-1"}) || len(order) != 4 || !slices.Contains(order, "node-3") {
		t.Fatalf("cordon order %v, the plan %v", order, planNames(plan))
	}

	// Measured now: the next plan estimates from those nodes' times.
	e.nodes.drainBlock = ""
	plan, err = e.eng.Plan(context.Background(), Spec{Cluster: cluster, Kind: core.RolloutKubernetes, Target: "v1.37.2"})
	if err != nil || plan.Estimate <= 0 || !strings.Contains(plan.EstimateBasis, "measured") {
		t.Fatalf("estimate after a rollout: %s (%s) %v", plan.Estimate, plan.EstimateBasis, err)
	}
}

// TestStartRefusedWhenTheClusterChanged: a Node's version changed since
// the plan: the start with its fingerprint is refused, saying so.
func TestStartRefusedWhenTheClusterChanged(t *testing.T) {
	e := newEnv(t, 2)
	spec := Spec{Cluster: cluster, Kind: core.RolloutKubernetes, Target: "v1.37.2", By: "admin"}
	plan, err := e.eng.Plan(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	e.nodes.mu.Lock()
	e.nodes.nodes["node-1"].ready = false
	e.nodes.mu.Unlock()
	spec.Fingerprint = plan.Fingerprint
	_, err = e.eng.Start(context.Background(), spec)
	if core.KindOf(err) != core.KindConflict || !strings.Contains(err.Error(), "changed since the plan") {
		t.Fatalf("start after a change: %v", err)
	}
	if n := 0; e.eng.List(func(core.Rollout) bool { n++; return true }) != nil || n != 0 {
		t.Fatal("a refused start stored a rollout")
	}
}

// TestSkewRulesRefuseTheRollout: a worker upgraded past a control plane
// left out, two minor versions at once, a downgrade.
func TestSkewRulesRefuseTheRollout(t *testing.T) {
	e := newEnv(t, 2)
	for _, c := range []struct {
		name, target string
		devices      []string
		want         string
	}{
		{"worker before its control plane", "v1.37.2", []string{device(1)}, "newer than the API server of node-0"},
		{"two minors at once", "v1.38.0", nil, "one minor version at a time"},
		{"downgrade", "v1.35.0", nil, "does not downgrade"},
	} {
		_, err := e.eng.Start(context.Background(), Spec{Cluster: cluster, Kind: core.RolloutKubernetes, Target: c.target, Devices: c.devices, By: "admin"})
		if core.KindOf(err) != core.KindState || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.name, err)
		}
		if _, err := e.eng.Plan(context.Background(), Spec{Cluster: cluster, Kind: core.RolloutKubernetes, Target: c.target, Devices: c.devices}); err == nil {
			t.Errorf("%s: planned", c.name)
		}
	}
	// A kubelet left three minors behind is within the policy; the
	// control plane first is too.
	e.nodes.nodes["node-2"].version = "v1.34.1"
	if _, err := e.eng.Plan(context.Background(), Spec{Cluster: cluster, Kind: core.RolloutKubernetes, Target: "v1.37.2", Devices: []string{device(0)}}); err != nil {
		t.Fatal(err)
	}
	e.nodes.nodes["node-2"].version = "v1.33.1"
	if _, err := e.eng.Plan(context.Background(), Spec{Cluster: cluster, Kind: core.RolloutKubernetes, Target: "v1.37.2", Devices: []string{device(0)}}); err == nil ||
		!strings.Contains(err.Error(), "more than 3 minor versions older") {
		t.Fatalf("a kubelet four minors behind: %v", err)
	}
}

// TestCanaryAutoGatePasses: the canary, the checks for the soak time
// (the Nodes Ready, no crash loops, the post hooks, the operator URL),
// then the others.
func TestCanaryAutoGatePasses(t *testing.T) {
	e := newEnv(t, 4)
	e.predicting(nil)
	e.addHookImage("check-bgp")
	var calls int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { calls++ }))
	defer srv.Close()
	storetest.Update(t, e.st, func(tx core.Tx) error {
		d, _ := tx.Devices().Get(device(2))
		d.Labels = map[string]string{"canary": "yes"}
		return tx.Devices().Put(d)
	})
	r := e.wait(e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2", MaxUnavailable: 2,
		Hooks:  map[string]string{core.HookPostUpgrade: "check-bgp"},
		Canary: core.RolloutCanary{Selector: map[string]string{"canary": "yes"}},
		Gate:   core.RolloutGate{Mode: core.GateAuto, Soak: core.Duration(100 * time.Millisecond), URL: srv.URL}}).ID)
	if r.State != core.RolloutSucceeded || r.GateStatus.Phase != core.GatePassed {
		t.Fatalf("rollout %s %q, gate %+v", r.State, r.Reason, r.GateStatus)
	}
	if r.Nodes[0].NodeName != "node-0" || r.Nodes[1].NodeName != "node-2" || !r.Nodes[1].Canary || r.Nodes[2].Canary {
		t.Fatalf("canary order: %+v", r.Nodes)
	}
	var names []string
	for _, c := range r.GateStatus.Checks {
		if !c.OK {
			t.Fatalf("check %+v", c)
		}
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != "nodes-ready,no-crashloops,post-hooks,url" || calls < 2 {
		t.Fatalf("checks %v, URL asked %d times", names, calls)
	}
	// node-2 (the canary) was done before any other worker started.
	log := strings.Join(e.nodes.log, ",")
	if i := strings.Index(log, "uncordon node-2"); i < 0 || strings.Contains(log[:i], "cordon node-1") {
		t.Fatalf("a worker went before the canary passed: %v", e.nodes.log)
	}
}

// TestCanaryGateFailureStopsTheRollout: a post hook that failed on the
// canary (the rollout told to go on past failed hooks), a pod crash
// looping on it, an operator URL that answers 500 or hangs, a script
// that exits 1: each fails the gate and the rollout stops before the
// other nodes.
func TestCanaryGateFailureStopsTheRollout(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hang":
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		default:
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	scripts := t.TempDir()
	if err := os.WriteFile(filepath.Join(scripts, "check.sh"), []byte("#!/bin/sh\necho \"bgp down on $ZTPD_CANARY_NODES\"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		setup func(e *env, p *predictingNodes, spec *Spec)
		want  string
	}{
		{"post hook", func(e *env, _ *predictingNodes, spec *Spec) {
			e.addHookImage("check-bgp")
			spec.Hooks, spec.ContinueOnHookFailure = map[string]string{core.HookPostUpgrade: "check-bgp"}, true
			e.fail[device(0)] = core.HookPostUpgrade
		}, "post_upgrade hook on node-0: failed, exit status 3"},
		{"crash loop", func(_ *env, p *predictingNodes, _ *Spec) {
			p.crashes["node-0"] = []string{"kube-system/bgp-agent-x"}
		}, "no-crashloops: kube-system/bgp-agent-x crash loops on node-0"},
		{"url 500", func(_ *env, _ *predictingNodes, spec *Spec) { spec.Gate.URL = srv.URL + "/check" }, "url: answered 500"},
		{"url hangs", func(_ *env, _ *predictingNodes, spec *Spec) {
			spec.Gate.URL, spec.Gate.Timeout = srv.URL+"/hang", core.Duration(200*time.Millisecond)
		}, "url: no answer within 200ms"},
		{"script", func(_ *env, _ *predictingNodes, spec *Spec) { spec.Gate.Script = "check.sh" }, "script: check.sh: exit status 1: bgp down on node-0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 3)
			p := e.predicting(func(o *Options) { o.GateScripts = scripts })
			spec := Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2", Canary: core.RolloutCanary{Count: 1},
				Gate: core.RolloutGate{Mode: core.GateAuto, Soak: core.Duration(time.Second)}}
			c.setup(e, p, &spec)
			r := e.wait(e.start(spec).ID)
			if r.State != core.RolloutFailed || !strings.Contains(r.Reason, "canary gate failed") || !strings.Contains(r.Reason, c.want) {
				t.Fatalf("rollout %s %q", r.State, r.Reason)
			}
			if r.GateStatus.Phase != core.GateFailed {
				t.Fatalf("gate %+v", r.GateStatus)
			}
			for _, n := range r.Nodes[1:] {
				if n.Phase != core.NodePending {
					t.Fatalf("a node past the failed gate: %+v", r.Nodes)
				}
			}
		})
	}
}

// TestResumeApprovesAWaitingGate, and an abort at the gate leaves the
// others untouched.
func TestResumeApprovesAWaitingGate(t *testing.T) {
	e := newEnv(t, 2)
	r := e.waitState(e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2", Canary: core.RolloutCanary{Count: 1}}).ID, core.RolloutPaused)
	if r.State != core.RolloutPaused || r.Nodes[0].Phase != core.NodeDone || r.Nodes[1].Phase != core.NodePending {
		t.Fatalf("at the gate: %s %+v", r.State, r.Nodes)
	}
	if _, err := e.eng.Approve(r.ID, "admin"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.eng.Approve(r.ID, "admin"); core.KindOf(err) != core.KindState {
		t.Fatalf("approved twice: %v", err)
	}
	r = e.wait(r.ID)
	if r.State != core.RolloutSucceeded || r.GateStatus.Phase != core.GateApproved || r.GateStatus.By != "admin" {
		t.Fatalf("after the approval: %s %+v", r.State, r.GateStatus)
	}
	if _, err := e.eng.Start(context.Background(), Spec{Cluster: cluster, Kind: core.RolloutKubernetes, Target: "v1.37.2",
		Gate: core.RolloutGate{Mode: core.GateAuto}}); core.KindOf(err) != core.KindInvalid {
		t.Fatalf("a gate without a canary: %v", err)
	}
	if _, err := e.eng.Start(context.Background(), Spec{Cluster: cluster, Kind: core.RolloutKubernetes, Target: "v1.37.2",
		Canary: core.RolloutCanary{Count: 1}, Gate: core.RolloutGate{Mode: core.GateAuto, Script: "../../bin/sh"}}); core.KindOf(err) != core.KindInvalid {
		t.Fatalf("a gate script outside the directory: %v", err)
	}
}

// TestNodeThatDisappearsIsReported: a Node deleted while its agent works
// fails the node at once (not after the step timeout) and stops the
// rollout.
func TestNodeThatDisappearsIsReported(t *testing.T) {
	e := newEnv(t, 2)
	e.predicting(nil)
	e.nodes.gateNode, e.nodes.drainGate = "node-1", make(chan struct{})
	r := e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2", StepTimeout: time.Hour})
	// node-1's drain held: its device's agent goes away with its Node.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		cur, _ := e.eng.Get(r.ID)
		if cur.Nodes[1].Phase == core.NodeCordoned {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node-1 never cordoned: %+v", cur.Nodes)
		}
	}
	e.nodes.mu.Lock()
	e.nodes.nodes["node-1"].deleted = true
	e.nodes.mu.Unlock()
	close(e.nodes.drainGate)
	// e.wait gives up after 20s: far less than the step timeout (1h) the
	// node would otherwise be waited for.
	r = e.wait(r.ID)
	if r.State != core.RolloutFailed || !strings.Contains(r.Reason, "Node node-1 disappeared from the cluster") {
		t.Fatalf("rollout %s %q", r.State, r.Reason)
	}
}

// TestTwoRolloutsOverOneSwitchAreRefused: standalone switches (no
// cluster) are refused a second rollout while one runs over them.
func TestTwoRolloutsOverOneSwitchAreRefused(t *testing.T) {
	e := newEnv(t, 2)
	sha := strings.Repeat("b", 64)
	storetest.Update(t, e.st, func(tx core.Tx) error {
		for _, i := range []int{1, 2} {
			d, _ := tx.Devices().Get(device(i))
			d.Kind = core.KindSONiC
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
			m, _ := tx.Memberships().Get(device(i))
			m.State = core.StateLeft
			if err := tx.Memberships().Put(m); err != nil {
				return err
			}
		}
		if err := tx.Images().Put(core.Image{SHA256: sha, Name: "sonic-new", Kind: "sonic-installer"}); err != nil {
			return err
		}
		return tx.Images().SetName("sonic-new", sha)
	})
	e.nodes.gateNode = "none"
	e.fail[device(1)] = "install"
	first, err := e.eng.Start(context.Background(), Spec{Kind: core.RolloutImage, Target: "sonic-new", Devices: []string{device(1), device(2)},
		Canary: core.RolloutCanary{Count: 1}, By: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.eng.Start(context.Background(), Spec{Kind: core.RolloutImage, Target: "sonic-new", Devices: []string{device(2)}, By: "admin"})
	if core.KindOf(err) != core.KindState || !strings.Contains(err.Error(), "over device "+device(2)) {
		t.Fatalf("a second rollout over %s: %v", device(2), err)
	}
	e.eng.Abort(first.ID, "admin")
	e.wait(first.ID)
}
