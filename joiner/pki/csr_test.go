package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

var switchCert = ClientCertRequest{
	CommonName:    "system:bootstrap:leaf-1",
	Organizations: []string{"system:bootstrappers:kubeadm:default-node-token", "system:bootstrappers", "ztpd:sonic-switches"},
}

func csrPEM(t *testing.T, key crypto.Signer, tmpl *x509.CertificateRequest) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func mustExt(t *testing.T, id asn1.ObjectIdentifier, v any) pkix.Extension {
	t.Helper()
	b, err := asn1.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return pkix.Extension{Id: id, Value: b}
}

// TestCheckCSR is the table of what a device may and may not ask for.
func TestCheckCSR(t *testing.T) {
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	p224, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	rsa2048, _ := rsa.GenerateKey(rand.Reader, 2048)
	rsa1024, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	_, ed, _ := ed25519.GenerateKey(rand.Reader)

	exact := pkix.Name{CommonName: switchCert.CommonName, Organization: switchCert.Organizations}
	badSig := csrPEM(t, p256, &x509.CertificateRequest{})
	{
		block, _ := pem.Decode(badSig)
		block.Bytes[len(block.Bytes)-3] ^= 0x55 // inside the signature
		badSig = pem.EncodeToMemory(block)
	}
	// A challenge password, through the deprecated field: the only way
	// the standard library adds an attribute other than extensions.
	//lint:ignore SA1019 the deprecated field is the way to make the attribute refused here
	challenge := &x509.CertificateRequest{Attributes: []pkix.AttributeTypeAndValueSET{{
		Type: asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 7}, Value: [][]pkix.AttributeTypeAndValue{{{Type: oidAttributeCommonName, Value: "x"}}}}}}

	for _, c := range []struct {
		name string
		pem  []byte
		want string // "" accepted, else part of the refusal
	}{
		{"empty subject P-256", csrPEM(t, p256, &x509.CertificateRequest{}), ""},
		{"exact subject P-384", csrPEM(t, p384, &x509.CertificateRequest{Subject: exact}), ""},
		{"common name only RSA 2048", csrPEM(t, rsa2048, &x509.CertificateRequest{Subject: pkix.Name{CommonName: switchCert.CommonName}}), ""},
		{"the issued extensions", csrPEM(t, p256, &x509.CertificateRequest{ExtraExtensions: []pkix.Extension{
			mustExt(t, oidExtKeyUsage, asn1.BitString{Bytes: []byte{0x80}, BitLength: 1}),
			mustExt(t, oidExtExtendedKeyUsage, []asn1.ObjectIdentifier{{1, 3, 6, 1, 5, 5, 7, 3, 2}}),
			mustExt(t, oidExtBasicConstraints, struct{}{}),
		}}), ""},
		{"RSA 1024", csrPEM(t, rsa1024, &x509.CertificateRequest{}), "RSA key of 1024 bits"},
		{"P-224", csrPEM(t, p224, &x509.CertificateRequest{}), "curve P-224"},
		{"ed25519", csrPEM(t, ed, &x509.CertificateRequest{}), "key of type ed25519.PublicKey"},
		{"bad signature", badSig, "signature does not verify"},
		{"DNS SAN", csrPEM(t, p256, &x509.CertificateRequest{DNSNames: []string{"kubernetes.default"}}), "subject alternative names"},
		{"email SAN", csrPEM(t, p256, &x509.CertificateRequest{EmailAddresses: []string{"a@b"}}), "subject alternative names"},
		{"serverAuth", csrPEM(t, p256, &x509.CertificateRequest{ExtraExtensions: []pkix.Extension{
			mustExt(t, oidExtExtendedKeyUsage, []asn1.ObjectIdentifier{{1, 3, 6, 1, 5, 5, 7, 3, 2}, {1, 3, 6, 1, 5, 5, 7, 3, 1}})}}),
			"extended key usage 1.3.6.1.5.5.7.3.1"},
		{"keyCertSign", csrPEM(t, p256, &x509.CertificateRequest{ExtraExtensions: []pkix.Extension{
			mustExt(t, oidExtKeyUsage, asn1.BitString{Bytes: []byte{0x84}, BitLength: 6})}}), "key usages beyond digitalSignature"},
		{"CA:TRUE", csrPEM(t, p256, &x509.CertificateRequest{ExtraExtensions: []pkix.Extension{
			mustExt(t, oidExtBasicConstraints, struct{ IsCA bool }{true})}}), "certificate authority"},
		{"another extension", csrPEM(t, p256, &x509.CertificateRequest{ExtraExtensions: []pkix.Extension{
			{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 99999, 1}, Value: []byte{5, 0}}}}), "extension 1.3.6.1.4.1.99999.1"},
		{"challenge password", csrPEM(t, p256, challenge), "attribute 1.2.840.113549.1.9.7"},
		{"another device's name", csrPEM(t, p256, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:bootstrap:leaf-2"}}),
			`common name "system:bootstrap:leaf-2"`},
		{"system:masters", csrPEM(t, p256, &x509.CertificateRequest{Subject: pkix.Name{Organization: []string{"system:masters"}}}),
			`organization "system:masters"`},
		{"an OU", csrPEM(t, p256, &x509.CertificateRequest{Subject: pkix.Name{OrganizationalUnit: []string{"x"}}}), "subject attribute 2.5.4.11"},
		{"not PEM", []byte("MIIB..."), "not a PEM CERTIFICATE REQUEST"},
		{"a certificate", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1}}), "not a PEM CERTIFICATE REQUEST"},
		{"too large", make([]byte, MaxCSRBytes+1), "more than"},
	} {
		t.Run(c.name, func(t *testing.T) {
			csr, err := CheckCSR(c.pem, switchCert)
			if c.want == "" {
				if err != nil || csr == nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ce *CSRError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want a CSRError with %q", err, c.want)
			}
		})
	}
}

// TestSignCSR: the certificate carries the CSR's key and ztpd's whole
// subject and profile, whatever subject the request named.
func TestSignCSR(t *testing.T) {
	now := time.Now()
	for _, alg := range []Algorithm{ECDSAP256, RSA2048} {
		ca, err := NewCA("kubernetes", alg, now)
		if err != nil {
			t.Fatal(err)
		}
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		csr, err := CheckCSR(csrPEM(t, key, &x509.CertificateRequest{Subject: pkix.Name{CommonName: switchCert.CommonName}}), switchCert)
		if err != nil {
			t.Fatal(err)
		}
		c, err := ca.SignCSR(switchCert, csr, now)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseCertPEM(c.CertPEM())
		if err != nil {
			t.Fatal(err)
		}
		if !key.PublicKey.Equal(got.PublicKey) {
			t.Fatalf("%s: certificate key is not the request's", alg)
		}
		orgs, want := slices.Sorted(slices.Values(got.Subject.Organization)), slices.Sorted(slices.Values(switchCert.Organizations))
		if got.Subject.CommonName != switchCert.CommonName || !slices.Equal(orgs, want) {
			t.Fatalf("%s: subject %v", alg, got.Subject)
		}
		if len(got.ExtKeyUsage) != 1 || got.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth || got.IsCA || len(got.DNSNames) != 0 {
			t.Fatalf("%s: profile %v %v", alg, got.ExtKeyUsage, got.IsCA)
		}
		if err := got.CheckSignatureFrom(ca.Certificate()); err != nil {
			t.Fatal(err)
		}
		if _, err := ca.SignCSR(ClientCertRequest{CommonName: "system:bootstrap:other"}, csr, now); err == nil {
			t.Fatalf("%s: signed a request naming another subject", alg)
		}
	}
}

// TestCheckCSROpenSSL: the request the join plugin makes with openssl (an
// empty subject, a minimal configuration) passes.
func TestCheckCSROpenSSL(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl not installed")
	}
	dir := t.TempDir()
	keyPath, cnf := filepath.Join(dir, "key.pem"), filepath.Join(dir, "req.cnf")
	if out, err := exec.Command("openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", keyPath).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := os.WriteFile(cnf, []byte("[req]\ndistinguished_name = dn\n[dn]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("openssl", "req", "-new", "-config", cnf, "-key", keyPath, "-subj", "/", "-sha256").Output()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CheckCSR(out, switchCert); err != nil {
		t.Fatalf("openssl's request refused: %v\n%s", err, out)
	}
}

// BenchmarkSwitchCertificate compares what ztpd spends on one switch's
// certificate: making its key and signing (as before keys were made on
// switches) against checking its request (the signature verification
// included) and signing.
func BenchmarkSwitchCertificate(b *testing.B) {
	ca, err := NewCA("kubernetes", ECDSAP256, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		b.Fatal(err)
	}
	req := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	now := time.Now()
	b.Run("key-made-by-ztpd", func(b *testing.B) {
		defer reportCPU(b)()
		for b.Loop() {
			kp, err := ca.IssueClient(switchCert, now)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := kp.PrivateKeyPEM(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("csr", func(b *testing.B) {
		defer reportCPU(b)()
		for b.Loop() {
			csr, err := CheckCSR(req, switchCert)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := ca.SignCSR(switchCert, csr, now); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// reportCPU reports the process's CPU time per op from now to the call of
// the function it returns: what other load on a shared machine does not
// distort as it does ns/op.
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() { b.ReportMetric(float64((cpu()-start).Microseconds())/float64(b.N), "cpu-us/op") }
}
