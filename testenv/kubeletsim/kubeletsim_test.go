package kubeletsim

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/joiner/pki"
	"github.com/ztpd/ztpd/joiner/tokens"
	"github.com/ztpd/ztpd/testenv/controlplane"
	"github.com/ztpd/ztpd/testenv/netns"
	"github.com/ztpd/ztpd/testenv/testpki"
)

// The control plane's addresses inside the test's network namespace.
const (
	endpointIP  = "10.99.215.10"
	advertiseIP = "10.99.215.11"
)

// cluster is one real control plane (kubeadm init phases, etcd,
// kube-apiserver with Node,RBAC and NodeRestriction, kube-controller-manager
// with csrapproving and csrsigning) shared by the subtests.
type cluster struct {
	cp        *controlplane.ControlPlane
	ca        *pki.CA
	admin     kubernetes.Interface
	pool      *Pool
	bootstrap []byte // kubeadm join's bootstrap-kubelet.conf for the worker token
	revoked   tokens.BootstrapToken
	dir       string
	ns        *netns.NS
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	worker, err := tokens.GenerateBootstrapToken()
	if err != nil {
		t.Fatal(err)
	}
	revoked, err := tokens.GenerateBootstrapToken()
	if err != nil {
		t.Fatal(err)
	}
	// The newest pinned version: the one client-go v0.37 belongs to.
	tp := controlplane.StartForTest(t, controlplane.TestOptions{
		Namespace: fmt.Sprintf("kls-%x", os.Getpid()), EndpointIP: endpointIP, AdvertiseIP: advertiseIP,
		Tokens: []bundle.Token{
			{Token: worker, TTL: time.Hour, Description: "kubeletsim: workers"},
			{Token: revoked, TTL: time.Hour, Description: "kubeletsim: revoked"},
		},
		Manifests: [][]byte{[]byte(bundle.SonicRBAC)},
	})
	cp, ns, ca, bins := tp.ControlPlane, tp.NS, tp.CA, tp.Bins
	joinPlan, err := bundle.PlanJoin(bundle.JoinParams{
		Version: tp.Version, APIServerEndpoint: endpointIP + ":6443", Token: worker,
		CACertHashes: []string{ca.DiscoveryHash()}, NodeName: "w-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The worker's real kubeadm join discovery writes bootstrap-kubelet.conf.
	join, err := controlplane.JoinDiscovery(ctx, controlplane.JoinConfig{
		Kubeadm: bins.Kubeadm, Config: joinPlan.Config, Dir: filepath.Join(dir, "w-1"),
		Run: controlplane.NetnsRun(ns),
	})
	if err != nil {
		t.Fatal(err)
	}
	bootstrap, err := os.ReadFile(join.BootstrapKubeconfig)
	if err != nil {
		t.Fatal(err)
	}

	rc, err := clientcmd.BuildConfigFromFlags("", cp.AdminKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	rc.Dial = controlplane.NetnsDial(ns)
	admin, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{
		cp: cp, ca: ca, admin: admin, bootstrap: bootstrap, revoked: revoked, dir: dir, ns: ns,
		pool: NewPool(PoolOptions{Dial: DialFunc(controlplane.NetnsDial(ns))}),
	}
}

func TestKubeletSim(t *testing.T) {
	c := newCluster(t)
	t.Run("BootstrapToken", c.testBootstrapToken)
	t.Run("ClientCertificate", c.testClientCertificate)
	t.Run("RevokedToken", c.testRevokedToken)
	t.Run("NotApproved", c.testNotApproved)
	t.Run("RestrictedLabel", c.testRestrictedLabel)
	t.Run("DeletedNode", c.testDeletedNode)
	t.Run("Pods", c.testPods)
	t.Run("Version", c.testVersion)
	t.Run("Fifty", c.testFifty)
	t.Run("Command", c.testCommand)
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (c *cluster) start(t *testing.T, cfg Config) *Kubelet {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	k, err := c.pool.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	return k
}

func waitRegistered(t *testing.T, k *Kubelet) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := k.WaitRegistered(ctx); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond every 200 ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		var ok bool
		if ok, last = cond(); ok {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s (last: %s)", what, timeout, last)
}

func condition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func (c *cluster) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := c.admin.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (c *cluster) lease(name string) (*coordinationv1.Lease, error) {
	return c.admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(context.Background(), name, metav1.GetOptions{})
}

// checkIssued checks the CSR KCM approved and the certificate it signed
// with the cluster CA, and returns the CSR's requesting user.
func (c *cluster) checkIssued(t *testing.T, k *Kubelet) string {
	t.Helper()
	st := k.Stats()
	req, err := c.admin.CertificatesV1().CertificateSigningRequests().Get(context.Background(), st.CSR, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("CSR %q: %v", st.CSR, err)
	}
	if req.Spec.SignerName != "kubernetes.io/kube-apiserver-client-kubelet" {
		t.Errorf("CSR signer %q", req.Spec.SignerName)
	}
	if got := fmt.Sprint(req.Spec.Usages); got != "[digital signature client auth]" {
		t.Errorf("CSR usages %s", got)
	}
	approved := false
	for _, cond := range req.Status.Conditions {
		if cond.Type == "Approved" && cond.Reason == "AutoApproved" {
			approved = true
		}
	}
	if !approved {
		t.Errorf("CSR not auto-approved by csrapproving: %+v", req.Status.Conditions)
	}
	block, _ := pem.Decode(k.CertificatePEM())
	if block == nil {
		t.Fatal("no issued certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "system:node:"+k.NodeName() || fmt.Sprint(cert.Subject.Organization) != "[system:nodes]" {
		t.Errorf("certificate subject %v", cert.Subject)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(c.ca.CertPEM())
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("issued certificate does not chain to the cluster CA: %v", err)
	}
	return req.Spec.Username
}

func (c *cluster) testBootstrapToken(t *testing.T) {
	k := c.start(t, Config{
		NodeName:            "w-1",
		BootstrapKubeconfig: c.bootstrap,
		Labels:              map[string]string{"ztpd.io/role": "worker", "node.kubernetes.io/pool": "rack-1"},
		InternalIP:          "10.99.215.21",
		StatusEvery:         2 * time.Second,
		LeaseEvery:          time.Second,
	})
	waitRegistered(t, k)
	if user := c.checkIssued(t, k); !strings.HasPrefix(user, "system:bootstrap:") {
		t.Errorf("CSR requested by %q, want the bootstrap token's user", user)
	}

	n := c.node(t, "w-1")
	for l, want := range map[string]string{
		"ztpd.io/role": "worker", "node.kubernetes.io/pool": "rack-1",
		"kubernetes.io/hostname": "w-1", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
	} {
		if n.Labels[l] != want {
			t.Errorf("label %s = %q, want %q", l, n.Labels[l], want)
		}
	}
	if r := condition(n, corev1.NodeReady); r == nil || r.Status != corev1.ConditionTrue || r.Reason != "KubeletReady" {
		t.Errorf("Ready condition %+v", r)
	}
	for _, ct := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		if cnd := condition(n, ct); cnd == nil || cnd.Status != corev1.ConditionFalse {
			t.Errorf("%s condition %+v", ct, cnd)
		}
	}
	if n.Status.NodeInfo.KubeletVersion != DefaultKubeletVersion {
		t.Errorf("kubeletVersion %q", n.Status.NodeInfo.KubeletVersion)
	}
	if len(n.Status.Addresses) == 0 || n.Status.Addresses[0] != (corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "10.99.215.21"}) {
		t.Errorf("addresses %+v", n.Status.Addresses)
	}
	if n.Status.Allocatable.Pods().Value() != 110 {
		t.Errorf("allocatable %v", n.Status.Allocatable)
	}

	// The Lease: the kubelet's, owned by the Node, renewed.
	var first time.Time
	eventually(t, 10*time.Second, "lease created", func() (bool, string) {
		l, err := c.lease("w-1")
		if err != nil {
			return false, err.Error()
		}
		if *l.Spec.HolderIdentity != "w-1" || *l.Spec.LeaseDurationSeconds != 40 {
			t.Errorf("lease spec %+v", l.Spec)
		}
		if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != n.UID {
			return false, fmt.Sprintf("owner references %+v", l.OwnerReferences)
		}
		first = l.Spec.RenewTime.Time
		return true, ""
	})
	eventually(t, 10*time.Second, "lease renewed", func() (bool, string) {
		l, err := c.lease("w-1")
		if err != nil {
			return false, err.Error()
		}
		return l.Spec.RenewTime.After(first), l.Spec.RenewTime.String()
	})

	// NotReady shows on the Node, and Ready again.
	for _, ready := range []bool{false, true} {
		k.SetReady(ready)
		want, reason := corev1.ConditionFalse, "KubeletNotReady"
		if ready {
			want, reason = corev1.ConditionTrue, "KubeletReady"
		}
		eventually(t, 10*time.Second, fmt.Sprintf("Ready=%s on the Node", want), func() (bool, string) {
			r := condition(c.node(t, "w-1"), corev1.NodeReady)
			return r != nil && r.Status == want && r.Reason == reason, fmt.Sprintf("%+v", r)
		})
	}

	// Stop: a dead kubelet. The Node stays; the Lease is no longer renewed.
	k.Stop()
	l, err := c.lease("w-1")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	l2, err := c.lease("w-1")
	if err != nil {
		t.Fatal(err)
	}
	if !l2.Spec.RenewTime.Equal(l.Spec.RenewTime) {
		t.Errorf("lease renewed after Stop: %v then %v", l.Spec.RenewTime, l2.Spec.RenewTime)
	}
	c.node(t, "w-1")
	if st := k.Stats(); st.StatusPatches < 3 || st.LeaseRenewals < 3 {
		t.Errorf("stats %+v", st)
	}
}

func (c *cluster) testClientCertificate(t *testing.T) {
	// A SONiC switch's bundle certificate: CN system:bootstrap:<name>,
	// groups default-node-token, system:bootstrappers, ztpd:sonic-switches,
	// for the key the switch made (its CSR); the bundle carries no key.
	keyPEM, csrPEM, err := testpki.DeviceCSR()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := pki.ParseCSR(csrPEM)
	if err != nil {
		t.Fatal(err)
	}
	j, err := bundle.RenderSonic(bundle.SonicParams{
		ClusterID: "kls", ServerHost: endpointIP, SwitchName: "sonic-1", Validity: time.Hour, CSR: csr,
	}, c.ca, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	k := c.start(t, Config{
		NodeName:      "sonic-1",
		ClientCertPEM: j.Files[0].Content,
		ClientKeyPEM:  keyPEM,
		APIServer:     c.cp.URL(),
		CACertPEM:     c.ca.CertPEM(),
		Labels:        map[string]string{"ztpd.io/kind": "sonic"},
		InternalIP:    "10.99.215.22",
	})
	waitRegistered(t, k)
	if user := c.checkIssued(t, k); user != "system:bootstrap:sonic-1" {
		t.Errorf("CSR requested by %q", user)
	}
	n := c.node(t, "sonic-1")
	if r := condition(n, corev1.NodeReady); r == nil || r.Status != corev1.ConditionTrue {
		t.Errorf("Ready condition %+v", r)
	}
	if n.Labels["ztpd.io/kind"] != "sonic" {
		t.Errorf("labels %v", n.Labels)
	}
}

func (c *cluster) testRevokedToken(t *testing.T) {
	secret := "bootstrap-token-" + c.revoked.ID()
	if err := c.admin.CoreV1().Secrets("kube-system").Delete(context.Background(), secret, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting %s: %v", secret, err)
	}
	kc, err := clientcmd.Load(c.bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range kc.AuthInfos {
		ai.Token = c.revoked.Reveal()
	}
	revoked, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	// The API server's token authenticator reads Secrets from a cache.
	var err2 error
	eventually(t, 20*time.Second, "revoked token refused", func() (bool, string) {
		k := c.start(t, Config{NodeName: "revoked-1", BootstrapKubeconfig: revoked})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err2 = k.WaitRegistered(ctx)
		return err2 != nil, fmt.Sprint(err2)
	})
	if !apierrors.IsUnauthorized(err2) || !strings.Contains(err2.Error(), "401 Unauthorized") || !strings.Contains(err2.Error(), "bootstrap token") {
		t.Errorf("error = %v, want a clear 401", err2)
	}
	t.Logf("revoked token: %v", err2)
	if _, err := c.admin.CoreV1().Nodes().Get(context.Background(), "revoked-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("node revoked-1: %v, want not found", err)
	}
}

// testNotApproved bootstraps with an identity that may create node CSRs
// (system:node-bootstrapper) but that KCM does not auto-approve: one CSR
// times out pending, another is denied by an operator.
func (c *cluster) testNotApproved(t *testing.T) {
	const group = "kubeletsim:no-autoapprove"
	ctx := context.Background()
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kubeletsim:no-autoapprove"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:node-bootstrapper"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: group}},
	}
	if _, err := c.admin.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := func(name string, timeout time.Duration) Config {
		kp, err := c.ca.IssueClient(pki.ClientCertRequest{CommonName: "system:bootstrap:" + name, Organizations: []string{group}}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		key, err := kp.PrivateKeyPEM()
		if err != nil {
			t.Fatal(err)
		}
		return Config{NodeName: name, ClientCertPEM: kp.CertPEM(), ClientKeyPEM: key,
			APIServer: c.cp.URL(), CACertPEM: c.ca.CertPEM(), BootstrapTimeout: timeout}
	}

	pending := c.start(t, cfg("pending-1", 3*time.Second))
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := pending.WaitRegistered(wctx)
	if err == nil || !strings.Contains(err.Error(), "was not issued within 3s (never approved)") {
		t.Errorf("pending CSR: error %v", err)
	}

	denied := c.start(t, cfg("denied-1", time.Minute))
	var name string
	eventually(t, 10*time.Second, "CSR created", func() (bool, string) {
		list, err := c.admin.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, r := range list.Items {
			if r.Spec.Username == "system:bootstrap:denied-1" {
				name = r.Name
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d CSRs", len(list.Items))
	})
	req, err := c.admin.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	req.Status.Conditions = append(req.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateDenied, Status: corev1.ConditionTrue, Reason: "OperatorDenied", Message: "not one of ours",
	})
	if _, err := c.admin.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, name, req, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = denied.WaitRegistered(wctx)
	if err == nil || !strings.Contains(err.Error(), "denied") || !strings.Contains(err.Error(), "OperatorDenied") {
		t.Errorf("denied CSR: error %v", err)
	}
	t.Logf("denied: %v", err)
}

func (c *cluster) testRestrictedLabel(t *testing.T) {
	k := c.start(t, Config{
		NodeName:            "labels-1",
		BootstrapKubeconfig: c.bootstrap,
		Labels:              map[string]string{"node-role.kubernetes.io/worker": ""},
		RegisterTimeout:     3 * time.Second,
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := k.WaitRegistered(ctx)
	if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "node-role.kubernetes.io/worker") {
		t.Errorf("error = %v, want NodeRestriction refusing the label", err)
	}
}

func (c *cluster) testDeletedNode(t *testing.T) {
	k := c.start(t, Config{
		NodeName: "gone-1", BootstrapKubeconfig: c.bootstrap,
		StatusEvery: 2 * time.Second, LeaseEvery: time.Second,
	})
	waitRegistered(t, k)
	if err := c.admin.CoreV1().Nodes().Delete(context.Background(), "gone-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "deletion seen", func() (bool, string) { return k.Stats().NodeDeleted, "" })
	time.Sleep(3 * time.Second)
	if _, err := c.admin.CoreV1().Nodes().Get(context.Background(), "gone-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a running kubelet re-created its deleted Node: %v", err)
	}
	if k.Stats().HeartbeatFails == 0 {
		t.Error("no heartbeat failures counted against a deleted Node")
	}
	// A restart registers again.
	if err := k.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	n := c.node(t, "gone-1")
	if r := condition(n, corev1.NodeReady); r == nil || r.Status != corev1.ConditionTrue {
		t.Errorf("Ready condition after restart %+v", r)
	}
}

func (c *cluster) testFifty(t *testing.T) {
	const n = 50
	start := time.Now()
	ks := make([]*Kubelet, n)
	quiet := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for i := range ks {
		ks[i] = c.start(t, Config{
			NodeName:            fmt.Sprintf("scale-%02d", i),
			BootstrapKubeconfig: c.bootstrap,
			Labels:              map[string]string{"ztpd.io/test": "scale"},
			InternalIP:          fmt.Sprintf("10.99.216.%d", i+1),
			Logger:              quiet,
		})
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, k := range ks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			errs[i] = k.WaitRegistered(ctx)
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d kubelets bootstrapped and registered in %v", n, took.Round(time.Millisecond))
	eventually(t, 30*time.Second, "all Ready with leases", func() (bool, string) {
		nodes, err := c.admin.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: "ztpd.io/test=scale"})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for i := range nodes.Items {
			if r := condition(&nodes.Items[i], corev1.NodeReady); r != nil && r.Status == corev1.ConditionTrue {
				ready++
			}
		}
		leases, err := c.admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		held := 0
		for _, l := range leases.Items {
			if strings.HasPrefix(l.Name, "scale-") {
				held++
			}
		}
		return ready == n && held == n, fmt.Sprintf("%d Ready, %d leases", ready, held)
	})
}

// testCommand runs testenv/cmd/kubeletsim inside the control plane's network
// namespace, as the lab and the bench do. KUBELETSIM_COMMAND_COUNT sets how
// many kubelets it runs (default 20; the bench runs 500).
func (c *cluster) testCommand(t *testing.T) {
	count := 20
	if v := os.Getenv("KUBELETSIM_COMMAND_COUNT"); v != "" {
		var err error
		if count, err = strconv.Atoi(v); err != nil || count < 1 {
			t.Fatalf("KUBELETSIM_COMMAND_COUNT=%q", v)
		}
	}
	bin := filepath.Join(t.TempDir(), "kubeletsim")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/ztpd/ztpd/testenv/cmd/kubeletsim").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	kc := filepath.Join(t.TempDir(), "bootstrap-kubelet.conf")
	if err := os.WriteFile(kc, c.bootstrap, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	args := []string{"--count", strconv.Itoa(count), "--name-prefix", "cmd-",
		"--bootstrap-kubeconfig", kc, "--node-ip", "10.99.220.1", "--node-labels", "ztpd.io/test=command"}
	// KUBELETSIM_COMMAND_RUN_FOR keeps them heartbeating that long (with
	// the kubelet's default periods) before the summary.
	runFor := os.Getenv("KUBELETSIM_COMMAND_RUN_FOR")
	if runFor != "" {
		args = append(args, "--run-for", runFor)
	} else {
		args = append(args, "--exit-after-registration")
	}
	cmd := c.ns.Command(ctx, bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	t.Logf("kubeletsim stderr:\n%s", lastLines(stderr.String(), 10))
	if err != nil {
		t.Fatalf("kubeletsim: %v\n%s", err, out)
	}
	var sum struct {
		Count, Registered, Failed int
		AllRegisteredSeconds      float64                         `json:"all_registered_seconds"`
		BootstrapSeconds          struct{ P50, P90, Max float64 } `json:"bootstrap_seconds"`
		StatusPatches             int64                           `json:"status_patches"`
		LeaseRenewals             int64                           `json:"lease_renewals"`
		HeartbeatFailures         int64                           `json:"heartbeat_failures"`
	}
	if err := json.Unmarshal(out, &sum); err != nil {
		t.Fatalf("summary: %v\n%s", err, out)
	}
	t.Logf("%d kubelets from the command registered in %.2fs (bootstrap p50 %.3fs p90 %.3fs max %.3fs)",
		count, sum.AllRegisteredSeconds, sum.BootstrapSeconds.P50, sum.BootstrapSeconds.P90, sum.BootstrapSeconds.Max)
	if runFor != "" {
		t.Logf("after %s: %d status patches, %d lease renewals, %d heartbeat failures; CPU %v user %v system",
			runFor, sum.StatusPatches, sum.LeaseRenewals, sum.HeartbeatFailures, cmd.ProcessState.UserTime(), cmd.ProcessState.SystemTime())
		if sum.HeartbeatFailures != 0 {
			t.Errorf("%d heartbeat failures", sum.HeartbeatFailures)
		}
	}
	if sum.Count != count || sum.Registered != count || sum.Failed != 0 {
		t.Errorf("summary %s", out)
	}
	width := len(strconv.Itoa(count))
	lastIP := netip.MustParseAddr("10.99.220.1")
	for i := 1; i < count; i++ {
		lastIP = lastIP.Next()
	}
	n := c.node(t, fmt.Sprintf("cmd-%0*d", width, count))
	if n.Labels["ztpd.io/test"] != "command" || n.Status.Addresses[0].Address != lastIP.String() {
		t.Errorf("node %s labels %v addresses %v", n.Name, n.Labels, n.Status.Addresses)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
