package app

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/ztpd/ztpd/internal/httpserve"
)

// APITLSDir holds the API's self-signed certificate (cert.pem, key.pem) in
// the data directory when api.tls names no files. The CLI trusts
// <data dir>/api-tls/cert.pem for a local server; remote clients pin it.
const APITLSDir = "api-tls"

// apiListen is the API's own listener (api.addr, or <http.addr host>:8443),
// resolved from the configuration when the app is built; Serve runs it.
type apiListen struct {
	addr    string
	useTLS  bool
	handler http.Handler
}

// apiTLS is the API listener's TLS configuration: the certificate files
// api.tls names, else a self-signed certificate kept in the data directory
// for every name a client may use (made again when one is missing).
func (a *App) apiTLS(addr string) (*tls.Config, error) {
	certFile, keyFile := a.Cfg.API.TLS.CertFile, a.Cfg.API.TLS.KeyFile
	if certFile == "" {
		var created bool
		var err error
		certFile, keyFile, created, err = httpserve.SelfSignedCert(filepath.Join(a.Cfg.DataDir, APITLSDir), "ztpd API", a.apiNames(addr))
		if err != nil {
			return nil, fmt.Errorf("api self-signed certificate: %w", err)
		}
		a.Log.Info("API uses a self-signed certificate; clients can pin it", "cert", certFile, "created", created)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("api.tls: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// apiNames are the addresses a client may use to reach the API on addr.
func (a *App) apiNames(addr string) []string {
	names := []string{"127.0.0.1", "::1", "localhost"}
	if h, _, err := net.SplitHostPort(addr); err == nil && h != "" && h != "0.0.0.0" && h != "::" {
		names = append(names, h)
	}
	if a.Cfg.AdvertiseAddr != "" {
		names = append(names, a.Cfg.AdvertiseAddr)
	}
	if hn, err := os.Hostname(); err == nil && hn != "" {
		names = append(names, hn)
	}
	return names
}
