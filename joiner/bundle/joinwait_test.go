package bundle

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	yaml3 "go.yaml.in/yaml/v3"

	"github.com/ztpd/ztpd/joiner/pki"
)

const testPin = "sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="

// TestNodeRenderings: one Node, two renderings: the cloud-config's
// write_files are its Files byte for byte and its runcmd its Commands
// (after the users' ownership fix, which only the cloud-config has).
func TestNodeRenderings(t *testing.T) {
	initPlan, err := PlanInit(initParams("1.28.4", pki.RSA2048))
	if err != nil {
		t.Fatal(err)
	}
	n, err := BuildNode(CloudConfigParams{Role: RoleFirstControlPlane, Plan: initPlan, CACertPEM: []byte(fakeCACert), CAKeyPEM: []byte(fakeCAKey),
		SSHAuthorizedKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFake admin@example"},
		ExtraManifests:    map[string][]byte{"sonic-rbac.yaml": []byte(SonicRBAC)},
		Report:            &Report{URL: "https://10.99.0.1:8442/join/report", Token: "r3port.t0ken", Pin: testPin},
		Agent:             []File{{Path: "/etc/ztpd/agent.json", Mode: 0o600, Content: []byte(`{"credential":"c"}`), Secret: true}}})
	if err != nil {
		t.Fatal(err)
	}
	var cc cloudConfig
	if err := yaml3.Unmarshal(n.CloudConfig(), &cc); err != nil {
		t.Fatal(err)
	}
	files := n.Files()
	if len(files) != len(cc.WriteFiles) {
		t.Fatalf("%d files, cloud-config writes %d", len(files), len(cc.WriteFiles))
	}
	secret := map[string]bool{}
	for i, f := range files {
		w := cc.WriteFiles[i]
		if f.Path != w.Path || f.Mode != w.Permissions || f.Content != w.Content {
			t.Fatalf("file %d: %s %s differs from the cloud-config's %s %s", i, f.Path, f.Mode, w.Path, w.Permissions)
		}
		secret[f.Path] = f.Secret
	}
	for _, p := range []string{"/etc/kubernetes/pki/ca.key", KubeadmConfigPath, reportEnvPath, "/etc/ztpd/agent.json"} {
		if !secret[p] {
			t.Errorf("%s is not marked secret", p)
		}
	}
	if secret[setupScriptPath] || secret["/etc/kubernetes/pki/ca.crt"] {
		t.Error("a public file is marked secret")
	}
	if got, want := strings.Join(n.Commands(), "\n"), strings.Join(cc.RunCmd[1:], "\n"); got != want || cc.RunCmd[0] != "chown -R cloud:cloud /home/cloud/.ssh" {
		t.Fatalf("commands %q, runcmd %q", n.Commands(), cc.RunCmd)
	}
	var env string
	for _, f := range files {
		if f.Path == reportEnvPath {
			env = f.Content
		}
	}
	if !strings.Contains(env, "ZTPD_REPORT_PIN='"+testPin+"'") {
		t.Fatalf("report.env:\n%s", env)
	}
	if _, err := BuildNode(CloudConfigParams{Role: RoleWorker, Plan: initPlan,
		Report: &Report{URL: "http://10.99.0.1:8080/join/report", Token: "t", Pin: testPin}}); err == nil {
		t.Fatal("a pinned report over plain HTTP was accepted")
	}
}

// TestWaiterCloudConfig: the public user-data carries the waiter, its
// configuration and unit, no secret, starts the unit without blocking
// the boot, and passes cloud-init's own schema check.
func TestWaiterCloudConfig(t *testing.T) {
	pins := testPin + ";sha256//BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBA="
	doc, err := RenderWaiterCloudConfig(WaiterParams{URL: "https://10.99.0.1:8442/latest/join-data", Pins: pins, Hostname: "vm-1"})
	if err != nil {
		t.Fatal(err)
	}
	var cc struct {
		Hostname   string      `yaml:"hostname"`
		Preserve   bool        `yaml:"preserve_hostname"`
		WriteFiles []writeFile `yaml:"write_files"`
		RunCmd     []string    `yaml:"runcmd"`
	}
	dec := yaml3.NewDecoder(strings.NewReader(string(doc)))
	dec.KnownFields(true)
	if err := dec.Decode(&cc); err != nil {
		t.Fatalf("YAML: %v\n%s", err, doc)
	}
	files := map[string]writeFile{}
	for _, f := range cc.WriteFiles {
		files[f.Path] = f
	}
	var cfg waiterConfig
	if err := json.Unmarshal([]byte(files[JoinWaitConfigPath].Content), &cfg); err != nil || cfg.URL != "https://10.99.0.1:8442/latest/join-data" || cfg.Pin != pins {
		t.Fatalf("waiter configuration %+v %v", cfg, err)
	}
	if files[JoinWaitScriptPath].Content != joinWaitScript || files[JoinWaitScriptPath].Permissions != "0755" ||
		!strings.Contains(files[JoinWaitUnitPath].Content, "ExecStart=/usr/bin/python3 "+JoinWaitScriptPath) {
		t.Fatalf("waiter files %v", files)
	}
	if cc.Hostname != "vm-1" || cc.RunCmd[len(cc.RunCmd)-1] != "systemctl enable --now --no-block "+JoinWaitUnit {
		t.Fatalf("hostname %q, runcmd %q", cc.Hostname, cc.RunCmd)
	}
	for _, bad := range []WaiterParams{{URL: "http://10.99.0.1/latest/join-data", Pins: pins}, {URL: "https://10.99.0.1/x", Pins: "sha256//short"},
		{URL: "https://10.99.0.1/x", Pins: ""}} {
		if _, err := RenderWaiterCloudConfig(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	t.Run("cloud-init schema", func(t *testing.T) { cloudInitSchema(t, doc) })
	t.Run("PyYAML", func(t *testing.T) {
		pyYAMLAgrees(t, "waiter", doc, cloudConfig{WriteFiles: cc.WriteFiles, RunCmd: cc.RunCmd})
	})
}

func cloudInitSchema(t *testing.T, doc []byte) {
	t.Helper()
	ci, err := exec.LookPath("cloud-init")
	if err != nil {
		t.Skip("cloud-init not installed: cannot run its schema check")
	}
	path := filepath.Join(t.TempDir(), "user-data")
	if err := os.WriteFile(path, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(ci, "schema", "-c", path).CombinedOutput(); err != nil {
		t.Fatalf("cloud-init schema: %v\n%s", err, out)
	}
}

// joinDataServer answers the waiter: status codes in turn (the last one
// repeats), each with its Retry-After; it records when each request came.
type joinDataServer struct {
	mu    sync.Mutex
	codes []int
	retry string
	times []time.Time
	body  string
}

func (s *joinDataServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.times = append(s.times, time.Now())
	code := s.codes[min(len(s.times)-1, len(s.codes)-1)]
	w.Header().Set("Content-Type", "application/json")
	switch code {
	case 200:
		w.Write([]byte(s.body))
		return
	case 503:
		w.Header().Set("Retry-After", s.retry)
	}
	w.WriteHeader(code)
	fmt.Fprintf(w, `{"error":{"code":"x","message":"reason %d"}}`, code)
}

func (s *joinDataServer) requests() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.times...)
}

// runWaiter runs the waiter script under root against srv with pins;
// it returns its exit code and output.
func runWaiter(t *testing.T, root, url, pins string, env ...string) (int, string) {
	t.Helper()
	cfg, _ := json.Marshal(waiterConfig{URL: url, Pin: pins})
	os.MkdirAll(filepath.Join(root, "etc/ztpd"), 0o755)
	if err := os.WriteFile(filepath.Join(root, JoinWaitConfigPath), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "ztpd-join-wait")
	if err := os.WriteFile(script, []byte(joinWaitScript), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", script)
	cmd.Env = append(append(os.Environ(), "ZTPD_ROOT="+root), env...)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// TestJoinWaiter runs the waiter for real against an HTTPS server: it
// waits out 503s as Retry-After says, within its cap; installs the files
// atomically with their modes under ZTPD_ROOT and logs the commands it
// skips there; stops (exit 3) on a key that matches no pin without
// sending anything, and on "already issued".
func TestJoinWaiter(t *testing.T) {
	for _, tool := range []string{"python3", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: the waiter needs it", tool)
		}
	}
	body := `{"cluster":"c1","cluster_name":"prod","device":"d","role":"worker","method":"kubeadm","kubernetes_version":"v1.30.4",` +
		`"api_endpoint":"10.99.1.10:6443","ca_hash":"sha256:00","files":[` +
		`{"path":"/etc/ztpd/kubeadm.yaml","mode":"0600","content":"token: abcdef.0123456789abcdef\n"},` +
		`{"path":"/opt/bin/deploy-kube-system","mode":"0700","content":"#!/bin/bash\necho deploy\n"}],` +
		`"commands":["systemctl daemon-reload","systemctl start deploy-kube-system"]}`
	srv := &joinDataServer{codes: []int{503, 503, 200}, retry: "1", body: body}
	ts := httptest.NewTLSServer(srv)
	defer ts.Close()
	sum := sha256.Sum256(ts.Certificate().RawSubjectPublicKeyInfo)
	pin := "sha256//" + base64.StdEncoding.EncodeToString(sum[:])
	url := ts.URL + "/latest/join-data"

	t.Run("waits then installs", func(t *testing.T) {
		root := t.TempDir()
		code, out := runWaiter(t, root, url, testPin+";"+pin) // the second pin matches: a rotation
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		times := srv.requests()
		if len(times) != 3 {
			t.Fatalf("%d requests, want 3:\n%s", len(times), out)
		}
		for i := 1; i < len(times); i++ {
			if gap := times[i].Sub(times[i-1]); gap < 900*time.Millisecond {
				t.Fatalf("request %d came %s after the one told Retry-After: 1", i+1, gap)
			}
		}
		for path, mode := range map[string]os.FileMode{"/etc/ztpd/kubeadm.yaml": 0o600, "/opt/bin/deploy-kube-system": 0o700, JoinWaitDone: 0o644} {
			st, err := os.Stat(filepath.Join(root, path))
			if err != nil || st.Mode().Perm() != mode {
				t.Fatalf("%s: %v %v", path, st, err)
			}
		}
		b, _ := os.ReadFile(filepath.Join(root, "etc/ztpd/kubeadm.yaml"))
		if string(b) != "token: abcdef.0123456789abcdef\n" {
			t.Fatalf("kubeadm.yaml %q", b)
		}
		if !strings.Contains(out, "waiting: reason 503") || !strings.Contains(out, "skipped: systemctl start deploy-kube-system") {
			t.Fatalf("output:\n%s", out)
		}
		leftovers, _ := filepath.Glob(filepath.Join(root, "etc/ztpd/.ztpd-*"))
		if len(leftovers) > 0 {
			t.Fatalf("temporary files left: %v", leftovers)
		}
		// Installed: a second run (the unit at the next boot) asks nothing.
		n := len(srv.requests())
		if code, out := runWaiter(t, root, url, pin); code != 0 || len(srv.requests()) != n {
			t.Fatalf("second run: exit %d, %d requests:\n%s", code, len(srv.requests())-n, out)
		}
	})

	t.Run("Retry-After capped", func(t *testing.T) {
		capped := &joinDataServer{codes: []int{503, 200}, retry: "120", body: body}
		ts := httptest.NewTLSServer(capped)
		defer ts.Close()
		sum := sha256.Sum256(ts.Certificate().RawSubjectPublicKeyInfo)
		start := time.Now()
		code, out := runWaiter(t, t.TempDir(), ts.URL+"/latest/join-data", "sha256//"+base64.StdEncoding.EncodeToString(sum[:]), "ZTPD_WAIT_CAP=1")
		if code != 0 || time.Since(start) > 30*time.Second || !strings.Contains(out, "asking again in 1s") {
			t.Fatalf("exit %d after %s (Retry-After 120, cap 1):\n%s", code, time.Since(start), out)
		}
	})

	t.Run("pin mismatch stops", func(t *testing.T) {
		root := t.TempDir()
		n := len(srv.requests())
		code, out := runWaiter(t, root, url, testPin)
		if code != 3 || !strings.Contains(out, "matches no pin") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		if len(srv.requests()) != n {
			t.Fatal("the waiter sent a request to a server whose key matches no pin")
		}
		if _, err := os.Stat(filepath.Join(root, JoinWaitDone)); err == nil {
			t.Fatal("done after a pin mismatch")
		}
	})

	t.Run("already issued stops", func(t *testing.T) {
		gone := &joinDataServer{codes: []int{409}}
		ts := httptest.NewTLSServer(gone)
		defer ts.Close()
		cert, _ := x509.ParseCertificate(ts.Certificate().Raw)
		sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
		code, out := runWaiter(t, t.TempDir(), ts.URL+"/latest/join-data", "sha256//"+base64.StdEncoding.EncodeToString(sum[:]))
		if code != 3 || !strings.Contains(out, "no more (409): reason 409") || len(gone.requests()) != 1 {
			t.Fatalf("exit %d, %d requests:\n%s", code, len(gone.requests()), out)
		}
	})
}
