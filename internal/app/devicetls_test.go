package app

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/clusters/clusterstest"
	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devicetls"
	"github.com/ztpd/ztpd/testenv/freeport"
	"github.com/ztpd/ztpd/ztp/endpoints"
)

// pinnedCurl fetches url from the source address from, the way a device
// does: curl with --pinnedpubkey (and -k: the pin is the trust, not names
// or issuers). ok is false when curl refused or failed.
func pinnedCurl(t *testing.T, from, pins, url string) (body []byte, ok bool) {
	t.Helper()
	out, err := exec.Command("curl", "-sS", "-k", "--fail-with-body", "--max-time", "10", "--interface", from,
		"--pinnedpubkey", pins, url).CombinedOutput()
	return out, err == nil
}

// TestDeviceHTTPSListener: with http.tls on, a switch fetches its
// ztp.json over HTTPS with real curl pinned to the pin the document names;
// a wrong pin is refused by curl; the join section's join-url is the
// HTTPS listener's and it carries the pin; after `device-tls rotate` the
// document names both pins and the listener still serves the old pair;
// the plain listener keeps serving.
func TestDeviceHTTPSListener(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed: devices pin with curl --pinnedpubkey")
	}
	dir := t.TempDir()
	leaf := filepath.Join(dir, "leaf.yaml")
	os.WriteFile(leaf, []byte("name: leaf\nmatch:\n  kind: [sonic]\nhostname: 'leaf-{{ .Serial | lower }}'\ncluster: fabric\nrole: worker\n"), 0o644)
	cfg := config.Default()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.HTTP.Addr = freeport.Addr(t)
	cfg.HTTP.TLS.Enabled, cfg.HTTP.TLS.Addr = true, freeport.Addr(t)
	cfg.AdvertiseAddr = "127.0.0.1"
	cfg.API.AdminKeyFile = filepath.Join(dir, "admin.key")
	cfg.Profiles = []string{leaf}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	a, err := New(cfg, NewLogger(&logs, "info", "text"))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, time.Second) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("served: %v", err)
		}
		a.Close()
	})
	clusterstest.Cluster(t, a.Clusters, "http://"+cfg.HTTP.Addr, "1.30.4", "fabric", 2)

	now := time.Now().UTC()
	const sw, swIP = "02:00:00:00:06:01", "127.0.0.61"
	err = a.Store.Update(func(tx core.Tx) error {
		if err := tx.Leases().Put(core.Lease{IP: swIP, MAC: sw, State: core.LeaseActive, Start: now, Expiry: now.Add(time.Hour)}); err != nil {
			return err
		}
		return tx.Devices().Put(core.Device{ID: sw, MAC: sw, Kind: core.KindSONiC, Serial: "SW601", Product: "Accton-AS7712-32X", IP: swIP,
			State: core.StateLeased, FirstSeen: now, LastSeen: now, UpdatedAt: now})
	})
	if err != nil {
		t.Fatal(err)
	}

	pin := a.DeviceTLS.PinList()
	https := "https://" + cfg.HTTP.TLS.Addr + endpoints.ZTPJSONPath
	var body []byte
	var ok bool
	deadline := time.Now().Add(10 * time.Second)
	for { // the listeners start with Serve
		if body, ok = pinnedCurl(t, swIP, pin, https); ok || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !ok {
		t.Fatalf("pinned fetch of ztp.json over https: %s\nlog:\n%s", body, &logs)
	}
	join := joinSection(t, body)
	_, port, _ := strings.Cut(cfg.HTTP.TLS.Addr, ":")
	if join["tls-pin"] != pin || join["join-url"] != "https://127.0.0.1:"+port+"/join" || join["enrollment"] == "" {
		t.Fatalf("join section %v, want join-url on the https listener and tls-pin %s", join, pin)
	}
	wrong := "sha256//" + strings.Repeat("A", 43) + "="
	if out, ok := pinnedCurl(t, swIP, wrong, https); ok {
		t.Fatalf("curl with a wrong pin fetched: %s", out)
	}

	// The plain listener serves the same document (the switch-over of
	// clients comes with the plugin and cloud-config changes).
	resp, err := clientFrom(swIP).Get("http://" + cfg.HTTP.Addr + endpoints.ZTPJSONPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("plain ztp.json: %d", resp.StatusCode)
	}

	// The agent door is on the listener too (it asks for a credential),
	// and the API is not.
	agent, _ := exec.Command("curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", "--interface", swIP, "--pinnedpubkey", pin,
		"https://"+cfg.HTTP.TLS.Addr+"/agent/v1/desired").Output()
	rest, _ := exec.Command("curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", "--interface", swIP, "--pinnedpubkey", pin,
		"https://"+cfg.HTTP.TLS.Addr+"/api/v1/devices").Output()
	if string(agent) != "401" || string(rest) != "404" {
		t.Fatalf("agent door over https: %s (want 401), REST API: %s (want 404)", agent, rest)
	}

	// Rotation, through the admin socket's route: documents name both
	// pins; the listener serves the old pair until the grace ends.
	w := httptest.NewRecorder()
	a.AdminMux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/admin/device-tls/rotate", nil))
	var st devicetls.Status
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &st) != nil || st.Phase != devicetls.PhaseNext || len(st.Pins) != 2 {
		t.Fatalf("rotate: %d %s", w.Code, w.Body)
	}
	both := strings.Join(st.Pins, ";")
	body, ok = pinnedCurl(t, swIP, pin, https)
	if !ok {
		t.Fatalf("old pin during the grace: %s", body)
	}
	if got := joinSection(t, body)["tls-pin"]; got != both {
		t.Fatalf("after rotate the document pins %v, want %s", got, both)
	}
	if _, ok := pinnedCurl(t, swIP, st.Pins[1], https); ok {
		t.Fatal("the next pair is served before the grace ends")
	}
	w = httptest.NewRecorder()
	a.AdminMux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/admin/device-tls/rotate", nil))
	if w.Code != http.StatusConflict && w.Code/100 != 4 {
		t.Fatalf("second rotate during the grace: %d %s", w.Code, w.Body)
	}
}

// joinSection is the join section of a ztp.json.
func joinSection(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var doc struct {
		ZTP map[string]json.RawMessage `json:"ztp"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("ztp.json: %v\n%s", err, body)
	}
	for name, raw := range doc.ZTP {
		if strings.HasSuffix(name, "-join") {
			var sec map[string]any
			if err := json.Unmarshal(raw, &sec); err != nil {
				t.Fatal(err)
			}
			return sec
		}
	}
	t.Fatalf("ztp.json has no join section:\n%s", body)
	return nil
}

// TestGroupPresentsOneDeviceCertificate: two appliances sharing one store
// (etcd) serve the same device certificate, so a document either one
// served names a pin the other's listener matches; a rotation on one is
// what the other names after its next refresh.
func TestGroupPresentsOneDeviceCertificate(t *testing.T) {
	_, apps := startTwoAppliances(t, func(c *config.Config) {
		c.HTTP.TLS.Enabled, c.HTTP.TLS.Addr = true, freeport.Addr(t)
	})
	a, b := apps[0], apps[1]
	if a.app.DeviceTLS.PinList() != b.app.DeviceTLS.PinList() {
		t.Fatalf("appliances pin %s and %s", a.app.DeviceTLS.PinList(), b.app.DeviceTLS.PinList())
	}
	for _, ga := range apps {
		if got := servedPin(t, ga.cfg.HTTP.TLS.Addr); got != a.app.DeviceTLS.PinList() {
			t.Fatalf("appliance %s serves %s, documents pin %s", ga.name, got, a.app.DeviceTLS.PinList())
		}
	}
	st, err := a.app.DeviceTLS.Rotate()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.app.DeviceTLS.Refresh(); err != nil {
		t.Fatal(err)
	}
	if got := b.app.DeviceTLS.PinList(); got != strings.Join(st.Pins, ";") {
		t.Fatalf("after a rotation on a, b pins %s, want %v", got, st.Pins)
	}
}

// servedPin is the pin of the certificate the TLS listener at addr serves.
func servedPin(t *testing.T, addr string) string {
	t.Helper()
	var conn *tls.Conn
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		conn, err = tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) // the pin is checked below
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return devicetls.PinOf(conn.ConnectionState().PeerCertificates[0])
}

// TestDeviceHTTPSOnAFreePort: the device HTTPS listener is on by default,
// and on a loopback http.addr it takes a free port (no root, no clash
// between appliances on one host); the documents name the port actually
// bound, so a switch that reads its ztp.json in clear reaches the
// listener its join-url names, pinned to its tls-pin.
func TestDeviceHTTPSOnAFreePort(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed: devices pin with curl --pinnedpubkey")
	}
	dir := t.TempDir()
	leaf := filepath.Join(dir, "leaf.yaml")
	os.WriteFile(leaf, []byte("name: leaf\nmatch:\n  kind: [sonic]\nhostname: 'leaf-{{ .Serial | lower }}'\ncluster: fabric\nrole: worker\n"), 0o644)
	cfg := config.Default()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.HTTP.Addr = freeport.Addr(t)
	cfg.AdvertiseAddr = "127.0.0.1"
	cfg.API.AdminKeyFile = filepath.Join(dir, "admin.key")
	cfg.Profiles = []string{leaf}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := cfg.DeviceTLSListener(); !strings.HasSuffix(got, ":0") {
		t.Fatalf("device HTTPS listener by default on loopback: %q, want a free port", got)
	}
	a, err := New(cfg, NewLogger(io.Discard, "info", "text"))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, time.Second) }()
	t.Cleanup(func() {
		stop()
		<-served
		a.Close()
	})
	clusterstest.Cluster(t, a.Clusters, "http://"+cfg.HTTP.Addr, "1.30.4", "fabric", 2)
	now := time.Now().UTC()
	const sw, swIP = "02:00:00:00:06:02", "127.0.0.62"
	err = a.Store.Update(func(tx core.Tx) error {
		if err := tx.Leases().Put(core.Lease{IP: swIP, MAC: sw, State: core.LeaseActive, Start: now, Expiry: now.Add(time.Hour)}); err != nil {
			return err
		}
		return tx.Devices().Put(core.Device{ID: sw, MAC: sw, Kind: core.KindSONiC, Serial: "SW602", Product: "Accton-AS7712-32X", IP: swIP,
			State: core.StateLeased, FirstSeen: now, LastSeen: now, UpdatedAt: now})
	})
	if err != nil {
		t.Fatal(err)
	}
	var body []byte
	deadline := time.Now().Add(10 * time.Second)
	for { // the listeners start with Serve
		resp, err := clientFrom(swIP).Get("http://" + cfg.HTTP.Addr + endpoints.ZTPJSONPath)
		if err == nil {
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("plain ztp.json: %v %s", err, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	join := joinSection(t, body)
	joinURL, _ := join["join-url"].(string)
	pin, _ := join["tls-pin"].(string)
	base, ok := strings.CutSuffix(joinURL, "/join")
	if !ok || !strings.HasPrefix(base, "https://127.0.0.1:") || strings.HasSuffix(base, ":0") || pin != a.DeviceTLS.PinList() {
		t.Fatalf("join section %v: want join-url on the bound port and tls-pin %s", join, a.DeviceTLS.PinList())
	}
	if out, ok := pinnedCurl(t, swIP, pin, base+endpoints.ZTPJSONPath); !ok {
		t.Fatalf("pinned fetch from the port the document names (%s): %s", base, out)
	}
}
