package httpserve

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
)

// TestSelfSignedCert: made once with every name, key 0600, kept while it
// covers the names asked for, made again when a name is added.
func TestSelfSignedCert(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	names := []string{"127.0.0.1", "::1", "localhost", "10.99.0.1"}
	certPath, keyPath, created, err := SelfSignedCert(dir, "ztpd test", names)
	if err != nil || !created {
		t.Fatalf("first call: created %v, %v", created, err)
	}
	if fi, err := os.Stat(keyPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	if _, err := tls.LoadX509KeyPair(certPath, keyPath); err != nil {
		t.Fatal(err)
	}
	leaf := func() *x509.Certificate {
		raw, err := os.ReadFile(certPath)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := pem.Decode(raw)
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := leaf()
	for _, n := range names {
		if err := c.VerifyHostname(n); err != nil {
			t.Errorf("certificate does not cover %s: %v", n, err)
		}
	}
	if c.Subject.CommonName != "ztpd test" {
		t.Errorf("subject %q", c.Subject.CommonName)
	}

	if _, _, created, err := SelfSignedCert(dir, "ztpd test", names[:2]); err != nil || created {
		t.Fatalf("covered names: created %v, %v; want the kept certificate", created, err)
	}
	if leaf().SerialNumber.Cmp(c.SerialNumber) != 0 {
		t.Fatal("certificate replaced although it covered the names")
	}
	if _, _, created, err := SelfSignedCert(dir, "ztpd test", append(names, "ztpd.example")); err != nil || !created {
		t.Fatalf("new name: created %v, %v", created, err)
	}
	if err := leaf().VerifyHostname("ztpd.example"); err != nil {
		t.Fatal(err)
	}
}
