package kubeletsim

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509/pkix"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestConfigRefused(t *testing.T) {
	kc := []byte("apiVersion: v1\nkind: Config\n")
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"bad name", Config{NodeName: "Bad_Name", BootstrapKubeconfig: kc}, "not a lower-case DNS-1123"},
		{"no credentials", Config{NodeName: "n1"}, "no bootstrap credentials"},
		{"both", Config{NodeName: "n1", BootstrapKubeconfig: kc, ClientCertPEM: []byte("x"), ClientKeyPEM: []byte("y")}, "not both"},
		{"cert without key", Config{NodeName: "n1", ClientCertPEM: []byte("x")}, "needs both"},
		{"cert without server", Config{NodeName: "n1", ClientCertPEM: []byte("x"), ClientKeyPEM: []byte("y")}, "needs the API server URL"},
	} {
		_, err := NewPool(PoolOptions{}).Start(context.Background(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestKubeconfigWithoutCARefused(t *testing.T) {
	kc := []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://10.99.0.1:6443"}
users:
- name: u
  user: {token: "abcdef.0123456789abcdef"}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`)
	k, err := NewPool(PoolOptions{}).Start(context.Background(), Config{NodeName: "n1", BootstrapKubeconfig: kc})
	if err != nil {
		t.Fatal(err)
	}
	err = k.WaitRegistered(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no cluster CA") {
		t.Errorf("error %v, want the missing CA named", err)
	}
}

func TestStatusDefaults(t *testing.T) {
	c := Config{NodeName: "n1", BootstrapKubeconfig: []byte("x")}
	if err := c.fillDefaults(); err != nil {
		t.Fatal(err)
	}
	if c.StatusEvery != 10*time.Second || c.StatusReportEvery != 5*time.Minute || c.LeaseEvery != 10*time.Second {
		t.Errorf("defaults %v %v %v", c.StatusEvery, c.StatusReportEvery, c.LeaseEvery)
	}
	c = Config{NodeName: "n1", BootstrapKubeconfig: []byte("x"), StatusEvery: 3 * time.Second}
	if err := c.fillDefaults(); err != nil {
		t.Fatal(err)
	}
	if c.StatusReportEvery != 3*time.Second {
		t.Errorf("an explicit update frequency sets the report frequency (kubelet's rule): %v", c.StatusReportEvery)
	}
}

// The Ready condition keeps its transition time while its status holds and
// moves it when the status flips; heartbeat times alone are no change.
func TestReadyCondition(t *testing.T) {
	k := &Kubelet{cfg: Config{NodeName: "n1", Hostname: "n1", KubeletVersion: "v1.37.2"}, identity: newNodeIdentity("n1"),
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	k.ready.Store(true)
	n := k.initialNode()
	ready := condition(n, corev1.NodeReady)
	if ready == nil || ready.Status != corev1.ConditionTrue || n.Status.Conditions[len(n.Status.Conditions)-1].Type != corev1.NodeReady {
		t.Fatalf("conditions %+v", n.Status.Conditions)
	}
	past := metav1.NewTime(time.Now().Add(-time.Hour))
	for i := range n.Status.Conditions {
		n.Status.Conditions[i].LastTransitionTime = past
		n.Status.Conditions[i].LastHeartbeatTime = past
	}
	next := n.DeepCopy()
	k.setNodeStatus(next)
	if nodeStatusHasChanged(&n.Status, &next.Status) {
		t.Error("a new heartbeat alone counts as a change")
	}
	if r := condition(next, corev1.NodeReady); !r.LastTransitionTime.Equal(&past) || r.LastHeartbeatTime.Equal(&past) {
		t.Errorf("ready %+v", r)
	}
	k.SetReady(false)
	notReady := next.DeepCopy()
	k.setNodeStatus(notReady)
	if !nodeStatusHasChanged(&next.Status, &notReady.Status) {
		t.Error("NotReady is no change")
	}
	if r := condition(notReady, corev1.NodeReady); r.Status != corev1.ConditionFalse || r.Reason != "KubeletNotReady" || r.LastTransitionTime.Equal(&past) {
		t.Errorf("not ready %+v", r)
	}
}

func TestDigestedName(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	usages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	subj := &pkix.Name{CommonName: "system:node:n1", Organization: []string{"system:nodes"}}
	a, err := digestedName(key.Public(), subj, usages)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := digestedName(key.Public(), subj, usages)
	other, _ := digestedName(key.Public(), &pkix.Name{CommonName: "system:node:n2", Organization: []string{"system:nodes"}}, usages)
	if a != b || a == other || !strings.HasPrefix(a, "node-csr-") {
		t.Errorf("names %q %q %q", a, b, other)
	}
}
