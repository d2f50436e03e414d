package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ztpd/ztpd/testenv/e2etest"
	"github.com/ztpd/ztpd/testenv/freeport"
	"github.com/ztpd/ztpd/testenv/hermetic"
)

// buildZtpd compiles the real binary once per test binary run.
var builtZtpd string

func buildZtpd(t *testing.T) string {
	t.Helper()
	if builtZtpd != "" {
		return builtZtpd
	}
	dir, err := os.MkdirTemp("", "ztpd-bin-")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "ztpd")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	builtZtpd = bin
	return bin
}

type runningServer struct {
	cmd    *exec.Cmd
	addr   string
	stderr *bytes.Buffer
}

func startServe(t *testing.T, bin, dataDir string, extra ...string) *runningServer {
	t.Helper()
	addr := freeport.Addr(t)
	args := append([]string{"serve", "--data-dir", dataDir, "--http-addr", addr}, extra...)
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Stdout = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return &runningServer{cmd: cmd, addr: addr, stderr: &stderr}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("server did not become healthy:\n%s", stderr.String())
	return nil
}

func TestServeDefaultsHealthMetricsAndGracefulStop(t *testing.T) {
	bin := buildZtpd(t)
	dir := t.TempDir()
	s := startServe(t, bin, filepath.Join(dir, "data"))
	resp, err := http.Get("http://" + s.addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]any
	json.NewDecoder(resp.Body).Decode(&h)
	resp.Body.Close()
	if h["status"] != "ok" {
		t.Fatalf("healthz: %v", h)
	}
	resp, err = http.Get("http://" + s.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "ztpd_store_commits_total") || !strings.Contains(string(body), "go_goroutines") {
		t.Fatalf("metrics lack ztpd and Go runtime series:\n%.500s", body)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "ztpd.db")); err != nil {
		t.Fatalf("store file: %v", err)
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, s.stderr)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no graceful exit after SIGTERM")
	}
	if !strings.Contains(s.stderr.String(), "ztpd stopped") {
		t.Fatalf("no shutdown log:\n%s", s.stderr)
	}
}

func TestSecondInstanceOnSameDataDirFailsAtOnce(t *testing.T) {
	bin := buildZtpd(t)
	data := filepath.Join(t.TempDir(), "data")
	startServe(t, bin, data)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, bin, "serve", "--data-dir", data, "--http-addr", freeport.Addr(t)).CombinedOutput()
	if err == nil {
		t.Fatal("second serve succeeded")
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("second serve took %v", time.Since(start))
	}
	if !strings.Contains(string(out), "in use by another ztpd") || !strings.Contains(string(out), "pid") {
		t.Fatalf("unclear message: %s", out)
	}
}

func TestInvalidConfigNamesTheField(t *testing.T) {
	bin := buildZtpd(t)
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(cfg, []byte("http:\n  addr: nonsense\n"), 0o644)
	out, err := exec.Command(bin, "serve", "--config", cfg, "--data-dir", t.TempDir()).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "http.addr") {
		t.Fatalf("want an error naming http.addr, got %v: %s", err, out)
	}
	out, err = exec.Command(bin, "serve", "--data-dir", t.TempDir(), "--dhcp-interface", "lo", "--dhcp-range", "10.99.1.10-10.99.1.5").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "dhcp.ranges[0]") {
		t.Fatalf("want an error naming dhcp.ranges[0], got %v: %s", err, out)
	}
	fmt.Fprint(io.Discard, out)
}

func TestMain(m *testing.M) {
	// The tests never read the host's packaged configuration (the package
	// test installs one while others run) or an operator's ZTPD_ variables:
	// no configuration file unless a test names one.
	hermetic.Isolate()
	code := m.Run()
	e2etest.Cleanup()
	if builtZtpd != "" {
		os.RemoveAll(filepath.Dir(builtZtpd))
	}
	os.Exit(code)
}

// TestAdminKeyFile: --admin-key-file puts the first admin key in a new
// 0600 file (not on standard output), in cli.yaml's format, so the CLI signs
// with it as is; an existing file is never overwritten.
func TestAdminKeyFile(t *testing.T) {
	bin := buildZtpd(t)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "admin.yaml")
	s := startServe(t, bin, filepath.Join(dir, "data"), "--admin-key-file", keyFile)
	st, err := os.Stat(keyFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	raw, _ := os.ReadFile(keyFile)
	var secret string
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "secret_key: "); ok {
			secret = v
		}
	}
	if len(secret) != 43 {
		t.Fatalf("no secret in the key file:\n%s", raw)
	}
	if out := s.stderr.String(); strings.Contains(out, secret) || !strings.Contains(out, keyFile) {
		t.Fatalf("standard output shows the secret or not the file:\n%s", out)
	}
	// The file is a cli.yaml: the CLI signs requests with it.
	cfgHome := t.TempDir()
	os.MkdirAll(filepath.Join(cfgHome, "ztpd"), 0o700)
	if err := os.WriteFile(filepath.Join(cfgHome, "ztpd", "cli.yaml"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	cli := exec.Command(bin, "kube-version", "list", "--api-url", "http://"+s.addr, "-o", "json")
	cli.Env = append(os.Environ(), "XDG_CONFIG_HOME="+cfgHome, "HOME="+t.TempDir(), "ZTPD_API_KEY=", "ZTPD_SECRET_KEY=", "ZTPD_API_URL=")
	if out, err := cli.CombinedOutput(); err != nil || !strings.HasPrefix(strings.TrimSpace(string(out)), "[") {
		t.Fatalf("CLI with the key file: %v\n%s", err, out)
	}

	// A new data directory with the file still there: refused, no key made.
	data2 := filepath.Join(dir, "data2")
	out, err := exec.Command(bin, "serve", "--data-dir", data2, "--http-addr", freeport.Addr(t), "--admin-key-file", keyFile).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "exists already") || strings.Contains(string(out), "secret key:") {
		t.Fatalf("existing key file: %v\n%s", err, out)
	}
	if after, _ := os.ReadFile(keyFile); !bytes.Equal(after, raw) {
		t.Fatal("existing key file changed")
	}
	ls, err := exec.Command(bin, "--data-dir", data2, "apikey", "list", "-o", "json").CombinedOutput()
	if err != nil || strings.TrimSpace(string(ls)) != "[]" {
		t.Fatalf("keys after the refused start: %v %s", err, ls)
	}
}

func TestMemoryLimitFollowsALowerCgroupLimit(t *testing.T) {
	for _, c := range []struct{ cgroup, want int64 }{
		{0, serveMemoryLimit},
		{8 << 30, serveMemoryLimit},
		{512 << 20, 512 << 20 * 8 / 10},
	} {
		if got := memoryLimit(c.cgroup); got != c.want {
			t.Errorf("memoryLimit(%d) = %d, want %d", c.cgroup, got, c.want)
		}
	}
}

// A server started without GOMEMLIMIT runs with the soft limit; one given
// GOMEMLIMIT keeps it.
func TestTuneGCSetsTheSoftMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(old)
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOMEMLIMIT", "")
	tuneGC(slog.New(slog.DiscardHandler))
	if got := debug.SetMemoryLimit(-1); got != memoryLimit(cgroupMemoryMax()) {
		t.Errorf("memory limit %d, want %d", got, memoryLimit(cgroupMemoryMax()))
	}
	debug.SetMemoryLimit(1 << 40)
	t.Setenv("GOMEMLIMIT", "1TiB")
	tuneGC(slog.New(slog.DiscardHandler))
	if got := debug.SetMemoryLimit(-1); got != 1<<40 {
		t.Errorf("GOMEMLIMIT set: memory limit changed to %d", got)
	}
}
