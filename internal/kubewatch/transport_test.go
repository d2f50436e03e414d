package kubewatch

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ztpd/ztpd/joiner/pki"
)

// tlsAPI is a minimal API server over TLS that requires a client
// certificate from a CA and serves one Node (list, watch, watch-list) and
// /readyz, recording which client certificate each request came with.
type tlsAPI struct {
	srv *httptest.Server

	mu      sync.Mutex
	watches map[string]int // client certificate serial -> watch requests
	other   map[string]int // serial -> other requests
}

func newTLSAPI(t *testing.T, ca *pki.CA) *tlsAPI {
	a := &tlsAPI{watches: map[string]int{}, other: map[string]int{}}
	n := node("n1", corev1.ConditionTrue, map[string]string{"kubernetes.io/hostname": "n1"})
	n.ResourceVersion = "7"
	n.APIVersion, n.Kind = "v1", "Node"
	a.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		serial := r.TLS.PeerCertificates[0].SerialNumber.String()
		q := r.URL.Query()
		watching := r.URL.Path == "/api/v1/nodes" && q.Get("watch") == "true"
		a.mu.Lock()
		if watching {
			a.watches[serial]++
		} else {
			a.other[serial]++
		}
		a.mu.Unlock()
		switch {
		case r.URL.Path == "/readyz":
			io.WriteString(w, "ok")
		case watching:
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			if q.Get("sendInitialEvents") == "true" {
				enc.Encode(map[string]any{"type": "ADDED", "object": n})
				enc.Encode(map[string]any{"type": "BOOKMARK", "object": map[string]any{
					"kind": "Node", "apiVersion": "v1",
					"metadata": map[string]any{"resourceVersion": "7", "annotations": map[string]string{metav1.InitialEventsAnnotationKey: "true"}},
				}})
			}
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		case r.URL.Path == "/api/v1/nodes":
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{
				"kind": "NodeList", "apiVersion": "v1",
				"metadata": map[string]any{"resourceVersion": "7"},
				"items":    []any{n},
			})
		default:
			http.NotFound(w, r)
		}
	}))
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	a.srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	a.srv.StartTLS()
	t.Cleanup(a.srv.Close)
	return a
}

func (a *tlsAPI) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.srv.Certificate().Raw})
}

func (a *tlsAPI) watchesBy(serial string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.watches[serial]
}

// minter issues short-lived observer certificates and remembers their
// serials.
type minter struct {
	ca       *pki.CA
	validity time.Duration

	mu      sync.Mutex
	serials []string
}

func (m *minter) credentials(now time.Time) ([]byte, []byte, error) {
	kp, err := m.ca.IssueClient(pki.ClientCertRequest{CommonName: ObserverUser, Organizations: []string{ObserverGroup}, Validity: m.validity}, now)
	if err != nil {
		return nil, nil, err
	}
	key, err := kp.PrivateKeyPEM()
	if err != nil {
		return nil, nil, err
	}
	m.mu.Lock()
	m.serials = append(m.serials, kp.Certificate().SerialNumber.String())
	m.mu.Unlock()
	return kp.CertPEM(), key, nil
}

func (m *minter) issued() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.serials...)
}

// TestCertificateRotation runs the real transport: the client certificate
// is renewed at half its validity and the watch comes back with the new
// one, without the Nodes being reported gone.
func TestCertificateRotation(t *testing.T) {
	ca, err := pki.NewCA("kubernetes", pki.ECDSAP256, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	api := newTLSAPI(t, ca)
	mint := &minter{ca: ca, validity: 3 * time.Second}
	sink := newRecorder()
	m, err := New(Options{
		Targets: &staticTargets{ts: []Target{{
			ClusterID: "c1", Endpoint: strings.TrimPrefix(api.srv.URL, "https://"),
			CACertPEM: api.caPEM(), Credentials: mint.credentials,
		}}},
		Sink:          sink,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		ProbeInterval: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	eventually(t, "n1 seen", func() bool { _, c := sink.last("c1", "n1"); return c > 0 })
	first := mint.issued()[0]
	eventually(t, "a watch with the first certificate", func() bool { return api.watchesBy(first) > 0 })
	// Renewed at ~1.5 s: a second certificate, and the watch re-made with it.
	eventually(t, "a renewed certificate watching", func() bool {
		s := mint.issued()
		return len(s) >= 2 && api.watchesBy(s[1]) > 0
	})
	eventually(t, "healthy after renewal", func() bool {
		h, _ := sink.healthOf("c1")
		return h.APIReachable && h.Synced && h.Nodes == 1 && h.Err == ""
	})
	if n := sink.goneCount(); n != 0 {
		t.Errorf("NodeGone %d times across a renewal", n)
	}
	if _, c := sink.last("c1", "n1"); c != 1 {
		t.Logf("n1 reported %d times (relists after a renewal report it again)", c)
	}
}

func TestLoadCertRefusesExpiredAndGarbage(t *testing.T) {
	ca, err := pki.NewCA("kubernetes", pki.ECDSAP256, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	mint := &minter{ca: ca, validity: time.Minute}
	now := time.Now()
	if _, at, err := loadCert(Target{Credentials: mint.credentials}, now); err != nil || at.Before(now) || at.After(now.Add(time.Minute)) {
		t.Errorf("renew at %v (%v), want within the minute", at, err)
	}
	if _, _, err := loadCert(Target{Credentials: mint.credentials}, now.Add(-2*time.Hour)); err != nil {
		t.Errorf("issued in the past: %v", err)
	}
	old := &minter{ca: ca, validity: time.Second}
	expired := func(time.Time) ([]byte, []byte, error) { return old.credentials(now.Add(-time.Hour)) }
	if _, _, err := loadCert(Target{Credentials: expired}, now); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("expired certificate: %v", err)
	}
	secret := "-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWtleS1ieXRlcw==\n-----END PRIVATE KEY-----\n"
	garbage := func(time.Time) ([]byte, []byte, error) { return []byte("not pem"), []byte(secret), nil }
	if _, _, err := loadCert(Target{Credentials: garbage}, now); err == nil || strings.Contains(err.Error(), "c2VjcmV0") {
		t.Errorf("garbage credentials: %v", err)
	}
	if _, _, err := loadCert(Target{}, now); err == nil {
		t.Error("no credentials accepted")
	}
	failing := func(time.Time) ([]byte, []byte, error) { return nil, nil, fmt.Errorf("CA sealed") }
	if _, _, err := loadCert(Target{Credentials: failing}, now); err == nil || !strings.Contains(err.Error(), "CA sealed") {
		t.Errorf("failing mint: %v", err)
	}
}
