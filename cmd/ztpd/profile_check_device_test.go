package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/testenv/freeport"
)

// "My switch gets no config": profile check --device previews with the
// facts ztpd recorded for that switch (what serving matched on), with the
// server running and after it stopped, and names what it cannot find.
func TestProfileCheckRecordedDevice(t *testing.T) {
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
	// The operator wrote the other model's product name.
	wrong := "name: leaf\nmatch:\n  kind: [sonic]\n  product: [Accton-AS7726-32X]\nhostname: 'leaf-{{ .Serial | lower }}'\n"
	if err := os.WriteFile(filepath.Join(profiles, "leaf.yaml"), []byte(wrong), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, _ := visServe(t, bin, cfg, addr, env, "--profiles", profiles)
	out, err := exec.Command("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--interface", "127.0.0.2",
		"-H", "SERIAL-NUMBER: LEAF0042", "-H", "PRODUCT-NAME: Accton-AS7712-32X", "-H", "SONiC-VERSION: N.A",
		"-A", "SONiC-ZTP/0.1", "http://"+addr+"/ztp/ztp.json").Output()
	if err != nil || string(out) != "404" {
		t.Fatalf("switch's ztp.json: %s %v, want 404 (no profile matches)", out, err)
	}
	// The refusal reaches the store through the devices service's
	// write-behind queue: wait for the record to carry the stated serial.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		show := exec.Command(bin, "--config", cfg, "device", "show", "LEAF0042")
		show.Env = env
		if show.Run() == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the refused switch's record never carried its serial LEAF0042")
		}
	}
	check := func(args ...string) string {
		t.Helper()
		return visRun(t, bin, env, append([]string{"--config", cfg, "profile", "check"}, args...)...)
	}
	for _, when := range []string{"server running", "server stopped"} {
		if when == "server stopped" {
			visStop(t, srv)
		}
		got := check("--profiles", profiles, "--device", "LEAF0042")
		for _, want := range []string{"serial=LEAF0042", "product=Accton-AS7712-32X", "ip=127.0.0.2", "mac=02:00:00:00:15:01"} {
			if !strings.Contains(got, want) {
				t.Errorf("%s: profile check --device LEAF0042 does not show the recorded fact %s:\n%s", when, want, got)
			}
		}
		if strings.Contains(got, "SAMPLE0001") || !strings.Contains(got, "no profile matches") {
			t.Errorf("%s: profile check --device LEAF0042 should say no profile matches its recorded facts:\n%s", when, got)
		}
		if why := `profile leaf does not match: match.product: the device's "Accton-AS7712-32X" is not "Accton-AS7726-32X"`; !strings.Contains(got, why) {
			t.Errorf("%s: profile check --device LEAF0042 does not say why leaf misses it (%s):\n%s", when, why, got)
		}
		// The corrected profile, checked before it is installed.
		fixed := filepath.Join(dir, "fixed-"+strings.ReplaceAll(when, " ", "-"))
		if err := os.MkdirAll(fixed, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(fixed, "leaf.yaml"), []byte(strings.Replace(wrong, "7726", "7712", 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		got = check("--profiles", fixed, "--device", "02:00:00:00:15:01")
		if !strings.Contains(got, "leaf-leaf0042") {
			t.Errorf("%s: the corrected profile does not render the switch's hostname:\n%s", when, got)
		}
	}
	cmd := exec.Command(bin, "--config", cfg, "profile", "check", "--profiles", profiles, "--device", "NOSUCH")
	cmd.Env = env
	msg, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(msg), "NOSUCH") || !strings.Contains(string(msg), "not found") {
		t.Errorf("profile check --device NOSUCH: %v\n%s", err, msg)
	}
}
