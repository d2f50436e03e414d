// Package testpki makes a certificate authority and certificates for mutual
// TLS between appliances, as their operator would with openssl: ECDSA P-256,
// every leaf for both server and client use, with IP SANs. Tests use New (a
// CA in the test's temp directory); a lab command without a *testing.T uses
// Create and the error-returning methods.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Lifetime is how long certificates are valid from now (they also start an
// hour before, for clocks a little behind).
const Lifetime = 24 * time.Hour

// CA is a certificate authority whose certificate is in File.
type CA struct {
	Cert *x509.Certificate
	PEM  []byte // the CA certificate
	Pool *x509.CertPool
	File string // Dir/ca.pem
	Dir  string // where Issue writes certificates

	key    *ecdsa.PrivateKey
	mu     sync.Mutex
	serial int64
	names  map[string]bool
}

// Cert is a certificate the CA issued and its key, in tls form and as PEM
// files (the key readable by its owner only).
type Cert struct {
	TLS      tls.Certificate
	CertPEM  []byte
	KeyPEM   []byte
	CertFile string
	KeyFile  string
}

// Create makes a CA named name (its subject's common name) and writes its
// certificate to dir/ca.pem.
func Create(dir, name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(Lifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{Cert: cert, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Pool: x509.NewCertPool(), File: filepath.Join(dir, "ca.pem"), Dir: dir, key: key, serial: 1, names: map[string]bool{}}
	ca.Pool.AddCert(cert)
	if err := os.WriteFile(ca.File, ca.PEM, 0o644); err != nil {
		return nil, err
	}
	return ca, nil
}

// Issue makes a certificate for name (its common name) valid for ips, or
// for 127.0.0.1 when none are given, and writes it to Dir/name.crt and
// Dir/name.key. A name is issued once per CA, so no file is overwritten
// under a server that reads it.
func (ca *CA) Issue(name string, ips ...net.IP) (*Cert, error) {
	ca.mu.Lock()
	taken := ca.names[name]
	ca.names[name] = true
	ca.mu.Unlock()
	if taken {
		return nil, fmt.Errorf("testpki: %q was already issued by this CA", name)
	}
	return ca.IssueFiles(filepath.Join(ca.Dir, name+".crt"), filepath.Join(ca.Dir, name+".key"), name, ips...)
}

// IssueFiles is Issue writing to the files given.
func (ca *CA) IssueFiles(certFile, keyFile, name string, ips ...net.IP) (*Cert, error) {
	if len(ips) == 0 {
		ips = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	ca.mu.Lock()
	ca.serial++
	serial := ca.serial
	ca.mu.Unlock()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(Lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	c := &Cert{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), CertFile: certFile, KeyFile: keyFile}
	if c.TLS, err = tls.X509KeyPair(c.CertPEM, c.KeyPEM); err != nil {
		return nil, err
	}
	if err := os.WriteFile(certFile, c.CertPEM, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(keyFile, c.KeyPEM, 0o600); err != nil {
		return nil, err
	}
	return c, nil
}

// TestCA is a CA whose failures fail the test that made it.
type TestCA struct {
	*CA
	t testing.TB
}

// New makes a CA named name in a temp directory of t.
func New(t testing.TB, name string) *TestCA {
	t.Helper()
	ca, err := Create(t.TempDir(), name)
	if err != nil {
		t.Fatal(err)
	}
	return &TestCA{CA: ca, t: t}
}

// Issue is CA.Issue, failing the test on an error.
func (ca *TestCA) Issue(name string, ips ...net.IP) *Cert {
	ca.t.Helper()
	c, err := ca.CA.Issue(name, ips...)
	if err != nil {
		ca.t.Fatal(err)
	}
	return c
}
