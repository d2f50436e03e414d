package devicetls

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/secretbox"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// clock is a settable fake clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func newService(t *testing.T, st core.Store, kr *secretbox.Keyring, c *clock, reg prometheus.Registerer) *Service {
	t.Helper()
	s, err := New(Options{Store: st, Keys: kr, Grace: time.Hour, Names: []string{"127.0.0.1"}, Now: c.now, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Load(); err != nil {
		t.Fatal(err)
	}
	return s
}

func keyring(t testing.TB) *secretbox.Keyring {
	kr, err := secretbox.OpenKeyring(filepath.Join(t.TempDir(), "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// serve runs an HTTPS server with s's certificate and returns its URL.
func serve(t *testing.T, s *Service) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Not httptest's StartTLS: it adds its own certificate, which Go
	// prefers to GetCertificate for a client that sends no server name.
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"ok":true}`))
	})}
	go srv.Serve(tls.NewListener(ln, s.TLSConfig()))
	t.Cleanup(func() { srv.Close() })
	return "https://" + ln.Addr().String() + "/"
}

// curl fetches url with pins as --pinnedpubkey (and -k: devices check
// the pin, not the names or the issuer), reporting whether it got the body.
func curl(t *testing.T, url, pins string) (bool, string) {
	t.Helper()
	out, err := exec.Command("curl", "-sS", "-k", "--max-time", "10", "--pinnedpubkey", pins, url).CombinedOutput()
	return err == nil && bytes.Contains(out, []byte(`"ok":true`)), string(out)
}

func needCurl(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed: the pin is checked by the client devices use")
	}
}

// TestPinIsCurls: the pin is what curl --pinnedpubkey accepts for the
// served certificate, and a wrong pin is refused by curl.
func TestPinIsCurls(t *testing.T) {
	needCurl(t)
	c := &clock{t: time.Now()}
	s := newService(t, storetest.Store(t), keyring(t), c, nil)
	url := serve(t, s)
	pin := s.PinList()
	if !strings.HasPrefix(pin, "sha256//") || strings.Contains(pin, ";") {
		t.Fatalf("pin list %q: want one sha256// pin", pin)
	}
	if ok, out := curl(t, url, pin); !ok {
		t.Fatalf("curl with the pin: %s", out)
	}
	wrong := "sha256//" + strings.Repeat("A", 43) + "="
	if ok, out := curl(t, url, wrong); ok {
		t.Fatalf("curl with a wrong pin fetched: %s", out)
	}
}

// TestRotation: rotate names both pins, the listener serves the old pair
// until the grace ends (old pin still honoured), then the new one, and
// documents name the old pin until the grace after the switch; a second
// rotation during the first is refused. The metrics follow.
func TestRotation(t *testing.T) {
	needCurl(t)
	c := &clock{t: time.Now().Add(-3 * time.Hour)}
	reg := prometheus.NewRegistry()
	st := storetest.Store(t)
	kr := keyring(t)
	s := newService(t, st, kr, c, reg)
	url := serve(t, s)
	old := s.Status().Serving

	got, err := s.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	if got.Phase != PhaseNext || len(got.Pins) != 2 || got.Pins[0] != old || got.Serving != old {
		t.Fatalf("after rotate: %+v", got)
	}
	next := got.Pins[1]
	if got.SwitchAt.Sub(c.now()) != time.Hour {
		t.Fatalf("switch at %s, want now+grace", got.SwitchAt)
	}
	if _, err := s.Rotate(); !errors.Is(err, ErrRotating) || core.KindOf(err) != core.KindState {
		t.Fatalf("second rotation during the first: %v", err)
	}
	// During the grace: the old pair is served, so a document fetched
	// before the rotation (old pin only) still works.
	if ok, out := curl(t, url, old); !ok {
		t.Fatalf("old pin during the grace: %s", out)
	}
	if ok, _ := curl(t, url, next); ok {
		t.Fatal("the next pair is served before the switch")
	}
	if ok, out := curl(t, url, s.PinList()); !ok {
		t.Fatalf("both pins: %s", out)
	}
	if v := gauge(t, reg, "ztpd_device_tls_rotation_phase", "next"); v != 1 {
		t.Fatalf("phase metric next = %v", v)
	}

	c.add(time.Hour)
	if err := s.Refresh(); err != nil {
		t.Fatal(err)
	}
	got = s.Status()
	if got.Phase != PhaseSwitched || got.Serving != next || len(got.Pins) != 2 || got.Pins[1] != old {
		t.Fatalf("after the switch: %+v", got)
	}
	if ok, out := curl(t, url, next); !ok {
		t.Fatalf("new pin after the switch: %s", out)
	}
	if ok, _ := curl(t, url, old); ok {
		t.Fatal("the old pair is still served after the switch")
	}
	if ok, out := curl(t, url, s.PinList()); !ok {
		t.Fatalf("both pins after the switch: %s", out)
	}

	c.add(time.Hour)
	got = s.Status()
	if got.Phase != PhaseSteady || len(got.Pins) != 1 || got.Pins[0] != next {
		t.Fatalf("after the grace: %+v", got)
	}
	if err := s.Refresh(); err != nil {
		t.Fatal(err)
	}
	if v := gauge(t, reg, "ztpd_device_tls_rotation_phase", "steady"); v != 1 {
		t.Fatalf("phase metric steady = %v", v)
	}

	// Another service on the same store (a restart, a second appliance)
	// reads the same pair.
	again := newService(t, st, kr, c, nil)
	if again.Status().Serving != next {
		t.Fatalf("re-read serves %s, want %s", again.Status().Serving, next)
	}
	// And a rotation completes the previous one first.
	if _, err := again.Rotate(); err != nil {
		t.Fatal(err)
	}
}

// TestSharedStore: two services (two appliances of a group) on one store
// present the same certificate, and a rotation on one is seen by the
// other at its next refresh.
func TestSharedStore(t *testing.T) {
	c := &clock{t: time.Now()}
	st := storetest.Store(t)
	kr := keyring(t)
	// The store reruns transactions as etcd's does on a conflict.
	a := newService(t, storetest.Rerunning(st), kr, c, nil)
	b := newService(t, storetest.Rerunning(st), kr, c, nil)
	if a.PinList() != b.PinList() {
		t.Fatalf("two appliances pin %s and %s", a.PinList(), b.PinList())
	}
	if _, err := a.Rotate(); err != nil {
		t.Fatal(err)
	}
	if err := b.Refresh(); err != nil {
		t.Fatal(err)
	}
	if a.PinList() != b.PinList() || len(b.Pins()) != 2 {
		t.Fatalf("after a rotation on one: %s and %s", a.PinList(), b.PinList())
	}
}

// TestOperatorFiles: with the operator's files, their certificate is
// served and pinned, and a rotation is refused.
func TestOperatorFiles(t *testing.T) {
	c := &clock{t: time.Now()}
	gen := newService(t, storetest.Store(t), keyring(t), c, nil)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	p, _, _ := gen.view(c.now())
	writePair(t, p.cert, certFile, keyFile)
	s, err := New(Options{CertFile: certFile, KeyFile: keyFile, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Load(); err != nil {
		t.Fatal(err)
	}
	if s.PinList() != gen.PinList() || s.Status().Source != "files" {
		t.Fatalf("operator's files: %+v", s.Status())
	}
	if _, err := s.Rotate(); !errors.Is(err, ErrOperatorCertificate) {
		t.Fatalf("rotate with files: %v", err)
	}
	cert, _ := s.GetCertificate(nil)
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	if PinOf(leaf) != gen.PinList() {
		t.Fatal("served certificate is not the files'")
	}
}

// TestOperatorFilesReloaded: replaced operator files, read again
// (SIGHUP), are served to the next connection, which curl accepts with
// the new pin and refuses with the old, and the pin documents name is the
// new one at once; files that do not load are refused and the pair in use
// stays.
func TestOperatorFilesReloaded(t *testing.T) {
	needCurl(t)
	c := &clock{t: time.Now()}
	gen := newService(t, storetest.Store(t), keyring(t), c, nil)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	first, _, _ := gen.view(c.now())
	writePair(t, first.cert, certFile, keyFile)
	s, err := New(Options{CertFile: certFile, KeyFile: keyFile, Now: c.now})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Load(); err != nil {
		t.Fatal(err)
	}
	url := serve(t, s)
	oldPin := s.PinList()
	if ok, out := curl(t, url, oldPin); !ok {
		t.Fatalf("the first files' pin: %s", out)
	}

	// The operator's next certificate: another key.
	if _, err := gen.Rotate(); err != nil {
		t.Fatal(err)
	}
	c.add(2 * time.Hour) // past gen's grace: it serves the next pair
	next, _, _ := gen.view(c.now())
	if next.pin == oldPin {
		t.Fatal("the generator did not switch pairs")
	}
	writePair(t, next.cert, certFile, keyFile)
	if changed, err := s.ReloadFiles(); err != nil || !changed {
		t.Fatalf("reload: %v %v", changed, err)
	}
	if s.PinList() != next.pin || s.Status().Serving != next.pin {
		t.Fatalf("after the reload documents name %s, want %s", s.PinList(), next.pin)
	}
	if ok, out := curl(t, url, next.pin); !ok {
		t.Fatalf("the new pin after the reload: %s", out)
	}
	if ok, _ := curl(t, url, oldPin); ok {
		t.Fatal("the old pin still matches after the reload")
	}

	// A half-written replacement: refused, the pair in use stays.
	os.WriteFile(keyFile, []byte("not a key"), 0o600)
	if _, err := s.ReloadFiles(); err == nil || !strings.Contains(err.Error(), "http.tls") {
		t.Fatalf("reload of a broken key file: %v", err)
	}
	if s.PinList() != next.pin {
		t.Fatalf("after a refused reload documents name %s, want %s", s.PinList(), next.pin)
	}
	if ok, out := curl(t, url, next.pin); !ok {
		t.Fatalf("after a refused reload: %s", out)
	}

	// Without files there is nothing to read again.
	if changed, err := gen.ReloadFiles(); changed || err != nil {
		t.Fatalf("reload of the stored pair: %v %v", changed, err)
	}
}

func writePair(t *testing.T, cert tls.Certificate, certFile, keyFile string) {
	t.Helper()
	kder, err := x509.MarshalECPrivateKey(cert.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// gauge is the value of metric name with label phase, from reg.
func gauge(t *testing.T, reg *prometheus.Registry, name, phase string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "phase" && l.GetValue() == phase {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{phase=%q}", name, phase)
	return 0
}
