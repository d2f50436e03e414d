package api

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// Listener serves the API on its own address (config api.addr, or
// <http.addr host>:8443 when http.addr is not loopback), with TLS unless
// api.tls.enabled is false. It runs the same way as every other listener
// (internal/httpserve): timeouts, connection limit, shutdown grace.
type Listener struct {
	Addr      string
	Handler   http.Handler
	TLS       config.TLS
	UseTLS    bool // serve TLS (self-signed unless TLS names files)
	DataDir   string
	Advertise string // put into the self-signed certificate's names
	Log       *slog.Logger
	Limits    httpserve.Limits
	Grace     time.Duration // --shutdown-grace
}

// Name names the runner.
func (l *Listener) Name() string { return "api" }

// Run listens until ctx ends, then shuts down gracefully.
func (l *Listener) Run(ctx context.Context) error {
	hl := httpserve.Listener{Name: "api", Addr: l.Addr, Handler: l.Handler, Limits: l.Limits, Log: l.Log, Grace: l.Grace}
	if l.UseTLS {
		cfg, err := l.tlsConfig()
		if err != nil {
			return err
		}
		hl.TLS = cfg
	}
	return hl.Run(ctx)
}

func (l *Listener) tlsConfig() (*tls.Config, error) {
	var cert tls.Certificate
	var err error
	if l.TLS.CertFile != "" {
		cert, err = tls.LoadX509KeyPair(l.TLS.CertFile, l.TLS.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("api.tls: %w", err)
		}
	} else {
		certFile, _, err := SelfSignedCert(l.DataDir, l.names())
		if err != nil {
			return nil, err
		}
		cert, err = tls.LoadX509KeyPair(certFile, filepath.Join(filepath.Dir(certFile), "key.pem"))
		if err != nil {
			return nil, err
		}
		l.Log.Info("API uses a self-signed certificate; clients can pin it", "cert", certFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// names are the addresses a client may use to reach the API.
func (l *Listener) names() []string {
	names := []string{"127.0.0.1", "::1", "localhost"}
	if h, _, err := net.SplitHostPort(l.Addr); err == nil && h != "" && h != "0.0.0.0" && h != "::" {
		names = append(names, h)
	}
	if l.Advertise != "" {
		names = append(names, l.Advertise)
	}
	if hn, err := os.Hostname(); err == nil && hn != "" {
		names = append(names, hn)
	}
	return names
}

// SelfSignedCert returns <dataDir>/api-tls/cert.pem and key.pem, creating
// them (ECDSA P-256, key mode 0600) when absent or when the certificate does
// not cover every name. It returns the certificate path and whether it was
// (re)generated.
func SelfSignedCert(dataDir string, names []string) (string, bool, error) {
	dir := filepath.Join(dataDir, "api-tls")
	certPath, keyPath := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if raw, err := os.ReadFile(certPath); err == nil {
		if _, err := os.Stat(keyPath); err == nil && covers(raw, names) {
			return certPath, false, nil
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", false, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", false, err
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "ztpd API", Organization: []string{"ztpd"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(5, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			if !slices.ContainsFunc(tmpl.IPAddresses, ip.Equal) {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			}
		} else if !slices.Contains(tmpl.DNSNames, n) {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", false, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", false, err
	}
	if err := writeFileAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return "", false, err
	}
	if err := writeFileAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", false, err
	}
	return certPath, true, nil
}

// covers reports whether the PEM certificate names every entry of names.
func covers(certPEM []byte, names []string) bool {
	b, _ := pem.Decode(certPEM)
	if b == nil {
		return false
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil || time.Now().After(c.NotAfter.Add(-30*24*time.Hour)) {
		return false
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			if !slices.ContainsFunc(c.IPAddresses, func(a net.IP) bool { return a.Equal(ip) }) {
				return false
			}
		} else if !slices.Contains(c.DNSNames, n) {
			return false
		}
	}
	return true
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	_, werr := tmp.Write(data)
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
