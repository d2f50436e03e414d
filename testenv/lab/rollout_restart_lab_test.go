package lab

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// restartAppliance stops the lab's ztpd, gracefully (SIGTERM, as an
// appliance upgrade does) or, with crash, by SIGKILL, and starts it again
// over the same data directory and configuration; the API key it was
// using still holds. The first run's output is kept as
// ztpd-before-restart.out.
func restartAppliance(t *testing.T, ctx context.Context, l *Lab, crash bool) {
	t.Helper()
	old := l.App
	if crash {
		old.Proc.Stop(0)
	} else {
		old.Close()
	}
	work := l.Topo.WorkDir
	if err := os.Rename(filepath.Join(work, "ztpd.out"), filepath.Join(work, "ztpd-before-restart.out")); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(old.Config)
	if err != nil {
		t.Fatal(err)
	}
	app, err := l.Topo.StartAppliance(ctx, old.Bin, string(cfg))
	if err != nil {
		t.Fatalf("ztpd after the restart: %v", err)
	}
	key, secret := old.key, old.secret
	*l.App = *app // in place: the lab's readers hold l.App
	l.App.key, l.App.secret = key, secret
}

// TestLabRolloutSurvivesARestart: one switch in a cluster with a VM; a
// SONiC image rollout of the switch started with ztpd's CLI. While the
// switch's agent runs the install (the operation handed out, the
// simulated sonic-installer already called), ztpd is stopped and started
// again. Nobody starts the rollout again: the restarted ztpd resumes it,
// awaits the operation it had handed (the agent finishes the install,
// reboots into the new image and rejoins while ztpd is down or back),
// waits for the switch's Node Ready and ends the rollout succeeded. The
// switch installed the image once, runs it, its Node is Ready and
// schedulable in the real API server, and the agent was never handed the
// install twice.
func TestLabRolloutSurvivesARestart(t *testing.T) {
	l, work := rolloutLabOf(t, "zrq", 214, Scenario{Switches: 1, VMs: 1, Clusters: 1, Upgrade: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sw := "sw0"
	root := filepath.Join(work, "devices", sw, "root")
	img := filepath.Join(work, "sonic-202411.bin")
	if err := os.WriteFile(img, []byte("# SONiC-OS-lab.202411 (lab image)\n"+strings.Repeat("x", 1<<16)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := l.App.CLI(ctx, "image", "add", img, "--kind", "sonic-installer", "--name", "sonic-202411.bin"); err != nil {
		t.Fatalf("ztpd image add: %v: %s", err, out)
	}
	var swMAC string
	for _, d := range l.Plan {
		if d.Name == sw {
			swMAC = d.MAC
		}
	}
	id := rolloutStart(ctx, t, l, "--kind", "image", "--target", "sonic-202411.bin", "--devices", swMAC, "--node-timeout", "3m")
	get := rolloutGetter(ctx, t, l, id)

	// ztpd stops as soon as the switch's agent runs the install.
	var before labRollout
	for {
		if strings.Contains(labCalls(work, sw), "sonic-installer install") {
			before = get()
			break
		}
		if r := get(); core.RolloutState(r.State).Ended() || ctx.Err() != nil {
			t.Fatalf("the rollout ended (or time ran out) before the install: %+v", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(before.Nodes) != 1 || before.Nodes[0].Phase != core.NodeAgent || before.Nodes[0].Operation == "" {
		t.Fatalf("at the restart: %+v, want the switch's node with its agent", before.Nodes)
	}
	handed := before.Nodes[0].Operation
	t.Logf("restarting ztpd: rollout %s, node %s %s, operation %s", before.State, before.Nodes[0].NodeName, before.Nodes[0].Phase, handed)
	restarted := time.Now()
	restartAppliance(t, ctx, l, false)
	t.Logf("ztpd back after %s", time.Since(restarted).Round(time.Millisecond))

	end := awaitRolloutEnd(ctx, t, get, work, "ztpd.out", "agent-"+sw+".out")
	t.Logf("rollout %s: %s %s", end.ID, end.State, end.Reason)
	t.Logf("agent %s:\n  %s", sw, strings.Join(agentLines(work, sw), "\n  "))
	calls := labCalls(work, sw)
	t.Logf("%s's calls:\n%s", sw, calls)
	if end.State != string(core.RolloutSucceeded) || len(end.Nodes) != 1 || end.Nodes[0].Phase != core.NodeDone {
		dumpLabLogs(t, work, "ztpd.out", "agent-"+sw+".out")
		t.Fatalf("after the restart: %s %q %+v, want succeeded with the switch done", end.State, end.Reason, end.Nodes)
	}
	n := end.Nodes[0]
	if n.Operation != handed {
		t.Errorf("the switch's node ended on operation %s, want the one handed before the restart %s", n.Operation, handed)
	}
	if k := strings.Count(calls, "sonic-installer install"); k != 1 {
		t.Errorf("the switch installed %d times, want once", k)
	}
	if cur, _ := os.ReadFile(filepath.Join(root, "host/lab-images/current")); strings.TrimSpace(string(cur)) != "SONiC-OS-lab.202411" {
		t.Errorf("the switch runs %q, want SONiC-OS-lab.202411", cur)
	}
	got := nodeInAPI(t, l, n.NodeName)
	t.Logf("  Node %s: %s Ready=%v unschedulable=%v", got.Name, got.Version, got.Ready, got.Unschedulable)
	if !got.Ready || got.Unschedulable {
		t.Errorf("switch Node %s: %+v, want Ready and schedulable", n.NodeName, got)
	}
	log, _ := os.ReadFile(filepath.Join(work, "ztpd.out"))
	if !strings.Contains(string(log), "resumed after a restart of ztpd") {
		t.Errorf("the restarted ztpd's log does not say it resumed the rollout")
	}
}

// TestLabKubernetesRolloutSurvivesACrash: a control plane and a worker at
// the version before the newest; a Kubernetes rollout to the newest
// started with ztpd's CLI. Once the control plane's agent has been handed
// its operation (kubeadm upgrade apply), ztpd is killed (SIGKILL, a crash)
// and started again. Nobody starts the rollout again: the restarted ztpd
// awaits the control plane's operation, waits for its Node Ready at the
// newest version, uncordons it, then does the worker; the rollout ends
// succeeded, both Nodes Ready and schedulable at the newest version in the
// real API server, and each node's kubeadm upgrade ran once.
func TestLabKubernetesRolloutSurvivesACrash(t *testing.T) {
	l, work := rolloutLab(t, "zrk", 218, 2)
	_, to, _ := UpgradeVersions()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	id := rolloutStart(ctx, t, l, "--kind", "kubernetes", "--target", l.UpgradeTo)
	get := rolloutGetter(ctx, t, l, id)
	var before labRollout
	for {
		before = get()
		if len(before.Nodes) > 0 && before.Nodes[0].Phase == core.NodeAgent && before.Nodes[0].Operation != "" {
			break
		}
		if core.RolloutState(before.State).Ended() || ctx.Err() != nil {
			t.Fatalf("the rollout ended (or time ran out) before the control plane's operation: %+v", before)
		}
		time.Sleep(20 * time.Millisecond)
	}
	phases := make([]string, len(before.Nodes))
	for i, n := range before.Nodes {
		phases[i] = n.NodeName + " " + n.Phase
	}
	t.Logf("killing ztpd: rollout %s, nodes %s", before.State, strings.Join(phases, ", "))
	restartAppliance(t, ctx, l, true)

	end := awaitRolloutEnd(ctx, t, get, work, "ztpd.out", "agent-vm0.out", "agent-vm1.out")
	t.Logf("rollout %s: %s %s", end.ID, end.State, end.Reason)
	for _, d := range []string{"vm0", "vm1"} {
		t.Logf("agent %s:\n  %s", d, strings.Join(agentLines(work, d), "\n  "))
	}
	if end.State != string(core.RolloutSucceeded) {
		dumpLabLogs(t, work, "ztpd.out")
		t.Fatalf("after the crash: %s %q, want succeeded", end.State, end.Reason)
	}
	if end.Nodes[0].Operation != before.Nodes[0].Operation {
		t.Errorf("the control plane ended on operation %s, want the one handed before the crash %s", end.Nodes[0].Operation, before.Nodes[0].Operation)
	}
	for _, n := range end.Nodes {
		if n.Phase != core.NodeDone {
			t.Errorf("node %s: %s (%s), want done", n.NodeName, n.Phase, n.Reason)
		}
		got := nodeInAPI(t, l, n.NodeName)
		t.Logf("  Node %s: %s Ready=%v unschedulable=%v", got.Name, got.Version, got.Ready, got.Unschedulable)
		if got.Version != to || !got.Ready || got.Unschedulable {
			t.Errorf("Node %s: %+v, want Ready and schedulable at %s", n.NodeName, got, to)
		}
	}
	for _, d := range []string{"vm0", "vm1"} {
		if k := strings.Count(labCalls(work, d), "kubeadm upgrade "); k != 1 {
			t.Errorf("%s ran kubeadm upgrade %s times, want once:\n%s", d, strconv.Itoa(k), labCalls(work, d))
		}
	}
	log, _ := os.ReadFile(filepath.Join(work, "ztpd.out"))
	if !strings.Contains(string(log), "resumed after a restart of ztpd") {
		t.Errorf("the restarted ztpd's log does not say it resumed the rollout")
	}
}

// awaitRolloutEnd polls get until the rollout has ended; when ctx ends
// first it dumps the named lab logs and fails the test.
func awaitRolloutEnd(ctx context.Context, t *testing.T, get func() labRollout, work string, logs ...string) labRollout {
	t.Helper()
	for {
		end := get()
		if core.RolloutState(end.State).Ended() {
			return end
		}
		if ctx.Err() != nil {
			dumpLabLogs(t, work, logs...)
			t.Fatalf("the rollout did not end after the restart: %+v", end)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
