package controlplane

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/joiner/pki"
	"github.com/ztpd/ztpd/joiner/tokens"
	"github.com/ztpd/ztpd/testenv/kubebin"
	"github.com/ztpd/ztpd/testenv/netns"
)

// The control plane's addresses, inside a network namespace of the test's
// own: the endpoint (what a load balancer would hold) and the node's.
const (
	endpointIP  = "10.99.214.10"
	advertiseIP = "10.99.214.11"
)

// testBundle is what ztpd's joiner hands a first control plane and a worker.
type testBundle struct {
	ca         *pki.CA
	worker     tokens.BootstrapToken
	shortLived tokens.BootstrapToken // TTL 20 s: expires during the test
	version    bundle.Version
	workerJoin []byte
}

// startTestPlane starts the control plane of a fresh bundle whose init
// creates a worker's token and a short-lived one, and renders the worker's
// join.
func startTestPlane(t *testing.T, version string) (*TestPlane, testBundle) {
	t.Helper()
	var b testBundle
	for _, p := range []*tokens.BootstrapToken{&b.worker, &b.shortLived} {
		var err error
		if *p, err = tokens.GenerateBootstrapToken(); err != nil {
			t.Fatal(err)
		}
	}
	tp := StartForTest(t, TestOptions{
		Version:    version,
		Namespace:  fmt.Sprintf("cp-%x-%s", os.Getpid(), strings.ReplaceAll(version, ".", "")),
		EndpointIP: endpointIP, AdvertiseIP: advertiseIP,
		CertSANs: []string{"api.test.example"},
		Tokens: []bundle.Token{
			{Token: b.worker, TTL: time.Hour, Description: "ztpd: worker w-1"},
			{Token: b.shortLived, TTL: 20 * time.Second, Description: "ztpd: short-lived"},
		},
		Manifests: [][]byte{[]byte(bundle.ClusterAdminsRBAC)},
	})
	b.ca, b.version = tp.CA, tp.Version
	b.workerJoin = b.joinConfig(t, b.worker, b.ca.DiscoveryHash())
	return tp, b
}

// joinConfig renders a worker's JoinConfiguration with another token or CA
// hash, as a misconfigured or attacked node would have.
func (b testBundle) joinConfig(t *testing.T, tok tokens.BootstrapToken, hash string) []byte {
	t.Helper()
	p, err := bundle.PlanJoin(bundle.JoinParams{
		Version: b.version, APIServerEndpoint: endpointIP + ":6443", Token: tok,
		CACertHashes: []string{hash}, NodeName: "w-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	return p.Config
}

func TestControlPlane(t *testing.T) {
	if err := Check(); err != nil {
		t.Skip("skipping:", err)
	}
	if err := netns.Check(); err != nil {
		t.Skip("skipping:", err)
	}
	vs, err := kubebin.Versions()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Run(v, func(t *testing.T) { testControlPlane(t, v) })
	}
}

func testControlPlane(t *testing.T, version string) {
	tp, b := startTestPlane(t, version)
	cp, ns, bins := tp.ControlPlane, tp.NS, tp.Bins
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	if cp.URL() != "https://"+endpointIP+":6443" {
		t.Errorf("URL = %s", cp.URL())
	}
	// The components run with kubeadm's flags: the node authorizer,
	// NodeRestriction, and the controller manager signing with our CA.
	api := strings.Join(cp.Command(APIServer), " ")
	for _, f := range []string{"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction", "--advertise-address=" + advertiseIP} {
		if !strings.Contains(api, f) {
			t.Errorf("kube-apiserver runs without %s: %s", f, api)
		}
	}
	kcm := strings.Join(cp.Command(ControllerManager), " ")
	for _, f := range []string{"--cluster-signing-cert-file=/etc/kubernetes/pki/ca.crt", "--cluster-signing-key-file=/etc/kubernetes/pki/ca.key", "--controllers=*,bootstrapsigner,tokencleaner"} {
		if !strings.Contains(kcm, f) {
			t.Errorf("kube-controller-manager runs without %s: %s", f, kcm)
		}
	}
	// kubeadm used our CA: it is the one on disk, unchanged.
	if got, err := os.ReadFile(filepath.Join(cp.KubernetesDir(), "pki", "ca.crt")); err != nil || string(got) != string(b.ca.CertPEM()) {
		t.Errorf("pki/ca.crt is not ztpd's CA (%v)", err)
	}

	out, err := cp.Kubectl(ctx, "get", "--raw", "/api/v1/namespaces/kube-public/configmaps/cluster-info")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"jws-kubeconfig-`+b.worker.ID()+`"`) {
		t.Errorf("cluster-info is not signed for the worker token (bootstrapsigner): %s", out)
	}
	if out, err := cp.Kubectl(ctx, "get", "clusterrolebinding", "ztpd:cluster-admins", "-o", "name"); err != nil || !strings.Contains(string(out), "ztpd:cluster-admins") {
		t.Errorf("extra manifest not applied: %s %v", out, err)
	}
	// bootstrap-token phase: the CSR auto-approval bindings for bootstrappers.
	if out, err := cp.Kubectl(ctx, "get", "clusterrolebinding", "kubeadm:node-autoapprove-bootstrap", "-o", "jsonpath={.roleRef.name}"); err != nil || !strings.Contains(string(out), "nodeclient") {
		t.Errorf("CSR auto-approve binding: %s %v", out, err)
	}

	// Real join discovery: the right token and hash work...
	j, err := JoinDiscovery(ctx, JoinConfig{
		Kubeadm: bins.Kubeadm, Config: b.workerJoin, Dir: filepath.Join(dir, "w-1"), Run: NetnsRun(ns),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(j.Output, "TLS certificate validates against pinned roots") {
		t.Errorf("kubeadm did not report a pinned-CA discovery:\n%s", j.Output)
	}
	checkBootstrapKubeconfig(t, j, b)
	if ca, err := os.ReadFile(j.CACert); err != nil || string(ca) != string(b.ca.CertPEM()) {
		t.Errorf("join wrote a CA that is not the cluster's (%v)", err)
	}

	// ... a wrong CA hash, a wrong secret and an unknown token do not.
	other, err := pki.NewCA("kubernetes", pki.ECDSAP256, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	unknown, err := tokens.GenerateBootstrapToken()
	if err != nil {
		t.Fatal(err)
	}
	wrongSecret, err := tokens.ParseBootstrapToken(b.worker.ID() + "." + strings.Repeat("0", 16))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cfg  []byte
		want string
	}{
		{"wrong CA hash", b.joinConfig(t, b.worker, other.DiscoveryHash()), "cluster CA found in cluster-info ConfigMap is invalid"},
		{"wrong token secret", b.joinConfig(t, wrongSecret, b.ca.DiscoveryHash()), "failed to verify JWS signature"},
		{"unknown token", b.joinConfig(t, unknown, b.ca.DiscoveryHash()), "could not find a JWS signature"},
	} {
		j, err := JoinDiscovery(ctx, JoinConfig{
			Kubeadm: bins.Kubeadm, Config: c.cfg, Dir: filepath.Join(dir, "bad"), Run: NetnsRun(ns),
			DiscoveryTimeout: 5 * time.Second,
		})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
		if j == nil {
			continue
		}
		if _, serr := os.Stat(j.BootstrapKubeconfig); serr == nil {
			t.Errorf("%s: kubeadm wrote a bootstrap kubeconfig", c.name)
		}
		os.RemoveAll(filepath.Join(dir, "bad"))
	}

	// The 20 s token expires: tokencleaner deletes it, bootstrapsigner
	// drops its signature, and a join with it fails.
	deadline := time.Now().Add(90 * time.Second)
	for {
		out, err := cp.Kubectl(ctx, "get", "--raw", "/api/v1/namespaces/kube-public/configmaps/cluster-info")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out), "jws-kubeconfig-"+b.shortLived.ID()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the expired token's signature is still in cluster-info")
		}
		time.Sleep(time.Second)
	}
	if _, err := JoinDiscovery(ctx, JoinConfig{
		Kubeadm: bins.Kubeadm, Config: b.joinConfig(t, b.shortLived, b.ca.DiscoveryHash()), Dir: filepath.Join(dir, "expired"),
		Run: NetnsRun(ns), DiscoveryTimeout: 5 * time.Second,
	}); err == nil || !strings.Contains(err.Error(), "could not find a JWS signature") {
		t.Errorf("expired token: err = %v", err)
	}

	// A component that dies is restarted, as the kubelet restarts a static
	// pod (the controller manager exits when it loses its lease).
	if err := syscall.Kill(cp.PID(ControllerManager), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); cp.Restarts(ControllerManager) == 0 || cp.PID(ControllerManager) == 0; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("kube-controller-manager not restarted after it was killed")
		}
	}

	// The API server can be stopped for a while and comes back with the
	// cluster's state (etcd kept running). It stops promptly under an open
	// watch (without a bounded watch termination grace it kept the watch
	// for its 60 s shutdown timeout, ignoring SIGTERM).
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	watch := cp.cfg.Run(ctx, kubectl, "--kubeconfig", cp.AdminKubeconfig(), "get", "configmaps", "-A", "--watch")
	listed, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer watch.Wait()
	defer watch.Process.Kill()
	// The list comes first, then kubectl opens the watch.
	if _, err := bufio.NewReader(listed).ReadString('\n'); err != nil {
		t.Fatalf("kubectl get --watch: %v", err)
	}
	go io.Copy(io.Discard, listed)
	time.Sleep(time.Second)
	apiPID := cp.PID(APIServer)
	stopping := time.Now()
	if err := cp.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(stopping); d > 10*time.Second {
		t.Errorf("StopAPIServer under an open watch took %v", d)
	}
	if cp.Healthy(ctx) {
		t.Error("API server still answers after StopAPIServer")
	}
	if slices.Contains(cp.Running(), APIServer) || processAlive(apiPID) {
		t.Error("kube-apiserver process still running after StopAPIServer")
	}
	restart := time.Now()
	if err := cp.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s API server back in %v", version, time.Since(restart).Round(time.Millisecond))
	if _, err := cp.Kubectl(ctx, "get", "clusterrolebinding", "ztpd:cluster-admins"); err != nil {
		t.Errorf("state lost across the API server restart: %v", err)
	}

	// Whatever the stop did to the controller manager (it exits when it
	// cannot renew its lease), all three run again.
	for deadline := time.Now().Add(60 * time.Second); len(cp.Running()) != 3; time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("running after the API server restart: %v", cp.Running())
		}
	}
	pids := []int{cp.PID(Etcd), cp.PID(APIServer), cp.PID(ControllerManager)}
	for i, c := range []string{Etcd, APIServer, ControllerManager} {
		// The PID is the component's own (the runner and unshare exec).
		if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pids[i])); err != nil || !strings.HasPrefix(string(cmdline), cp.Command(c)[0]+"\x00") {
			t.Errorf("%s: pid %d runs %q (%v)", c, pids[i], cmdline, err)
		}
	}
	if err := cp.Stop(); err != nil {
		t.Error(err)
	}
	if r := cp.Running(); len(r) != 0 {
		t.Errorf("still running after Stop: %v", r)
	}
	for _, pid := range pids {
		if pid == 0 || processAlive(pid) {
			t.Errorf("process %d alive after Stop", pid)
		}
	}
	for _, d := range []string{filepath.Dir(cp.KubernetesDir()), dir} { // the plane's and the joins'
		if left := processesMentioning(d); len(left) > 0 {
			t.Errorf("processes left using %s: %v", d, left)
		}
	}
}

func checkBootstrapKubeconfig(t *testing.T, j *Join, b testBundle) {
	t.Helper()
	raw, err := os.ReadFile(j.BootstrapKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var kc struct {
		Clusters []struct {
			Cluster struct {
				Server string `json:"server"`
				CAData []byte `json:"certificate-authority-data"`
			} `json:"cluster"`
		} `json:"clusters"`
		Users []struct {
			User struct {
				Token string `json:"token"`
			} `json:"user"`
		} `json:"users"`
	}
	if err := yaml.Unmarshal(raw, &kc); err != nil {
		t.Fatal(err)
	}
	if len(kc.Clusters) != 1 || kc.Clusters[0].Cluster.Server != "https://"+endpointIP+":6443" ||
		string(kc.Clusters[0].Cluster.CAData) != string(b.ca.CertPEM()) {
		t.Errorf("bootstrap-kubelet.conf cluster: %+v", kc.Clusters)
	}
	if len(kc.Users) != 1 || kc.Users[0].User.Token != b.worker.Reveal() {
		t.Error("bootstrap-kubelet.conf does not carry the worker's bootstrap token")
	}
}

func processAlive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// processesMentioning lists the processes whose command line contains s.
func processesMentioning(s string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), s) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}
