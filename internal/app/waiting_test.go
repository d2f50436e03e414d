package app

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/clusters/clusterstest"
	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
	"github.com/ztpd/ztpd/joiner"
	"github.com/ztpd/ztpd/ztp/endpoints"
)

// A device that waits (its profile's cluster does not exist yet; a VM
// awaiting approval) is answered over HTTP with 503, Retry-After and a
// message that says what it waits for, never as an internal error; the wait
// is the device's reason in device show and device list --state
// unmatched, one event and one INFO line however often it retries.
func TestDeviceWaitsAreAnsweredAndRecordedOncePerChange(t *testing.T) {
	dir := t.TempDir()
	leaf, vms := filepath.Join(dir, "leaf.yaml"), filepath.Join(dir, "vms.yaml")
	os.WriteFile(leaf, []byte("name: leaf\nmatch:\n  kind: [sonic]\nhostname: 'leaf-{{ .Serial | lower }}'\ncluster: fabric\nrole: worker\n"), 0o644)
	os.WriteFile(vms, []byte("name: vms\nmatch:\n  kind: vm\ncluster: prod\n"), 0o644)
	cfg := config.Default()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.HTTP.Addr = "127.0.0.1:8080"
	cfg.API.AdminKeyFile = filepath.Join(dir, "admin.key")
	cfg.Profiles = []string{leaf, vms}
	var logs syncBuffer
	a, err := New(cfg, NewLogger(&logs, "info", "text"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	clusterstest.Cluster(t, a.Clusters, "http://127.0.0.1:8080", "1.30.4", "prod", 2)

	now := time.Now().UTC()
	const sw, vm = "02:00:00:00:05:01", "52:54:00:00:05:02"
	err = a.Store.Update(func(tx core.Tx) error {
		for _, d := range []core.Device{
			{ID: sw, MAC: sw, Kind: core.KindSONiC, Serial: "SW501", Product: "Accton-AS7712-32X", IP: "127.0.0.51",
				State: core.StateLeased, FirstSeen: now, LastSeen: now, UpdatedAt: now,
				// what an earlier request was told, before the profile matched
				Refusal: core.Refusal{What: "ztp.json", Kind: "no-profile", Reason: "no profile matches device " + sw, At: now}},
			{ID: vm, MAC: vm, Kind: core.KindVM, IP: "127.0.0.52", State: core.StateLeased, FirstSeen: now, LastSeen: now, UpdatedAt: now},
		} {
			if err := tx.Leases().Put(core.Lease{IP: d.IP, MAC: d.MAC, State: core.LeaseActive, Start: now, Expiry: now.Add(time.Hour)}); err != nil {
				return err
			}
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.mainHandler())
	defer srv.Close()
	// A VM waits where it fetches its join data: the device HTTPS listener.
	secure := httptest.NewTLSServer(a.deviceTLSHandler())
	defer secure.Close()

	get := func(from, path string) (int, http.Header, httpserve.ErrorBody) {
		t.Helper()
		c, base := clientFrom(from), srv.URL
		if path == joiner.JoinDataPath {
			c.Transport.(*http.Transport).TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
			base = secure.URL
		}
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var body httpserve.ErrorBody
		_ = json.Unmarshal(raw, &body)
		return resp.StatusCode, resp.Header, body
	}
	wantWait := func(from, path, names string) {
		t.Helper()
		for range 5 {
			code, h, body := get(from, path)
			if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" || body.Error.Code != "waiting" ||
				!strings.Contains(body.Error.Message, names) || body.Error.RequestID != "" || strings.Contains(body.Error.Message, "internal") {
				t.Fatalf("%s from %s: %d Retry-After %q %+v; want 503, Retry-After and a wait naming %s",
					path, from, code, h.Get("Retry-After"), body.Error, names)
			}
		}
	}
	wantWait("127.0.0.51", endpoints.ZTPJSONPath, `Kubernetes cluster "fabric"`)
	wantWait("127.0.0.52", joiner.JoinDataPath, "awaiting approval")
	a.Devices.Flush()

	events := func(dev string) map[string]int {
		n := map[string]int{}
		err := a.Store.View(func(tx core.Tx) error {
			return tx.Events().ListDevice(core.DeviceEvents, dev, 0, func(e core.Event) (bool, error) {
				n[e.Type]++
				return true, nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := events(sw); n["device.waiting"] != 1 {
		t.Errorf("switch events over 5 waiting retries: %v, want one device.waiting", n)
	}
	if n := events(vm); n["join.waiting"] != 1 || n["device.waiting"] != 0 {
		t.Errorf("VM events over 5 waiting retries: %v, want one join.waiting (the joiner's) and no second event", n)
	}

	rest := func(path string) []byte {
		t.Helper()
		w := httptest.NewRecorder()
		a.apiLocal.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if w.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", path, w.Code, w.Body)
		}
		return w.Body.Bytes()
	}
	for _, c := range []struct{ dev, reason string }{{sw, `Kubernetes cluster "fabric"`}, {vm, "awaiting approval"}} {
		var d core.Device
		if err := json.Unmarshal(rest("/api/v1/devices/"+c.dev), &d); err != nil {
			t.Fatal(err)
		}
		if d.Refusal.Kind != core.RefusalWaiting || !strings.Contains(d.Refusal.Reason, c.reason) {
			t.Errorf("device show %s: reason %+v, want a wait naming %s", c.dev, d.Refusal, c.reason)
		}
	}
	if list := string(rest("/api/v1/devices?state=unmatched")); !strings.Contains(list, `Kubernetes cluster \"fabric\"`) ||
		strings.Contains(list, "no profile matches") {
		t.Errorf("device list --state unmatched does not show the switch's wait:\n%s", list)
	}

	out := logs.String()
	if strings.Contains(out, "level=ERROR") {
		t.Errorf("a wait was logged as an error:\n%s", out)
	}
	if n := strings.Count(out, "device waiting"); n != 2 {
		t.Errorf("%d \"device waiting\" lines for two devices retrying 5 times each, want 2:\n%s", n, out)
	}
}
