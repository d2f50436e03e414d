package app

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
)

// TestDesiredDefaultsFromTheDeviceProfile: the app gives the desired-state
// owner the desired: block of each device's profile (the one its next
// fetch gets): the REST API shows the effective state with the profile's
// name and what was set on the device; a PUT changes only the device's
// own; a device another profile gets has no defaults.
func TestDesiredDefaultsFromTheDeviceProfile(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "fabric.yaml")
	if err := os.WriteFile(prof, []byte(`name: leaf
match: {kind: sonic, product: "Accton-*"}
desired:
  mode: cluster
  image: sonic-202411.bin
  kubernetes_version: 1.37.2
  labels: {tier: leaf}
  hooks: {pre_upgrade: snap.sh}
---
name: other
match: {kind: sonic}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.HTTP.Addr = "127.0.0.1:8080"
	cfg.API.AdminKeyFile = filepath.Join(dir, "admin.key")
	cfg.Profiles = []string{prof}
	a, err := New(cfg, NewLogger(io.Discard, "error", "text"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// Before the profiles load (offline CLI use) nobody can tell.
	if _, name := a.desiredDefaults("02:00:00:00:05:01"); name != "" {
		t.Fatalf("defaults before the profiles load: %q", name)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	const leaf, other = "02:00:00:00:05:01", "02:00:00:00:05:02"
	now := time.Now().UTC()
	err = a.Store.Update(func(tx core.Tx) error {
		for id, product := range map[string]string{leaf: "Accton-AS7712-32X", other: "Dell-S5248F"} {
			if err := tx.Devices().Put(core.Device{ID: id, MAC: id, Kind: core.KindSONiC, Serial: "SN-" + id[15:], Product: product,
				IP: "10.99.40.11", State: core.StateLeased, FirstSeen: now, LastSeen: now, UpdatedAt: now}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	type view struct {
		Mode              string            `json:"mode"`
		Image             string            `json:"image"`
		KubernetesVersion string            `json:"kubernetes_version"`
		Labels            map[string]string `json:"labels"`
		Hooks             map[string]string `json:"hooks"`
		Profile           string            `json:"profile"`
		Explicit          *struct {
			Image  string            `json:"image"`
			Labels map[string]string `json:"labels"`
		} `json:"explicit"`
	}
	call := func(method, id string, body any) view {
		t.Helper()
		var raw []byte
		if body != nil {
			raw, _ = json.Marshal(body)
		}
		req := httptest.NewRequest(method, "/api/v1/devices/"+id+"/desired", bytes.NewReader(raw))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		a.apiLocal.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Fatalf("%s %s: %d %s", method, id, w.Code, w.Body)
		}
		var out struct {
			view
			Desired *view `json:"desired"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		if out.Desired != nil {
			return *out.Desired
		}
		return out.view
	}

	v := call("GET", leaf, nil)
	if v.Profile != "leaf" || v.Mode != "cluster" || v.Image != "sonic-202411.bin" || v.KubernetesVersion != "v1.37.2" ||
		v.Labels["tier"] != "leaf" || v.Hooks["pre_upgrade"] != "snap.sh" || v.Explicit == nil || v.Explicit.Image != "" || len(v.Explicit.Labels) != 0 {
		t.Fatalf("GET of a device whose profile gives defaults: %+v", v)
	}
	v = call("PUT", leaf, map[string]any{"labels": map[string]string{"rack": "7"}})
	if !maps.Equal(v.Labels, map[string]string{"tier": "leaf", "rack": "7"}) || v.Explicit == nil ||
		!maps.Equal(v.Explicit.Labels, map[string]string{"rack": "7"}) || v.Image != "sonic-202411.bin" {
		t.Fatalf("PUT labels: %+v %+v", v, v.Explicit)
	}
	if d, err := a.Desired.Get(leaf); err != nil || d.Labels["tier"] != "leaf" {
		t.Fatalf("Desired.Get: %+v %v", d, err)
	}
	if v = call("GET", other, nil); v.Profile != "" || v.Explicit != nil || v.Image != "" || len(v.Labels) != 0 {
		t.Fatalf("a device whose profile has no desired block: %+v", v)
	}
}
