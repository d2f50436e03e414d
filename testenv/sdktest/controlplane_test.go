package sdktest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/cloudstack-go/v2/cloudstack"
	"sigs.k8s.io/yaml"

	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/joiner"
	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/testenv/controlplane"
	"github.com/ztpd/ztpd/testenv/freeport"
	"github.com/ztpd/ztpd/testenv/inproc"
	"github.com/ztpd/ztpd/testenv/kubebin"
	"github.com/ztpd/ztpd/testenv/kubeletsim"
	"github.com/ztpd/ztpd/testenv/lab"
	"github.com/ztpd/ztpd/testenv/netns"
)

// The control-plane VM's link: a veth from this host's network namespace
// (ztpd's side) into a namespace of the test's own (the VM's side). The
// VM's address is the cluster's API endpoint, which ztpd's watch reaches
// over this link; nothing else on the host routes to 10.99.217.0/30.
const (
	vmHostAddr = "10.99.217.1"
	vmAddr     = "10.99.217.2"
	vmNet      = "10.99.217.0/30"
)

// TestCloudStackSDKRealControlPlane: a CloudStack user creates a cluster
// with the unmodified SDK; a VM joins it through ztpd's /join and gets the
// first control plane's bundle; the real control plane runs from that
// bundle's files (kubeadm init phases with ztpd's CA, etcd, kube-apiserver,
// kube-controller-manager) and its Node registers (the simulated kubelet
// with kubeadm's kubelet.conf, the real `kubeadm init phase
// mark-control-plane`). The SDK sees the cluster Starting, and its kubeconfig
// refused with what it waits for, until ztpd's watch of the API server sees
// the control-plane Node Ready; then Running, and the kubeconfig it hands
// out lists that Node with the real kubectl.
func TestCloudStackSDKRealControlPlane(t *testing.T) {
	begin := time.Now()
	if err := controlplane.Check(); err != nil {
		t.Skip("skipping:", err)
	}
	if err := netns.Check(); err != nil {
		t.Skip("skipping:", err)
	}
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("skipping: kubectl is not installed")
	}
	vs, err := kubebin.Versions()
	if err != nil {
		t.Fatal(err)
	}
	version := vs[len(vs)-1] // the newest pinned: client-go's release
	bins := kubebin.Require(t, version)
	etcd := kubebin.RequireEtcd(t)
	semver := strings.TrimPrefix(version, "v")

	vm, mac := vmNamespace(t)
	// ztpd serves devices on the host end of the VM's link (the VM posts
	// /join from its own address, which its lease ties to its MAC) and the
	// API on loopback, as an appliance keeps its API off the device network.
	deviceAddr, apiAddr := freeport.On(t, vmHostAddr), freeport.On(t, "127.0.0.1")
	// The control plane stops after ztpd (cleanups run last-in first-out):
	// kube-apiserver does not finish its SIGTERM shutdown while ztpd's
	// Node watch is open, and Stop would wait 15 s to kill it.
	var plane *controlplane.ControlPlane
	t.Cleanup(func() {
		if plane != nil {
			if err := plane.Stop(); err != nil {
				t.Error(err)
			}
		}
	})
	deviceBase, cfg, ztpd := inproc.ServeApp(t, func(c *config.Config) {
		c.HTTP.Addr = deviceAddr
		c.API.Addr, c.API.TLS.Enabled = apiAddr, false // plain HTTP on loopback only
		c.API.ClusterProbeInterval = config.Duration(500 * time.Millisecond)
		c.Joiner.AutoApprove = []config.Rule{{Subnets: []string{vmNet}, Roles: []string{"control-plane", "worker"}}}
	})
	base := "http://" + apiAddr
	eventually(t, 10*time.Second, func() error { // ServeApp waited for the device listener
		c, err := net.Dial("tcp", apiAddr)
		if err == nil {
			c.Close()
		}
		return err
	})
	adminKey, adminSecret := newKey(t, cfg, "admin")
	userKey, userSecret := newKey(t, cfg, "user")
	admin := cloudstack.NewAsyncClient(base+"/client/api", adminKey, adminSecret, true)
	admin.AsyncTimeout(60)
	user := cloudstack.NewAsyncClient(base+"/client/api", userKey, userSecret, true)
	user.AsyncTimeout(60)

	zones, err := user.Zone.ListZones(user.Zone.NewListZonesParams())
	if err != nil || zones.Count != 1 {
		t.Fatalf("listZones: %v %+v", err, zones)
	}
	offs, err := user.ServiceOffering.ListServiceOfferings(user.ServiceOffering.NewListServiceOfferingsParams())
	if err != nil || offs.Count == 0 {
		t.Fatalf("listServiceOfferings: %v %+v", err, offs)
	}
	vp := admin.Kubernetes.NewAddKubernetesSupportedVersionParams(2, 2048, semver)
	vp.SetUrl(deviceBase + "/isos/" + version + ".iso")
	vp.SetZoneid(zones.Zones[0].Id)
	kv, err := admin.Kubernetes.AddKubernetesSupportedVersion(vp)
	if err != nil {
		t.Fatal(err)
	}
	cp := user.Kubernetes.NewCreateKubernetesClusterParams("real control plane", kv.Id, "edge-real", offs.ServiceOfferings[0].Id, 1, zones.Zones[0].Id)
	cp.SetControlnodes(1)
	created, err := user.Kubernetes.CreateKubernetesCluster(cp)
	if err != nil || created.State != "Starting" {
		t.Fatalf("create: %v %+v", err, created)
	}
	gp := user.Kubernetes.NewGetKubernetesClusterConfigParams()
	gp.SetId(created.Id)
	startingErr := func(waitingFor string) error {
		c, _, err := user.Kubernetes.GetKubernetesClusterByID(created.Id)
		if err != nil {
			return err
		}
		if c.State != "Starting" {
			return fmt.Errorf("cluster is %s, want Starting", c.State)
		}
		_, err = user.Kubernetes.GetKubernetesClusterConfig(gp)
		if err == nil || !strings.Contains(err.Error(), "CloudStack API error 530 (CSExceptionErrorCode: 9999): Kubernetes cluster edge-real is Starting ("+waitingFor) ||
			!strings.Contains(err.Error(), "its kubeconfig is available once it is Running") {
			return fmt.Errorf("getKubernetesClusterConfig of the Starting cluster: %v", err)
		}
		return nil
	}
	if err := startingErr("waiting for its first control plane"); err != nil {
		t.Fatal(err)
	}

	// The VM joins: its enrollment secret (what its user-data or ZTP
	// section carries), its lease, then POST /join from its address.
	now := time.Now().UTC()
	if err := ztpd.Store.Update(func(tx core.Tx) error {
		return tx.Leases().Put(core.Lease{IP: vmAddr, MAC: mac, State: core.LeaseActive, Start: now, Expiry: now.Add(time.Hour)})
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	sec, err := ztpd.Joiner.Enroll(ctx, joiner.EnrollRequest{Cluster: created.Id, MAC: mac})
	if err != nil {
		t.Fatal(err)
	}
	vmHTTP := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: controlplane.NetnsDial(vm)}}
	body, _ := json.Marshal(map[string]string{"enrollment": sec.Reveal(), "mac": mac, "hostname": "edge-real-cp1", "kind": "vm"})
	resp, err := vmHTTP.Post(deviceBase+"/join", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var d joiner.Delivery
	err = json.NewDecoder(resp.Body).Decode(&d)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /join: %d %v", resp.StatusCode, err)
	}
	if !d.Init || d.Role != "control-plane" || d.NodeName != "edge-real-cp1" || d.APIEndpoint != vmAddr+":6443" || d.KubernetesVersion != version {
		t.Fatalf("first control plane's bundle: init %v role %q node %q endpoint %q version %q", d.Init, d.Role, d.NodeName, d.APIEndpoint, d.KubernetesVersion)
	}
	// The control plane, as the VM's deploy script would run kubeadm init
	// from the files cloud-init wrote.
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	writeCloudConfigFiles(t, d.CloudConfig, root)
	kubeadmConfig, caCert, caKey, manifests, err := controlplane.InputsFromRoot(root)
	if err != nil {
		t.Fatalf("the init bundle's cloud-config: %v", err)
	}
	if len(manifests) == 0 {
		t.Fatal("the init bundle carries no manifests (cluster-admins RBAC)")
	}
	plane, err = controlplane.Start(ctx, controlplane.Config{
		Kubernetes:    bins,
		Etcd:          etcd,
		KubeadmConfig: kubeadmConfig,
		CACert:        caCert,
		CAKey:         caKey,
		Manifests:     manifests,
		Dir:           filepath.Join(dir, "cp"),
		Run:           controlplane.NetnsRun(vm),
		Dial:          controlplane.NetnsDial(vm),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s control plane ready in %v", version, plane.StartDuration.Round(time.Millisecond))

	// The API server answers ztpd's watch, but no control-plane Node is
	// registered: still Starting, and the SDK is told so.
	eventually(t, time.Minute, func() error {
		return startingErr("waiting for its control-plane Nodes: 0 of 1 registered and Ready")
	})

	// The control plane's kubelet: kubeadm's kubelet.conf (system:node:<name>,
	// the node name ztpd put in the bundle) and the bundle's node labels;
	// then kubeadm marks the Node a control plane, as kubeadm init does.
	kubeletConf, err := os.ReadFile(filepath.Join(plane.KubernetesDir(), "kubelet.conf"))
	if err != nil {
		t.Fatal(err)
	}
	pool := kubeletsim.NewPool(kubeletsim.PoolOptions{Dial: kubeletsim.DialFunc(controlplane.NetnsDial(vm))})
	kubelet, err := pool.Start(context.Background(), kubeletsim.Config{
		NodeName: d.NodeName, BootstrapKubeconfig: kubeletConf, Labels: d.NodeLabels, InternalIP: vmAddr,
		KubeletVersion: version, StatusEvery: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(testLog{t}, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelet.Stop)
	if err := kubelet.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
	if err := plane.MarkControlPlane(ctx); err != nil {
		t.Fatal(err)
	}

	// ztpd's watch sees the control-plane Node Ready: Running.
	eventually(t, 2*time.Minute, func() error {
		c, _, err := user.Kubernetes.GetKubernetesClusterByID(created.Id)
		if err != nil {
			return err
		}
		if c.State != "Running" {
			return fmt.Errorf("cluster is %s", c.State)
		}
		return nil
	})
	running := time.Since(begin)
	ms, err := ztpd.Joiner.Members(ctx, created.Id)
	if err != nil || len(ms) != 1 || ms[0].Device != mac || ms[0].State != core.StateJoined || ms[0].NodeName != d.NodeName {
		t.Fatalf("members after the Node is Ready: %v %+v", err, ms)
	}

	// What a CloudStack user does next: the kubeconfig, and kubectl with it
	// against the real API server (over the VM's link, as ztpd's watch).
	kc, err := user.Kubernetes.GetKubernetesClusterConfig(gp)
	if err != nil || !strings.Contains(kc.Configdata, "https://"+vmAddr+":6443") {
		t.Fatalf("getKubernetesClusterConfig of the Running cluster: %v %+v", err, kc)
	}
	kcFile := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kcFile, []byte(kc.Configdata), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", kcFile, "get", "nodes", "-o", "json").Output()
	if err != nil {
		t.Fatalf("kubectl get nodes with the SDK's kubeconfig: %v %s", err, exitStderr(err))
	}
	nodes, err := lab.ParseNodes(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1 || nodes[0].Name != d.NodeName {
		t.Fatalf("kubectl get nodes: %s", out)
	}
	n := nodes[0]
	if !n.ControlPlane || n.Ready != "True" {
		t.Fatalf("Node %s: Ready=%q, labels %v", n.Name, n.Ready, n.Labels)
	}
	for k, v := range d.NodeLabels {
		if n.Labels[k] != v {
			t.Errorf("Node label %s=%q, the bundle says %q", k, n.Labels[k], v)
		}
	}
	// The kubeconfig is the user's (its key's name "sdk"), not an admin's:
	// listing Nodes works because ztpd's bundle binds ztpd:cluster-admins,
	// the certificate's group.
	if out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", kcFile, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}").Output(); err != nil ||
		!strings.HasPrefix(string(out), "sdk ") || !strings.Contains(string(out), "ztpd:cluster-admins") || strings.Contains(string(out), "system:masters") {
		t.Errorf("kubectl auth whoami: %v %s %s", err, out, exitStderr(err))
	}
	t.Logf("Running %v after the test began; whole test %v", running.Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))
}

// vmNamespace makes the control-plane VM's network namespace, linked to
// this host's namespace by a veth (host end vmHostAddr, VM end vmAddr on
// eth0, the VM's default route via the host end). Deleting the namespace
// at the end deletes the veth with it. It returns the namespace and the
// MAC of the VM's eth0.
func vmNamespace(t *testing.T) (*netns.NS, string) {
	t.Helper()
	ns, err := netns.Add(fmt.Sprintf("sdkcp-%x", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	hostIf := fmt.Sprintf("zsdk%x", os.Getpid())
	if len(hostIf) > 15 {
		hostIf = hostIf[:15]
	}
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	_ = exec.Command("ip", "link", "del", hostIf).Run() // a leftover of a killed run
	ip("link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", ns.Name)
	t.Cleanup(func() { exec.Command("ip", "link", "del", hostIf).Run() })
	ip("addr", "add", vmHostAddr+"/30", "dev", hostIf)
	ip("link", "set", hostIf, "up")
	for _, args := range [][]string{
		{"addr", "add", vmAddr + "/30", "dev", "eth0"},
		{"link", "set", "eth0", "up"},
		// kubeadm finds the node's address by the default route.
		{"route", "add", "default", "via", vmHostAddr},
	} {
		if err := ns.IP(args...); err != nil {
			t.Fatal(err)
		}
	}
	mac, err := ns.MAC("eth0")
	if err != nil {
		t.Fatal(err)
	}
	return ns, mac
}

// writeCloudConfigFiles writes the write_files of a #cloud-config under
// root, as cloud-init writes them, after checking the first control
// plane's files are there.
func writeCloudConfigFiles(t *testing.T, cc, root string) {
	t.Helper()
	var doc struct {
		WriteFiles []struct {
			Path    string `json:"path"`
			Content string `json:"content"`
		} `json:"write_files"`
	}
	if !strings.HasPrefix(cc, "#cloud-config\n") {
		t.Fatalf("the bundle's cloud_config is not a #cloud-config: %.80q", cc)
	}
	if err := yaml.Unmarshal([]byte(cc), &doc); err != nil {
		t.Fatalf("the bundle's cloud-config: %v", err)
	}
	files := map[string][]byte{}
	for _, f := range doc.WriteFiles {
		files[f.Path] = []byte(f.Content)
	}
	for _, p := range []string{"/etc/kubernetes/pki/ca.crt", "/etc/kubernetes/pki/ca.key", bundle.KubeadmConfigPath} {
		if len(files[p]) == 0 {
			t.Fatalf("the init bundle's cloud-config has no %s", p)
		}
	}
	for p, content := range files {
		dst := filepath.Join(root, filepath.Clean("/"+p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// eventually retries check every 250 ms until it returns nil, failing the
// test with its last error after timeout.
func eventually(t *testing.T, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// testLog writes log lines into the test's log.
type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func exitStderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
