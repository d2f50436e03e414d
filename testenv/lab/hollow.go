package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
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
	args := []string{"--morph=kubelet", "--name", a.name, "--cert-dir", filepath.Join(dir, "pki"),
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
	if err := kl.start(); err != nil {
		return nil, err
	}
	k.mu.Lock()
	k.kubelets[device] = kl
	k.mu.Unlock()
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
		kl.Proc.Stop(15 * time.Second)
		select {
		case <-kl.k.closed:
			return
		default:
		}
		kl.k.mu.Lock()
		kl.Version = v
		kl.upgradedAt = time.Now()
		kl.k.mu.Unlock()
		if err := kl.start(); err != nil {
			// The Node then stays NotReady, which the rollout reports.
			fmt.Fprintf(os.Stderr, "lab: restarting %s's kubelet at %s: %v\n", kl.Device, v, err)
			return
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

// fakeRuntimeSocket is where kubemark's fake runtime listens (a random
// name under /tmp, logged nowhere).
var fakeRuntimeSocket = regexp.MustCompile(`^/tmp/kubelet_remote_[0-9]+\.sock$`)

// removeHollowFiles removes what the hollow node leaves under /tmp once it
// exited: its kubelet root, and its fake runtime's socket, which is found
// while it runs among the unix sockets of its network namespace (the
// device's: no other hollow node listens there).
func removeHollowFiles(p *Proc, log string) {
	var socks []string
look:
	for tries := 0; len(socks) == 0 && tries < 120; tries++ {
		select {
		case <-p.Done():
			break look
		case <-time.After(time.Second):
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/unix", p.Cmd.Process.Pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 8 && fakeRuntimeSocket.MatchString(f[7]) && !slices.Contains(socks, f[7]) {
				socks = append(socks, f[7])
			}
		}
	}
	<-p.Done()
	for _, s := range socks {
		os.Remove(s)
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
