package main

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/devicetls"
	"github.com/ztpd/ztpd/internal/httpserve"
	"github.com/ztpd/ztpd/testenv/freeport"
)

// `ztpd device-tls show|rotate -o json` on a data directory with no server
// running: the pair is made once, rotate names both pins, a second rotate
// during the grace is refused; with http.tls turned off both say so.
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
	os.WriteFile(off, []byte("data_dir: "+filepath.Join(dir, "data2")+"\nhttp:\n  tls: {enabled: false}\n"), 0o644)
	if _, err := runCLI(t, "--config", off, "device-tls", "show"); err == nil || !strings.Contains(err.Error(), "http.tls.enabled") {
		t.Fatalf("show with http.tls off: %v", err)
	}
}

// SIGHUP (systemctl reload ztpd) reads the operator's device certificate
// files again: the running listener serves the new key (curl pinned to
// the new pin gets through, the old pin is refused), `device-tls show`
// and documents name the new pin; files that do not load are refused with
// an error logged, and the certificate in use stays.
func TestDeviceTLSFilesReloadOnHangup(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed: devices pin with curl --pinnedpubkey")
	}
	bin := buildZtpd(t)
	env := cliEnv(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "device-tls.crt"), filepath.Join(dir, "device-tls.key")
	writeOperatorPair := func() string {
		t.Helper()
		now := time.Now()
		der, kder, err := httpserve.NewSelfSigned("operator device TLS", []string{"127.0.0.1"}, now, now.AddDate(1, 0, 0))
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
		os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
		return devicetls.PinOf(leaf)
	}
	first := writeOperatorPair()
	addr := freeport.Addr(t)
	cfg := filepath.Join(dir, "ztpd.yaml")
	os.WriteFile(cfg, []byte("data_dir: "+filepath.Join(dir, "data")+"\nhttp:\n  addr: "+addr+
		"\n  tls: {addr: 127.0.0.1:0, cert_file: "+certFile+", key_file: "+keyFile+"}\n"), 0o644)
	srv, log := visServe(t, bin, cfg, addr, env)
	started := log.visWait(t, "start", regexp.MustCompile(`msg="ztpd started".* device_https=127\.0\.0\.1:[1-9]`))
	https := "https://" + regexp.MustCompile(`device_https=(\S+)`).FindStringSubmatch(started)[1] + "/healthz"
	pinned := func(pin string) bool {
		return exec.Command("curl", "-s", "-k", "-o", "/dev/null", "--max-time", "10", "--pinnedpubkey", pin, https).Run() == nil
	}
	serving := func() string {
		t.Helper()
		var st devicetls.Status
		out := visRun(t, bin, env, "--config", cfg, "-o", "json", "device-tls", "show")
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("device-tls show: %v\n%s", err, out)
		}
		return st.Serving
	}
	if !pinned(first) || serving() != first {
		t.Fatalf("the first files: pinned fetch %v, serving %s, want %s", pinned(first), serving(), first)
	}

	second := writeOperatorPair()
	srv.Process.Signal(syscall.SIGHUP)
	log.visWait(t, "reload", regexp.MustCompile(`msg="device TLS certificate files reloaded.*pin="?`+regexp.QuoteMeta(second)))
	if !pinned(second) || pinned(first) || serving() != second {
		t.Fatalf("after the reload: new pin %v, old pin %v, serving %s, want %s", pinned(second), pinned(first), serving(), second)
	}

	os.WriteFile(keyFile, []byte("half-written"), 0o600)
	srv.Process.Signal(syscall.SIGHUP)
	log.visWait(t, "refused reload", regexp.MustCompile(`level=ERROR msg="device TLS certificate files not reloaded: the certificate in use stays"`))
	if !pinned(second) || serving() != second {
		t.Fatalf("after a refused reload: pinned %v, serving %s, want %s", pinned(second), serving(), second)
	}
	visStop(t, srv)
}
