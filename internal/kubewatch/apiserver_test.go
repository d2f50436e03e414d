package kubewatch_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	"github.com/ztpd/ztpd/internal/kubewatch"
	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/joiner/pki"
	"github.com/ztpd/ztpd/joiner/tokens"
	"github.com/ztpd/ztpd/testenv/controlplane"
	"github.com/ztpd/ztpd/testenv/kubebin"
)

// The control plane's addresses in the test's own network namespace
// (distinct from testenv/controlplane's tests, which may run at once).
const (
	cpEndpointIP  = "10.99.215.10"
	cpAdvertiseIP = "10.99.215.11"
)

// sink keeps the last of everything, for the real API server test.
type sink struct {
	mu     sync.Mutex
	nodes  map[string]kubewatch.Node
	gone   map[string]bool
	health kubewatch.Health
	csrs   map[string]kubewatch.CSR // by node name
}

func (s *sink) CSRSeen(_ string, c kubewatch.CSR) {
	s.mu.Lock()
	if s.csrs == nil {
		s.csrs = map[string]kubewatch.CSR{}
	}
	s.csrs[c.NodeName] = c
	s.mu.Unlock()
}

func (s *sink) csr(node string) (kubewatch.CSR, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.csrs[node]
	return c, ok
}

func (s *sink) NodeSeen(_ string, n kubewatch.Node) {
	s.mu.Lock()
	s.nodes[n.Name] = n
	delete(s.gone, n.Name)
	s.mu.Unlock()
}

func (s *sink) NodeGone(_, name string) {
	s.mu.Lock()
	s.gone[name] = true
	delete(s.nodes, name)
	s.mu.Unlock()
}

func (s *sink) ClusterSeen(_ string, h kubewatch.Health) {
	s.mu.Lock()
	s.health = h
	s.mu.Unlock()
}

func (s *sink) node(name string) (kubewatch.Node, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[name]
	return n, ok
}

func (s *sink) isGone(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gone[name]
}

func (s *sink) last() kubewatch.Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.health
}

type labeler map[string]map[string]string

func (l labeler) DesiredLabels(_, node string) (map[string]string, bool) {
	d, ok := l[node]
	return d, ok
}

type targets []kubewatch.Target

func (t targets) WatchTargets() ([]kubewatch.Target, error) { return t, nil }

// observerMint issues observer certificates from the cluster CA, as the
// joiner does, and counts them.
type observerMint struct {
	ca       *pki.CA
	validity time.Duration
	mu       sync.Mutex
	n        int
}

func (m *observerMint) credentials(now time.Time) ([]byte, []byte, error) {
	kp, err := m.ca.IssueClient(pki.ClientCertRequest{
		CommonName: kubewatch.ObserverUser, Organizations: []string{kubewatch.ObserverGroup}, Validity: m.validity,
	}, now)
	if err != nil {
		return nil, nil, err
	}
	key, err := kp.PrivateKeyPEM()
	if err != nil {
		return nil, nil, err
	}
	m.mu.Lock()
	m.n++
	m.mu.Unlock()
	return kp.CertPEM(), key, nil
}

func (m *observerMint) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// builtVersion picks the newest pinned Kubernetes version that is built,
// or skips with the build command.
func builtVersion(t *testing.T) kubebin.Set {
	vs, err := kubebin.Versions()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range slices.Backward(vs) {
		if s, err := kubebin.Kubernetes(v); err == nil {
			return s
		}
	}
	return kubebin.Require(t, vs[len(vs)-1])
}

// TestRealAPIServer watches a real control plane (etcd, kube-apiserver and
// kube-controller-manager set up by kubeadm's init phases) as the observer
// identity with RBAC(): Nodes seen and gone, labels patched, everything
// outside the role refused, the client certificate renewed, and the API
// server's outage seen and survived.
func TestRealAPIServer(t *testing.T) {
	tok, err := tokens.GenerateBootstrapToken()
	if err != nil {
		t.Fatal(err)
	}
	tp := controlplane.StartForTest(t, controlplane.TestOptions{
		Version:   builtVersion(t).Version,
		Namespace: fmt.Sprintf("kw-%x", os.Getpid()), EndpointIP: cpEndpointIP, AdvertiseIP: cpAdvertiseIP,
		Tokens:  []bundle.Token{{Token: tok, TTL: time.Hour, Description: "ztpd: kubewatch test"}},
		Timeout: 8 * time.Minute,
	})
	cp, ns, ca := tp.ControlPlane, tp.NS, tp.CA
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	adminCfg, err := clientcmd.BuildConfigFromFlags("", cp.AdminKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	adminCfg.Dial = controlplane.NetnsDial(ns)
	admin := kubernetes.NewForConfigOrDie(adminCfg)
	if err := kubewatch.EnsureRBAC(ctx, admin); err != nil {
		t.Fatal(err)
	}
	if err := kubewatch.EnsureRBAC(ctx, admin); err != nil { // again: an update, not a conflict
		t.Fatalf("EnsureRBAC a second time: %v", err)
	}

	// The observer identity can do its job and nothing else.
	obsCertPEM, obsKeyPEM, err := (&observerMint{ca: ca, validity: time.Hour}).credentials(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	observer := kubernetes.NewForConfigOrDie(&rest.Config{
		Host: "https://" + cpEndpointIP + ":6443", Dial: controlplane.NetnsDial(ns),
		TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertPEM(), CertData: obsCertPEM, KeyData: obsKeyPEM},
	})
	if _, err := observer.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("observer cannot list Nodes: %v", err)
	}
	if _, err := observer.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("observer listing Secrets: err = %v, want 403 Forbidden", err)
	}
	if _, err := observer.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("observer listing Pods: err = %v, want 403 Forbidden", err)
	}
	if _, err := observer.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "intruder"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("observer creating a Node: err = %v, want 403 Forbidden", err)
	}

	mint := &observerMint{ca: ca, validity: 20 * time.Second} // renewed after ~10 s
	s := &sink{nodes: map[string]kubewatch.Node{}, gone: map[string]bool{}}
	want := map[string]map[string]string{
		"w-1": {"ztpd.io/hwsku": "Accton-AS7326-56X", "sonic.ztpd.io/version": "202405"},
		"w-2": {"ztpd.io/role": "leaf"},
	}
	m, err := kubewatch.New(kubewatch.Options{
		Targets: targets{{ClusterID: "c1", Name: "real", Endpoint: cpEndpointIP + ":6443",
			CACertPEM: ca.CertPEM(), Credentials: mint.credentials}},
		Sink: s, Labeler: labeler(want),
		Logger:        slog.New(slog.NewTextHandler(testLog{t}, nil)),
		ProbeInterval: time.Second,
		Dial:          controlplane.NetnsDial(ns),
	})
	if err != nil {
		t.Fatal(err)
	}
	mctx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() { m.Run(mctx); close(watchDone) }()
	defer func() { stopWatch(); <-watchDone }()
	started := time.Now()

	waitFor(t, 20*time.Second, "cluster reachable and synced", func() bool {
		h := s.last()
		return h.APIReachable && h.Synced && h.Err == ""
	})

	// A Node registers (as the admin, standing in for a kubelet) and goes
	// Ready: seen, labelled through the observer identity.
	createReadyNode(t, ctx, admin, "w-1", map[string]string{"example.com/rack": "r1", "ztpd.io/stale": "x"})
	waitFor(t, 10*time.Second, "w-1 seen Ready", func() bool {
		n, ok := s.node("w-1")
		return ok && n.Ready == kubewatch.ReadyTrue && n.Reason == "KubeletReady"
	})
	wantLabels := map[string]string{
		"example.com/rack": "r1", "ztpd.io/hwsku": "Accton-AS7326-56X", "sonic.ztpd.io/version": "202405",
	}
	var got *corev1.Node
	waitFor(t, 10*time.Second, "w-1 labelled", func() bool {
		got, err = admin.CoreV1().Nodes().Get(ctx, "w-1", metav1.GetOptions{})
		return err == nil && maps.Equal(got.Labels, wantLabels)
	})
	if !slices.ContainsFunc(got.ManagedFields, func(f metav1.ManagedFieldsEntry) bool { return f.Manager == "ztpd" }) {
		t.Errorf("no managed fields of manager ztpd on w-1: the patch did not come from the watch")
	}
	waitFor(t, 10*time.Second, "health counts w-1", func() bool {
		h := s.last()
		return h.Nodes == 1 && h.ReadyNodes == 1 && h.ReadyControlPlanes == 0
	})

	// A kubelet client certificate request, approved by the admin: the
	// observer reads who asked (the API server's field selector on the
	// signer and the role's read-only CSR rule work for real).
	csrKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csrDER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "system:node:w-9", Organization: []string{"system:nodes"}}}, csrKey)
	if err != nil {
		t.Fatal(err)
	}
	req, err := admin.CertificatesV1().CertificateSigningRequests().Create(ctx, &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-csr-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csrDER}),
			SignerName: kubewatch.KubeletClientSigner,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Approved as kubectl certificate approve does: on the latest version,
	// again on a conflict, and not at all when it already is. The
	// controller manager's csrapproving controller may approve it first:
	// the admin may create node client requests, so it qualifies for
	// auto-approval; a second Approved condition is refused as a duplicate.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, req.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if slices.ContainsFunc(cur.Status.Conditions, func(c certificatesv1.CertificateSigningRequestCondition) bool {
			return c.Type == certificatesv1.CertificateApproved
		}) {
			return nil
		}
		cur.Status.Conditions = append(cur.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Test", Message: "approved by the test"})
		_, err = admin.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, cur.Name, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "w-9's CSR seen", func() bool {
		c, ok := s.csr("w-9")
		return ok && c.Approved && c.Requester == req.Spec.Username && c.Requester != ""
	})

	// Deleted: gone within seconds.
	deleted := time.Now()
	if err := admin.CoreV1().Nodes().Delete(ctx, "w-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "w-1 gone", func() bool { return s.isGone("w-1") })
	t.Logf("NodeGone %v after the delete", time.Since(deleted).Round(time.Millisecond))

	// The first certificate (20 s) is renewed, expires, and the watch keeps
	// working with the new one.
	waitFor(t, 30*time.Second, "certificate renewed", func() bool { return mint.count() >= 2 })
	if d := time.Until(started.Add(25 * time.Second)); d > 0 {
		time.Sleep(d) // past the first certificate's expiry
	}
	if h := s.last(); !h.APIReachable || h.Err != "" {
		t.Errorf("after renewal: health %+v", h)
	}

	// The API server stops: unreachable, with the reason; back: reachable,
	// and the informer resumes.
	if err := cp.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "API unreachable", func() bool {
		h := s.last()
		return !h.APIReachable && h.Err != ""
	})
	t.Logf("while stopped: %s", s.last().Err)
	time.Sleep(3 * time.Second)
	if err := cp.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "API reachable again", func() bool { return s.last().APIReachable })
	createReadyNode(t, ctx, admin, "w-2", nil)
	resumed := time.Now()
	waitFor(t, 90*time.Second, "w-2 seen after the restart", func() bool {
		n, ok := s.node("w-2")
		return ok && n.Ready == kubewatch.ReadyTrue
	})
	t.Logf("w-2 seen %v after its creation", time.Since(resumed).Round(time.Millisecond))
	waitFor(t, 30*time.Second, "w-2 labelled", func() bool {
		n, err := admin.CoreV1().Nodes().Get(ctx, "w-2", metav1.GetOptions{})
		return err == nil && n.Labels["ztpd.io/role"] == "leaf"
	})
	waitFor(t, 30*time.Second, "healthy after the restart", func() bool {
		h := s.last()
		return h.APIReachable && h.Err == "" && h.Nodes == 1
	})
	t.Logf("client certificates minted: %d", mint.count())
}

func createReadyNode(t *testing.T, ctx context.Context, admin kubernetes.Interface, name string, labels map[string]string) {
	t.Helper()
	n, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The watch may label the new Node between the create and this update
	// (a conflict on the resource version): retry on the fresh object, as
	// a kubelet's status update does.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		cur.Status.Conditions = []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status",
			LastHeartbeatTime: now, LastTransitionTime: now,
		}}
		_, err = admin.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
