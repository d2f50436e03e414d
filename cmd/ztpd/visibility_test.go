package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/app"
	"github.com/ztpd/ztpd/internal/clusters/clusterstest"
	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/joiner"
	"github.com/ztpd/ztpd/testenv/freeport"
)

// Visibility and local access, with the real
// binary: what a refused switch looks like in the log, in "device list",
// "device show" and "ztpd events"; read commands on the appliance without
// API keys, through the admin socket or the store opened in-process.

// visLog is a child process's output, safe to read while it runs.
type visLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *visLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *visLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// visWait waits until the log has a line matching re and returns it.
func (l *visLog) visWait(t *testing.T, what string, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, ln := range strings.Split(l.String(), "\n") {
			if re.MatchString(ln) {
				return ln
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line for %s (%s):\n%s", what, re, l.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// visRun runs the real binary without API credentials and returns its
// standard output; it fails the test when the command fails.
func visRun(t *testing.T, bin string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ztpd %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// visServe starts "ztpd serve --config cfg" plus extra and waits for
// /healthz on addr.
func visServe(t *testing.T, bin, cfg, addr string, env []string, extra ...string) (*exec.Cmd, *visLog) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--config", cfg, "serve"}, extra...)...)
	cmd.Env = env
	log := &visLog{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return cmd, log
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not become healthy:\n%s", log.String())
		}
	}
}

func visStop(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop on SIGTERM")
	}
}

// visCurl asks for path from source address src (a 127.0.0.0/8 address:
// no root needed) with the real curl, and returns the HTTP status.
func visCurl(t *testing.T, src, addr, path string) string {
	t.Helper()
	out, err := exec.Command("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--interface", src, "http://"+addr+path).Output()
	if err != nil {
		t.Fatalf("curl from %s: %v", src, err)
	}
	return string(out)
}

// visConfig writes a configuration: HTTP on addr, the reserved address
// 127.0.0.2 bound to a SONiC switch (a binding: the switch is entitled to
// its content without DHCP), no profiles.
func visConfig(t *testing.T, dir, addr string) string {
	t.Helper()
	path := filepath.Join(dir, "ztpd.yaml")
	cfg := fmt.Sprintf(`data_dir: %s
http:
  addr: %s
dhcp:
  subnets:
    - name: lo
      subnet: 127.0.0.0/8
      reservations:
        - {mac: "02:00:00:00:15:01", ip: 127.0.0.2, kind: sonic, hostname: sw1}
`, filepath.Join(dir, "data"), addr)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestVisibilityRefusedSwitch is what a new operator sees when a switch
// asks a plain server for its ztp.json: the start warns that no profile is
// loaded (and that device-facing URLs are on loopback); the refusal and the
// device's new state are logged at info with the reason; "device list
// --state unmatched", "events --device" and "device show" show it without
// any API key, "device list --state refused" the address without a lease,
// "events --follow" prints the next refusal as it comes; and once the
// server is stopped the same reads work on the store directly.
func TestVisibilityRefusedSwitch(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	bin := buildZtpd(t)
	dir := t.TempDir()
	addr := freeport.Addr(t)
	cfg := visConfig(t, dir, addr)
	env := cliEnv(t)
	srv, log := visServe(t, bin, cfg, addr, env)
	log.visWait(t, "the no-profiles warning", regexp.MustCompile(`level=WARN .*no device profiles are loaded.*--profiles DIR`))
	log.visWait(t, "the loopback advertise warning", regexp.MustCompile(`level=WARN .*URLs handed to devices use 127\.0\.0\.1.*--advertise-addr`))

	const mac = "02:00:00:00:15:01"
	if code := visCurl(t, "127.0.0.2", addr, "/ztp/ztp.json"); code != "404" {
		t.Fatalf("ztp.json of a switch no profile matches: HTTP %s, want 404", code)
	}
	log.visWait(t, "the refusal at info", regexp.MustCompile(`level=INFO msg="device refused" what=ztp.json addr=127.0.0.2 .*device=`+mac+` reason="no profile matches`))
	log.visWait(t, "the state change at info", regexp.MustCompile(`level=INFO msg="device state changed" .*device=`+mac+` from=new to=discovered ip=127.0.0.2 event=ztp.unknown`))
	if code := visCurl(t, "127.0.0.3", addr, "/ztp/ztp.json"); code != "403" {
		t.Fatalf("ztp.json from an address without a lease: HTTP %s, want 403", code)
	}

	c := []string{"--config", cfg}
	out := visRun(t, bin, env, append(c, "device", "list", "--state", "unmatched")...)
	if !strings.Contains(out, mac) || !strings.Contains(out, "ztp.json") || !strings.Contains(out, "no profile matches device "+mac) {
		t.Errorf("device list --state unmatched:\n%s", out)
	}
	out = visRun(t, bin, env, append(c, "device", "list", "--state", "unmatched", "-o", "json")...)
	var unmatched []struct {
		ID      string       `json:"id"`
		Refusal core.Refusal `json:"refusal"`
	}
	if err := json.Unmarshal([]byte(out), &unmatched); err != nil || len(unmatched) != 1 || unmatched[0].ID != mac ||
		unmatched[0].Refusal.Kind != "no-profile" || unmatched[0].Refusal.What != "ztp.json" {
		t.Errorf("device list --state unmatched -o json: %v\n%s", err, out)
	}
	out = visRun(t, bin, env, append(c, "events", "--device", mac)...)
	if !strings.Contains(out, "ztp.unknown") || !strings.Contains(out, "no profile matches") {
		t.Errorf("events --device:\n%s", out)
	}
	out = visRun(t, bin, env, append(c, "device", "show", mac)...)
	for _, want := range []string{"last refused", "no profile matches", "timeline", "ztp.unknown", "sw1"} {
		if !strings.Contains(out, want) {
			t.Errorf("device show lacks %q:\n%s", want, out)
		}
	}
	out = visRun(t, bin, env, append(c, "device", "list", "--state", "refused")...)
	if !strings.Contains(out, "127.0.0.3") || !strings.Contains(out, "holds no lease") || strings.Contains(out, "127.0.0.2 ") {
		t.Errorf("device list --state refused:\n%s", out)
	}

	// --follow prints what it has, then the next refusal once, as it comes.
	follow := exec.Command(bin, append(c, "events", "--follow", "--device", mac, "-o", "json")...)
	follow.Env = env
	stdout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { follow.Process.Kill(); follow.Wait() }()
	lines := make(chan eventView, 10)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e eventView
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				lines <- e
			}
		}
		close(lines)
	}()
	next := func(what string) eventView {
		t.Helper()
		select {
		case e, ok := <-lines:
			if !ok {
				t.Fatalf("events --follow ended before %s", what)
			}
			return e
		case <-time.After(10 * time.Second):
			t.Fatalf("events --follow printed no %s", what)
		}
		return eventView{}
	}
	first := next("first event")
	if first.Type != "ztp.unknown" || first.Device != mac {
		t.Fatalf("first followed event: %+v", first)
	}
	time.Sleep(300 * time.Millisecond) // let it poll once with nothing new
	if code := visCurl(t, "127.0.0.2", addr, "/ztp/ztp.json"); code != "404" {
		t.Fatalf("second ztp.json: HTTP %s", code)
	}
	second := next("new event")
	if second.Seq <= first.Seq || second.Type != "ztp.unknown" {
		t.Fatalf("followed event after a new refusal: %+v (first %+v)", second, first)
	}
	select {
	case e := <-lines:
		t.Fatalf("events --follow printed an event twice or one that did not happen: %+v", e)
	case <-time.After(2500 * time.Millisecond):
	}

	// Without a server the reads open the store in-process.
	visStop(t, srv)
	out = visRun(t, bin, env, append(c, "device", "list", "--state", "unmatched")...)
	if !strings.Contains(out, mac) {
		t.Errorf("device list --state unmatched without a server:\n%s", out)
	}
	out = visRun(t, bin, env, append(c, "events", "--device", mac, "--type", "ztp")...)
	if strings.Count(out, "ztp.unknown") != 2 {
		t.Errorf("events without a server:\n%s", out)
	}
}

// TestVisibilityServeProfilesFlag: "serve --profiles DIR" loads profiles
// (no no-profiles warning, the switch is served), and a profile naming a
// cluster that does not exist is a warning at start naming the file.
func TestVisibilityServeProfilesFlag(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	bin := buildZtpd(t)
	dir := t.TempDir()
	addr := freeport.Addr(t)
	cfg := visConfig(t, dir, addr)
	profiles := filepath.Join(dir, "profiles")
	if err := os.MkdirAll(profiles, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"sw.yaml":   "name: sw\nmatch:\n  kind: sonic\n  mac: \"02:00:00:00:15:01\"\n",
		"edge.yaml": "name: edge\nmatch:\n  kind: sonic\n  serial: EDGE*\ncluster: nosuch\nrole: sonic\n",
	} {
		if err := os.WriteFile(filepath.Join(profiles, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := cliEnv(t)
	_, log := visServe(t, bin, cfg, addr, env, "--profiles", profiles, "--advertise-addr", "10.99.0.1")
	log.visWait(t, "the missing cluster warning", regexp.MustCompile(`level=WARN .*edge\.yaml:\d+: profile \\?"edge\\?": cluster \\?"nosuch\\?" does not exist`))
	if code := visCurl(t, "127.0.0.2", addr, "/ztp/ztp.json"); code != "200" {
		t.Fatalf("ztp.json of the switch its profile matches: HTTP %s\n%s", code, log.String())
	}
	log.visWait(t, "the served state at info", regexp.MustCompile(`level=INFO msg="device state changed" .*from=new to=ztp-served .*reason="profile sw"`))
	if s := log.String(); strings.Contains(s, "no device profiles are loaded") || strings.Contains(s, "URLs handed to devices use") {
		t.Errorf("warned about profiles or the advertise address although both are given:\n%s", s)
	}
}

// TestVisibilityLocalReadsAndNames: on the appliance, without API
// credentials, every read command works, through the store in-process and
// through the running server's admin socket, and tables name clusters by
// name (token list, device list, device show) while -o json keeps the IDs
// with the names beside them.
func TestVisibilityLocalReadsAndNames(t *testing.T) {
	bin := buildZtpd(t)
	dir := t.TempDir()
	addr := freeport.Addr(t)
	cfgPath := visConfig(t, dir, addr)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.New(cfg, app.NewLogger(io.Discard, "error", "text"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	edge := clusterstest.Cluster(t, a.Clusters, "http://10.99.0.1:8080", "1.31.2", "edge-1", 2)
	const mac = "02:00:00:00:15:02"
	mustDevice(t, a, mac)
	if _, err := a.Joiner.Approve(ctx, mac, "edge-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Joiner.Enroll(ctx, joiner.EnrollRequest{Cluster: "edge-1", MAC: mac}); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	env := cliEnv(t)
	c := []string{"--config", cfgPath}
	check := func(how string) {
		t.Helper()
		out := visRun(t, bin, env, append(c, "token", "list")...)
		if !strings.Contains(out, "edge-1") || strings.Contains(out, edge.ID) || !strings.Contains(out, mac) {
			t.Errorf("%s: token list names the cluster by ID or not at all:\n%s", how, out)
		}
		out = visRun(t, bin, env, append(c, "token", "list", "--cluster", "edge-1", "-o", "json")...)
		var toks []tokenInfo
		if err := json.Unmarshal([]byte(out), &toks); err != nil || len(toks) == 0 || toks[0].Cluster != edge.ID || toks[0].ClusterName != "edge-1" {
			t.Errorf("%s: token list -o json: %v\n%s", how, err, out)
		}
		out = visRun(t, bin, env, append(c, "device", "list")...)
		if !strings.Contains(out, "edge-1") || strings.Contains(out, edge.ID) {
			t.Errorf("%s: device list:\n%s", how, out)
		}
		out = visRun(t, bin, env, append(c, "device", "list", "--cluster", "edge-1", "-o", "json")...)
		var devs []deviceView
		if err := json.Unmarshal([]byte(out), &devs); err != nil || len(devs) != 1 || devs[0].Cluster != edge.ID || devs[0].ClusterName != "edge-1" {
			t.Errorf("%s: device list -o json: %v\n%s", how, err, out)
		}
		out = visRun(t, bin, env, append(c, "device", "show", mac)...)
		if !strings.Contains(out, "edge-1 ("+edge.ID+")") || !strings.Contains(out, "device.approved") {
			t.Errorf("%s: device show:\n%s", how, out)
		}
		for _, args := range [][]string{{"cluster", "list"}, {"cluster", "show", "edge-1"}, {"kube-version", "list"}, {"lease", "list"}, {"events", "--cluster", "edge-1"}} {
			out = visRun(t, bin, env, append(c, args...)...)
			if want := map[string]string{"cluster": "edge-1", "kube-version": "1.31.2", "lease": "IP", "events": "device.approved"}[args[0]]; !strings.Contains(out, want) {
				t.Errorf("%s: ztpd %s lacks %q:\n%s", how, strings.Join(args, " "), want, out)
			}
		}
	}
	check("without a server")
	srv, _ := visServe(t, bin, cfgPath, addr, env)
	if _, err := os.Stat(filepath.Join(dir, "data", app.AdminSocketName)); err != nil {
		t.Fatalf("admin socket: %v", err)
	}
	check("through the admin socket")
	visStop(t, srv)
}

// TestVisibilityNoLocalAccessOffTheAppliance: without API credentials and
// without a data directory (not the appliance), an API command says what
// to pass and creates nothing, instead of answering from an empty store.
func TestVisibilityNoLocalAccessOffTheAppliance(t *testing.T) {
	bin := buildZtpd(t)
	data := filepath.Join(t.TempDir(), "nothing-here")
	cmd := exec.Command(bin, "--data-dir", data, "device", "list")
	cmd.Env = cliEnv(t)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no ztpd data directory at "+data) || !strings.Contains(string(out), "--api-key") {
		t.Fatalf("device list off the appliance: %v\n%s", err, out)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Fatalf("the command created %s: %v", data, err)
	}
}
