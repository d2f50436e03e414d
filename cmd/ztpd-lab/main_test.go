package main

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/testenv/lab"
)

func run(args ...string) (string, error) {
	var out bytes.Buffer
	root := newRootCmd(&out)
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// Bad flags are refused before anything is built, naming the flag.
func TestFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--vms", "1", "--clusters", "2"}, "--vms (1) must be at least --clusters (2)"},
		{[]string{"--clusters", "0"}, "--clusters at least 1"},
		{[]string{"--switches", "-1"}, "cannot be negative"},
		{[]string{"--switches", "170", "--vms", "11"}, "at most 180 devices"},
		{[]string{"--octet", "254"}, "--octet 254"},
		{[]string{"-o", "yaml"}, `--output "yaml"`},
		{[]string{"--ztpd", filepath.Join(t.TempDir(), "no-ztpd")}, "--ztpd"},
		{[]string{"extra"}, "unknown command"},
		{[]string{"--upgrade=later"}, `--upgrade "later"`},
		{[]string{"--console", "8443"}, `--console "8443": want host:port`},
		{[]string{"--ipv6", "--dual-stack"}, "--ipv6 and --dual-stack: choose one"},
	} {
		if _, err := run(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want an error with %q", c.args, err, c.want)
		}
	}
}

func TestHelpShowsExamples(t *testing.T) {
	out, err := run("--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sudo ztpd-lab -o json", "--ztpd", "--switches", "--upgrade --console 127.0.0.1:8443", "--upgrade=manual", "--ipv6", "--dual-stack"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q:\n%s", want, out)
		}
	}
}

// The binary exits non-zero on an error and says why on stderr.
func TestExitStatus(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "ztpd-lab")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "--vms", "0")
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.HasPrefix(stderr.String(), "ztpd-lab: --vms (0)") {
		t.Fatalf("exit %v, stderr %q", err, stderr.String())
	}
}

// The last lines name no file of a temporary work directory, which is gone
// when they are read; with --work-dir they do. A lab whose checks held says
// so in its last line.
func TestResultNamesOnlyKeptFiles(t *testing.T) {
	res := &lab.Result{KubernetesVersion: "v1.37.2", Devices: make([]core.Device, 3),
		Clusters:      []lab.ClusterState{{Name: "lab-0", State: "Running"}},
		ControlPlanes: []lab.ControlPlaneInfo{{Cluster: "lab-0", Device: "vm-0", Namespace: "ztpdlab-vm-0", URL: "https://10.99.100.10:6443", Dir: "/tmp/ztpd-lab-1/vm-0/etc-kubernetes"}}}
	for _, kept := range []bool{false, true} {
		var out bytes.Buffer
		if err := printResult(&out, "table", res, kept); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(out.String(), "/tmp/ztpd-lab-1"); got != kept {
			t.Errorf("kept=%v: names the work directory: %v\n%s", kept, got, out.String())
		}
		if !kept && !strings.Contains(out.String(), "--work-dir DIR keeps them") {
			t.Errorf("temporary work directory: no word on keeping the files:\n%s", out.String())
		}
	}
	if got := passedLine(res); !strings.HasPrefix(got, "all checks passed: 3 devices") || !strings.Contains(got, "1 clusters Running") {
		t.Errorf("passed line %q", got)
	}
}
