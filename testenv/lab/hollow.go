package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/testenv/controlplane"
	"github.com/ztpd/ztpd/testenv/netns"
)

// startHollow runs kubemark's hollow node for one node inside ns: the real
// kubelet of the node's version over kubemark's fake container runtime
// (no container runs; the kubelet's pod workers, status and termination
// grace periods are real). Its credentials are the simulated kubelet's:
// the bootstrap kubeconfig or the switch's certificate and key (it does
// the TLS bootstrap itself, into a kubeconfig and cert dir of its own), or
// kubeadm's kubelet.conf on the first control plane.
func (k *Kube) startHollow(device string, ns *netns.NS, a kubeletArgs) (*Kubelet, error) {
	dir := filepath.Join(k.topo.WorkDir, "devices", device, "hollow-kubelet")
	if err := os.MkdirAll(filepath.Join(dir, "pki"), 0o700); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	// -v=2: the kubelet logs its Node's status events (NodeReady), which
	// restartIfCSINodeStuck reads.
	args := []string{"--morph=kubelet", "-v=2", "--name", a.name, "--cert-dir", filepath.Join(dir, "pki"),
		// The fake runtime's images: there is no containerd to ask.
		"--use-host-image-service=false", "--max-pods", "30"}
	cred := a.kubeconfig
	switch {
	case a.clientKubeconfig:
		kubeconfig = a.kubeconfig
	case a.kubeconfig != "":
		args = append(args, "--bootstrap-kubeconfig", a.kubeconfig)
	default:
		// The switch's certificate is a bootstrap credential (ztpd issues
		// it in the bootstrappers' group): the kubelet bootstraps with it.
		boot := filepath.Join(dir, "bootstrap-kubeconfig")
		if err := os.WriteFile(boot, []byte(certKubeconfig(a.server, a.ca, a.cert, a.key)), 0o600); err != nil {
			return nil, err
		}
		args = append(args, "--bootstrap-kubeconfig", boot)
		cred = a.cert
	}
	args = append(args, "--kubeconfig", kubeconfig)
	if len(a.labels) > 0 {
		args = append(args, "--node-labels", bundle.NodeLabelsArg(a.labels))
	}
	version := k.Bins.Version
	if b, err := os.ReadFile(a.versionFile); err == nil && strings.TrimSpace(string(b)) != "" {
		version = strings.TrimSpace(string(b))
	}
	kl := &Kubelet{Device: device, NodeName: a.name, Labels: a.labels, NS: ns, Bootstrap: cred, k: k, args: args,
		hollow: true, Version: version, versionFile: a.versionFile}
	k.mu.Lock()
	err := kl.startLocked()
	k.kubelets[device] = kl
	k.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if a.versionFile != "" {
		go kl.followVersion()
	}
	return kl, nil
}

// followVersion is the hollow node's `systemctl restart kubelet` after an
// upgrade: once the lab's fake systemctl installed another version (the
// version file), the hollow node of that version replaces the running one,
// with the same credentials, as the restarted kubelet unit would run the
// new binary.
func (kl *Kubelet) followVersion() {
	for {
		select {
		case <-kl.k.closed:
			return
		case <-time.After(250 * time.Millisecond):
		}
		b, err := os.ReadFile(kl.versionFile)
		v := strings.TrimSpace(string(b))
		if err != nil || v == "" || v == kl.Version {
			continue
		}
		kl.k.mu.Lock()
		p := kl.Proc
		kl.k.mu.Unlock()
		p.Stop(15 * time.Second)
		kl.k.mu.Lock()
		select {
		case <-kl.k.closed:
			kl.k.mu.Unlock()
			return
		default:
		}
		kl.Version = v
		kl.upgradedAt = time.Now()
		err = kl.startLocked()
		kl.k.mu.Unlock()
		if err != nil {
			// The Node then stays NotReady, which the rollout reports.
			fmt.Fprintf(os.Stderr, "lab: restarting %s's kubelet at %s: %v\n", kl.Device, v, err)
			return
		}
	}
}

// superviseHollow is the kubelet unit's Restart=always for the hollow node
// process p: a kubelet that exits on its own (the real kubelet exits when,
// e.g., it could not initialise its CSINode within 140 s because its
// registration was slow) is started again after kubeletRestartDelay, as
// systemd does; not when the lab closes or replaced p meanwhile (an
// upgrade's restart).
func (kl *Kubelet) superviseHollow(p *Proc) {
	<-p.Done()
	select {
	case <-kl.k.closed:
		return
	case <-time.After(kubeletRestartDelay):
	}
	kl.k.mu.Lock()
	defer kl.k.mu.Unlock()
	select {
	case <-kl.k.closed:
		return
	default:
	}
	if kl.Proc != p {
		return
	}
	kl.Restarts++
	if err := kl.startLocked(); err != nil {
		fmt.Fprintf(os.Stderr, "lab: restarting %s's kubelet: %v\n", kl.Device, err)
	}
}

// csiNodeGrace is how long a registered hollow node may stay NotReady with
// its CSINode not initialised before restartIfCSINodeStuck restarts it.
const csiNodeGrace = 20 * time.Second

// restartIfCSINodeStuck stops the hollow node process p when it registered
// its Node but stays NotReady because its CSINode could not be initialised:
// the kubelet tries that from its start, for about 140 s with growing
// pauses, and a registration that came late (a loaded machine: 20-40 s
// from start to registration) leaves it NotReady until the last try, after
// which it exits and systemd starts it again (superviseHollow), with its
// Node there. The lab does that restart as soon as the Node stays
// NotReady for csiNodeGrace after registration, instead of the kubelet's
// two minutes.
func restartIfCSINodeStuck(p *Proc, log string) {
	var registered time.Time
	for {
		select {
		case <-p.Done():
			return
		case <-time.After(time.Second):
		}
		b, _ := os.ReadFile(log)
		if bytes.Contains(b, []byte(`event="NodeReady"`)) {
			return
		}
		if registered.IsZero() {
			if bytes.Contains(b, []byte("Successfully registered node")) {
				registered = time.Now()
			}
			continue
		}
		if time.Since(registered) > csiNodeGrace && bytes.Contains(b, []byte("Failed to initialize CSINode")) {
			fmt.Fprintf(os.Stderr, "lab: %s: NotReady %s after registration, its CSINode not initialised: restarting it\n", filepath.Base(log), csiNodeGrace)
			p.Stop(5 * time.Second)
			return
		}
	}
}

// waitHollowRegistered waits for the hollow node's "Successfully registered
// node" (the kubelet's own log line) in the log of any of its processes
// (superviseHollow restarts one that failed), for up to three minutes.
func (kl *Kubelet) waitHollowRegistered(ctx context.Context) error {
	deadline := time.Now().Add(3 * time.Minute)
	var logs []string
	for {
		kl.k.mu.Lock()
		if !slices.Contains(logs, kl.Log) {
			logs = append(logs, kl.Log)
		}
		kl.k.mu.Unlock()
		var last []byte
		for _, l := range logs {
			last, _ = os.ReadFile(l)
			if bytes.Contains(last, []byte("Successfully registered node")) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubelet (hollow node) for %s not registered after 3 minutes (%d start(s)): %s", kl.NodeName, len(logs), tail(string(last), 1500))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubelet (hollow node) for %s not registered: %w: %s", kl.NodeName, ctx.Err(), tail(string(last), 1500))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// certKubeconfig is a kubeconfig authenticating with a client certificate
// and key in files.
func certKubeconfig(server, ca, cert, key string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster:
    server: %q
    certificate-authority: %q
users:
- name: node
  user:
    client-certificate: %q
    client-key: %q
contexts:
- name: node
  context: {cluster: cluster, user: node}
current-context: node
`, server, ca, cert, key)
}

// hollowRootLine is how kubemark names the kubelet root it made under
// /tmp (it takes no flag for it).
var hollowRootLine = regexp.MustCompile(`Using (/tmp/hollow-kubelet\.[A-Za-z0-9]+) as root dir for hollow-kubelet`)

// fakeRuntimeSockets is where kubemark's fake runtimes listen: a random
// name under /tmp, logged nowhere (and bound under another name first, so
// not found among a process's sockets either).
const fakeRuntimeSockets = "/tmp/kubelet_remote_*.sock"

// removeHollowFiles removes what the hollow node process p leaves under
// /tmp once it exited: its kubelet root, and the fake runtimes' sockets
// nobody listens on any more (a path-bound socket answers a connect from
// any network namespace while its process lives; refused, it is stale).
func removeHollowFiles(p *Proc, log string) {
	<-p.Done()
	socks, _ := filepath.Glob(fakeRuntimeSockets)
	for _, s := range socks {
		c, err := net.DialTimeout("unix", s, time.Second)
		if err == nil {
			c.Close()
			continue
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			os.Remove(s)
		}
	}
	b, _ := os.ReadFile(log)
	if m := hollowRootLine.FindSubmatch(b); m != nil {
		os.RemoveAll(string(m[1]))
	}
}

// UpgradedAt is when the hollow node was stopped to restart at the version
// an upgrade installed (zero: it was not).
func (kl *Kubelet) UpgradedAt() time.Time {
	kl.k.mu.Lock()
	defer kl.k.mu.Unlock()
	return kl.upgradedAt
}

// Client is a client of the cluster's API server as its admin (kubeadm's
// admin.conf), dialling from the control plane's namespace.
func (p *Plane) Client() (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", p.CP.AdminKubeconfig())
	if err != nil {
		return nil, err
	}
	cfg.Dial = controlplane.NetnsDial(p.NS)
	cfg.Timeout = 30 * time.Second
	return kubernetes.NewForConfig(cfg)
}
