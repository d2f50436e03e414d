package kubewatch

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/connrotation"
)

// conn is one connection to a cluster: its client, its /readyz probe and
// how its client certificate is renewed.
type conn struct {
	client kubernetes.Interface
	probe  func(ctx context.Context) error
	// renewAt is when renew should next run; renew installs fresh
	// credentials and returns the time after that. nil: never.
	renewAt time.Time
	renew   func(t Target, now time.Time) (time.Time, error)
	close   func()
}

// connector makes a conn for a target; tests replace it.
type connector func(t Target) (*conn, error)

// dial builds the client for a target over a transport whose client
// certificate can be swapped: on renewal the new certificate is installed
// and every connection closed, so the informer's watch and the probe
// reconnect with it. The informer's cache survives; no relist is forced.
func (m *Manager) dial(t Target) (*conn, error) {
	if _, _, err := net.SplitHostPort(t.Endpoint); err != nil {
		return nil, fmt.Errorf("API endpoint %q: want host:port: %w", t.Endpoint, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(t.CACertPEM) {
		return nil, errors.New("no cluster CA certificate (PEM) to verify the API server with")
	}
	cert, renewAt := &tls.Certificate{}, time.Time{}
	if t.BearerToken == "" {
		var err error
		if cert, renewAt, err = loadCert(t, m.opt.Now()); err != nil {
			return nil, err
		}
	}
	var current atomic.Pointer[tls.Certificate]
	current.Store(cert)

	dial := m.opt.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	dialer := connrotation.NewDialer(dial)
	// SetTransportDefaults adds HTTP/2 with pings, so a vanished API
	// server is noticed on an idle watch too, and the proxy settings of
	// the environment, as kubectl does.
	tr := utilnet.SetTransportDefaults(&http.Transport{
		DialContext: dialer.DialContext,
		TLSClientConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			RootCAs:    roots,
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				return current.Load(), nil
			},
		},
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 25,
	})
	client, err := kubernetes.NewForConfig(&rest.Config{
		Host:        "https://" + t.Endpoint,
		Transport:   tr,
		BearerToken: t.BearerToken,
		QPS:         m.opt.QPS,
		Burst:       m.opt.Burst,
		UserAgent:   "ztpd-kubewatch",
		// Protobuf: a relist of hundreds of Nodes decodes several times
		// faster than JSON.
		ContentConfig: rest.ContentConfig{
			ContentType:        "application/vnd.kubernetes.protobuf",
			AcceptContentTypes: "application/vnd.kubernetes.protobuf,application/json",
		},
	})
	if err != nil {
		return nil, fmt.Errorf("API client: %w", err)
	}
	renew := func(t Target, now time.Time) (time.Time, error) {
		cert, at, err := loadCert(t, now)
		if err != nil {
			return time.Time{}, err
		}
		current.Store(cert)
		dialer.CloseAll()
		return at, nil
	}
	if t.BearerToken != "" {
		renew = nil // a token is not renewed by ztpd
	}
	rc := client.CoreV1().RESTClient()
	return &conn{
		client: client,
		probe: func(ctx context.Context) error {
			_, err := rc.Get().AbsPath("/readyz").DoRaw(ctx)
			return err
		},
		renewAt: renewAt,
		renew:   renew,
		close: func() {
			dialer.CloseAll()
			tr.CloseIdleConnections()
		},
	}, nil
}

// loadCert mints the target's client certificate and says when to renew
// it: at half its validity, or half of what is left if that has passed.
// Errors never carry the key material.
func loadCert(t Target, now time.Time) (*tls.Certificate, time.Time, error) {
	if t.Credentials == nil {
		return nil, time.Time{}, errors.New("no credentials for the observer identity")
	}
	certPEM, keyPEM, err := t.Credentials(now)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("minting the observer's client certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("observer's client certificate: %w", err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, time.Time{}, fmt.Errorf("observer's client certificate: %w", err)
		}
	}
	if !now.Before(leaf.NotAfter) {
		return nil, time.Time{}, fmt.Errorf("observer's client certificate expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	at := leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) / 2)
	if at.Before(now) {
		at = now.Add(leaf.NotAfter.Sub(now) / 2)
	}
	if min := now.Add(time.Second); at.Before(min) {
		at = min
	}
	return &pair, at, nil
}
