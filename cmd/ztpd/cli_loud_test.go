package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// loudResult is one run of the real binary.
type loudResult struct {
	code           int
	stdout, stderr string
}

// loudRun runs the real ztpd binary with args and no terminal on stdin.
func loudRun(t *testing.T, env []string, args ...string) loudResult {
	t.Helper()
	cmd := exec.Command(buildZtpd(t), args...)
	cmd.Dir = t.TempDir()
	if env != nil {
		cmd.Env = env
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := loudResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run ztpd %v: %v", args, err)
	}
	return r
}

// Issue 15 item 2: every mistyped subcommand printed its group's help and
// exited 0.
func TestLoudMistypedSubcommandsExitNonZero(t *testing.T) {
	cases := []struct {
		args    []string
		suggest string
	}{
		{[]string{"cluster", "craete", "x"}, "create"},
		{[]string{"image", "lst"}, "list"},
		{[]string{"iso", "biuld"}, "build"},
		{[]string{"apikey", "crete"}, "create"},
		{[]string{"profile", "chek"}, "check"},
		{[]string{"lease", "bogus"}, "list"},
		{[]string{"kube-version", "lst"}, "list"},
		{[]string{"token", "lst"}, "list"},
		{[]string{"device", "aprove", "00:11:22:33:44:55"}, "approve"},
		{[]string{"clustr", "list"}, "cluster"},
		{[]string{"help", "clustr"}, "cluster"},
		{[]string{"completion", "bsh"}, "bash"},
	}
	for _, c := range cases {
		r := loudRun(t, nil, c.args...)
		if r.code == 0 {
			t.Errorf("ztpd %s: exit 0, want non-zero\nstdout: %.300s", strings.Join(c.args, " "), r.stdout)
			continue
		}
		if !strings.Contains(r.stderr, "unknown command \""+c.args[len(c.args)-1]+"\"") &&
			!strings.Contains(r.stderr, "unknown command \"") {
			t.Errorf("ztpd %s: stderr does not name the unknown command:\n%s", strings.Join(c.args, " "), r.stderr)
		}
		if !strings.Contains(strings.ToLower(r.stderr), "did you mean") || !strings.Contains(r.stderr, "\t"+c.suggest) {
			t.Errorf("ztpd %s: stderr lacks \"did you mean\" %s:\n%s", strings.Join(c.args, " "), c.suggest, r.stderr)
		}
	}
}

// A bare group still prints its help and succeeds; extra words after a
// command that takes none are refused.
func TestLoudGroupHelpAndUnknownArgs(t *testing.T) {
	r := loudRun(t, nil, "cluster")
	if r.code != 0 || !strings.Contains(r.stdout, "Available Commands") {
		t.Errorf("ztpd cluster: exit %d, want 0 with help\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{
		{"cluster", "list", "extra"},
		{"image", "list", "extra"},
		{"iso", "bom", "extra"},
		{"serve", "extra"},
		{"version", "extra"},
	} {
		r := loudRun(t, nil, args...)
		if r.code == 0 || !strings.Contains(r.stderr, "extra") {
			t.Errorf("ztpd %s: exit %d, want non-zero naming the argument\n%s", strings.Join(args, " "), r.code, r.stderr)
		}
	}
}

// loudHoldPort listens on a free loopback port for the test's duration and
// returns it: the port another process already uses.
func loudHoldPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// Issue 15 item 4: a second serve on a busy port created a data directory,
// an at-rest key and an admin key, logged "started", and only then failed to
// bind. Every listener is checked first; nothing is created.
func TestLoudServeOnBusyPortCreatesNothing(t *testing.T) {
	for _, c := range []struct {
		name string
		args func(busy string) []string
	}{
		{"http", func(busy string) []string { return []string{"--http-addr", busy} }},
		{"pprof", func(busy string) []string { return []string{"--http-addr", freePort(t), "--pprof-addr", busy} }},
		{"metadata", func(busy string) []string { return []string{"--http-addr", freePort(t), "--metadata-addr", busy} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			busy := loudHoldPort(t)
			dir := t.TempDir()
			data := filepath.Join(dir, "data")
			keyFile := filepath.Join(dir, "admin.yaml")
			args := append([]string{"serve", "--data-dir", data, "--admin-key-file", keyFile}, c.args(busy)...)
			r := loudRun(t, nil, args...)
			if r.code == 0 {
				t.Fatalf("serve on busy %s port %s exited 0\n%s", c.name, busy, r.stderr)
			}
			if !strings.Contains(r.stderr, busy) || !strings.Contains(r.stderr, "address already in use") ||
				!strings.Contains(r.stderr, c.name+" listener") {
				t.Errorf("error does not name the listener and its address:\n%s", r.stderr)
			}
			if strings.Contains(r.stderr, "started") || strings.Contains(r.stdout+r.stderr, "secret key") {
				t.Errorf("serve said it started or made a key:\n%s%s", r.stdout, r.stderr)
			}
			if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("data directory %s was created (%v)", data, err)
			}
			if _, err := os.Stat(keyFile); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("admin key file %s was created (%v)", keyFile, err)
			}
		})
	}
}

// The same for TFTP (UDP).
func TestLoudServeOnBusyTFTPPortCreatesNothing(t *testing.T) {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	busy := pc.LocalAddr().String()
	data := filepath.Join(t.TempDir(), "data")
	r := loudRun(t, nil, "serve", "--data-dir", data, "--http-addr", freePort(t), "--tftp", "--tftp-addr", busy)
	if r.code == 0 || !strings.Contains(r.stderr, "tftp listener") || !strings.Contains(r.stderr, busy) {
		t.Fatalf("serve on a busy TFTP port: exit %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data directory %s was created (%v)", data, err)
	}
}

// A serve that binds everything still logs "started", after its listeners.
func TestLoudServeStartsAfterBinding(t *testing.T) {
	bin := buildZtpd(t)
	s := startServe(t, bin, filepath.Join(t.TempDir(), "data"), "--pprof-addr", freePort(t))
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(s.stderr.String(), "ztpd started") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(s.stderr.String(), "ztpd started") {
		t.Fatalf("no started line:\n%s", s.stderr.String())
	}
}
