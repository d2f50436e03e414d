package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Regression: profile errors came one round at a time, under Go type
// names, at the document's first line; `profile check` previewed VMs and
// ONIE switches with switch facts and documents they never fetch.

type profileCheckResult struct {
	stdout, stderr string
	code           int
}

// profileCheckRun runs the real binary in dir.
func profileCheckRun(t *testing.T, dir string, args ...string) profileCheckResult {
	t.Helper()
	cmd := exec.Command(buildZtpd(t), args...)
	cmd.Dir, cmd.Env = dir, cliEnv(t)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := profileCheckResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("ztpd %v: %v", args, err)
	}
	return r
}

func profileCheckWrite(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// profileCheckErrors runs the check on dir's profiles and returns its error
// lines (exit status 1 required).
func profileCheckErrors(t *testing.T, dir string) []string {
	t.Helper()
	r := profileCheckRun(t, dir, "profile", "check", "--profiles", ".")
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, goName := range []string{"profile.spec", "*profile.Data", "unmarshal", "can't evaluate"} {
		if strings.Contains(r.stderr, goName) {
			t.Errorf("error names Go's %q:\n%s", goName, r.stderr)
		}
	}
	var lines []string
	for _, l := range strings.Split(r.stderr, "\n") {
		if l = strings.TrimSpace(l); l != "" && l != "ztpd: invalid profiles:" {
			lines = append(lines, l)
		}
	}
	return lines
}

func profileCheckWant(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("errors:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestProfileCheckIssueExamples(t *testing.T) {
	dir := t.TempDir()
	// "field priorty not found in type profile.spec", reported at line 1.
	profileCheckWrite(t, dir, "a.yaml", "name: a\nmatch: {kind: sonic}\n\n\npriorty: 5\n")
	profileCheckWant(t, profileCheckErrors(t, dir), `a.yaml:5:1: profile "a": priorty: unknown field (did you mean priority?)`)

	// "can't evaluate field Serail in type *profile.Data".
	profileCheckWrite(t, dir, "a.yaml", "name: a\nmatch: {kind: sonic}\n\n\nhostname: 'sw-{{ .Serail }}'\n")
	profileCheckWant(t, profileCheckErrors(t, dir), `a.yaml:5:18: profile "a": hostname: unknown field .Serail (did you mean .Serial?)`)

	// Several errors in one file, and a duplicate name in another: all of
	// them in one run, in order.
	profileCheckWrite(t, dir, "a.yaml", `name: a
priorty: 5
match: {kind: [sonic, swich]}
hostname: 'sw-{{ .Serail | lowr }}'
mgmt: {ip: '{{ .IP }}', prefix: 40}
sections:
  - name: snmp
    data: {community-ro: '{{ .Labels.rack }}'}
`)
	profileCheckWrite(t, dir, "b.yaml", "name: a\n")
	profileCheckWant(t, profileCheckErrors(t, dir),
		`a.yaml:2:1: profile "a": priorty: unknown field (did you mean priority?)`,
		`a.yaml:3:23: profile "a": match.kind: "swich" is not one of sonic, onie, vm, unknown`,
		`a.yaml:4:18: profile "a": hostname: unknown field .Serail (did you mean .Serial?)`,
		`a.yaml:4:28: profile "a": hostname: unknown function "lowr" (did you mean "lower"?)`,
		`a.yaml:5:33: profile "a": mgmt.prefix: "40" is not a prefix length 1..32`,
		`a.yaml:8:30: profile "a": sections[0].data.community-ro: at <.Labels.rack>: map has no entry for key "rack" (the sample device has no label "rack"; write {{ index .Labels "rack" | default "..." }} when a device may lack it)`,
		`b.yaml:1:7: profile "a": name: also defined at a.yaml:1`)
}

// profileCheckJSON is the JSON answer of profile check.
type profileCheckJSON struct {
	Device   map[string]any `json:"device"`
	Matched  string         `json:"matched"`
	Fetches  []struct{ What, URL string }
	ZTPJSON  json.RawMessage   `json:"ztp_json"`
	ConfigDB json.RawMessage   `json:"config_db"`
	UserData string            `json:"user_data"`
	Metadata map[string]string `json:"meta_data"`
	Store    string            `json:"store"`
	Notes    []string          `json:"notes"`
	Warnings []string          `json:"warnings"`
	raw      string            // the output, for failures
}

func profileCheckPreview(t *testing.T, dir string, args ...string) profileCheckJSON {
	t.Helper()
	r := profileCheckRun(t, dir, append([]string{"profile", "check", "-o", "json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("profile check %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
	}
	var res profileCheckJSON
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	res.raw = r.stdout
	return res
}

func (res profileCheckJSON) fetched() string {
	var l []string
	for _, f := range res.Fetches {
		l = append(l, f.What+" "+f.URL)
	}
	return strings.Join(l, "\n")
}

// Each kind of device is previewed with the facts it has and the
// documents it fetches, and nothing else.
func TestProfileCheckPreviewPerKind(t *testing.T) {
	examples, err := filepath.Abs("../../examples/profiles")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	noFacts := func(res profileCheckJSON, facts ...string) {
		t.Helper()
		for _, f := range facts {
			if v, ok := res.Device[f]; ok {
				t.Errorf("%s device has %s %v", res.Device["kind"], f, v)
			}
		}
	}

	sw := profileCheckPreview(t, dir, "--profiles", examples, "--serial", "LEAF0010", "--product", "Accton-AS7712-32X",
		"--ip", "10.99.40.10", "--sonic-version", "N.A")
	if sw.Matched != "leaf" || sw.ZTPJSON == nil || sw.ConfigDB == nil || sw.Metadata != nil || sw.UserData != "" {
		t.Fatalf("switch:\n%s", sw.raw)
	}
	if f := sw.fetched(); !strings.Contains(f, "ztp.json http://127.0.0.1:8080/ztp/ztp.json") || !strings.Contains(f, "firmware: SONiC 202405.1") ||
		!strings.Contains(f, "config_db.json (merge) http://127.0.0.1:8080/ztp/config/52:54:00:12:34:56/config_db.json") {
		t.Errorf("switch fetches:\n%s", f)
	}

	onie := profileCheckPreview(t, dir, "--profiles", examples, "--kind", "onie", "--ip", "10.99.40.10")
	if onie.ZTPJSON != nil || onie.ConfigDB != nil || onie.Metadata != nil || onie.UserData != "" || len(onie.Fetches) != 1 ||
		onie.Fetches[0].URL != "http://127.0.0.1:8080/onie/installer" {
		t.Fatalf("ONIE:\n%s", onie.raw)
	}
	noFacts(onie, "product", "sonic_version")
	if onie.Device["serial"] != "SAMPLE0001" || onie.Device["platform"] != "x86_64-accton_as7712_32x-r0" {
		t.Errorf("ONIE facts %v", onie.Device)
	}

	vm := profileCheckPreview(t, dir, "--profiles", examples, "--kind", "vm", "--ip", "10.99.42.7")
	if vm.Matched != "vm-worker" || vm.ZTPJSON != nil || vm.ConfigDB != nil || len(vm.Metadata) != 10 ||
		!strings.HasPrefix(vm.UserData, "#cloud-config\nhostname: \"worker-1e0042000007\"") {
		t.Fatalf("VM:\n%s", vm.raw)
	}
	noFacts(vm, "serial", "product", "platform", "sonic_version", "vendor_class", "dhcp_hostname")
	if f := vm.fetched(); f != "meta-data (index and each entry) http://<dhcp-server-addr>/latest/meta-data/\nuser-data http://<dhcp-server-addr>/latest/user-data" {
		t.Errorf("VM fetches:\n%s", f)
	}

	// A fact the kind never reports describes no device.
	for _, args := range [][]string{{"--kind", "vm", "--serial", "X1"}, {"--kind", "onie", "--product", "P"}, {"--kind", "vm", "--sonic-version", "N.A"}} {
		r := profileCheckRun(t, dir, append([]string{"profile", "check", "--profiles", examples}, args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, "does not report it") {
			t.Errorf("%v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
}

const profileCheckRefs = `name: leaf
match: {kind: [sonic, onie]}
sonic: {version: "202405.1", image: sonic-test.bin}
cluster: fabrc
role: sonic
---
name: vms
match: {kind: vm}
cluster: k8s-prod
role: worker
`

// Profiles naming a cluster or an image the store lacks are warned about,
// with a running server (admin socket) and without one (the store opened
// in-process); with no store nothing is checked and nothing is created.
func TestProfileCheckWarnsMissingClusterAndImage(t *testing.T) {
	work := t.TempDir()
	profileCheckWrite(t, work, "p.yaml", profileCheckRefs)
	fresh := filepath.Join(t.TempDir(), "data")
	res := profileCheckPreview(t, work, "--data-dir", fresh, "--profiles", "p.yaml")
	if len(res.Warnings) != 0 || !strings.Contains(res.Store, "not consulted") {
		t.Fatalf("no store: %s %v", res.Store, res.Warnings)
	}
	if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("profile check created the data directory: %v", err)
	}

	data := filepath.Join(t.TempDir(), "data")
	srv := startServe(t, buildZtpd(t), data)
	warned := func(res profileCheckJSON, parts ...string) bool {
		for _, w := range res.Warnings {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(w, p)
			}
			if ok {
				return true
			}
		}
		return false
	}
	res = profileCheckPreview(t, work, "--data-dir", data, "--profiles", "p.yaml", "--sonic-version", "N.A")
	if !strings.Contains(res.Store, "running server") ||
		!warned(res, `p.yaml:4: profile "leaf": cluster "fabrc" does not exist`) ||
		!warned(res, `p.yaml:9: profile "vms": cluster "k8s-prod" does not exist`) ||
		!warned(res, `p.yaml:3: profile "leaf": SONiC image "sonic-test.bin" is not in the image store`) ||
		!warned(res, `ztp.json would be refused: HTTP 503`) {
		t.Fatalf("%s\n%s", res.Store, strings.Join(res.Warnings, "\n"))
	}

	// The image, stored under another name first (so the image list names
	// it other.bin), and a cluster one letter off.
	bin := filepath.Join(work, "sonic.bin")
	profileCheckWrite(t, work, "sonic.bin", "a SONiC installer")
	for _, args := range [][]string{
		{"image", "add", bin, "--kind", "onie-installer", "--name", "other.bin", "--platform", "x86_64-accton_as7712_32x-r0"},
		{"image", "add", bin, "--kind", "sonic-installer", "--name", "sonic-test.bin", "--version", "202405.1"},
	} {
		if r := profileCheckRun(t, work, append([]string{"--data-dir", data}, args...)...); r.code != 0 {
			t.Fatalf("%v: %s", args, r.stderr)
		}
	}
	iso := filepath.Join(work, "k8s.iso")
	if err := os.WriteFile(iso, bytes.Repeat([]byte("CD001"), 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"kube-version", "add", "--iso", iso, "--semver", "1.31.4"}, {"cluster", "create", "fabric", "--version", "1.31.4"}} {
		if r := profileCheckRun(t, work, append([]string{"--data-dir", data}, args...)...); r.code != 0 {
			t.Fatalf("%v: %s", args, r.stderr)
		}
	}
	check := func(where string) {
		t.Helper()
		res := profileCheckPreview(t, work, "--data-dir", data, "--profiles", "p.yaml", "--sonic-version", "N.A")
		if !strings.Contains(res.Store, where) || len(res.Warnings) != 2 ||
			!warned(res, `cluster "fabrc" does not exist (did you mean "fabric"?)`) || !warned(res, `cluster "k8s-prod" does not exist`) {
			t.Fatalf("%s: %s\n%s", where, res.Store, strings.Join(res.Warnings, "\n"))
		}
		if f := res.fetched(); !strings.Contains(f, "firmware: SONiC 202405.1, image sonic-test.bin http://127.0.0.1:8080/images/") || strings.Contains(f, "{missing}") {
			t.Fatalf("%s: fetches\n%s", where, f)
		}
		onie := profileCheckPreview(t, work, "--data-dir", data, "--profiles", "p.yaml", "--kind", "onie")
		if len(onie.Fetches) != 1 || !strings.Contains(onie.Fetches[0].What, "image sonic-test.bin pinned by profile leaf") {
			t.Fatalf("%s: ONIE fetches %+v", where, onie.Fetches)
		}
	}
	check("running server")

	srv.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- srv.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop")
	}
	check("data directory")
}
