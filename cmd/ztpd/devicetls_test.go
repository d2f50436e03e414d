package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/devicetls"
)

// `ztpd device-tls show|rotate -o json` on a data directory with no server
// running: the pair is made once, rotate names both pins, a second rotate
// during the grace is refused; with http.tls off both say so.
func TestDeviceTLSCommands(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "ztpd.yaml")
	os.WriteFile(cfgPath, []byte("data_dir: "+filepath.Join(dir, "data")+"\nhttp:\n  tls: {enabled: true, addr: 127.0.0.1:0}\n"), 0o644)
	status := func(args ...string) devicetls.Status {
		t.Helper()
		out, err := runCLI(t, append([]string{"--config", cfgPath, "-o", "json", "device-tls"}, args...)...)
		if err != nil {
			t.Fatalf("device-tls %v: %v", args, err)
		}
		var st devicetls.Status
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("device-tls %v: %v\n%s", args, err, out)
		}
		return st
	}
	first := status("show")
	if first.Source != "store" || first.Phase != devicetls.PhaseSteady || len(first.Pins) != 1 || !strings.HasPrefix(first.Serving, "sha256//") {
		t.Fatalf("show: %+v", first)
	}
	if again := status("show"); again.Serving != first.Serving {
		t.Fatalf("the pair changed between two commands: %s, %s", first.Serving, again.Serving)
	}
	rot := status("rotate")
	if rot.Phase != devicetls.PhaseNext || len(rot.Pins) != 2 || rot.Pins[0] != first.Serving || rot.SwitchAt.IsZero() {
		t.Fatalf("rotate: %+v", rot)
	}
	if _, err := runCLI(t, "--config", cfgPath, "device-tls", "rotate"); err == nil || !strings.Contains(err.Error(), "under way") {
		t.Fatalf("second rotate: %v", err)
	}

	off := filepath.Join(dir, "off.yaml")
	os.WriteFile(off, []byte("data_dir: "+filepath.Join(dir, "data2")+"\n"), 0o644)
	if _, err := runCLI(t, "--config", off, "device-tls", "show"); err == nil || !strings.Contains(err.Error(), "http.tls.enabled") {
		t.Fatalf("show with http.tls off: %v", err)
	}
}
