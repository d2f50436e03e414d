package lab

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/ztpd/ztpd/testenv/controlplane"
)

// TestEndToEndOnboarding is the product in one test: 4 SONiC switches across
// two subnets (two behind a DHCP relay), 1 ONIE switch, 3 CloudStack VMs and
// 2 clusters onboard through a real ztpd with real clients. Each cluster's
// first control plane VM runs a real control plane (kubeadm init phases,
// etcd, kube-apiserver, kube-controller-manager) from its bundle, the other
// VM runs real kubeadm join discovery, and every device's simulated kubelet
// bootstraps against the real API server (token or switch certificate).
// The end check reads the API servers with the kubeconfig ztpd hands out:
// every device is a Ready Node with ztpd's labels, ztpd shows it joined.
// Then, against the running lab: a Node deleted with kubectl is `left` in
// ztpd within seconds; a worker's bootstrap token revoked in ztpd is refused
// by the API server; an API server stopped for longer than the alert time
// moves its cluster to Alert, and started again back to Running.
func TestEndToEndOnboarding(t *testing.T) {
	bin, ksim := requireLabFleet(t)
	work := t.TempDir()
	var log strings.Builder
	l, err := Open(context.Background(), Scenario{Switches: 4, ONIE: 1, VMs: 3, Clusters: 2},
		Options{Prefix: "zle", Octet: 130, WorkDir: work, Bin: bin, Kubeletsim: ksim, Out: &log, Timeout: 6 * time.Minute})
	dumpLogs := func() {
		for _, f := range []string{"ztpd.out", "relay.log", "relay.out"} {
			if b, rerr := os.ReadFile(filepath.Join(work, f)); rerr == nil {
				t.Logf("%s (tail):\n%s", f, tail(string(b), 4000))
			}
		}
	}
	if l != nil {
		defer func() {
			if t.Failed() && err == nil {
				dumpLogs()
			}
			l.Close()
			if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), "zle-") {
				t.Errorf("lab left namespaces behind:\n%s", out)
			}
		}()
	}
	t.Log("progress:\n" + log.String())
	if err != nil {
		dumpLogs()
		t.Fatal(err)
	}
	res := l.Result
	if len(res.Clusters) != 2 || len(res.ControlPlanes) != 2 {
		t.Fatalf("clusters: %+v, control planes %+v", res.Clusters, res.ControlPlanes)
	}
	for _, p := range res.ControlPlanes {
		t.Logf("cluster %s: real control plane (Kubernetes %s) on %s at %s, started in %s", p.Cluster, res.KubernetesVersion, p.Device, p.URL, p.Started.Round(100*time.Millisecond))
	}
	t.Logf("onboarded %d devices into %d real clusters in %s", len(res.Devices), len(res.Clusters), res.Elapsed.Round(100*time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	worker := "vm2" // lab-0's worker VM (kubeadm join with a bootstrap token)
	wdev := l.device(t, worker)
	member := func(cluster string) MemberState {
		t.Helper()
		c, err := l.Cluster(ctx, cluster)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range c.Members {
			if m.Device == wdev {
				return m
			}
		}
		t.Fatalf("%s is not a member of %s: %+v", worker, cluster, c.Members)
		return MemberState{}
	}

	// (a) A Node deleted with kubectl: ztpd shows the member left within
	// seconds (its watch sees the delete): the device is left and no
	// longer among the cluster's members.
	node := member("lab-0").NodeName
	if out, err := l.Kubectl(ctx, "lab-0", "delete", "node", node); err != nil {
		t.Fatalf("kubectl delete node %s: %v %s", node, err, out)
	}
	deleted := time.Now()
	for {
		st := l.deviceState(ctx, t, wdev)
		c, err := l.Cluster(ctx, "lab-0")
		if err != nil {
			t.Fatal(err)
		}
		still := false
		for _, m := range c.Members {
			still = still || m.Device == wdev
		}
		if st == "left" && !still {
			break
		}
		if time.Since(deleted) > 15*time.Second {
			t.Fatalf("15 s after kubectl delete node %s, ztpd shows %s as %q (still a member: %v), not left", node, worker, st, still)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("(a) Node %s deleted with kubectl: ztpd shows %s left after %s", node, worker, time.Since(deleted).Round(100*time.Millisecond))

	// (c) The worker's bootstrap token revoked in ztpd: ztpd deletes its
	// Secret from the cluster, and the real API server refuses a TLS
	// bootstrap with it. kube-apiserver caches a successful token
	// authentication for 10 s, so the attempt comes after (b), well past
	// that.
	tokenID := l.bootstrapTokenID(t, worker)
	if out, err := l.ZTPD(ctx, "token", "revoke", tokenID, "--kind", "kubeadm", "--yes"); err != nil {
		t.Fatalf("ztpd token revoke %s: %v %s", tokenID, err, out)
	}
	revoked := time.Now()

	// (b) lab-1's kube-apiserver stopped for longer than the alert time:
	// ztpd shows the cluster Alert, and Running again once it is back.
	plane := l.Kube.Plane("lab-1")
	if plane == nil {
		t.Fatal("lab-1 has no control plane")
	}
	state := func() string {
		c, err := l.Cluster(ctx, "lab-1")
		if err != nil {
			t.Fatal(err)
		}
		return c.State
	}
	if s := state(); s != "Running" {
		t.Fatalf("lab-1 is %s before its API server stops", s)
	}
	stopped := time.Now()
	if err := plane.CP.StopAPIServer(); err != nil {
		// kube-apiserver drains its connections (the kubelets' and ztpd's
		// watches) on SIGTERM; the control plane kills it after 15 s, as
		// the kubelet would after a static pod's grace period.
		t.Logf("stopping kube-apiserver: %v", err)
	}
	if slices.Contains(plane.CP.Running(), controlplane.APIServer) {
		t.Fatalf("kube-apiserver still runs after StopAPIServer")
	}
	t.Logf("lab-1's kube-apiserver stopped in %s", time.Since(stopped).Round(100*time.Millisecond))
	for s := state(); s != "Alert"; s = state() {
		if time.Since(stopped) > LabAlertAfter+40*time.Second {
			t.Fatalf("lab-1 is %s %s after its API server stopped (alert after %s)", s, time.Since(stopped).Round(time.Second), LabAlertAfter)
		}
		time.Sleep(500 * time.Millisecond)
	}
	alertIn := time.Since(stopped)
	if alertIn < LabAlertAfter {
		t.Errorf("lab-1 went Alert %s after its API server stopped, before the alert time %s", alertIn, LabAlertAfter)
	}
	if err := plane.CP.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	for s := state(); s != "Running"; s = state() {
		if time.Since(started) > 90*time.Second {
			t.Fatalf("lab-1 is still %s %s after its API server started again", s, time.Since(started).Round(time.Second))
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("(b) lab-1's kube-apiserver stopped: Alert after %s; started again: Running after %s",
		alertIn.Round(100*time.Millisecond), time.Since(started).Round(100*time.Millisecond))

	// (c), the attempt.
	if wait := 11*time.Second - time.Since(revoked); wait > 0 {
		time.Sleep(wait)
	}
	out, err := l.Kube.BootstrapAttempt(ctx, worker, node+"-again")
	if err == nil || !(strings.Contains(out, "Unauthorized") || strings.Contains(out, "401")) {
		t.Fatalf("bootstrap with revoked token %s: want 401 Unauthorized, got %v:\n%s", tokenID, err, tail(out, 2000))
	}
	t.Logf("(c) token %s revoked through ztpd: the API server refuses a bootstrap with it: %s", tokenID, firstLine(lastMatch(out, "nauthorized")))
}

// device returns ztpd's device id of a planned device.
func (l *Lab) device(t *testing.T, name string) string {
	t.Helper()
	for _, d := range l.Plan {
		if d.Name != name {
			continue
		}
		for _, rec := range l.Result.Devices {
			if strings.EqualFold(rec.MAC, d.MAC) {
				return rec.ID
			}
		}
	}
	t.Fatalf("no device record for %s", name)
	return ""
}

// deviceState is a device's state as ztpd's REST API shows it.
func (l *Lab) deviceState(ctx context.Context, t *testing.T, id string) string {
	t.Helper()
	devs, err := listDevices(ctx, l.App)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if d.ID == id {
			return string(d.State)
		}
	}
	t.Fatalf("no device %s", id)
	return ""
}

// bootstrapTokenID is the id of the bootstrap token in a VM's
// JoinConfiguration.
func (l *Lab) bootstrapTokenID(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(l.Topo.WorkDir, "devices", name, "root", "etc/ztpd/kubeadm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var jc struct {
		Discovery struct {
			BootstrapToken struct {
				Token string `json:"token"`
			} `json:"bootstrapToken"`
		} `json:"discovery"`
	}
	if err := yaml.Unmarshal(b, &jc); err != nil {
		t.Fatal(err)
	}
	id, _, ok := strings.Cut(jc.Discovery.BootstrapToken.Token, ".")
	if !ok {
		t.Fatalf("%s's JoinConfiguration has no bootstrap token", name)
	}
	return id
}

// TestEndToEndOnboardingIPv6 is the end-to-end lab on a v6-only network (no
// IPv4 address in any namespace): SONiC switches by dhclient -6 with
// SONiC's option declarations (one subnet through ISC dhcrelay -6), an
// ONIE switch by link-local discovery, VMs by dhclient -6 and the metadata
// service over IPv6; the cluster's real control plane runs on the first
// VM's fd99:: address, and every device is a Ready Node joined over IPv6.
func TestEndToEndOnboardingIPv6(t *testing.T) {
	bin, ksim := requireLabFleet(t)
	if _, err := exec.LookPath("dhcrelay"); err != nil {
		t.Skip("the IPv6 lab needs ISC dhcrelay")
	}
	work := t.TempDir()
	var log strings.Builder
	l, err := Open(context.Background(), Scenario{Switches: 2, ONIE: 1, VMs: 2, Clusters: 1},
		Options{Prefix: "zl6e", Octet: 178, WorkDir: work, Bin: bin, Kubeletsim: ksim, Out: &log, Timeout: 6 * time.Minute, Family: IPv6})
	if l != nil {
		defer func() {
			l.Close()
			if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), "zl6e-") {
				t.Errorf("lab left namespaces behind:\n%s", out)
			}
		}()
	}
	t.Log("progress:\n" + log.String())
	if err != nil {
		for _, f := range []string{"ztpd.out", "relay6.out"} {
			if b, rerr := os.ReadFile(filepath.Join(work, f)); rerr == nil {
				t.Logf("%s (tail):\n%s", f, tail(string(b), 4000))
			}
		}
		t.Fatal(err)
	}
	res := l.Result
	if len(res.ControlPlanes) != 1 || !strings.HasPrefix(res.ControlPlanes[0].URL, "https://[fd99:") {
		t.Fatalf("control planes %+v: want one API server on an fd99:: address", res.ControlPlanes)
	}
	for _, d := range res.Devices {
		if d.State != "joined" || !strings.HasPrefix(d.IP, "fd99:") {
			t.Errorf("device %s (%s): state %s, address %s; want joined over IPv6", d.ID, d.MAC, d.State, d.IP)
		}
	}
	for _, c := range res.Clusters {
		for _, n := range c.Nodes {
			if n.Ready != "True" {
				t.Errorf("cluster %s: Node %s Ready=%s", c.Name, n.Name, n.Ready)
			}
		}
	}
	t.Logf("v6-only: %d devices joined the real cluster at %s in %s", len(res.Devices), res.ControlPlanes[0].URL, res.Elapsed.Round(100*time.Millisecond))
}
