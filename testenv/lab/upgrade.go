package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/testenv/kubebin"
)

// The lab's upgrade (Scenario.Upgrade): the clusters start at the
// Kubernetes version before the newest built; once every device has
// joined, each cluster is upgraded to the newest with CloudStack's
// upgradeKubernetesCluster, which ztpd carries out as a rollout over the
// cluster's nodes, one at a time: cordon and drain the Node through the
// real API server, hand the device's agent its kubeadm upgrade, wait for
// the Node Ready at the new version, uncordon. What runs for real: ztpd's
// rollout engine against the real API servers, and each device's agent
// (the python3 script the join bundle installed, polling ztpd's API over
// TLS from the device's namespace and address with its own credential).
// What is simulated: the devices' kubeadm and systemctl (and a switch's
// sonic-installer, reboot and config, sonicsim.go) are fakes that
// record the call and "install" the new kubelet version, which the
// simulated kubelet then reports (with Options.Hollow, the hollow node of
// that version, the real kubelet built from its source, replaces the old
// one, as the restarted kubelet unit would run the new binary); the first
// control plane's kubeadm upgrade apply moves its real control plane
// (testenv/controlplane.UpgradeTo).

// UpgradeVersions are the versions the lab's upgrade goes from and to: the
// two newest pinned in testenv/k8sbin/versions.
func UpgradeVersions() (from, to string, err error) {
	vs, err := kubebin.Versions()
	if err != nil {
		return "", "", err
	}
	if len(vs) < 2 {
		return "", "", fmt.Errorf("the lab's upgrade needs two Kubernetes versions pinned in testenv/k8sbin/versions, there is %d", len(vs))
	}
	return vs[len(vs)-2], vs[len(vs)-1], nil
}

// agentPollSeconds is how often the lab's agents poll (a device's timer
// polls every 60 s, and every 5 s while its node is in a rollout): a
// person watching sees each node's phases, and the lab ends sooner.
const agentPollSeconds = 2

// RolloutResult is one cluster's upgrade as the lab saw it.
type RolloutResult struct {
	Cluster string `json:"cluster"`
	ID      string `json:"id"`
	State   string `json:"state"`
	Reason  string `json:"reason,omitempty"`
	Target  string `json:"target"`
	// Nodes in the rollout's order, each with the phases the lab saw it
	// in (read every 250 ms).
	Nodes []RolloutNodeResult `json:"nodes"`
	// MaxUnderway is the most nodes seen between cordoned and done at once.
	MaxUnderway int           `json:"max_underway"`
	Elapsed     time.Duration `json:"elapsed_ns"`
}

// RolloutNodeResult is one device's way through a rollout.
type RolloutNodeResult struct {
	Device string   `json:"device"` // the lab's name (vm0, sw1)
	Node   string   `json:"node"`
	Phases []string `json:"phases"`
	Reason string   `json:"reason,omitempty"`
}

// rolloutView is GET /api/v1/rollouts' item, as far as the lab reads it.
type rolloutView struct {
	ID       string    `json:"id"`
	Kind     string    `json:"kind"`
	Cluster  string    `json:"cluster"`
	State    string    `json:"state"`
	Reason   string    `json:"reason"`
	Target   string    `json:"target"`
	Created  time.Time `json:"created"`
	Finished time.Time `json:"finished"`
	Nodes    []struct {
		Device   string `json:"device"`
		NodeName string `json:"node_name"`
		Phase    string `json:"phase"`
		Reason   string `json:"reason"`
	} `json:"nodes"`
}

// startAgents runs every device's agent as its systemd timer would, with
// the device's fake kubeadm and systemctl first on its PATH.
func (l *Lab) startAgents(target string) error {
	python, err := exec.LookPath("python3")
	if err != nil {
		return fmt.Errorf("the devices' agent needs python3: %w", err)
	}
	for _, d := range l.Plan {
		kl := l.Kube.Kubelet(d.Name)
		if kl == nil {
			return fmt.Errorf("%s has no kubelet: it did not join", d.Name)
		}
		dir := filepath.Join(l.Topo.WorkDir, "devices", d.Name)
		root := filepath.Join(dir, "root")
		script := filepath.Join(root, "usr/local/bin/ztpd-agent")
		for _, f := range []string{script, filepath.Join(root, "etc/ztpd/agent.json")} {
			if _, err := os.Stat(f); err != nil {
				return fmt.Errorf("%s: its join bundle installed no agent: %w", d.Name, err)
			}
		}
		bin := filepath.Join(dir, "fakebin")
		if err := writeFakeTools(bin, root, l.Kube.Bins.Version, target); err != nil {
			return err
		}
		if d.Kind == "sonic" {
			if err := writeSonicTools(bin, root); err != nil {
				return err
			}
			if err := installJoinPlugin(dir, root); err != nil {
				return err
			}
			go l.watchSwitchKubelet(d, root)
		}
		if p := l.Kube.Plane(d.Cluster); p != nil && p.Device == d.Name {
			go l.upgradePlaneOnApply(p, root, target)
		}
		cmd := kl.NS.Command(context.Background(), python, script, "run", "--interval", fmt.Sprint(agentPollSeconds))
		cmd.Env = append(os.Environ(), "ZTPD_ROOT="+root, "PATH="+bin+":"+os.Getenv("PATH"))
		if _, err := l.Topo.StartProc(cmd, "agent-"+d.Name); err != nil {
			return err
		}
	}
	return nil
}

// upgradePlaneOnApply waits for the first control plane's kubeadm upgrade
// apply and moves the cluster's real control plane to target
// (controlplane.UpgradeTo); a failure is what kubeadm prints.
func (l *Lab) upgradePlaneOnApply(p *Plane, root, target string) {
	req, done := filepath.Join(root, "lab-apply-requested"), filepath.Join(root, "lab-apply-done")
	for {
		if _, err := os.Stat(req); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var msg []byte
	if err := p.CP.UpgradeTo(ctx, target); err != nil {
		msg = []byte("control plane upgrade: " + err.Error() + "\n")
	}
	os.WriteFile(done, msg, 0o644)
}

// writeFakeTools writes a device's kubeadm and systemctl: they record
// their calls in $ZTPD_ROOT/lab-calls.log. The kubelet and kubeadm
// "installed" on the device are $ZTPD_ROOT/usr/local/bin/kubelet and
// kubeadm, scripts that print their version as the real binaries'
// --version does (written at the version the device runs, from, unless
// there already); kubeadm upgrade replaces both with the target's (apply:
// the version it is given), and systemctl restart kubelet makes the
// simulated kubelet report what the installed kubelet says
// (KubeletVersionFile). So an agent that restores the kubelet it kept
// before an upgrade and restarts it brings the Node back at that version.
// kubeadm reset stops a switch's kubelet (sonicsim.go). Fault: while
// $ZTPD_ROOT/lab-kubelet-restart-fails exists, the next
// restart of the kubelet fails (once: the file is removed).
func writeFakeTools(bin, root, from, target string) error {
	for _, name := range []string{"kubelet", "kubeadm"} {
		p := filepath.Join(root, "usr/local/bin", name)
		if _, err := os.Stat(p); err == nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(fakeBinary(name, from)), 0o755); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	// An upgrade installs binaries of another version: the same scripts
	// with their version line changed.
	install := `install_version() {
	for b in kubelet kubeadm; do
		f="$ZTPD_ROOT/usr/local/bin/$b"
		sed "s/^# version: .*/# version: $1/" "$f" > "$f.new" && chmod 755 "$f.new" && mv "$f.new" "$f"
	done
}
`
	scripts := map[string]string{
		"kubeadm": `#!/bin/sh
# ztpd-lab: a device's kubeadm (simulated).
echo "kubeadm $*" >> "$ZTPD_ROOT/lab-calls.log"
` + install + `case "$1 $2" in
"upgrade apply")
	# The lab moves the cluster's real control plane (kube-apiserver and
	# kube-controller-manager on the new binaries), as kubeadm would.
	touch "$ZTPD_ROOT/lab-apply-requested"
	while [ ! -e "$ZTPD_ROOT/lab-apply-done" ]; do sleep 0.2; done
	if [ -s "$ZTPD_ROOT/lab-apply-done" ]; then cat "$ZTPD_ROOT/lab-apply-done" >&2; exit 1; fi
	install_version "$4" ;;
"upgrade node") install_version ` + target + ` ;;
"reset -f") touch "$ZTPD_ROOT/lab-kubelet-stop" ;;
esac
exit 0
`,
		"systemctl": `#!/bin/sh
# ztpd-lab: a device's systemctl (simulated).
echo "systemctl $*" >> "$ZTPD_ROOT/lab-calls.log"
if [ "$1 $2" = "restart kubelet" ]; then
	if [ -e "$ZTPD_ROOT/lab-kubelet-restart-fails" ]; then
		rm -f "$ZTPD_ROOT/lab-kubelet-restart-fails"
		echo "Job for kubelet.service failed because the control process exited with error code." >&2
		exit 1
	fi
	v=$("$ZTPD_ROOT/usr/local/bin/kubelet" --version | awk '{print $2}')
	mkdir -p "$ZTPD_ROOT/var/lib/kubelet"
	echo "$v" > "$ZTPD_ROOT` + KubeletVersionFile + `"
fi
exit 0
`,
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// fakeBinary is an installed kubelet's or kubeadm's stand-in at version:
// --version prints it as the real one does (from its "# version:" line,
// which an upgrade rewrites).
func fakeBinary(name, version string) string {
	return "#!/bin/sh\n# ztpd-lab: the device's " + name + " (simulated)\n# version: " + version + "\n" +
		`case "$1" in
--version|version) echo "Kubernetes $(sed -n 's/^# version: //p' "$0")" ;;
*) echo "` + name + `: simulated by the lab" >&2; exit 1 ;;
esac
`
}

// prepareUpgrade registers the version the upgrade goes to and starts
// the devices' agents; it returns the version's ID.
func (l *Lab) prepareUpgrade(ctx context.Context) (string, error) {
	to := l.UpgradeTo
	semver := strings.TrimPrefix(to, "v")
	v, err := l.App.CloudStack(ctx, "addKubernetesSupportedVersion", url.Values{
		"semanticversion": {semver}, "name": {to}, "url": {"http://lab.invalid/k8s-" + semver + ".iso"}})
	if err != nil {
		return "", fmt.Errorf("register %s: %w", to, err)
	}
	var ver struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(v["kubernetessupportedversion"], &ver); err != nil || ver.ID == "" {
		return "", fmt.Errorf("addKubernetesSupportedVersion %s answered no id: %v", to, err)
	}
	return ver.ID, l.startAgents(to)
}

// upgrade upgrades every cluster at once to Lab.UpgradeTo through
// upgradeKubernetesCluster (each a rollout over its nodes), showing each
// device's phase in the live table, until every job ended; then it checks
// the outcome: every rollout succeeded with at most one node underway at a
// time, every device went through it to done, every Node is Ready at the
// new version and ztpd shows each cluster at it.
func (l *Lab) upgrade(ctx context.Context) error {
	app, to := l.App, l.UpgradeTo
	verID, err := l.prepareUpgrade(ctx)
	if err != nil {
		return err
	}
	cs, err := clusterStates(ctx, app)
	if err != nil {
		return err
	}
	began := time.Now().Add(-time.Second)
	jobs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, jobs[i] = app.CloudStack(ctx, "upgradeKubernetesCluster", url.Values{"id": {c.ID}, "kubernetesversionid": {verID}})
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	res := l.Result
	res.Rollouts = l.follow(ctx, began, done)
	var bad []string
	for i, err := range jobs {
		if err != nil {
			bad = append(bad, fmt.Sprintf("upgradeKubernetesCluster %s: %v", cs[i].Name, err))
		}
	}
	if len(res.Rollouts) != len(cs) {
		bad = append(bad, fmt.Sprintf("%d rollouts seen for %d clusters", len(res.Rollouts), len(cs)))
	}
	for _, r := range res.Rollouts {
		if r.State != string(core.RolloutSucceeded) {
			bad = append(bad, fmt.Sprintf("rollout %s of %s: %s %s", r.ID, r.Cluster, r.State, r.Reason))
		}
		if r.MaxUnderway > 1 {
			bad = append(bad, fmt.Sprintf("rollout %s of %s had %d nodes underway at once (max_unavailable 1)", r.ID, r.Cluster, r.MaxUnderway))
		}
		for _, n := range r.Nodes {
			if !slices.Contains(n.Phases, core.NodeDone) {
				bad = append(bad, fmt.Sprintf("%s went %s in rollout %s, never done", n.Device, strings.Join(n.Phases, " > "), r.ID))
			}
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("the upgrade to %s:\n  %s\n(the agents' output: %s)", to, strings.Join(bad, "\n  "),
			filepath.Join(l.Topo.WorkDir, "agent-*.out"))
	}
	// The clusters settle again (Running, every member joined), at the
	// new version in their API servers and in ztpd.
	if err := l.clusters.settle(ctx, res, l.Plan, 2*time.Minute); err != nil {
		return err
	}
	for _, c := range res.Clusters {
		for _, n := range c.Nodes {
			if n.KubeletVersion != to {
				bad = append(bad, fmt.Sprintf("cluster %s: Node %s reports kubelet %s, want %s", c.Name, n.Name, n.KubeletVersion, to))
			}
		}
		var rc struct {
			Version struct {
				Name string `json:"name"`
			} `json:"version"`
		}
		if err := app.REST(ctx, "/api/v1/clusters/"+url.PathEscape(c.ID), nil, &rc); err != nil {
			return err
		}
		if rc.Version.Name != to {
			bad = append(bad, fmt.Sprintf("ztpd shows cluster %s at %q, want %s", c.Name, rc.Version.Name, to))
		}
		if p := l.Kube.Plane(c.Name); p != nil {
			if v, err := p.CP.ServerVersion(ctx); err != nil || v != to {
				bad = append(bad, fmt.Sprintf("cluster %s: its API server reports %q (%v), want %s", c.Name, v, err, to))
			}
		}
	}
	if len(bad) > 0 {
		return errors.New("after the upgrade:\n  " + strings.Join(bad, "\n  "))
	}
	return nil
}

// FollowRollouts shows, until ctx ends, every rollout started from now on
// in the lab's table (each device's phase in its STEP column), and returns
// what it saw: for a person who starts one by hand (Options.UpgradeByHand).
func (l *Lab) FollowRollouts(ctx context.Context) []RolloutResult {
	return l.follow(ctx, time.Now().Add(-time.Second), ctx.Done())
}

// follow reads the rollouts created after since every 250 ms until until
// is closed, sets each device's phase in the table and prints it.
func (l *Lab) follow(ctx context.Context, since time.Time, until <-chan struct{}) []RolloutResult {
	app, o := l.App, l.opts
	devices, _ := listDevices(ctx, app)
	nameOf := map[string]string{} // ztpd device id -> the lab's name
	for _, d := range l.Plan {
		for _, dev := range devices {
			if strings.EqualFold(dev.MAC, d.MAC) {
				nameOf[dev.ID] = d.Name
			}
		}
	}
	cs, _ := clusterStates(ctx, app)
	var order []string
	seen := map[string]*RolloutResult{} // by rollout id
	read := func() {
		var page struct {
			Items []rolloutView `json:"items"`
		}
		if err := app.REST(ctx, "/api/v1/rollouts", url.Values{"limit": {"100"}}, &page); err != nil {
			return
		}
		for _, r := range page.Items {
			if r.Created.Before(since) {
				continue
			}
			res := seen[r.ID]
			if res == nil {
				res = &RolloutResult{ID: r.ID, Target: r.Target, Cluster: r.Cluster}
				for _, c := range cs {
					if c.ID == r.Cluster {
						res.Cluster = c.Name
					}
				}
				for _, n := range r.Nodes {
					res.Nodes = append(res.Nodes, RolloutNodeResult{Device: firstNonEmpty(nameOf[n.Device], n.Device), Node: n.NodeName})
				}
				seen[r.ID] = res
				order = append(order, r.ID)
			}
			res.State, res.Reason, res.Elapsed = r.State, r.Reason, time.Since(r.Created)
			if !r.Finished.IsZero() {
				res.Elapsed = r.Finished.Sub(r.Created)
			}
			underway := 0
			for i, n := range r.Nodes {
				if i >= len(res.Nodes) {
					break
				}
				rn := &res.Nodes[i]
				if len(rn.Phases) == 0 || rn.Phases[len(rn.Phases)-1] != n.Phase {
					rn.Phases = append(rn.Phases, n.Phase)
				}
				rn.Reason = n.Reason
				switch n.Phase {
				case core.NodeCordoned, core.NodeDrained, core.NodeAgent, core.NodeWaiting:
					underway++
				}
				step := fmt.Sprintf("%s: %s", rolloutWhat(r), n.Phase)
				if n.Reason != "" {
					step += " (" + firstLine(n.Reason) + ")"
				}
				l.steps.set(rn.Device, step)
			}
			res.MaxUnderway = max(res.MaxUnderway, underway)
		}
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var clusters []ClusterState
	lastRead := time.Time{}
	for running := true; running; {
		select {
		case <-until:
			running = false
		case <-tick.C:
		}
		if ctx.Err() != nil {
			break
		}
		read()
		if o.Out != nil {
			devices, _ = listDevices(ctx, app)
			if time.Since(lastRead) > 2*time.Second || !running {
				clusters, _ = l.clusters.read(ctx)
				lastRead = time.Now()
			}
			l.steps.print(o.Out, devices, clusters, o.Live && running, time.Since(l.start))
		}
	}
	out := make([]RolloutResult, 0, len(order))
	for _, id := range order {
		out = append(out, *seen[id])
	}
	return out
}

// rolloutWhat names what a rollout does to its nodes, for the table.
func rolloutWhat(r rolloutView) string {
	switch core.RolloutKind(r.Kind) {
	case core.RolloutKubernetes:
		return "upgrade to " + r.Target
	case core.RolloutImage:
		return "image " + r.Target
	}
	return r.Kind
}
