package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/testenv/kubebin"
)

// The day-2 rollouts end to end: one real cluster in the lab at the
// Kubernetes version before the newest, every device's real agent (the
// python script its join bundle installed) polling ztpd from its
// namespace, simulated kubeadm, systemctl and kubelets (upgrade.go), and a
// rollout started with ztpd's CLI as an operator would.

// rolloutLab opens a lab of vms VMs in one cluster, prepared for an
// upgrade it leaves to the test (Options.UpgradeByHand).
func rolloutLab(t *testing.T, prefix string, octet, vms int) (*Lab, string) {
	return rolloutLabOf(t, prefix, octet, Scenario{VMs: vms, Clusters: 1, Upgrade: true})
}

func rolloutLabOf(t *testing.T, prefix string, octet int, s Scenario) (*Lab, string) {
	t.Helper()
	bin, ksim := requireLabFleet(t)
	from, _, err := UpgradeVersions()
	if err != nil {
		t.Skip(err)
	}
	kubebin.Require(t, from)
	work := t.TempDir()
	var log strings.Builder
	l, err := Open(context.Background(), s,
		Options{Prefix: prefix, Octet: octet, WorkDir: work, Bin: bin, Kubeletsim: ksim, Out: &log,
			Timeout: 5 * time.Minute, UpgradeByHand: true})
	if l != nil {
		t.Cleanup(func() { l.Close() })
	}
	if err != nil {
		t.Log("progress:\n" + tail(log.String(), 4000))
		dumpLabLogs(t, work, "ztpd.out")
		t.Fatal(err)
	}
	return l, work
}

func dumpLabLogs(t *testing.T, work string, names ...string) {
	t.Helper()
	for _, f := range names {
		if b, err := os.ReadFile(filepath.Join(work, f)); err == nil {
			t.Logf("%s (tail):\n%s", f, tail(string(b), 3000))
		}
	}
}

// labRollout is a rollout as GET /api/v1/rollouts/{id} answers it.
type labRollout struct {
	ID         string             `json:"id"`
	State      string             `json:"state"`
	Reason     string             `json:"reason"`
	GateStatus *core.GateStatus   `json:"gate_status"`
	Nodes      []core.RolloutNode `json:"nodes"`
}

// runRollout starts a Kubernetes rollout of the lab's cluster to the
// upgrade's version with ztpd's CLI and extra flags, follows it until it
// ended (each node's phases, as the lab's table shows them) and returns
// what the lab saw and the rollout's record at the end.
func runRollout(t *testing.T, l *Lab, extra ...string) (RolloutResult, labRollout) {
	t.Helper()
	return startRollout(t, l, append([]string{"--kind", "kubernetes", "--target", l.UpgradeTo}, extra...)...)
}

// rolloutStart starts a rollout of the lab's cluster with `ztpd rollout
// start` and flags, and returns its ID.
func rolloutStart(ctx context.Context, t *testing.T, l *Lab, flags ...string) string {
	t.Helper()
	args := append([]string{"rollout", "start", "--cluster", l.Result.Clusters[0].Name, "-o", "json"}, flags...)
	out, err := l.ZTPD(ctx, args...)
	if err != nil {
		t.Fatalf("ztpd %s: %v: %s", strings.Join(args, " "), err, out)
	}
	var started struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(out, &started); err != nil || started.ID == "" {
		t.Fatalf("ztpd rollout start answered %s (%v)", out, err)
	}
	t.Logf("$ ztpd %s\n  started %s", strings.Join(args, " "), started.ID)
	return started.ID
}

// rolloutGetter reads rollout id through the REST API; a failed read is
// logged and reads as the zero rollout.
func rolloutGetter(ctx context.Context, t *testing.T, l *Lab, id string) func() labRollout {
	return func() labRollout {
		var r labRollout
		if err := l.App.REST(ctx, "/api/v1/rollouts/"+url.PathEscape(id), nil, &r); err != nil {
			t.Logf("GET rollout: %v", err)
		}
		return r
	}
}

// startRollout starts a rollout of the lab's cluster with ztpd rollout
// start and flags, and follows it as runRollout does.
func startRollout(t *testing.T, l *Lab, flags ...string) (RolloutResult, labRollout) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	since := time.Now().Add(-time.Second)
	id := rolloutStart(ctx, t, l, flags...)
	var end labRollout
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for ctx.Err() == nil {
			var r labRollout
			if err := l.App.REST(ctx, "/api/v1/rollouts/"+url.PathEscape(id), nil, &r); err == nil {
				end = r
				if core.RolloutState(r.State).Ended() {
					return
				}
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()
	seen := l.follow(ctx, since, ended)
	<-ended
	if ctx.Err() != nil {
		dumpLabLogs(t, l.Topo.WorkDir, "ztpd.out", "agent-vm1.out")
		t.Fatalf("rollout %s did not end within 6 minutes: %+v", id, end)
	}
	var res RolloutResult
	for _, r := range seen {
		if r.ID == id {
			res = r
		}
	}
	t.Logf("rollout %s: %s %s", end.ID, end.State, end.Reason)
	if g := end.GateStatus; g != nil {
		t.Logf("  gate %s: %s", g.Phase, g.Reason)
		for _, c := range g.Checks {
			t.Logf("    check %s ok=%v %s", c.Name, c.OK, c.Detail)
		}
	}
	for _, n := range res.Nodes {
		t.Logf("  %s (%s): %s  [%s]", n.Device, n.Node, strings.Join(n.Phases, " > "), n.Reason)
	}
	return res, end
}

// labNode is a Node as the cluster's API server shows it.
type labNode struct {
	Name          string
	Version       string
	Ready         bool
	Unschedulable bool
}

func nodeInAPI(t *testing.T, l *Lab, name string) labNode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := l.Kubectl(ctx, l.Result.Clusters[0].Name, "get", "node", name, "-o", "json")
	if err != nil {
		t.Fatalf("kubectl get node %s: %v: %s", name, err, out)
	}
	var n struct {
		Spec struct {
			Unschedulable bool `json:"unschedulable"`
		} `json:"spec"`
		Status struct {
			NodeInfo struct {
				KubeletVersion string `json:"kubeletVersion"`
			} `json:"nodeInfo"`
			Conditions []struct{ Type, Status string } `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal(out, &n); err != nil {
		t.Fatal(err)
	}
	ln := labNode{Name: name, Version: n.Status.NodeInfo.KubeletVersion, Unschedulable: n.Spec.Unschedulable}
	for _, c := range n.Status.Conditions {
		if c.Type == "Ready" {
			ln.Ready = c.Status == "True"
		}
	}
	return ln
}

// agentLines are the lines of a device's agent output that say what it
// did (its steps and their ends), for the test's transcript.
func agentLines(work, device string) []string {
	f, err := os.Open(filepath.Join(work, "agent-"+device+".out"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		s := sc.Text()
		if strings.Contains(s, "step ") || strings.Contains(s, "new operation") || strings.Contains(s, "complete") || strings.Contains(s, "rolled back") {
			out = append(out, s)
		}
	}
	return out
}

func labCalls(work, device string) string {
	b, _ := os.ReadFile(filepath.Join(work, "devices", device, "root", "lab-calls.log"))
	return string(b)
}

// TestLabCanaryPasses: three VMs (a control plane and two workers) at the
// version before the newest; a rollout to the newest with a canary of two
// (the control plane goes first, then one worker) and gate auto with a
// short soak. The gate's checks pass (Nodes Ready, no crash loops, post
// hooks) for the soak, the gate opens, and the rollout goes on to the
// last worker: every node done, every Node Ready and schedulable at the
// newest version in the API server, and the last worker started only
// after the gate had passed.
func TestLabCanaryPasses(t *testing.T) {
	l, work := rolloutLab(t, "zcp", 134, 3)
	res, r := runRollout(t, l, "--canary", "2", "--gate", "auto", "--soak", "4s")
	for _, d := range []string{"vm0", "vm1", "vm2"} {
		t.Logf("agent %s:\n  %s", d, strings.Join(agentLines(work, d), "\n  "))
	}
	if r.State != string(core.RolloutSucceeded) {
		t.Fatalf("rollout %s: %s %s", r.ID, r.State, r.Reason)
	}
	if r.GateStatus == nil || r.GateStatus.Phase != core.GatePassed {
		t.Fatalf("gate: %+v, want passed", r.GateStatus)
	}
	var canaries int
	for i, n := range r.Nodes {
		if n.Phase != core.NodeDone {
			t.Errorf("node %s: %s (%s), want done", n.NodeName, n.Phase, n.Reason)
		}
		if n.Canary {
			canaries++
			if i >= 2 {
				t.Errorf("node %s is a canary at position %d", n.NodeName, i+1)
			}
			continue
		}
		// The gate's Since is when it passed; the rest started after.
		if n.Started.Before(r.GateStatus.Since) {
			t.Errorf("node %s started %s, before the gate passed at %s", n.NodeName, n.Started, r.GateStatus.Since)
		}
		if len(res.Nodes) > i && res.Nodes[i].Phases[0] != core.NodePending {
			t.Errorf("node %s was first seen %s, want pending while the canary ran", n.NodeName, res.Nodes[i].Phases[0])
		}
	}
	if canaries != 2 {
		t.Errorf("%d canary nodes, want 2", canaries)
	}
	for _, n := range r.Nodes {
		got := nodeInAPI(t, l, n.NodeName)
		t.Logf("  Node %s: %s Ready=%v unschedulable=%v", got.Name, got.Version, got.Ready, got.Unschedulable)
		if got.Version != l.UpgradeTo || !got.Ready || got.Unschedulable {
			t.Errorf("Node %s: %+v, want Ready and schedulable at %s", n.NodeName, got, l.UpgradeTo)
		}
	}
}

// TestLabCanaryFailsStops: as TestLabCanaryPasses, but the gate's operator
// check is a URL that answers 500 (served in ztpd's namespace). The
// canary (control plane and one worker) is upgraded, the gate fails on
// the URL, and the rollout stops there: the last worker never leaves
// pending, its Node is untouched in the API server (Ready, not cordoned,
// still at the old version) and its agent was handed no operation.
func TestLabCanaryFailsStops(t *testing.T) {
	l, work := rolloutLab(t, "zcf", 138, 3)
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("needs python3")
	}
	// The operator's health check, failing: 500 for every GET.
	const health = `import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"fabric unhealthy: 3 BGP sessions down\n"
        self.send_response(500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("127.0.0.1", 18500), H).serve_forever()
`
	if _, err := l.Topo.StartProc(l.Topo.App.Command(context.Background(), python, "-c", health), "gate-health"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	from, _, _ := UpgradeVersions()
	res, r := runRollout(t, l, "--canary", "2", "--gate", "auto", "--soak", "4s",
		"--gate-url", "http://127.0.0.1:18500/healthz", "--gate-timeout", "3s")
	for _, d := range []string{"vm0", "vm1", "vm2"} {
		t.Logf("agent %s:\n  %s", d, strings.Join(agentLines(work, d), "\n  "))
	}
	if r.State == string(core.RolloutSucceeded) {
		t.Fatalf("rollout %s succeeded past a failing gate", r.ID)
	}
	if r.GateStatus == nil || r.GateStatus.Phase != core.GateFailed || !strings.Contains(r.GateStatus.Reason, "500") {
		t.Fatalf("gate: %+v, want failed on the URL's 500", r.GateStatus)
	}
	var rest int
	for i, n := range r.Nodes {
		if n.Canary {
			if n.Phase != core.NodeDone {
				t.Errorf("canary node %s: %s (%s), want done", n.NodeName, n.Phase, n.Reason)
			}
			continue
		}
		rest++
		if n.Phase != core.NodePending && n.Phase != core.NodeWithdrawn {
			t.Errorf("node %s after the failed gate: %s (%s), want never started", n.NodeName, n.Phase, n.Reason)
		}
		if len(res.Nodes) > i {
			for _, p := range res.Nodes[i].Phases {
				if p != core.NodePending && p != core.NodeWithdrawn {
					t.Errorf("node %s went %s", n.NodeName, strings.Join(res.Nodes[i].Phases, " > "))
					break
				}
			}
		}
		got := nodeInAPI(t, l, n.NodeName)
		t.Logf("  Node %s (not a canary): %s Ready=%v unschedulable=%v", got.Name, got.Version, got.Ready, got.Unschedulable)
		if got.Version != from || !got.Ready || got.Unschedulable {
			t.Errorf("Node %s: %+v, want untouched: Ready, schedulable, at %s", n.NodeName, got, from)
		}
		dev := res.Nodes[i].Device
		if c := labCalls(work, dev); strings.Contains(c, "kubeadm") || strings.Contains(c, "systemctl") {
			t.Errorf("%s's agent ran the upgrade: %s", dev, c)
		}
	}
	if rest != 1 {
		t.Errorf("%d nodes after the canary, want 1", rest)
	}
}

// TestLabKubeletRestartRollsBack: two VMs (a control plane and a worker);
// a rollout to the newest version with rollback auto, where the worker's
// kubelet restart after kubeadm upgrade node fails (the lab's systemctl
// fails it once). The worker's agent restores the kubelet and kubeadm it
// kept before the step and restarts the kubelet, which then reports the
// version of the restored binary: the rollout shows the worker
// rolled-back with the reason, its Node is Ready and schedulable at the
// old version in the API server (and its desired target says so again),
// and the control plane at the new one.
func TestLabKubeletRestartRollsBack(t *testing.T) {
	l, work := rolloutLab(t, "zkr", 146, 2)
	from, to, _ := UpgradeVersions()
	worker := "vm1"
	if err := os.WriteFile(filepath.Join(work, "devices", worker, "root", "lab-kubelet-restart-fails"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res, r := runRollout(t, l, "--rollback", "auto", "--node-timeout", "90s")
	for _, d := range []string{"vm0", worker} {
		t.Logf("agent %s:\n  %s", d, strings.Join(agentLines(work, d), "\n  "))
	}
	calls := labCalls(work, worker)
	t.Logf("%s's kubeadm and systemctl calls:\n%s", worker, calls)
	var wn core.RolloutNode
	for i, n := range r.Nodes {
		if res.Nodes[i].Device == worker {
			wn = n
		} else if n.Phase != core.NodeDone {
			t.Errorf("control plane %s: %s (%s), want done", n.NodeName, n.Phase, n.Reason)
		}
	}
	if wn.Phase != core.NodeRolledBack {
		t.Fatalf("worker %s: %s (%s), want rolled-back", wn.NodeName, wn.Phase, wn.Reason)
	}
	if !strings.Contains(wn.Reason, "rolled back to "+from) || !strings.Contains(wn.Reason, "upgrade") {
		t.Errorf("worker's reason %q: want rolled back to %s after the upgrade step", wn.Reason, from)
	}
	for _, want := range []string{"kubeadm upgrade node", "systemctl restart kubelet\nsystemctl restart kubelet"} {
		if !strings.Contains(calls, want) {
			t.Errorf("%s's calls lack %q", worker, want)
		}
	}
	kl, _ := os.ReadFile(filepath.Join(work, "devices", worker, "root", "usr/local/bin/kubelet"))
	if !strings.Contains(string(kl), "# version: "+from) {
		t.Errorf("%s's installed kubelet after the rollback:\n%s\nwant the one at %s restored", worker, kl, from)
	}
	got := nodeInAPI(t, l, wn.NodeName)
	t.Logf("  Node %s: %s Ready=%v unschedulable=%v", got.Name, got.Version, got.Ready, got.Unschedulable)
	if got.Version != from || !got.Ready || got.Unschedulable {
		t.Errorf("worker Node %s: %+v, want Ready and schedulable at %s again", wn.NodeName, got, from)
	}
	cp := nodeInAPI(t, l, r.Nodes[0].NodeName)
	if cp.Version != to || !cp.Ready {
		t.Errorf("control plane Node: %+v, want Ready at %s", cp, to)
	}
	var ds struct {
		KubernetesVersion string `json:"kubernetes_version"`
	}
	if err := l.App.REST(context.Background(), "/api/v1/devices/"+url.PathEscape(wn.Device)+"/desired", nil, &ds); err != nil {
		t.Fatal(err)
	}
	t.Logf("  %s's desired kubernetes_version: %q", worker, ds.KubernetesVersion)
	if ds.KubernetesVersion != from {
		t.Errorf("%s's desired kubernetes_version is %q after the rollback, want %s (what it runs again)", worker, ds.KubernetesVersion, from)
	}

}

// addImageWithFailingHook adds a new SONiC image (sonic-202411.bin) and a
// post_upgrade hook (check-bgp) that fails as a BGP check would, and
// returns the MAC of the lab's switch sw, which the image rollout targets.
func addImageWithFailingHook(ctx context.Context, t *testing.T, l *Lab, work, sw string) string {
	t.Helper()
	img := filepath.Join(work, "sonic-202411.bin")
	if err := os.WriteFile(img, []byte("# SONiC-OS-lab.202411 (lab image)\n"+strings.Repeat("x", 1<<16)), 0o644); err != nil {
		t.Fatal(err)
	}
	hook := filepath.Join(work, "check-bgp")
	if err := os.WriteFile(hook, []byte("#!/bin/sh\necho \"bgp: neighbor 10.0.0.1 down\"\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, add := range [][]string{{"image", "add", img, "--kind", "sonic-installer", "--name", "sonic-202411.bin"},
		{"image", "add", hook, "--kind", "file", "--name", "check-bgp"}} {
		if out, err := l.App.CLI(ctx, add...); err != nil {
			t.Fatalf("ztpd %s: %v: %s", strings.Join(add, " "), err, out)
		}
	}
	for _, d := range l.Plan {
		if d.Name == sw {
			return d.MAC
		}
	}
	t.Fatalf("no %s in the lab's plan", sw)
	return ""
}

// TestLabSwitchImageRollsBack: a SONiC switch in a real cluster (beside
// its control plane VM) gets an image rollout with rollback auto whose
// post_upgrade hook fails. Its agent records the running image and a
// config checkpoint, the switch leaves (kubelet stopped, Node deleted),
// installs the new image, reboots into it (new boot id), rejoins, runs the
// hook, which fails; the agent sets the previous image as default,
// reboots into it (the boot id changes again), rolls the config back to
// its checkpoint, and ztpd has it rejoin: the rollout shows the switch
// rolled-back with the hook's reason, the simulated sonic-installer,
// reboot and config recorded exactly that, the switch runs its previous
// image, its Node is Ready in the API server and its desired image is
// none again (as before the rollout).
func TestLabSwitchImageRollsBack(t *testing.T) {
	l, work := rolloutLabOf(t, "zsr", 186, Scenario{Switches: 1, VMs: 1, Clusters: 1, Upgrade: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sw := "sw0"
	root := filepath.Join(work, "devices", sw, "root")
	bootBefore, _ := os.ReadFile(filepath.Join(root, "proc/sys/kernel/random/boot_id"))
	swMAC := addImageWithFailingHook(ctx, t, l, work, sw)
	res, r := startRollout(t, l, "--kind", "image", "--target", "sonic-202411.bin", "--devices", swMAC,
		"--hook", "post_upgrade=check-bgp", "--rollback", "auto", "--node-timeout", "2m")
	t.Logf("agent %s:\n  %s", sw, strings.Join(agentLines(work, sw), "\n  "))
	calls := labCalls(work, sw)
	t.Logf("%s's calls:\n%s", sw, calls)
	bootAfter, _ := os.ReadFile(filepath.Join(root, "proc/sys/kernel/random/boot_id"))
	t.Logf("boot id %s -> %s", strings.TrimSpace(string(bootBefore)), strings.TrimSpace(string(bootAfter)))
	if len(r.Nodes) != 1 || res.Nodes[0].Device != sw {
		t.Fatalf("rollout nodes %+v", r.Nodes)
	}
	n := r.Nodes[0]
	if n.Phase != core.NodeRolledBack {
		dumpLabLogs(t, work, "lab-switch-"+sw+".log", "kubelet-"+sw+".out", "agent-"+sw+".out")
	}
	if n.Phase != core.NodeRolledBack || !strings.Contains(n.Reason, "post_upgrade") || !strings.Contains(n.Reason, "bgp: neighbor 10.0.0.1 down") ||
		!strings.Contains(n.Reason, "rejoined, Node Ready") {
		t.Fatalf("switch: %s (%s), want rolled-back after the post_upgrade hook, rejoined, Node Ready", n.Phase, n.Reason)
	}
	// The calls in order: the rollback point, the install and its reboot,
	// then the rollback's set-default, reboot and config rollback.
	want := []string{"sonic-installer list", "config checkpoint ztpd-op-", "sonic-installer install -y",
		"reboot", "sonic-installer list", "sonic-installer set-default " + LabSonicImage, "reboot", "sonic-installer list", "config rollback ztpd-op-"}
	rest := calls
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("%s's calls lack %q (in order %q)", sw, w, want)
		}
		rest = rest[i+len(w):]
	}
	if strings.Count(calls, "reboot") != 2 {
		t.Errorf("%d reboots, want 2 (into the new image, back into the previous)", strings.Count(calls, "reboot"))
	}
	if strings.TrimSpace(string(bootAfter)) == strings.TrimSpace(string(bootBefore)) {
		t.Errorf("boot id unchanged")
	}
	cur, _ := os.ReadFile(filepath.Join(root, "host/lab-images/current"))
	if strings.TrimSpace(string(cur)) != LabSonicImage {
		t.Errorf("the switch runs %q, want its previous image %s", cur, LabSonicImage)
	}
	got := nodeInAPI(t, l, n.NodeName)
	t.Logf("  Node %s: %s Ready=%v unschedulable=%v", got.Name, got.Version, got.Ready, got.Unschedulable)
	if !got.Ready || got.Unschedulable {
		t.Errorf("switch Node %s: %+v, want Ready and schedulable", n.NodeName, got)
	}
	var ds struct {
		Image string `json:"image"`
	}
	if err := l.App.REST(context.Background(), "/api/v1/devices/"+url.PathEscape(n.Device)+"/desired", nil, &ds); err != nil {
		t.Fatal(err)
	}
	if ds.Image != "" {
		t.Errorf("%s's desired image is %q after the rollback, want none again", sw, ds.Image)
	}
}

// TestLabSwitchManualRollback: as TestLabSwitchImageRollsBack, but with
// rollback manual (the default): the failed post_upgrade hook stops the
// rollout and leaves the switch as the failure left it (on the new image,
// rejoined there). The operator then runs `ztpd rollout rollback NODE
// --watch` (the CLI binary against ztpd's API): the switch's agent sets
// its previous image as default, reboots into it, rolls its config back
// to the checkpoint taken before the install, and ztpd has it rejoin. The
// command ends with the node rolled-back, the switch runs its previous
// image, its Node is Ready and schedulable in the API server, the rollout
// shows the node rolled-back at the operator's asking, and the switch's
// desired image is none again.
func TestLabSwitchManualRollback(t *testing.T) {
	l, work := rolloutLabOf(t, "zsm", 194, Scenario{Switches: 1, VMs: 1, Clusters: 1, Upgrade: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sw := "sw0"
	root := filepath.Join(work, "devices", sw, "root")
	swMAC := addImageWithFailingHook(ctx, t, l, work, sw)
	_, r := startRollout(t, l, "--kind", "image", "--target", "sonic-202411.bin", "--devices", swMAC,
		"--hook", "post_upgrade=check-bgp", "--rollback", "manual", "--node-timeout", "2m")
	if len(r.Nodes) != 1 {
		t.Fatalf("rollout nodes %+v", r.Nodes)
	}
	n := r.Nodes[0]
	if r.State != string(core.RolloutFailed) || n.Phase != core.NodeFailed || !strings.Contains(n.Reason, "post_upgrade") {
		dumpLabLogs(t, work, "agent-"+sw+".out")
		t.Fatalf("rollout %s, switch %s (%s): want failed on the post_upgrade hook", r.State, n.Phase, n.Reason)
	}
	// Left as the failure left it: on the new image (rejoined there before
	// the hook ran), nothing rolled back.
	cur, _ := os.ReadFile(filepath.Join(root, "host/lab-images/current"))
	if strings.TrimSpace(string(cur)) != "SONiC-OS-lab.202411" {
		t.Fatalf("after the failed hook the switch runs %q, want the new image SONiC-OS-lab.202411", cur)
	}
	got := nodeInAPI(t, l, n.NodeName)
	t.Logf("  Node %s after the failed hook: Ready=%v unschedulable=%v", got.Name, got.Ready, got.Unschedulable)
	before := labCalls(work, sw)
	if strings.Contains(before, "set-default") {
		t.Fatalf("rollback manual rolled back by itself:\n%s", before)
	}
	bootBefore, _ := os.ReadFile(filepath.Join(root, "proc/sys/kernel/random/boot_id"))

	args := []string{"rollout", "rollback", n.NodeName, "--yes", "--watch", "-o", "json"}
	out, err := l.ZTPD(ctx, args...)
	t.Logf("$ ztpd %s\n%s", strings.Join(args, " "), tail(string(out), 3000))
	t.Logf("agent %s:\n  %s", sw, strings.Join(agentLines(work, sw), "\n  "))
	calls := labCalls(work, sw)
	t.Logf("%s's calls:\n%s", sw, calls)
	if err != nil {
		dumpLabLogs(t, work, "lab-switch-"+sw+".log", "kubelet-"+sw+".out", "agent-"+sw+".out")
		t.Fatalf("ztpd rollout rollback: %v", err)
	}
	var after labRollout
	if err := json.Unmarshal(out, &after); err != nil || after.ID != r.ID || len(after.Nodes) != 1 {
		t.Fatalf("ztpd rollout rollback -o json printed %s (%v), want rollout %s", out, err, r.ID)
	}
	// What the rollout shows now, read again.
	if err := l.App.REST(ctx, "/api/v1/rollouts/"+url.PathEscape(r.ID), nil, &after); err != nil {
		t.Fatal(err)
	}
	rn := after.Nodes[0]
	t.Logf("rollout %s: %s; node %s: %s (%s)", after.ID, after.State, rn.NodeName, rn.Phase, rn.Reason)
	if rn.Phase != core.NodeRolledBack || !strings.Contains(rn.Reason, "rollback asked by") || !strings.Contains(rn.Reason, "rejoined, Node Ready") {
		t.Fatalf("switch after the rollback: %s (%s), want rolled-back at the operator's asking, rejoined, Node Ready", rn.Phase, rn.Reason)
	}
	// The rollback's calls, in order: the previous image as default, a
	// reboot into it, the config back to the checkpoint the install took.
	checkpoint := ""
	if i := strings.Index(before, "config checkpoint "); i >= 0 {
		checkpoint = strings.Fields(before[i+len("config checkpoint "):])[0]
	}
	if checkpoint == "" {
		t.Fatalf("no config checkpoint before the install:\n%s", before)
	}
	rest := strings.TrimPrefix(calls, before)
	for _, w := range []string{"sonic-installer list", "sonic-installer set-default " + LabSonicImage, "reboot",
		"sonic-installer list", "config rollback " + checkpoint} {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("the rollback's calls lack %q in order:\n%s", w, strings.TrimPrefix(calls, before))
		}
		rest = rest[i+len(w):]
	}
	bootAfter, _ := os.ReadFile(filepath.Join(root, "proc/sys/kernel/random/boot_id"))
	if strings.TrimSpace(string(bootAfter)) == strings.TrimSpace(string(bootBefore)) {
		t.Errorf("boot id unchanged by the rollback")
	}
	cur, _ = os.ReadFile(filepath.Join(root, "host/lab-images/current"))
	if strings.TrimSpace(string(cur)) != LabSonicImage {
		t.Errorf("the switch runs %q, want its previous image %s", cur, LabSonicImage)
	}
	got = nodeInAPI(t, l, rn.NodeName)
	t.Logf("  Node %s after the rollback: %s Ready=%v unschedulable=%v", got.Name, got.Version, got.Ready, got.Unschedulable)
	if !got.Ready || got.Unschedulable {
		t.Errorf("switch Node %s: %+v, want Ready and schedulable", rn.NodeName, got)
	}
	var ds struct {
		Image string `json:"image"`
	}
	if err := l.App.REST(ctx, "/api/v1/devices/"+url.PathEscape(rn.Device)+"/desired", nil, &ds); err != nil {
		t.Fatal(err)
	}
	if ds.Image != "" {
		t.Errorf("%s's desired image is %q after the rollback, want none again", sw, ds.Image)
	}
}
