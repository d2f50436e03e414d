package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEtcdCSR: an etcd node's server and peer requests are signed for the
// names and address it holds, whatever subset of them it asked for; a
// request naming another device's address, another name or another kind
// of name is refused with the reason.
func TestEtcdCSR(t *testing.T) {
	ca, err := NewEtcdCA(ECDSAP256, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	holder := netip.MustParseAddr("10.99.1.21")
	server, peer := EtcdMemberCerts("prod-a-etcd-1", holder)
	ip := func(s string) net.IP { return net.ParseIP(s) }
	cases := []struct {
		name   string
		tmpl   x509.CertificateRequest
		want   EtcdCertRequest
		refuse string
	}{
		{"empty server request", x509.CertificateRequest{}, server, ""},
		{"server names its own", x509.CertificateRequest{Subject: pkix.Name{CommonName: "prod-a-etcd-1"},
			DNSNames: []string{"prod-a-etcd-1", "localhost"}, IPAddresses: []net.IP{ip("10.99.1.21"), ip("127.0.0.1")}}, server, ""},
		{"peer names its address", x509.CertificateRequest{IPAddresses: []net.IP{ip("10.99.1.21")}}, peer, ""},
		{"another device's address", x509.CertificateRequest{IPAddresses: []net.IP{ip("10.99.1.22")}}, server, "address 10.99.1.22, which is not this device's"},
		{"loopback on the peer certificate", x509.CertificateRequest{IPAddresses: []net.IP{ip("127.0.0.1")}}, peer, "address 127.0.0.1"},
		{"another name", x509.CertificateRequest{DNSNames: []string{"kubernetes.default"}}, server, "DNS name \"kubernetes.default\""},
		{"another common name", x509.CertificateRequest{Subject: pkix.Name{CommonName: "root"}}, server, "common name \"root\""},
		{"an organization", x509.CertificateRequest{Subject: pkix.Name{Organization: []string{"system:masters"}}}, EtcdAPIServerClient(), "common name only"},
		{"a URI name", x509.CertificateRequest{URIs: []*url.URL{{Scheme: "spiffe", Host: "x"}}}, server, "kind 6"},
		{"names on the client certificate", x509.CertificateRequest{IPAddresses: []net.IP{ip("10.99.1.21")}}, EtcdAPIServerClient(), "address 10.99.1.21"},
		{"client", x509.CertificateRequest{Subject: pkix.Name{CommonName: EtcdAPIServerClientName}}, EtcdAPIServerClient(), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			csr, err := ParseEtcdCSR(csrPEM(t, key, &tc.tmpl))
			if err == nil {
				var cert *Certificate
				if cert, err = ca.SignEtcd(tc.want, csr, time.Now()); err == nil {
					checkEtcdCert(t, ca, cert.Certificate(), tc.want)
				}
			}
			switch {
			case tc.refuse == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refuse != "" && err == nil:
				t.Fatal("signed")
			case tc.refuse != "" && !strings.Contains(err.Error(), tc.refuse):
				t.Fatalf("refused without %q: %v", tc.refuse, err)
			}
		})
	}
}

// checkEtcdCert verifies cert against ca for its usage, and that it names
// exactly what want says.
func checkEtcdCert(t *testing.T, ca *CA, cert *x509.Certificate, want EtcdCertRequest) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	usages := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if want.Usage != EtcdClient {
		usages = append(usages, x509.ExtKeyUsageServerAuth)
	}
	for _, u := range usages {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			t.Errorf("%s certificate does not verify for %v: %v", want.Usage, u, err)
		}
	}
	if want.Usage == EtcdClient {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
			t.Error("the client certificate verifies as a server's")
		}
	}
	if cert.Subject.CommonName != want.CommonName || len(cert.Subject.Organization) != 0 {
		t.Errorf("subject %v, want CN=%s", cert.Subject, want.CommonName)
	}
	if !slices.Equal(cert.DNSNames, want.DNSNames) {
		t.Errorf("DNS names %v, want %v", cert.DNSNames, want.DNSNames)
	}
	var ips []netip.Addr
	for _, ip := range cert.IPAddresses {
		a, _ := netip.AddrFromSlice(ip)
		ips = append(ips, a.Unmap())
	}
	if !slices.Equal(ips, want.IPs) {
		t.Errorf("addresses %v, want %v", ips, want.IPs)
	}
}

// TestEtcdCSROpenSSL: the requests an etcd node makes with openssl (as its
// bootstrap script does: an empty subject, P-256) pass and are signed.
func TestEtcdCSROpenSSL(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl not installed")
	}
	ca, err := NewEtcdCA(RSA2048, time.Now())
	if err != nil {
		t.Fatal(err)
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
	server, _ := EtcdMemberCerts("etcd-1", netip.MustParseAddr("fd99::1:21"))
	csr, err := ParseEtcdCSR(out)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.SignEtcd(server, csr, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	checkEtcdCert(t, ca, cert.Certificate(), server)
}

// FuzzParseEtcdCSR: whatever a device sends, the parser answers without
// panicking, and what it admits is signed only for the device's names.
func FuzzParseEtcdCSR(f *testing.F) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for _, tmpl := range []*x509.CertificateRequest{
		{},
		{IPAddresses: []net.IP{net.ParseIP("10.99.1.21")}, DNSNames: []string{"etcd-1"}},
		{IPAddresses: []net.IP{net.ParseIP("10.99.1.22")}},
	} {
		der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(encodeCSRForFuzz(der))
	}
	ca, err := NewEtcdCA(ECDSAP256, time.Now())
	if err != nil {
		f.Fatal(err)
	}
	server, _ := EtcdMemberCerts("etcd-1", netip.MustParseAddr("10.99.1.21"))
	f.Fuzz(func(t *testing.T, in []byte) {
		csr, err := ParseEtcdCSR(in)
		if err != nil {
			return
		}
		cert, err := ca.SignEtcd(server, csr, time.Now())
		if err != nil {
			return
		}
		checkEtcdCert(t, ca, cert.Certificate(), server)
	})
}

func encodeCSRForFuzz(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}
