// Package e2etest builds network-namespace labs for end-to-end tests of the
// ZTP transports: the real ztpd binary serves in one namespace, real clients
// (curl, tftp-hpa, atftp) run in another, joined by a veth pair. Only
// 10.99.0.0/16 addresses are used; namespaces are named zz-* and removed when
// the test ends.
package e2etest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/testenv/hermetic"
)

// RequireRoot skips t unless it runs as root with every tool on PATH.
func RequireRoot(t *testing.T, tools ...string) {
	t.Helper()
	if testing.Short() {
		t.Skip("namespace test skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	for _, tool := range append([]string{"ip"}, tools...) {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s on PATH", tool)
		}
	}
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// Ztpd builds the ztpd binary once per test process.
func Ztpd(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ztpd-e2e-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "ztpd")
		out, err := exec.Command("go", "build", "-o", builtBin, "github.com/ztpd/ztpd/cmd/ztpd").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// Cleanup removes the binary Ztpd built; call it from TestMain after m.Run.
func Cleanup() {
	if builtBin != "" {
		os.RemoveAll(filepath.Dir(builtBin))
	}
}

// Lab is a server namespace and a client namespace joined by a veth.
type Lab struct {
	t          *testing.T
	Srv, Cli   string // namespace names
	SrvIP      string // first server address
	CliIP      string // first client address
	Net        string // "10.99.N"
	DataDir    string
	Dir        string // scratch directory
	cmd        *exec.Cmd
	out        *syncBuffer
	IfSrv, IfC string
}

// NewLab creates namespaces zz-<name>-s and zz-<name>-c on 10.99.<n>.0/24:
// the server gets .1 (plus extraSrv host numbers), the client .10 plus
// extraCli host numbers (each a device with its own address).
func NewLab(t *testing.T, name string, n int, extraSrv, extraCli []int) *Lab {
	t.Helper()
	return NewLabPrefix(t, "zz", name, n, extraSrv, extraCli)
}

// NewLabPrefix is NewLab with namespaces <prefix>-<name>-s and -c and
// interfaces <prefix><name>s and c, for tests that keep to a namespace
// prefix of their own.
func NewLabPrefix(t *testing.T, prefix, name string, n int, extraSrv, extraCli []int) *Lab {
	t.Helper()
	l := &Lab{t: t, Srv: prefix + "-" + name + "-s", Cli: prefix + "-" + name + "-c", Net: fmt.Sprintf("10.99.%d", n),
		IfSrv: prefix + name + "s", IfC: prefix + name + "c", Dir: t.TempDir()}
	if len(l.IfSrv) > 15 {
		t.Fatalf("lab name %q too long for interface names", name)
	}
	l.SrvIP, l.CliIP = l.Net+".1", l.Net+".10"
	l.DataDir = filepath.Join(l.Dir, "data")
	l.cleanupNS()
	t.Cleanup(l.cleanupNS)
	run := func(args ...string) {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", l.Srv)
	run("netns", "add", l.Cli)
	run("link", "add", l.IfSrv, "netns", l.Srv, "type", "veth", "peer", "name", l.IfC, "netns", l.Cli)
	run("-n", l.Srv, "addr", "add", l.SrvIP+"/24", "dev", l.IfSrv)
	for _, h := range extraSrv {
		run("-n", l.Srv, "addr", "add", fmt.Sprintf("%s.%d/24", l.Net, h), "dev", l.IfSrv)
	}
	run("-n", l.Cli, "addr", "add", l.CliIP+"/24", "dev", l.IfC)
	for _, h := range extraCli {
		run("-n", l.Cli, "addr", "add", fmt.Sprintf("%s.%d/24", l.Net, h), "dev", l.IfC)
	}
	for _, ns := range []string{l.Srv, l.Cli} {
		run("-n", ns, "link", "set", "lo", "up")
	}
	run("-n", l.Srv, "link", "set", l.IfSrv, "up")
	run("-n", l.Cli, "link", "set", l.IfC, "up")
	// Addresses are usable once duplicate address detection is not in the way
	// (IPv4 has none) and the link is up.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		out, _ := exec.Command("ip", "-n", l.Cli, "-o", "link", "show", "dev", l.IfC).Output()
		if bytes.Contains(out, []byte("state UP")) || bytes.Contains(out, []byte("LOWER_UP")) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return l
}

func (l *Lab) cleanupNS() {
	l.Stop()
	exec.Command("ip", "netns", "del", l.Srv).Run()
	exec.Command("ip", "netns", "del", l.Cli).Run()
}

// Addr is the lab address with host number h.
func (l *Lab) Addr(h int) string { return fmt.Sprintf("%s.%d", l.Net, h) }

// Seed opens the lab's data directory offline (no server running) and lets
// fn fill it.
func (l *Lab) Seed(fn func(db *boltstore.Store, images *imagestore.Store)) {
	l.t.Helper()
	db, err := boltstore.Open(l.DataDir, boltstore.Options{})
	if err != nil {
		l.t.Fatal(err)
	}
	defer db.Close()
	ims, err := imagestore.Open(db, l.DataDir)
	if err != nil {
		l.t.Fatal(err)
	}
	fn(db, ims)
}

// Start runs `ztpd serve --config cfg` in the server namespace and waits
// until /healthz answers from the client namespace.
func (l *Lab) Start(cfgYAML string, extra ...string) {
	l.t.Helper()
	cfg := filepath.Join(l.Dir, "ztpd.yaml")
	if err := os.WriteFile(cfg, []byte(cfgYAML), 0o644); err != nil {
		l.t.Fatal(err)
	}
	args := append([]string{"netns", "exec", l.Srv, Ztpd(l.t), "serve", "--config", cfg, "--data-dir", l.DataDir, "--log-level", "debug"}, extra...)
	l.cmd = exec.Command("ip", args...)
	l.cmd.Env = hermetic.TestEnv(l.t) // ztpd sees only its --config, not the host's
	l.out = &syncBuffer{}
	l.cmd.Stdout, l.cmd.Stderr = l.out, l.out
	if err := l.cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if out, err := l.Run("curl", "-sf", "-m", "2", "http://"+l.SrvIP+":8080/healthz"); err == nil && strings.Contains(out, "ok") {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	l.t.Fatalf("ztpd did not come up:\n%s", l.out.String())
}

// Log is what the server wrote so far.
func (l *Lab) Log() string {
	if l.out == nil {
		return ""
	}
	return l.out.String()
}

// Stop ends the server (SIGTERM, then SIGKILL).
func (l *Lab) Stop() {
	if l.cmd == nil || l.cmd.Process == nil {
		return
	}
	l.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { l.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		l.cmd.Process.Kill()
		<-done
	}
	l.cmd = nil
}

// Run runs a command in the client namespace and returns its combined
// output.
func (l *Lab) Run(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", l.Cli, name}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// RunIn runs a command in namespace ns.
func (l *Lab) RunIn(ns, name string, args ...string) (string, error) {
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...).CombinedOutput()
	return string(out), err
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
