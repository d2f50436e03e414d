package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An approval rule on circuit or remote ids admits nobody while no relay is
// declared (relayed packets are dropped): serve says so at start.
func TestServeWarnsRelayRulesWithoutRelays(t *testing.T) {
	bin := buildZtpd(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ztpd.yaml")
	if err := os.WriteFile(cfg, []byte("joiner:\n  auto_approve:\n    - {circuit_ids: [rack7/port3], cluster: prod}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, bin, filepath.Join(dir, "data"), "--config", cfg)
	want := "no relay is declared under dhcp.relays"
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(s.stderr.String(), want); {
		if time.Now().After(deadline) {
			t.Fatalf("no warning %q:\n%s", want, s.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
