package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/app"
	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/testenv/freeport"
	"github.com/ztpd/ztpd/testenv/inproc"
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

// Regression: every mistyped subcommand printed its group's help and
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
		{[]string{"rollout", "strat"}, "start"},
		{[]string{"device", "desired", "gte", "00:11:22:33:44:55"}, "get"},
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

// Regression: a second serve on a busy port created a data directory,
// an at-rest key and an admin key, logged "started", and only then failed to
// bind. Every listener is checked first; nothing is created.
func TestLoudServeOnBusyPortCreatesNothing(t *testing.T) {
	for _, c := range []struct {
		name string
		args func(busy string) []string
	}{
		{"http", func(busy string) []string { return []string{"--http-addr", busy} }},
		{"pprof", func(busy string) []string { return []string{"--http-addr", freeport.Addr(t), "--pprof-addr", busy} }},
		{"metadata", func(busy string) []string { return []string{"--http-addr", freeport.Addr(t), "--metadata-addr", busy} }},
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
	r := loudRun(t, nil, "serve", "--data-dir", data, "--http-addr", freeport.Addr(t), "--tftp", "--tftp-addr", busy)
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
	s := startServe(t, bin, filepath.Join(t.TempDir(), "data"), "--pprof-addr", freeport.Addr(t))
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(s.stderr.String(), "ztpd started") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(s.stderr.String(), "ztpd started") {
		t.Fatalf("no started line:\n%s", s.stderr.String())
	}
}

// loudServeWithCluster serves ztpd in-process (so the test can stand in for
// the cluster's API server answering ztpd's watch) with a Kubernetes version
// and a Running cluster "c1" made with the real CLI through the admin
// socket, and returns the data directory.
func loudServeWithCluster(t *testing.T, env []string) string {
	t.Helper()
	_, cfg, a := inproc.ServeApp(t, nil)
	data := cfg.DataDir
	iso := filepath.Join(t.TempDir(), "k8s.iso")
	if err := os.WriteFile(iso, bytes.Repeat([]byte("CD001"), 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := loudRun(t, env, "--data-dir", data, "kube-version", "add", "--iso", iso, "--semver", "1.31.4"); r.code != 0 {
		t.Fatalf("kube-version add: %s", r.stderr)
	}
	r := loudRun(t, env, "--data-dir", data, "cluster", "create", "c1", "--version", "1.31.4", "-o", "json")
	var c client.CSCluster
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &c) != nil {
		t.Fatalf("cluster create: %s%s", r.stdout, r.stderr)
	}
	inproc.Healthy(t, a, c.ID)
	if st := loudClusterState(t, env, data, "c1"); st != "Running" {
		t.Fatalf("cluster c1 is %s, want Running", st)
	}
	return data
}

// loudClusterState is the state of cluster name, or "" when it is gone.
func loudClusterState(t *testing.T, env []string, data, name string) string {
	t.Helper()
	r := loudRun(t, env, "--data-dir", data, "cluster", "list", "-o", "json")
	if r.code != 0 {
		t.Fatalf("cluster list: %s", r.stderr)
	}
	var list []client.CSCluster
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("cluster list: %v\n%s", err, r.stdout)
	}
	for _, c := range list {
		if c.Name == name {
			return c.State
		}
	}
	return ""
}

// Regression: cluster delete destroyed the CA without confirmation.
// Destructive commands refuse without a terminal unless --yes is given, ask
// on a terminal, and go ahead with --yes.
func TestLoudDestructiveCommandsNeedYes(t *testing.T) {
	env := cliEnv(t)
	data := loudServeWithCluster(t, env)

	r := loudRun(t, env, "--data-dir", data, "cluster", "delete", "c1")
	if r.code == 0 || !strings.Contains(r.stderr, "--yes") || !strings.Contains(r.stderr, "CA is destroyed") {
		t.Fatalf("cluster delete without --yes: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if st := loudClusterState(t, env, data, "c1"); st != "Running" {
		t.Fatalf("cluster after a refused delete: %q, want Running", st)
	}
	// Every destructive command refuses the same way, before it acts.
	for _, args := range [][]string{
		{"kube-version", "delete", "v1.31.4"},
		{"image", "rm", "v1.31.4.iso"},
		{"apikey", "revoke", "AKsomekey"},
		{"token", "revoke", "abcdef"},
		{"device", "reset", "02:00:00:00:00:01"},
		{"rollout", "abort", "ro-20260301T101500-abcdefghij"},
	} {
		r := loudRun(t, env, append([]string{"--data-dir", data}, args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, "pass --yes") {
			t.Errorf("ztpd %s without --yes: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
	}
	if r := loudRun(t, env, "--data-dir", data, "image", "list", "-o", "json"); !strings.Contains(r.stdout, "v1.31.4.iso") {
		t.Fatalf("image gone after a refused rm:\n%s", r.stdout)
	}

	// On a terminal: "n" keeps the cluster, "y" goes ahead. script(1) gives
	// the command a pseudo-terminal.
	script, scriptErr := exec.LookPath("script")
	t.Run("terminal prompt", func(t *testing.T) {
		if scriptErr != nil {
			t.Skip("needs script(1) to give the command a pseudo-terminal")
		}
		onTerminal := func(answer string, args ...string) string {
			line := buildZtpd(t)
			for _, a := range args {
				line += " '" + a + "'"
			}
			cmd := exec.Command(script, "-qec", line, "/dev/null")
			cmd.Env = env
			cmd.Stdin = strings.NewReader(answer + "\n")
			out, _ := cmd.CombinedOutput()
			return string(out)
		}
		out := onTerminal("n", "--data-dir", data, "cluster", "delete", "c1")
		if !strings.Contains(out, "[y/N]") || !strings.Contains(out, "not confirmed") {
			t.Fatalf("terminal, answer n:\n%s", out)
		}
		if st := loudClusterState(t, env, data, "c1"); st != "Running" {
			t.Fatalf("cluster after answering n: %q, want Running", st)
		}
		out = onTerminal("y", "--data-dir", data, "cluster", "delete", "c1")
		if !strings.Contains(out, "[y/N]") || strings.Contains(out, "not confirmed") {
			t.Fatalf("terminal, answer y:\n%s", out)
		}

	})
	if scriptErr != nil { // not deleted on a terminal: delete it with --yes
		if r := loudRun(t, env, "--data-dir", data, "cluster", "delete", "c1", "--yes"); r.code != 0 {
			t.Fatalf("cluster delete --yes: exit %d\n%s", r.code, r.stderr)
		}
	}
	if st := loudClusterState(t, env, data, "c1"); st != "" {
		t.Fatalf("cluster after a confirmed delete: %q, want deleted", st)
	}
	// --yes and -y go ahead without asking.
	if r := loudRun(t, env, "--data-dir", data, "kube-version", "delete", "v1.31.4", "--yes"); r.code != 0 {
		t.Fatalf("kube-version delete --yes: exit %d\n%s", r.code, r.stderr)
	}
	if r := loudRun(t, env, "--data-dir", data, "image", "rm", "-y", "v1.31.4.iso"); r.code != 0 {
		t.Fatalf("image rm -y: exit %d\n%s", r.code, r.stderr)
	}
	if r := loudRun(t, env, "--data-dir", data, "image", "list", "-o", "json"); strings.Contains(r.stdout, "v1.31.4.iso") {
		t.Fatalf("image still listed after rm -y:\n%s", r.stdout)
	}
}

// Regression: device approve of a device whose profile names no
// cluster was accepted and changed nothing; --cluster nosuch said "Invalid
// Kubernetes cluster ID". The device really fetches its ztp.json from the
// real server first, so the server knows its profile.
func TestLoudApproveRefusesWhatCannotTakeEffect(t *testing.T) {
	env := cliEnv(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	profiles := filepath.Join(dir, "profiles")
	os.MkdirAll(profiles, 0o755)
	if err := os.WriteFile(filepath.Join(profiles, "plain.yaml"), []byte("name: plain\nmatch:\n  serial: LOUD*\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "ztpd.yaml")
	if err := os.WriteFile(cfgFile, []byte("profiles: ["+profiles+"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The switch holds a lease on 127.0.0.1 (it fetches from loopback).
	const mac = "02:00:00:00:15:01"
	cfg := config.Default()
	cfg.DataDir = data
	a, err := app.New(cfg, app.NewLogger(io.Discard, "error", "text"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if err := a.Store.Update(func(tx core.Tx) error {
		return tx.Leases().Put(core.Lease{IP: "127.0.0.1", MAC: mac, State: core.LeaseActive, Start: now, Expiry: now.Add(time.Hour)})
	}); err != nil {
		t.Fatal(err)
	}
	a.Close()
	s := startServe(t, buildZtpd(t), data, "--config", cfgFile)
	req, _ := http.NewRequest("GET", "http://"+s.addr+"/ztp/ztp.json", nil)
	req.Header.Set("Serial-Number", "LOUD0001")
	req.Header.Set("Base-Mac-Address", mac)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("ztp.json: %d %s", resp.StatusCode, body)
	}
	// The device record is written behind the answer.
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := loudRun(t, env, "--data-dir", data, "device", "list", "-o", "json")
		if strings.Contains(r.stdout, mac) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("device not recorded:\n%s%s", r.stdout, r.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}

	r := loudRun(t, env, "--data-dir", data, "device", "approve", mac)
	if r.code == 0 || !strings.Contains(r.stderr, `profile "plain", which names no cluster`) {
		t.Fatalf("approve of a device whose profile names no cluster: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = loudRun(t, env, "--data-dir", data, "device", "approve", mac, "--cluster", "nosuch")
	if r.code == 0 || !strings.Contains(r.stderr, `cluster "nosuch" not found`) || strings.Contains(r.stderr, "Invalid Kubernetes cluster ID") {
		t.Fatalf("approve --cluster nosuch: exit %d\n%s", r.code, r.stderr)
	}
	r = loudRun(t, env, "--data-dir", data, "device", "approve", "02:00:00:00:15:99")
	if r.code == 0 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("approve of an unknown device: exit %d\n%s", r.code, r.stderr)
	}
	r = loudRun(t, env, "--data-dir", data, "device", "show", mac, "-o", "json")
	var d core.Device
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || d.Approved || d.Profile != "plain" {
		t.Fatalf("device after refused approvals: %+v %v\n%s", d, err, r.stdout)
	}
}

// Regression: iso inspect printed an empty SHA256 column, and sizes were
// raw byte counts. The table shows every file's sha256 and human sizes;
// -o json keeps exact bytes. The ISO is made by xorriso.
func TestLoudISOInspectShowsSHA256AndHumanSizes(t *testing.T) {
	xorriso, err := exec.LookPath("xorriso")
	if err != nil {
		t.Skip("xorriso not installed")
	}
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	os.MkdirAll(filepath.Join(tree, "k8s"), 0o755)
	kubeadm := bytes.Repeat([]byte("kubeadm!"), 3<<16) // 1.5 MiB
	if err := os.WriteFile(filepath.Join(tree, "k8s", "kubeadm"), kubeadm, 0o755); err != nil {
		t.Fatal(err)
	}
	iso := filepath.Join(dir, "x.iso")
	if out, err := exec.Command(xorriso, "-as", "mkisofs", "-R", "-V", "CDROM", "-o", iso, tree).CombinedOutput(); err != nil {
		t.Fatalf("xorriso: %v\n%s", err, out)
	}
	sum := sha256.Sum256(kubeadm)
	r := loudRun(t, nil, "iso", "inspect", iso)
	if r.code != 0 {
		t.Fatalf("iso inspect: %s", r.stderr)
	}
	var line string
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "k8s/kubeadm") {
			line = l
		}
	}
	if !strings.Contains(line, hex.EncodeToString(sum[:])) || !strings.Contains(line, "1.5 MiB") {
		t.Fatalf("iso inspect table: file line %q, want its sha256 and 1.5 MiB\n%s", line, r.stdout)
	}
	if !regexp.MustCompile(`(?m)^sha256\s+[0-9a-f]{64}$`).MatchString(r.stdout) {
		t.Fatalf("iso inspect table: no image sha256\n%s", r.stdout)
	}
	r = loudRun(t, nil, "iso", "inspect", iso, "-o", "json")
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf(`"size": %d`, len(kubeadm))) {
		t.Fatalf("iso inspect -o json does not keep bytes:\n%s%s", r.stdout, r.stderr)
	}
	// Without hashing, no SHA256 column at all (it was empty).
	r = loudRun(t, nil, "iso", "inspect", "--hash=false", iso)
	if r.code != 0 || strings.Contains(r.stdout, "SHA256") {
		t.Fatalf("iso inspect --hash=false:\n%s%s", r.stdout, r.stderr)
	}
}

// Regression: --semver v1.31.4 was refused; sizes of stored images
// were raw bytes in tables.
func TestLoudSemverWithVAndImageSizes(t *testing.T) {
	env := cliEnv(t)
	data := filepath.Join(t.TempDir(), "data")
	startServe(t, buildZtpd(t), data)
	iso := filepath.Join(t.TempDir(), "k8s.iso")
	if err := os.WriteFile(iso, bytes.Repeat([]byte("CD001"), 3<<10), 0o644); err != nil { // 15 KiB
		t.Fatal(err)
	}
	r := loudRun(t, env, "--data-dir", data, "kube-version", "add", "--iso", iso, "--semver", "v1.31.4", "-o", "json")
	var added struct {
		Version struct {
			Name   string `json:"name"`
			SemVer string `json:"semver"`
		} `json:"version"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &added) != nil || added.Version.Name != "v1.31.4" {
		t.Fatalf("kube-version add --semver v1.31.4: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = loudRun(t, env, "--data-dir", data, "image", "list")
	if r.code != 0 || !strings.Contains(r.stdout, "15 KiB") || strings.Contains(r.stdout, "15360") {
		t.Fatalf("image list sizes:\n%s%s", r.stdout, r.stderr)
	}
	r = loudRun(t, env, "--data-dir", data, "image", "list", "-o", "json")
	if r.code != 0 || !strings.Contains(r.stdout, "15360") {
		t.Fatalf("image list -o json lost the byte count:\n%s%s", r.stdout, r.stderr)
	}
	// A cluster of it, by the release tag, is created and not left in Error.
	r = loudRun(t, env, "--data-dir", data, "cluster", "create", "fabric", "--version", "v1.31.4", "--join-method", "sonic", "-o", "json")
	if r.code != 0 {
		t.Fatalf("cluster create --join-method sonic: exit %d\n%s", r.code, r.stderr)
	}
	if st := loudClusterState(t, env, data, "fabric"); st != "Starting" {
		t.Fatalf("sonic cluster is %q, want Starting (waiting for its first control plane)", st)
	}
}

// Regression: --dhcp-interface nosuch0 said "has no IPv4 address"; it
// says the interface does not exist, lists those that do, and creates
// nothing.
func TestLoudMissingDHCPInterface(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	r := loudRun(t, nil, "serve", "--data-dir", data, "--http-addr", freeport.Addr(t),
		"--dhcp-interface", "nosuch0", "--dhcp-range", "10.99.1.10-10.99.1.20")
	if r.code == 0 || !strings.Contains(r.stderr, `interface "nosuch0" does not exist on this host (it has: `) ||
		!strings.Contains(r.stderr, "lo") || strings.Contains(r.stderr, "no IPv4 address") {
		t.Fatalf("serve --dhcp-interface nosuch0: exit %d\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data directory %s was created (%v)", data, err)
	}
}

// A Kubernetes version ztpd cannot provision is refused when added, so no
// cluster of it is created only to fail into Error.
func TestLoudUnprovisionableVersionRefused(t *testing.T) {
	env := cliEnv(t)
	data := filepath.Join(t.TempDir(), "data")
	startServe(t, buildZtpd(t), data)
	r := loudRun(t, env, "--data-dir", data, "kube-version", "add", "--semver", "2.0.0", "--url", "http://10.99.0.1:8080/isos/k.iso")
	if r.code == 0 || !strings.Contains(r.stderr, "cannot be provisioned") {
		t.Fatalf("kube-version add --semver 2.0.0: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// Without a running server, API commands run their jobs inside the command:
// --no-wait would cut the job off when the command closes the store, so it
// is ignored (said on stderr) and the job finishes.
func TestLoudNoWaitWithoutServerFinishesTheJob(t *testing.T) {
	env := cliEnv(t)
	data := filepath.Join(t.TempDir(), "data")
	iso := filepath.Join(t.TempDir(), "k8s.iso")
	if err := os.WriteFile(iso, bytes.Repeat([]byte("CD001"), 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := loudRun(t, env, "--data-dir", data, "kube-version", "add", "--iso", iso, "--semver", "1.31.4"); r.code != 0 {
		t.Fatalf("kube-version add: %s", r.stderr)
	}
	r := loudRun(t, env, "--data-dir", data, "cluster", "create", "c1", "--version", "1.31.4", "--no-wait")
	if r.code != 0 || !strings.Contains(r.stderr, "--no-wait ignored") {
		t.Fatalf("cluster create --no-wait without a server: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if st := loudClusterState(t, env, data, "c1"); st != "Starting" {
		t.Fatalf("cluster c1 is %q after an offline create, want Starting (its job done: CA made, waiting for its API server)", st)
	}
}

// A bad API certificate (api.tls.cert_file) fails serve before anything is
// created, like a busy port (it was found only once serving started, after
// the data directory, the key and an admin key existed).
func TestLoudServeWithBadAPICertificateCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	keyFile := filepath.Join(dir, "admin.yaml")
	cfg := filepath.Join(dir, "ztpd.yaml")
	body := "api:\n  addr: " + freeport.Addr(t) + "\n  tls: {enabled: true, cert_file: " + filepath.Join(dir, "missing.crt") +
		", key_file: " + filepath.Join(dir, "missing.key") + "}\n"
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	r := loudRun(t, nil, "--config", cfg, "serve", "--data-dir", data, "--http-addr", freeport.Addr(t), "--admin-key-file", keyFile)
	if r.code == 0 || !strings.Contains(r.stderr, "api.tls") || !strings.Contains(r.stderr, "missing.crt") {
		t.Fatalf("serve with a missing API certificate: exit %d\n%s", r.code, r.stderr)
	}
	for _, p := range []string{data, keyFile} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s was created (%v)", p, err)
		}
	}
}
