package app

import (
	"crypto/x509"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// TestAPITLS: without api.tls files the API's certificate is the
// self-signed one in <data dir>/api-tls (the file the CLI and the lab
// trust), covering the listener's and the advertised address; with files,
// those are served; unreadable files are an error naming api.tls.
func TestAPITLS(t *testing.T) {
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.AdvertiseAddr = "10.99.0.1"
	a := &App{Cfg: cfg, Log: NewLogger(io.Discard, "error", "text")}
	tc, err := a.apiTLS("10.99.0.2:8443")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(tc.Certificates[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"10.99.0.1", "10.99.0.2", "127.0.0.1", "localhost"} {
		if err := leaf.VerifyHostname(n); err != nil {
			t.Errorf("self-signed certificate: %v", err)
		}
	}
	pinned, err := os.ReadFile(filepath.Join(cfg.DataDir, APITLSDir, "cert.pem"))
	if err != nil || !strings.Contains(string(pinned), "BEGIN CERTIFICATE") {
		t.Fatalf("pinned certificate: %v", err)
	}

	// Operator's files (made here by the same generator, elsewhere).
	certFile, keyFile, _, err := httpserve.SelfSignedCert(t.TempDir(), "operator", []string{"api.example"})
	if err != nil {
		t.Fatal(err)
	}
	a.Cfg.API.TLS = config.TLS{Enabled: true, CertFile: certFile, KeyFile: keyFile}
	if tc, err = a.apiTLS("10.99.0.2:8443"); err != nil {
		t.Fatal(err)
	}
	if leaf, _ = x509.ParseCertificate(tc.Certificates[0].Certificate[0]); leaf.Subject.CommonName != "operator" {
		t.Fatalf("served %q, want the operator's certificate", leaf.Subject.CommonName)
	}
	a.Cfg.API.TLS.KeyFile = filepath.Join(t.TempDir(), "missing.pem")
	if _, err := a.apiTLS("10.99.0.2:8443"); err == nil || !strings.Contains(err.Error(), "api.tls") {
		t.Fatalf("missing key file: %v", err)
	}
}
