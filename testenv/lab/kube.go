package lab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/ztpd/ztpd/joiner"
	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/testenv/controlplane"
	"github.com/ztpd/ztpd/testenv/kubebin"
	"github.com/ztpd/ztpd/testenv/netns"
)

// Kube is the lab's Kubernetes. What runs for real: the first control
// plane of each cluster (kubeadm init phases from the device's bundle,
// etcd, kube-apiserver and kube-controller-manager as processes in the
// device's namespace, kubeadm's mark-control-plane), and every other VM's
// `kubeadm join` discovery. What is simulated: the kubelet (there is no
// container runtime here), by cmd/kubeletsim in the device's namespace,
// which does the kubelet's API traffic: TLS bootstrap, Node registration,
// status and Lease; or, with UseHollow, by kubemark's hollow node: the
// real kubelet (TLS bootstrap, registration, pod workers, termination
// grace periods) over a fake container runtime that runs no containers,
// with a real kube-scheduler beside each control plane so pods land.
type Kube struct {
	Bins       kubebin.Set // the lab's Kubernetes version (the newest built, or the one before with Scenario.Upgrade)
	Etcd       string
	Kubeletsim string // testenv/cmd/kubeletsim binary
	// hollow holds, by version, the hollow nodes and schedulers the lab
	// runs instead of kubeletsim (UseHollow); nil: kubeletsim.
	hollow map[string]kubebin.HollowSet
	// StatusEvery is the simulated kubelets' status update frequency (zero:
	// the kubelet's 10 s); an upgrade waits for a Node to report its new
	// version, so the lab's upgrade runs them every 2 s.
	StatusEvery time.Duration

	topo   *Topology
	closed chan struct{} // closed when the topology closes

	mu       sync.Mutex
	planes   map[string]*Plane // by cluster name
	kubelets map[string]*Kubelet
}

// Plane is a real control plane a lab VM runs.
type Plane struct {
	Cluster string
	Device  string
	NS      *netns.NS
	CP      *controlplane.ControlPlane
}

// Kubelet is one simulated kubelet process, in its device's namespace.
type Kubelet struct {
	Device   string
	NodeName string
	Labels   map[string]string
	NS       *netns.NS
	Log      string
	Proc     *Proc
	// Bootstrap is the credential it bootstrapped with: a kubeconfig path
	// (token or client certificate), or the switch's certificate.
	Bootstrap string
	// Restarts counts the times it failed and was started again.
	Restarts int
	// Version is what a hollow node runs: the cluster's at first, the
	// version an upgrade "installed" once its kubelet restarted.
	Version string

	k    *Kube
	args []string
	// hollow: kubemark's hollow node with args (its binary is the one of
	// Version); versionFile is what the lab's fake kubeadm and systemctl
	// install, a restart at that version follows.
	hollow      bool
	versionFile string
	starts      int
	upgradedAt  time.Time
}

// LabKubernetesVersion is the version the lab's clusters run: the newest
// pinned in testenv/k8sbin/versions.
func LabKubernetesVersion() (string, error) {
	vs, err := kubebin.Versions()
	if err != nil {
		return "", err
	}
	return vs[len(vs)-1], nil
}

// NewKube finds the binaries of the lab's Kubernetes version; the error
// wraps kubebin.ErrNotBuilt when they are not built.
func NewKube(kubeletsim string) (*Kube, error) {
	v, err := LabKubernetesVersion()
	if err != nil {
		return nil, err
	}
	return NewKubeAt(kubeletsim, v)
}

// NewKubeAt is NewKube with the clusters at version v (one of
// testenv/k8sbin/versions).
func NewKubeAt(kubeletsim, v string) (*Kube, error) {
	bins, err := kubebin.Kubernetes(v)
	if err != nil {
		return nil, err
	}
	etcd, err := kubebin.Etcd()
	if err != nil {
		return nil, err
	}
	return &Kube{Bins: bins, Etcd: etcd, Kubeletsim: kubeletsim,
		planes: map[string]*Plane{}, kubelets: map[string]*Kubelet{}}, nil
}

// NewKubeIn is NewKubeAt for devices in network namespaces of the caller's
// own (a test that builds its network itself, not a lab Topology): the
// simulated kubelets log under workDir, and stop with the control planes
// when the returned stop runs.
func NewKubeIn(kubeletsim, v, workDir string) (k *Kube, stop func() error, err error) {
	if k, err = NewKubeAt(kubeletsim, v); err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(workDir, 0o755); err != nil {
		return nil, nil, err
	}
	t := &Topology{WorkDir: workDir}
	k.attach(t)
	return k, t.Close, nil
}

// attach ties the Kube to a topology: its control planes stop when the
// topology closes.
func (k *Kube) attach(t *Topology) {
	k.topo = t
	k.closed = make(chan struct{})
	t.onClose(func() { close(k.closed) })
	t.onClose(k.stopPlanes)
}

// UseHollow makes the lab run kubemark's hollow node for every kubelet, and
// kube-scheduler beside every control plane, at the cluster's version and
// at each of versions (those an upgrade goes to). The error wraps
// kubebin.ErrNotBuilt when one is not built.
func (k *Kube) UseHollow(versions ...string) error {
	hs := map[string]kubebin.HollowSet{}
	for _, v := range append([]string{k.Bins.Version}, versions...) {
		h, err := kubebin.Hollow(v)
		if err != nil {
			return err
		}
		hs[h.Version] = h
	}
	k.hollow = hs
	return nil
}

// Hollow says whether the kubelets are kubemark's hollow nodes.
func (k *Kube) Hollow() bool { return k.hollow != nil }

// Plane returns the control plane of a cluster, or nil.
func (k *Kube) Plane(cluster string) *Plane {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.planes[cluster]
}

// Planes lists the running control planes, by cluster name.
func (k *Kube) Planes() []*Plane {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]*Plane, 0, len(k.planes))
	for _, p := range k.planes {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cluster < out[j].Cluster })
	return out
}

// Kubelet returns a device's simulated kubelet, or nil.
func (k *Kube) Kubelet(device string) *Kubelet {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.kubelets[device]
}

func (k *Kube) stopPlanes() {
	var wg sync.WaitGroup
	for _, p := range k.Planes() {
		wg.Add(1)
		go func() { defer wg.Done(); p.CP.Stop() }()
	}
	wg.Wait()
}

// startFirstControlPlane runs the real control plane from the init bundle
// the VM's cloud-config wrote under root, then registers the VM's own Node
// with a simulated kubelet (with kubeadm's kubelet.conf: a system:node
// client certificate, renewed through a CSR as the kubelet's certificate
// rotation does) and lets kubeadm mark it as a control plane.
func (k *Kube) startFirstControlPlane(ctx context.Context, ns *netns.NS, dir, root string, d Device, ip string, progress Progress) error {
	cfg, caCert, caKey, manifests, err := controlplane.InputsFromRoot(root)
	if err != nil {
		return fmt.Errorf("init bundle: %w", err)
	}
	reg, err := nodeRegistration(cfg, "InitConfiguration")
	if err != nil {
		return err
	}
	// A cluster with etcd nodes: the etcd CA and client certificate
	// from the join data, the client key the waiter made on this VM.
	var external *controlplane.ExternalEtcdFiles
	if ca, err := os.ReadFile(filepath.Join(root, bundle.EtcdCAFile)); err == nil {
		external = &controlplane.ExternalEtcdFiles{CACert: ca}
		if external.ClientCert, err = os.ReadFile(filepath.Join(root, bundle.EtcdAPIServerCert)); err != nil {
			return fmt.Errorf("init bundle: %w", err)
		}
		if external.ClientKey, err = os.ReadFile(filepath.Join(root, bundle.EtcdAPIServerKey)); err != nil {
			return fmt.Errorf("the etcd client key the waiter made: %w", err)
		}
		progress(d.Name, "kubeadm init phases (external etcd), kube-apiserver, kube-controller-manager")
	} else {
		progress(d.Name, "kubeadm init phases, etcd, kube-apiserver, kube-controller-manager")
	}
	cp, err := controlplane.Start(ctx, controlplane.Config{
		Kubernetes: k.Bins, Etcd: k.Etcd, Scheduler: k.hollow[k.Bins.Version].Scheduler, KubeadmConfig: cfg, CACert: caCert, CAKey: caKey,
		Manifests: manifests, Dir: filepath.Join(dir, "controlplane"), ExternalEtcd: external,
		Run: controlplane.NetnsRun(ns), Dial: controlplane.NetnsDial(ns),
	})
	if err != nil {
		return err
	}
	k.mu.Lock()
	k.planes[d.Cluster] = &Plane{Cluster: d.Cluster, Device: d.Name, NS: ns, CP: cp}
	k.mu.Unlock()
	progress(d.Name, fmt.Sprintf("control plane up in %s at %s; kubelet (simulated)", cp.StartDuration.Round(100*time.Millisecond), cp.URL()))
	kubeconf := filepath.Join(cp.KubernetesDir(), "kubelet.conf")
	kl, err := k.startKubelet(d.Name, ns, kubeletArgs{name: reg.Name, labels: reg.Labels, nodeIP: ip, kubeconfig: kubeconf,
		clientKubeconfig: true, versionFile: filepath.Join(root, KubeletVersionFile)})
	if err != nil {
		return err
	}
	if err := kl.waitRegistered(ctx, progress); err != nil {
		return err
	}
	progress(d.Name, "kubeadm init phase mark-control-plane")
	return cp.MarkControlPlane(ctx)
}

// EtcdLog is where an etcd node keeps its etcd's output, in the VM's
// directory.
const EtcdLog = "etcd.log"

// startEtcdNode runs what an etcd node's unit runs: the start script its
// join data wrote, with the real etcd, in the VM's namespace (the keys
// the waiter made, the certificates ztpd signed), until the lab closes;
// it returns once etcd answers on the node itself. ztpd sees it up only
// by reaching it over TLS.
func (k *Kube) startEtcdNode(ctx context.Context, ns *netns.NS, dir, root string, d Device, progress Progress) error {
	progress(d.Name, "etcd (real, from its join data)")
	logf, err := os.Create(filepath.Join(dir, EtcdLog))
	if err != nil {
		return err
	}
	cmd := ns.Command(context.Background(), "python3", filepath.Join(root, bundle.EtcdStartScriptPath))
	cmd.Env = append(os.Environ(), "ZTPD_ROOT="+root, "ZTPD_ETCD_BIN="+k.Etcd, "ZTPD_ETCD_ARGS=--log-level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	go func() {
		select {
		case <-k.closed:
			_ = cmd.Process.Kill()
		case <-done:
		}
	}()
	// etcd's own listener, through the namespace: up when it accepts.
	for ctx.Err() == nil {
		select {
		case <-done:
			return fmt.Errorf("etcd exited (see %s)", filepath.Join(dir, EtcdLog))
		default:
		}
		if c, err := controlplane.NetnsDial(ns)(ctx, "tcp", "127.0.0.1:2379"); err == nil {
			c.Close()
			progress(d.Name, "etcd listening")
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	return ctx.Err()
}

// joinNode runs the real `kubeadm join` discovery with the JoinConfiguration
// the VM's cloud-config wrote, then the simulated kubelet's TLS bootstrap
// with kubeadm's bootstrap-kubelet.conf, its node name and --node-labels
// from kubeadm-flags.env as the kubelet reads them.
func (k *Kube) joinNode(ctx context.Context, ns *netns.NS, dir, root string, d Device, ip string, progress Progress) error {
	cfg, err := os.ReadFile(filepath.Join(root, bundle.KubeadmConfigPath))
	if err != nil {
		return fmt.Errorf("join bundle: %w", err)
	}
	reg, err := nodeRegistration(cfg, "JoinConfiguration")
	if err != nil {
		return err
	}
	progress(d.Name, "kubeadm join phase kubelet-start (discovery)")
	j, err := controlplane.JoinDiscovery(ctx, controlplane.JoinConfig{
		Kubeadm: k.Bins.Kubeadm, Config: cfg, Dir: filepath.Join(dir, "kubeadm"),
		Run: controlplane.NetnsRun(ns), DiscoveryTimeout: 3 * time.Minute,
	})
	if err != nil {
		return err
	}
	flags, err := kubeadmFlags(filepath.Join(j.KubeletDir, "kubeadm-flags.env"))
	if err != nil {
		return err
	}
	name := reg.Name
	if v := flags["hostname-override"]; v != "" {
		name = v
	}
	labels := reg.Labels
	if v, ok := flags["node-labels"]; ok {
		if labels, err = parseLabelList(v); err != nil {
			return fmt.Errorf("kubeadm-flags.env: %w", err)
		}
	}
	progress(d.Name, "kubelet (simulated) TLS bootstrap with the bootstrap token")
	kl, err := k.startKubelet(d.Name, ns, kubeletArgs{name: name, labels: labels, nodeIP: ip, kubeconfig: j.BootstrapKubeconfig,
		versionFile: filepath.Join(root, KubeletVersionFile)})
	if err != nil {
		return err
	}
	return kl.waitRegistered(ctx, progress)
}

// sonicJoinFile is where the lab's switch keeps the join delivery the
// plugin received (see runJoinPlugin).
const sonicJoinFile = "/etc/sonic/ztpd/join-delivery.json"

// joinSwitch bootstraps the switch's kubelet the way ctrmgrd's kubelet on
// a switch would: with the client certificate and key of its join
// delivery, against KUBERNETES_MASTER|SERVER from its config_db fragment,
// trusting the cluster CA it installed, as the delivery's node name and
// with its node labels.
func (k *Kube) joinSwitch(ctx context.Context, ns *netns.NS, root string, d Device, ip string, progress Progress) error {
	raw, err := os.ReadFile(filepath.Join(root, sonicJoinFile))
	if err != nil {
		return fmt.Errorf("join delivery: %w", err)
	}
	del, err := ParseSonicDelivery(raw)
	if err != nil {
		return err
	}
	caPath, _ := del.CAFile()
	if caPath == "" {
		return errors.New("join delivery has no cluster CA for the trust store")
	}
	// The switch made its key and asked for a certificate for it: the
	// delivery carries the certificate, never a key.
	if _, ok := del.File(bundle.SonicClientKeyPath); ok || bytes.Contains(raw, []byte("PRIVATE KEY")) {
		return errors.New("join delivery carries a private key: ztpd made the switch's key")
	}
	if fi, err := os.Stat(filepath.Join(root, bundle.SonicClientKeyPath)); err != nil || fi.Mode().Perm() != 0o600 {
		return fmt.Errorf("the switch's own key: %v (%v)", err, fi)
	}
	ca := filepath.Join(root, caPath)
	progress(d.Name, "kubelet (simulated) TLS bootstrap with the switch certificate")
	kl, err := k.startKubelet(d.Name, ns, kubeletArgs{name: del.NodeName, labels: del.NodeLabels, nodeIP: ip,
		cert: filepath.Join(root, bundle.SonicClientCertPath), key: filepath.Join(root, bundle.SonicClientKeyPath),
		server: del.Server(), ca: ca, versionFile: filepath.Join(root, KubeletVersionFile)})
	if err != nil {
		return err
	}
	return kl.waitRegistered(ctx, progress)
}

// SonicDelivery is a switch's join delivery (method sonic), as the
// switch's join plugin reads it: its node name and labels, the
// config_db.json fragment (KUBERNETES_MASTER|SERVER) and the files to
// install (client certificate and key, cluster CA).
type SonicDelivery struct {
	Method     string            `json:"method"`
	NodeName   string            `json:"node_name"`
	NodeLabels map[string]string `json:"node_labels"`
	ConfigDB   struct {
		Master map[string]map[string]string `json:"KUBERNETES_MASTER"`
	} `json:"config_db"`
	Files []joiner.DeliveredFile `json:"files"`
}

// ParseSonicDelivery decodes a SONiC join delivery and checks it is one:
// method sonic, KUBERNETES_MASTER|SERVER ip and port, a node name.
func ParseSonicDelivery(raw []byte) (*SonicDelivery, error) {
	var d SonicDelivery
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("join delivery: %w", err)
	}
	if d.Method != "sonic" {
		return nil, fmt.Errorf("join delivery method %q: the lab's switches join kubeadm clusters with certificates (sonic)", d.Method)
	}
	srv := d.ConfigDB.Master["SERVER"]
	if srv["ip"] == "" || srv["port"] == "" || d.NodeName == "" {
		return nil, fmt.Errorf("join delivery lacks KUBERNETES_MASTER|SERVER ip/port or node_name: %s", raw)
	}
	return &d, nil
}

// Server is the API server's URL from KUBERNETES_MASTER|SERVER.
func (d *SonicDelivery) Server() string {
	srv := d.ConfigDB.Master["SERVER"]
	// As sonic-ctrmgrd builds it: "https://{ip}:{port}", so an IPv6 ip
	// comes bracketed already.
	return "https://" + srv["ip"] + ":" + srv["port"]
}

// File is the content of the delivered file at path, if there is one.
func (d *SonicDelivery) File(path string) ([]byte, bool) {
	for _, f := range d.Files {
		if f.Path == path {
			b, err := f.Decoded()
			return b, err == nil
		}
	}
	return nil, false
}

// CAFile is the cluster CA the switch installs in its trust store (the
// last file under /usr/local/share/ca-certificates/), or "".
func (d *SonicDelivery) CAFile() (path string, content []byte) {
	for _, f := range d.Files {
		if strings.HasPrefix(f.Path, "/usr/local/share/ca-certificates/") {
			path = f.Path
		}
	}
	if path == "" {
		return "", nil
	}
	content, _ = d.File(path)
	return path, content
}

type kubeletArgs struct {
	name, nodeIP string
	labels       map[string]string
	kubeconfig   string
	// clientKubeconfig: kubeconfig holds a client certificate already
	// (kubeadm's kubelet.conf), not a bootstrap token.
	clientKubeconfig bool
	cert, key        string
	server, ca       string
	// versionFile "installs" another kubelet: while it exists, its
	// contents are the version the kubelet reports (the lab's fake kubeadm
	// and systemctl write it in an upgrade); until then the cluster's.
	versionFile string
}

// KubeletVersionFile is where, under a lab device's root, the version its
// simulated kubelet reports is "installed" (see kubeletArgs.versionFile).
const KubeletVersionFile = "/var/lib/kubelet/lab-kubelet-version"

// startKubelet starts cmd/kubeletsim (or the hollow node) for one node
// inside ns; the topology stops it when the lab closes.
func (k *Kube) startKubelet(device string, ns *netns.NS, a kubeletArgs) (*Kubelet, error) {
	if k.hollow != nil {
		return k.startHollow(device, ns, a)
	}
	if k.Kubeletsim == "" {
		return nil, errors.New("lab: no kubeletsim binary (go build ./testenv/cmd/kubeletsim)")
	}
	args := []string{"--name", a.name, "--log-level", "info", "--progress-every", "1h", "--kubelet-version", k.Bins.Version}
	if a.versionFile != "" {
		args = append(args, "--kubelet-version-file", a.versionFile)
	}
	if k.StatusEvery > 0 {
		args = append(args, "--node-status-update-frequency", k.StatusEvery.String())
	}
	cred := a.kubeconfig
	if a.kubeconfig != "" {
		args = append(args, "--bootstrap-kubeconfig", a.kubeconfig)
	} else {
		args = append(args, "--client-cert", a.cert, "--client-key", a.key, "--server", a.server, "--ca-file", a.ca)
		cred = a.cert
	}
	if len(a.labels) > 0 {
		args = append(args, "--node-labels", bundle.NodeLabelsArg(a.labels))
	}
	if a.nodeIP != "" {
		args = append(args, "--node-ip", a.nodeIP)
	}
	kl := &Kubelet{Device: device, NodeName: a.name, Labels: a.labels, NS: ns, Bootstrap: cred, k: k, args: args}
	if err := kl.start(); err != nil {
		return nil, err
	}
	k.mu.Lock()
	k.kubelets[device] = kl
	k.mu.Unlock()
	return kl, nil
}

// start starts the kubelet's process.
func (kl *Kubelet) start() error {
	kl.k.mu.Lock()
	defer kl.k.mu.Unlock()
	return kl.startLocked()
}

// startLocked starts the kubelet's process; k.mu is held.
func (kl *Kubelet) startLocked() error {
	name := "kubelet-" + kl.Device
	if kl.starts > 0 {
		name += fmt.Sprintf(".%d", kl.starts)
	}
	kl.starts++
	bin := kl.k.Kubeletsim
	if kl.hollow {
		h, ok := kl.k.hollow[kl.Version]
		if !ok {
			return fmt.Errorf("%s: no hollow node of %s built for the lab (UseHollow)", kl.Device, kl.Version)
		}
		bin = h.Kubemark
	}
	p, err := kl.k.topo.StartProc(kl.NS.Command(context.Background(), bin, kl.args...), name)
	if err != nil {
		return err
	}
	kl.Proc, kl.Log = p, filepath.Join(kl.k.topo.WorkDir, name+".out")
	if kl.hollow {
		go removeHollowFiles(p, kl.Log)
		go kl.superviseHollow(p)
		go restartIfCSINodeStuck(p, kl.Log)
	}
	return nil
}

// kubeletRestartDelay is kubeadm's kubelet unit's RestartSec: systemd starts
// a kubelet that failed again after 10 s, for ever.
const kubeletRestartDelay = 10 * time.Second

// waitRegistered waits for the kubelet's "Successfully registered node"
// (the kubelet's own log line). A kubelet whose bootstrap or registration
// failed (e.g. a switch that asked before kubeadm's bootstrap-token phase
// made the RBAC for its group: 403) is started again after
// kubeletRestartDelay, as systemd does with the kubelet unit, for up to
// three minutes.
func (kl *Kubelet) waitRegistered(ctx context.Context, progress Progress) error {
	if kl.hollow {
		return kl.waitHollowRegistered(ctx)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		log, _ := os.ReadFile(kl.Log)
		if bytes.Contains(log, []byte("Successfully registered node")) {
			return nil
		}
		failed := bytes.Contains(log, []byte(`msg="kubelet failed"`))
		select {
		case <-kl.Proc.Done():
			failed = true
		default:
		}
		if failed {
			kl.Proc.Stop(5 * time.Second)
			log, _ = os.ReadFile(kl.Log)
			if time.Now().Add(kubeletRestartDelay).After(deadline) {
				return fmt.Errorf("kubelet (simulated) for %s failed %d times: %s", kl.NodeName, kl.Restarts+1, tail(string(log), 1500))
			}
			progress(kl.Device, fmt.Sprintf("kubelet failed, restarted in %s as systemd would: %s", kubeletRestartDelay, firstLine(lastMatch(string(log), "kubelet failed"))))
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(kubeletRestartDelay):
			}
			kl.Restarts++
			if err := kl.start(); err != nil {
				return err
			}
			continue
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubelet (simulated) for %s not registered after 3 minutes: %s", kl.NodeName, tail(string(log), 1500))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubelet (simulated) for %s not registered: %w: %s", kl.NodeName, ctx.Err(), tail(string(log), 1500))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// lastMatch is the last line of s containing sub.
func lastMatch(s, sub string) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], sub) {
			return lines[i]
		}
	}
	return ""
}

// BootstrapAttempt runs a fresh simulated kubelet in the device's namespace
// with the same bootstrap credential as the device's kubelet, as node name,
// until it registers or fails, and returns its outcome (nil when it
// registered) and its output.
func (k *Kube) BootstrapAttempt(ctx context.Context, device, name string) (string, error) {
	kl := k.Kubelet(device)
	if kl == nil {
		return "", fmt.Errorf("no kubelet for %s", device)
	}
	if !strings.HasSuffix(kl.Bootstrap, ".conf") {
		return "", fmt.Errorf("%s did not bootstrap with a kubeconfig", device)
	}
	out, err := kl.NS.Command(ctx, k.Kubeletsim, "--name", name, "--bootstrap-kubeconfig", kl.Bootstrap,
		"--exit-after-registration", "--log-level", "info", "--bootstrap-timeout", "30s", "--register-timeout", "30s").CombinedOutput()
	return string(out), err
}

// nodeReg is what a kubeadm configuration says about the node.
type nodeReg struct {
	Name   string
	Labels map[string]string
}

// nodeRegistration reads nodeRegistration.name and the node-labels kubelet
// argument (v1beta4: a list of name/value; v1beta3: a map) of the document
// of the given kind.
// NodeRegistration reads the node name and --node-labels the kubeadm
// configuration cfg gives the kubelet in its document of kind
// (InitConfiguration or JoinConfiguration), v1beta4 list or older map form.
func NodeRegistration(cfg []byte, kind string) (name string, labels map[string]string, err error) {
	r, err := nodeRegistration(cfg, kind)
	return r.Name, r.Labels, err
}

func nodeRegistration(cfg []byte, kind string) (nodeReg, error) {
	for _, doc := range bytes.Split(cfg, []byte("\n---")) {
		var m struct {
			Kind    string `json:"kind"`
			NodeReg struct {
				Name      string          `json:"name"`
				ExtraArgs json.RawMessage `json:"kubeletExtraArgs"`
			} `json:"nodeRegistration"`
		}
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nodeReg{}, fmt.Errorf("kubeadm configuration: %w", err)
		}
		if m.Kind != kind {
			continue
		}
		r := nodeReg{Name: m.NodeReg.Name}
		var labels string
		var list []struct{ Name, Value string }
		var byName map[string]string
		switch {
		case len(m.NodeReg.ExtraArgs) == 0:
		case json.Unmarshal(m.NodeReg.ExtraArgs, &list) == nil:
			for _, a := range list {
				if a.Name == "node-labels" {
					labels = a.Value
				}
			}
		case json.Unmarshal(m.NodeReg.ExtraArgs, &byName) == nil:
			labels = byName["node-labels"]
		default:
			return r, fmt.Errorf("kubeadm %s: kubeletExtraArgs is neither a list nor a map", kind)
		}
		var err error
		if r.Labels, err = parseLabelList(labels); err != nil {
			return r, err
		}
		if r.Name == "" {
			return r, fmt.Errorf("kubeadm %s has no nodeRegistration.name", kind)
		}
		return r, nil
	}
	return nodeReg{}, fmt.Errorf("kubeadm configuration has no %s", kind)
}

// kubeadmFlags reads KUBELET_KUBEADM_ARGS from kubeadm-flags.env into
// flag name -> value.
func kubeadmFlags(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("kubeadm's kubelet flags: %w", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "KUBELET_KUBEADM_ARGS=")
		if !ok {
			continue
		}
		for _, arg := range strings.Fields(strings.Trim(v, `"`)) {
			name, val, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
			out[name] = val
		}
	}
	return out, sc.Err()
}

// parseLabelList parses k=v,k=v.
func parseLabelList(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		key, v, ok := strings.Cut(kv, "=")
		if !ok || key == "" {
			return nil, fmt.Errorf("node label %q is not key=value", kv)
		}
		out[key] = v
	}
	return out, nil
}

// sortedKeys is for stable output.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for key := range m {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	return keys
}
