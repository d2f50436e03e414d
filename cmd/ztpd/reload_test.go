package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/ztpd/ztpd/testenv/freeport"
)

// SIGHUP (systemctl reload ztpd) reads the profiles again: a new profile
// serves the switch without a restart; a file with errors is refused with
// its errors logged and the profiles in use keep serving.
func TestReloadProfilesOnHangup(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed: the switch's ztp.json fetch needs it")
	}
	bin := buildZtpd(t)
	env := cliEnv(t)
	dir := t.TempDir()
	addr := freeport.Addr(t)
	cfg := visConfig(t, dir, addr)
	profiles := filepath.Join(dir, "profiles")
	if err := os.MkdirAll(profiles, 0o755); err != nil {
		t.Fatal(err)
	}
	srv, log := visServe(t, bin, cfg, addr, env, "--profiles", profiles)
	if got := visCurl(t, "127.0.0.2", addr, "/ztp/ztp.json"); got != "404" {
		t.Fatalf("ztp.json with no profile: %s, want 404", got)
	}
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(profiles, "sw.yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := srv.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	write("name: sw\nmatch:\n  kind: [sonic]\nhostname: 'sw-{{ .IP }}'\n")
	log.visWait(t, "reload", regexp.MustCompile(`msg="profiles reloaded".*loaded=1`))
	if got := visCurl(t, "127.0.0.2", addr, "/ztp/ztp.json"); got != "200" {
		t.Fatalf("ztp.json after the reload: %s, want 200", got)
	}
	write("name: sw\nmatch:\n  kind: [sonic]\npriorty: 3\n")
	log.visWait(t, "refused reload", regexp.MustCompile(`level=ERROR msg="profiles not reloaded: the profiles in use stay".*priorty: unknown field \(did you mean priority\?\)`))
	time.Sleep(100 * time.Millisecond)
	if got := visCurl(t, "127.0.0.2", addr, "/ztp/ztp.json"); got != "200" {
		t.Fatalf("ztp.json after a refused reload: %s, want 200 (the profiles in use stay)", got)
	}
	visStop(t, srv)
}
