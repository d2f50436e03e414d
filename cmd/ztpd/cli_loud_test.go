package main

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"
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
