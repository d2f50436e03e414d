package kubewatch

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func csrFor(t *testing.T, name, cn, user string, approved bool) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}}}, key)
	if err != nil {
		t.Fatal(err)
	}
	r := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: KubeletClientSigner, Username: user,
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
	if approved {
		r.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue}}
	}
	return r
}

// TestCSRsReachTheSink: approved kubelet client CSRs are reported with the
// node they are for and who asked; pending ones once approved; requests
// for anything but system:node:<name> never.
func TestCSRsReachTheSink(t *testing.T) {
	cs := fake.NewClientset(
		csrFor(t, "csr-a", "system:node:w1", "system:bootstrap:abcdef", true),
		csrFor(t, "csr-b", "system:node:w2", "system:bootstrap:ghijkl", false),
		csrFor(t, "csr-c", "kubernetes-admin", "kubernetes-admin", true),
	)
	h := start(t, false, map[string]*fake.Clientset{"c1": cs})
	h.waitSynced(t, "c1")
	eventually(t, "w1's CSR", func() bool { return len(h.sink.csrsSeen()) == 1 })
	if c := h.sink.csrsSeen()[0]; c.NodeName != "w1" || c.Requester != "system:bootstrap:abcdef" || !c.Approved || c.Denied {
		t.Fatalf("csr %+v", c)
	}
	pending, err := cs.CertificatesV1().CertificateSigningRequests().Get(context.Background(), "csr-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pending.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue}}
	if _, err := cs.CertificatesV1().CertificateSigningRequests().UpdateApproval(context.Background(), "csr-b", pending, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "w2's CSR once approved", func() bool {
		for _, c := range h.sink.csrsSeen() {
			if c.NodeName == "w2" && c.Requester == "system:bootstrap:ghijkl" && c.Approved {
				return true
			}
		}
		return false
	})
	for _, c := range h.sink.csrsSeen() {
		if c.NodeName == "" || c.Name == "csr-c" {
			t.Fatalf("non-node CSR reported: %+v", c)
		}
	}
}

// FuzzCSROf: whatever a CSR object holds, reading it never panics, and a
// node name comes only from a system:node: subject.
func FuzzCSROf(f *testing.F) {
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n"), "system:bootstrap:abcdef")
	f.Add([]byte{}, "")
	f.Fuzz(func(t *testing.T, request []byte, user string) {
		c, ok := csrOf(&certificatesv1.CertificateSigningRequest{Spec: certificatesv1.CertificateSigningRequestSpec{Request: request, Username: user}})
		if ok && (c.NodeName == "" || c.Requester != user) {
			t.Fatalf("csr %+v", c)
		}
	})
}
