package main

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/testenv/inproc"
)

// "device desired get|set" of a device whose profile has a desired: block,
// against a serving ztpd: get shows the effective targets and which come
// from the profile; set --label adds to the labels set on the device, so
// the profile's stay defaults rather than being copied onto the device.
func TestDesiredCommandsWithProfileDefaults(t *testing.T) {
	for _, v := range []string{"ZTPD_API_URL", "ZTPD_API_KEY", "ZTPD_SECRET_KEY", "ZTPD_API_CA"} {
		t.Setenv(v, "")
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	prof := filepath.Join(t.TempDir(), "leaf.yaml")
	if err := os.WriteFile(prof, []byte("name: leaf\nmatch: {kind: sonic}\ndesired:\n  image: sonic-202411.bin\n  labels: {tier: leaf}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, cfg, ztpd := inproc.ServeApp(t, func(c *config.Config) { c.Profiles = []string{prof} })
	if err := ztpd.ReloadProfiles(); err != nil { // as serve's Start does
		t.Fatal(err)
	}
	const dev = "02:00:00:00:0f:01"
	now := time.Now().UTC()
	if err := ztpd.Store.Update(func(tx core.Tx) error {
		return tx.Devices().Put(core.Device{ID: dev, MAC: dev, Kind: core.KindSONiC, State: core.StateLeased, FirstSeen: now, LastSeen: now, UpdatedAt: now})
	}); err != nil {
		t.Fatal(err)
	}
	dd := "--data-dir=" + cfg.DataDir // the admin socket of the serving ztpd

	out, err := runCLI(t, dd, "device", "desired", "get", dev)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sonic-202411.bin", "tier=leaf", "leaf gives defaults: image, label tier"} {
		if !strings.Contains(out, want) {
			t.Errorf("desired get lacks %q:\n%s", want, out)
		}
	}
	if _, err := runCLI(t, dd, "device", "desired", "set", dev, "--label", "rack=7"); err != nil {
		t.Fatal(err)
	}
	out, err = runCLI(t, dd, "device", "desired", "get", dev, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var d desiredView
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if d.Profile != "leaf" || d.Explicit == nil || !maps.Equal(d.Explicit.Labels, map[string]string{"rack": "7"}) ||
		!maps.Equal(d.Labels, map[string]string{"tier": "leaf", "rack": "7"}) || d.Image != "sonic-202411.bin" {
		t.Fatalf("after set --label rack=7: %s", out)
	}
}
