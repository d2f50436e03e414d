package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/store/storetest"
)

var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newTestCA(t testing.TB, alg Algorithm) *CA {
	t.Helper()
	ca, err := NewCA("kubernetes", alg, testNow)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestNewCACertificateShape(t *testing.T) {
	for _, alg := range []Algorithm{RSA2048, ECDSAP256} {
		t.Run(string(alg), func(t *testing.T) {
			ca := newTestCA(t, alg)
			c := ca.Certificate()
			if !c.IsCA || !c.BasicConstraintsValid {
				t.Fatal("not a CA certificate")
			}
			if c.KeyUsage&x509.KeyUsageCertSign == 0 || c.KeyUsage&x509.KeyUsageDigitalSignature == 0 {
				t.Fatalf("key usage %b lacks certSign/digitalSignature", c.KeyUsage)
			}
			if len(c.SubjectKeyId) != 20 {
				t.Fatalf("SKI length %d", len(c.SubjectKeyId))
			}
			if got := c.NotAfter.Sub(testNow); got != CAValidity {
				t.Fatalf("validity %v, want %v", got, CAValidity)
			}
			if !c.NotBefore.Before(testNow) {
				t.Fatal("NotBefore not backdated")
			}
			switch alg {
			case RSA2048:
				k, ok := c.PublicKey.(*rsa.PublicKey)
				if !ok || k.N.BitLen() != 2048 {
					t.Fatalf("public key %T", c.PublicKey)
				}
			case ECDSAP256:
				if _, ok := c.PublicKey.(*ecdsa.PublicKey); !ok {
					t.Fatalf("public key %T", c.PublicKey)
				}
			}
			if err := c.CheckSignatureFrom(c); err != nil {
				t.Fatalf("not self-signed: %v", err)
			}
		})
	}
	if _, err := NewCA("x", "DSA-1024", testNow); err == nil {
		t.Fatal("unknown algorithm accepted")
	}
}

// TestDiscoveryHashMatchesOpenSSL checks the hash kubeadm's documentation
// derives with: openssl x509 -pubkey | openssl pkey -pubin -outform der | sha256sum
func TestDiscoveryHashMatchesOpenSSL(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl not installed")
	}
	for _, alg := range []Algorithm{RSA2048, ECDSAP256} {
		t.Run(string(alg), func(t *testing.T) {
			ca := newTestCA(t, alg)
			crt := filepath.Join(t.TempDir(), "ca.crt")
			os.WriteFile(crt, ca.CertPEM(), 0o644)
			cmd := exec.Command("sh", "-c",
				`openssl x509 -pubkey -noout -in "$1" | openssl pkey -pubin -outform der | sha256sum`, "sh", crt)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("openssl: %v\n%s", err, out)
			}
			want := "sha256:" + strings.Fields(string(out))[0]
			if got := ca.DiscoveryHash(); got != want {
				t.Fatalf("discovery hash %s, openssl says %s", got, want)
			}
		})
	}
}

func TestIssueClientVerifiesAgainstCA(t *testing.T) {
	for _, alg := range []Algorithm{RSA2048, ECDSAP256} {
		t.Run(string(alg), func(t *testing.T) {
			ca := newTestCA(t, alg)
			kp, err := ca.IssueClient(ClientCertRequest{
				CommonName:    "kubernetes-admin",
				Organizations: []string{"system:masters"},
			}, testNow)
			if err != nil {
				t.Fatal(err)
			}
			c := kp.Certificate()
			if c.Subject.CommonName != "kubernetes-admin" || !slices.Equal(c.Subject.Organization, []string{"system:masters"}) {
				t.Fatalf("subject %v", c.Subject)
			}
			if c.IsCA {
				t.Fatal("client certificate is a CA")
			}
			if !bytes.Equal(c.AuthorityKeyId, ca.Certificate().SubjectKeyId) {
				t.Fatal("AKI does not name the CA's SKI")
			}
			if got := c.NotAfter.Sub(testNow); got != ClientValidity {
				t.Fatalf("validity %v", got)
			}
			roots := x509.NewCertPool()
			roots.AddCert(ca.Certificate())
			if _, err := c.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: testNow,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Fatalf("verify: %v", err)
			}
			if _, err := c.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: testNow,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
				t.Fatal("client certificate usable as a server certificate")
			}
			opensslVerify(t, ca, kp)
		})
	}
}

// opensslVerify has OpenSSL check the chain, the purpose, and that the key
// PEM parses and belongs to the certificate.
func opensslVerify(t *testing.T, ca *CA, kp *KeyPair) {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl not installed: cannot cross-check the chain and key with OpenSSL")
	}
	dir := t.TempDir()
	keyPEM, err := kp.PrivateKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "ca.crt"), ca.CertPEM(), 0o644)
	os.WriteFile(filepath.Join(dir, "c.crt"), kp.CertPEM(), 0o644)
	os.WriteFile(filepath.Join(dir, "c.key"), keyPEM, 0o600)
	run := func(script string) string {
		cmd := exec.Command("sh", "-c", script)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		return string(out)
	}
	at := fmt.Sprint(testNow.Unix())
	if out := run("openssl verify -attime " + at + " -purpose sslclient -CAfile ca.crt c.crt"); !strings.Contains(out, "c.crt: OK") {
		t.Fatalf("openssl verify: %s", out)
	}
	a := run("openssl x509 -in c.crt -noout -pubkey")
	b := run("openssl pkey -in c.key -pubout")
	if a != b {
		t.Fatal("private key does not match the certificate")
	}
}

func TestCASealOpen(t *testing.T) {
	kr := storetest.Open(t).Keys
	for _, alg := range []Algorithm{RSA2048, ECDSAP256} {
		ca := newTestCA(t, alg)
		keyPEM, _ := ca.PrivateKeyPEM()
		s, err := ca.Seal(kr, "cluster/c1")
		if err != nil {
			t.Fatal(err)
		}
		stored, _ := json.Marshal(s)
		if bytes.Contains(stored, []byte("PRIVATE KEY")) {
			t.Fatal("sealed CA record holds a plaintext key")
		}
		back, err := OpenCA(s, kr, "cluster/c1")
		if err != nil {
			t.Fatal(err)
		}
		gotPEM, _ := back.PrivateKeyPEM()
		if !bytes.Equal(gotPEM, keyPEM) || back.DiscoveryHash() != ca.DiscoveryHash() || back.Algorithm() != alg {
			t.Fatal("round trip changed the CA")
		}
		if _, err := OpenCA(s, kr, "cluster/c2"); err == nil {
			t.Fatal("sealed key opened under another cluster's context")
		}
		// Key swapped onto another CA's certificate is refused.
		other := newTestCA(t, alg)
		s2 := s
		s2.CertPEM = other.CertPEM()
		if _, err := OpenCA(s2, kr, "cluster/c1"); err == nil || !strings.Contains(err.Error(), "does not match") {
			t.Fatalf("mismatched key and certificate: %v", err)
		}
	}
}

func TestPrivateKeysNeverPrinted(t *testing.T) {
	ca := newTestCA(t, ECDSAP256)
	kp, err := ca.IssueClient(ClientCertRequest{CommonName: "x", Organizations: []string{"y"}}, testNow)
	if err != nil {
		t.Fatal(err)
	}
	caKey, _ := ca.PrivateKeyPEM()
	kpKey, _ := kp.PrivateKeyPEM()
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	logger.Info("issued", "ca", ca, "pair", kp)
	text := slog.New(slog.NewTextHandler(&buf, nil))
	text.Info("issued", "ca", ca, "pair", kp)
	j1, _ := json.Marshal(ca)
	j2, _ := json.Marshal(kp)
	j3, _ := json.Marshal(struct{ CA *CA }{ca})
	outputs := []string{
		buf.String(), string(j1), string(j2), string(j3),
		fmt.Sprintf("%v %+v %#v %s", ca, ca, ca, ca),
		fmt.Sprintf("%v %+v %#v %s", kp, kp, kp, kp),
		fmt.Sprintf("%v %+v", *ca, *kp),
	}
	scalar := func(k crypto.Signer) string {
		b, err := k.(*ecdsa.PrivateKey).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		return new(big.Int).SetBytes(b).String() // as %v would print the big.Int D
	}
	caD, kpD := scalar(ca.key), scalar(kp.key)
	outputs = append(outputs, fmt.Sprintf("%v %+v %#v", []CA{*ca}, map[string]KeyPair{"k": *kp}, struct{ C CA }{*ca}))
	for _, o := range outputs {
		if strings.Contains(o, caD) || strings.Contains(o, kpD) || strings.Contains(o, "PRIVATE KEY") || strings.Contains(o, string(caKey[40:80])) || strings.Contains(o, string(kpKey[40:80])) {
			t.Fatalf("private key material printed: %s", o)
		}
	}
	if !strings.Contains(string(j1), "BEGIN CERTIFICATE") {
		t.Fatalf("CA JSON lacks the certificate: %s", j1)
	}
}

func TestIssueClientRejectsBadSubjects(t *testing.T) {
	ca := newTestCA(t, ECDSAP256)
	for _, req := range []ClientCertRequest{
		{CommonName: ""},
		{CommonName: "a\nb"},
		{CommonName: strings.Repeat("a", 65)},
		{CommonName: "ok", Organizations: []string{""}},
		{CommonName: "\xff\xfe"},
		{CommonName: "ok", Organizations: []string{"o\xc3"}},
	} {
		if _, err := ca.IssueClient(req, testNow); err == nil {
			t.Fatalf("accepted %+v", req)
		}
	}
	// Validity is capped at the CA's own expiry.
	kp, err := ca.IssueClient(ClientCertRequest{CommonName: "long", Validity: 20 * CAValidity}, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if !kp.Certificate().NotAfter.Equal(ca.Certificate().NotAfter) {
		t.Fatal("client certificate outlives its CA")
	}
}
