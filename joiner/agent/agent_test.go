package agent

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	testCredential = "ztpd-agent.dev1.s3cret-never-printed"
	testDevice     = "02:00:0a:63:00:10"
)

// report is one POST /agent/v1/report body as the server decodes it.
type report struct {
	Operation    string `json:"operation"`
	Step         string `json:"step"`
	State        string `json:"state"`
	ExitCode     int    `json:"exit_code"`
	Output       string `json:"output"`
	BootID       string `json:"boot_id"`
	AgentVersion string `json:"agent_version"`
}

func (r report) String() string { return r.Step + " " + r.State }

// fakeZTPD serves the agent API of the protocol over TLS and records reports.
type fakeZTPD struct {
	srv *httptest.Server

	mu           sync.Mutex
	operation    map[string]any    // the current operation; nil: none
	refuse       bool              // answer 403 to everything
	reportStatus int               // answer reports with this status (0: 200)
	dropReports  bool              // close the connection on reports (unreachable)
	reports      []report          // reports answered 200
	reportedAt   []time.Time       // when each of reports arrived
	pollSeconds  int               // the documents' poll_seconds (0: 60)
	desiredFails int               // answer GET desired with 503 (ztpd down) while set
	desiredGets  int               // GET desired requests answered
	getsAt       []time.Time       // when each of them arrived
	files        map[string][]byte // served at /files/<name>
	neighbors    []string          // POST /agent/v1/neighbors bodies
}

func newFakeZTPD(t *testing.T) *fakeZTPD {
	f := &fakeZTPD{files: map[string][]byte{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /agent/v1/desired", f.desired)
	mux.HandleFunc("POST /agent/v1/report", f.report)
	mux.HandleFunc("POST /agent/v1/neighbors", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if !f.authorized(w, r) {
			return
		}
		b, _ := io.ReadAll(r.Body)
		f.neighbors = append(f.neighbors, string(b))
		w.Write([]byte(`{"ok":true}`))
	})
	mux.HandleFunc("GET /files/{name}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		b, ok := f.files[r.PathValue("name")]
		f.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	})
	f.srv = httptest.NewUnstartedServer(mux)
	f.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes of the wrong-CA test
	f.srv.StartTLS()
	t.Cleanup(f.srv.Close)
	if !strings.HasPrefix(f.srv.URL, "https://127.0.0.1:") {
		t.Fatalf("test server at %s, want 127.0.0.1 (the certificate's IP SAN)", f.srv.URL)
	}
	return f
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg, "request_id": "r1"}})
}

func (f *fakeZTPD) authorized(w http.ResponseWriter, r *http.Request) bool {
	if f.refuse || r.Header.Get("Authorization") != "Bearer "+testCredential {
		writeError(w, http.StatusForbidden, "refused", "agent credential revoked")
		return false
	}
	return true
}

func (f *fakeZTPD) desired(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.authorized(w, r) {
		return
	}
	f.desiredGets++
	f.getsAt = append(f.getsAt, time.Now())
	if f.desiredFails != 0 {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "ztpd is restarting")
		return
	}
	poll := f.pollSeconds
	if poll == 0 {
		poll = 60
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"device": testDevice, "generation": 7, "mode": "cluster", "cluster": "c1", "role": "worker",
		"kubernetes_version": "v1.37.2", "image": nil, "labels": map[string]string{}, "poll_seconds": poll,
		"operation": f.operation,
	})
}

func (f *fakeZTPD) report(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.authorized(w, r) {
		return
	}
	if f.dropReports {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	var rep report
	// ztpd reads at most 64 KiB of a report (api.maxAgentReport).
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10+1))
	if err := json.Unmarshal(body, &rep); err != nil || len(body) > 64<<10 || r.Header.Get("Content-Type") != "application/json" {
		writeError(w, http.StatusBadRequest, "bad_request", "bad report")
		return
	}
	if f.reportStatus == http.StatusConflict {
		writeError(w, http.StatusConflict, "conflict", "operation withdrawn")
		return
	}
	f.reports = append(f.reports, rep)
	f.reportedAt = append(f.reportedAt, time.Now())
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"ok":true}` + "\n"))
}

func (f *fakeZTPD) set(fn func(f *fakeZTPD)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeZTPD) got() []report {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reports)
}

// rig is one device: a root with the installed files, fake commands first
// on PATH that record their arguments, and the fake ztpd.
type rig struct {
	t     *testing.T
	root  string // ZTPD_ROOT
	bin   string // fake commands
	calls string // what the fakes (and test hooks) record, one line each
	ztpd  *fakeZTPD
}

func newRig(t *testing.T) *rig {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed")
	}
	dir := t.TempDir()
	r := &rig{t: t, root: filepath.Join(dir, "root"), bin: filepath.Join(dir, "bin"), calls: filepath.Join(dir, "calls.log"), ztpd: newFakeZTPD(t)}
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.ztpd.srv.Certificate().Raw})
	files, err := Files(InstallConfig{URL: r.ztpd.srv.URL + "/agent/v1", Credential: testCredential, CAPEM: string(ca), Device: testDevice, Interval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		r.write(f.Path, string(f.Content), f.Mode)
	}
	r.setBootID("boot-1")
	os.MkdirAll(r.bin, 0o755)
	// No lldpd here, and no SONiC lldp container: a docker that fails
	// keeps the host's out of the agent's neighbour report.
	os.WriteFile(filepath.Join(r.bin, "docker"), []byte("#!/bin/sh\nexit 1\n"), 0o755)
	for _, name := range []string{"kubeadm", "systemctl", "config", "sonic-installer", "reboot"} {
		// Each fake records its argv, prints something, and exits with the
		// code in <bin>/<name>.exit (default 0).
		body := "#!/bin/sh\necho \"" + name + " $*\" >> " + r.calls + "\necho \"" + name + " output: $*\"\n" +
			"code=$(cat " + filepath.Join(r.bin, name+".exit") + " 2>/dev/null)\nexit ${code:-0}\n"
		if err := os.WriteFile(filepath.Join(r.bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// write places a file under the root.
func (r *rig) write(path, content string, mode os.FileMode) {
	r.t.Helper()
	p := r.root + path
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		r.t.Fatal(err)
	}
	os.Chmod(p, mode)
}

func (r *rig) setBootID(id string) { r.write("/proc/sys/kernel/random/boot_id", id+"\n", 0o644) }

func (r *rig) command(args ...string) *exec.Cmd {
	cmd := exec.Command("python3", append([]string{r.root + ScriptPath}, args...)...)
	cmd.Env = append(os.Environ(), "ZTPD_ROOT="+r.root, "PATH="+r.bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// agent runs the installed agent and returns its exit code and output. The
// credential must never appear in the output.
func (r *rig) agent(args ...string) (int, string) {
	r.t.Helper()
	cmd := r.command(args...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	go func() {
		<-ctx.Done()
		if cmd.Process != nil && ctx.Err() == context.DeadlineExceeded {
			cmd.Process.Kill()
		}
	}()
	out, err := cmd.CombinedOutput()
	code := 0
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		code = exitErr.ExitCode()
	} else if err != nil {
		r.t.Fatalf("agent %v: %v\n%s", args, err, out)
	}
	if strings.Contains(string(out), testCredential) || strings.Contains(string(out), "s3cret") {
		r.t.Fatalf("agent printed the credential:\n%s", out)
	}
	r.t.Logf("ztpd-agent %s: exit %d\n%s", strings.Join(args, " "), code, out)
	return code, string(out)
}

// once runs one poll and requires the exit code.
func (r *rig) once(want int) string {
	r.t.Helper()
	code, out := r.agent("once")
	if code != want {
		r.t.Fatalf("ztpd-agent once: exit %d, want %d\n%s", code, want, out)
	}
	return out
}

// recorded is what the fakes and hooks recorded, in order.
func (r *rig) recorded() []string {
	b, err := os.ReadFile(r.calls)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		r.t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

type agentState struct {
	Operation string   `json:"operation"`
	Done      []string `json:"done"`
	Running   *struct {
		Step      string `json:"step"`
		BootID    string `json:"boot_id"`
		Rebooting bool   `json:"rebooting"`
	} `json:"running"`
	Failed *struct {
		Step     string `json:"step"`
		ExitCode int    `json:"exit_code"`
	} `json:"failed"`
	Complete       bool           `json:"complete"`
	Abandoned      bool           `json:"abandoned"`
	PendingReports []report       `json:"pending_reports"`
	RollbackPoint  map[string]any `json:"rollback_point"`
}

func (r *rig) state() agentState {
	r.t.Helper()
	b, err := os.ReadFile(r.root + StateDir + "/state.json")
	if err != nil {
		r.t.Fatal(err)
	}
	var st agentState
	if err := json.Unmarshal(b, &st); err != nil {
		r.t.Fatalf("state.json: %v\n%s", err, b)
	}
	return st
}

// hook serves a shell script and returns its URL and sha256. The body
// usually records "hook <step>" so the order with the fakes shows.
func (r *rig) hook(name, body string) (string, string) {
	content := []byte("#!/bin/sh\n" + body + "\n")
	r.ztpd.set(func(f *fakeZTPD) { f.files[name] = content })
	sum := sha256.Sum256(content)
	return r.ztpd.srv.URL + "/files/" + name, hex.EncodeToString(sum[:])
}

func (r *rig) recordLine(what string) string { return "echo \"" + what + "\" >> " + r.calls }

func step(name, action string, args map[string]string) map[string]any {
	return map[string]any{"name": name, "action": action, "args": args}
}

func (r *rig) offer(id, kind string, steps ...map[string]any) {
	r.ztpd.set(func(f *fakeZTPD) {
		f.operation = map[string]any{"id": id, "kind": kind, "steps": steps}
	})
}

func states(reps []report) []string {
	var s []string
	for _, r := range reps {
		s = append(s, r.String())
	}
	return s
}

func requireEqual[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if !bytes.Equal(g, w) {
		t.Fatalf("%s:\n got %s\nwant %s", what, g, w)
	}
}

func TestScriptCompiles(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "ztpd-agent.py")
	os.WriteFile(src, Script(), 0o644)
	out, err := exec.Command("python3", "-c", "import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)",
		src, filepath.Join(dir, "ztpd-agent.pyc")).CombinedOutput()
	if err != nil {
		t.Fatalf("py_compile: %v\n%s", err, out)
	}
}

// TestUpgradeOperation: an upgrade [hook pre_upgrade, kubeadm-upgrade node,
// hook post_upgrade] runs in order, each step reported running then
// succeeded with its output; kubeadm and kubelet are fetched and checked;
// a second poll does nothing.
func TestUpgradeOperation(t *testing.T) {
	r := newRig(t)
	preURL, preSum := r.hook("pre", r.recordLine("hook $ZTPD_STEP")+"\necho \"pre-upgrade of $ZTPD_OPERATION $ZTPD_STEP on $ZTPD_DEVICE\"")
	postURL, postSum := r.hook("post", r.recordLine("hook $ZTPD_STEP")+"\necho post-upgrade done >&2")
	kubeadmBin, kubeletBin := []byte("#!/bin/sh\n# kubeadm v1.37.2\n"), []byte("#!/bin/sh\n# kubelet v1.37.2\n")
	r.ztpd.set(func(f *fakeZTPD) { f.files["kubeadm"], f.files["kubelet"] = kubeadmBin, kubeletBin })
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	r.offer("op-1", "upgrade-kubernetes",
		step("pre_upgrade", "hook", map[string]string{"url": preURL, "sha256": preSum, "timeout": "30"}),
		step("upgrade", "kubeadm-upgrade", map[string]string{"version": "v1.37.2", "phase": "node",
			"binaries_url": r.ztpd.srv.URL + "/files", "kubeadm_sha256": sum(kubeadmBin), "kubelet_sha256": sum(kubeletBin)}),
		step("post_upgrade", "hook", map[string]string{"url": postURL, "sha256": postSum}))

	r.once(0)
	requireEqual(t, "commands", r.recorded(), []string{"hook pre_upgrade", "kubeadm upgrade node", "systemctl restart kubelet", "hook post_upgrade"})
	reps := r.ztpd.got()
	requireEqual(t, "reports", states(reps), []string{"pre_upgrade running", "pre_upgrade succeeded", "upgrade running",
		"upgrade succeeded", "post_upgrade running", "post_upgrade succeeded"})
	for _, rep := range reps {
		if rep.Operation != "op-1" || rep.BootID != "boot-1" || rep.AgentVersion != "1" || rep.ExitCode != 0 {
			t.Fatalf("report %+v", rep)
		}
	}
	for i, want := range map[int]string{1: "pre-upgrade of op-1 pre_upgrade on " + testDevice, 3: "kubeadm output: upgrade node", 5: "post-upgrade done"} {
		if !strings.Contains(reps[i].Output, want) {
			t.Fatalf("report %s output lacks %q:\n%s", reps[i], want, reps[i].Output)
		}
	}
	for name, want := range map[string][]byte{"kubeadm": kubeadmBin, "kubelet": kubeletBin} {
		p := r.root + "/usr/local/bin/" + name
		b, err := os.ReadFile(p)
		fi, _ := os.Stat(p)
		if err != nil || !bytes.Equal(b, want) || fi.Mode().Perm() != 0o755 {
			t.Fatalf("%s installed: %v %q %v", name, err, b, fi.Mode())
		}
	}
	st := r.state()
	if !st.Complete || st.Running != nil || st.Failed != nil || len(st.PendingReports) != 0 {
		t.Fatalf("state %+v", st)
	}
	requireEqual(t, "done", st.Done, []string{"pre_upgrade", "upgrade", "post_upgrade"})
	if fi, err := os.Stat(r.root + StateDir + "/state.json"); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file: %v %v", err, fi)
	}

	// The operation is complete: the next poll runs and reports nothing.
	r.once(0)
	if len(r.recorded()) != 4 || len(r.ztpd.got()) != 6 {
		t.Fatalf("second poll acted: %v %v", r.recorded(), states(r.ztpd.got()))
	}
	code, out := r.agent("status")
	var status agentState
	if code != 0 || json.Unmarshal([]byte(out), &status) != nil || status.Operation != "op-1" || !status.Complete {
		t.Fatalf("status: %d\n%s", code, out)
	}
}

// TestBinaryOutput: a step's output is its last 16 KiB, and binary output
// still fits ztpd's 64 KiB report limit.
func TestBinaryOutput(t *testing.T) {
	r := newRig(t)
	url, sum := r.hook("noisy", "head -c 100000 /dev/urandom\nhead -c 20000 /dev/zero\nprintf 'last words'")
	r.offer("op-1", "upgrade-kubernetes", step("pre_upgrade", "hook", map[string]string{"url": url, "sha256": sum}))
	r.once(0)
	reps := r.ztpd.got()
	requireEqual(t, "reports", states(reps), []string{"pre_upgrade running", "pre_upgrade succeeded"})
	if out := reps[1].Output; !strings.HasSuffix(out, "last words") || len([]rune(out)) > 16<<10 {
		t.Fatalf("output: %d runes, ends %q", len([]rune(out)), out[max(0, len(out)-40):])
	}
}

// TestKubeadmUpgradeApply: the first control plane runs `upgrade apply -y
// <version>`; a version that is not one is refused before kubeadm runs.
func TestKubeadmUpgradeApply(t *testing.T) {
	r := newRig(t)
	r.offer("op-1", "upgrade-kubernetes", step("upgrade", "kubeadm-upgrade", map[string]string{"version": "v1.37.2", "phase": "apply"}))
	r.once(0)
	requireEqual(t, "commands", r.recorded(), []string{"kubeadm upgrade apply -y v1.37.2", "systemctl restart kubelet"})
	r.offer("op-2", "upgrade-kubernetes", step("upgrade", "kubeadm-upgrade", map[string]string{"version": "--force", "phase": "apply"}))
	r.once(0)
	if len(r.recorded()) != 2 || r.state().Failed == nil {
		t.Fatalf("bad version ran: %v %+v", r.recorded(), r.state())
	}
}

// TestHookFailures: a hook whose sha256 does not match is not run; a
// non-zero exit and a timeout (the process group killed) fail the step with
// its output; later steps never run and the failure is not retried.
func TestHookFailures(t *testing.T) {
	t.Run("sha256 mismatch", func(t *testing.T) {
		r := newRig(t)
		url, _ := r.hook("evil", r.recordLine("evil ran"))
		_, otherSum := r.hook("good", r.recordLine("good ran"))
		nextURL, nextSum := r.hook("next", r.recordLine("next ran"))
		r.offer("op-1", "upgrade-kubernetes",
			step("pre_upgrade", "hook", map[string]string{"url": url, "sha256": otherSum}),
			step("post_upgrade", "hook", map[string]string{"url": nextURL, "sha256": nextSum}))
		r.once(0)
		reps := r.ztpd.got()
		requireEqual(t, "reports", states(reps), []string{"pre_upgrade running", "pre_upgrade failed"})
		if !strings.Contains(reps[1].Output, "sha256 mismatch") || reps[1].ExitCode != -1 {
			t.Fatalf("failed report %+v", reps[1])
		}
		if got := r.recorded(); got != nil {
			t.Fatalf("ran: %v", got)
		}
		if _, err := os.Stat(r.root + StateDir + "/hooks/" + otherSum); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("mismatching hook stored: %v", err)
		}
		if st := r.state(); st.Failed == nil || st.Failed.Step != "pre_upgrade" {
			t.Fatalf("state %+v", st)
		}
		r.once(0) // failed stays failed until ztpd hands out a new operation
		if len(r.ztpd.got()) != 2 || r.recorded() != nil {
			t.Fatalf("failed operation retried: %v", states(r.ztpd.got()))
		}
	})
	t.Run("non-zero exit", func(t *testing.T) {
		r := newRig(t)
		url, sum := r.hook("bad", "echo draining node; echo cannot drain: PDB >&2; exit 7")
		nextURL, nextSum := r.hook("next", r.recordLine("next ran"))
		r.offer("op-1", "upgrade-kubernetes",
			step("pre_upgrade", "hook", map[string]string{"url": url, "sha256": sum}),
			step("post_upgrade", "hook", map[string]string{"url": nextURL, "sha256": nextSum}))
		r.once(0)
		reps := r.ztpd.got()
		requireEqual(t, "reports", states(reps), []string{"pre_upgrade running", "pre_upgrade failed"})
		if reps[1].ExitCode != 7 || !strings.Contains(reps[1].Output, "draining node") || !strings.Contains(reps[1].Output, "cannot drain: PDB") {
			t.Fatalf("failed report %+v", reps[1])
		}
		if r.recorded() != nil {
			t.Fatalf("later step ran: %v", r.recorded())
		}
	})
	t.Run("timeout", func(t *testing.T) {
		r := newRig(t)
		pidFile := filepath.Join(t.TempDir(), "sleep.pid")
		url, sum := r.hook("slow", "echo starting\nsleep 60 &\necho $! > "+pidFile+"\nwait")
		r.offer("op-1", "upgrade-kubernetes", step("pre_upgrade", "hook", map[string]string{"url": url, "sha256": sum, "timeout": "1"}))
		start := time.Now()
		r.once(0)
		if d := time.Since(start); d > 20*time.Second {
			t.Fatalf("timed-out hook held the agent %v", d)
		}
		reps := r.ztpd.got()
		requireEqual(t, "reports", states(reps), []string{"pre_upgrade running", "pre_upgrade failed"})
		if reps[1].ExitCode != -9 || !strings.Contains(reps[1].Output, "starting") || !strings.Contains(reps[1].Output, "timed out after 1s") {
			t.Fatalf("failed report %+v", reps[1])
		}
		// The hook's background child was in the killed process group.
		b, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		requireGone(t, pid)
	})
}

// requireGone waits for pid to be dead (gone or a zombie nobody reaped:
// the test's PID 1 may not reap orphans).
func requireGone(t *testing.T, pid int) {
	t.Helper()
	for range 50 {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return
		}
		if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 0 && f[0] == "Z" {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	t.Fatalf("process %d still alive", pid)
}

// TestInterruptedStepRunsAgain: the agent is killed (SIGKILL, as a power
// loss would) while a hook runs; the next poll skips the step done before,
// runs the interrupted one again, reports it again, and completes.
func TestInterruptedStepRunsAgain(t *testing.T) {
	r := newRig(t)
	dir := t.TempDir()
	marker, pidFile := filepath.Join(dir, "first-run"), filepath.Join(dir, "hook.pid")
	// The first run blocks; the second (after the kill) finishes.
	url, sum := r.hook("blocking", r.recordLine("hook $ZTPD_STEP")+"\nif [ ! -e "+marker+" ]; then touch "+marker+"; sleep 300 & echo $! > "+pidFile+"; wait; fi\necho finished")
	quickURL, quickSum := r.hook("quick", r.recordLine("hook $ZTPD_STEP"))
	afterURL, afterSum := r.hook("after", r.recordLine("hook $ZTPD_STEP"))
	r.offer("op-1", "upgrade-kubernetes",
		step("cordon", "hook", map[string]string{"url": quickURL, "sha256": quickSum}),
		step("drain", "hook", map[string]string{"url": url, "sha256": sum}),
		step("after", "hook", map[string]string{"url": afterURL, "sha256": afterSum}))

	cmd := r.command("once")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	for deadline := time.Now().Add(30 * time.Second); pid == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("hook never started\n%s", out.String())
		}
		if b, err := os.ReadFile(pidFile); err == nil && bytes.HasSuffix(b, []byte("\n")) {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
	}
	if st := r.state(); st.Running == nil || st.Running.Step != "drain" {
		t.Fatalf("state while the hook runs: %+v", st)
	}
	// A second poll meanwhile (the timer and an operator) does nothing.
	if out := r.once(0); !strings.Contains(out, "another ztpd-agent run is in progress") || len(r.ztpd.got()) != 3 {
		t.Fatalf("concurrent poll: %v\n%s", states(r.ztpd.got()), out)
	}
	cmd.Process.Kill()
	cmd.Wait()
	syscall.Kill(pid, syscall.SIGKILL) // the rest of the "power loss"
	requireGone(t, pid)

	r.once(0)
	// cordon was done before the kill: it is not run again.
	requireEqual(t, "commands", r.recorded(), []string{"hook cordon", "hook drain", "hook drain", "hook after"})
	requireEqual(t, "reports", states(r.ztpd.got()), []string{"cordon running", "cordon succeeded", "drain running",
		"drain running", "drain succeeded", "after running", "after succeeded"})
	if rep := r.ztpd.got()[4]; !strings.Contains(rep.Output, "finished") {
		t.Fatalf("rerun output %q", rep.Output)
	}
	st := r.state()
	if !st.Complete || st.Running != nil {
		t.Fatalf("state %+v", st)
	}
	requireEqual(t, "done", st.Done, []string{"cordon", "drain", "after"})
}

// TestRebootStep: the reboot step records running with the boot id and
// calls reboot; a poll in the same boot waits; a poll after the boot id
// changed marks it succeeded and continues.
func TestRebootStep(t *testing.T) {
	r := newRig(t)
	url, sum := r.hook("after", r.recordLine("hook $ZTPD_STEP"))
	r.offer("op-1", "upgrade-image",
		step("reboot", "reboot", nil),
		step("post_upgrade", "hook", map[string]string{"url": url, "sha256": sum}))
	r.once(0)
	requireEqual(t, "commands", r.recorded(), []string{"reboot "})
	requireEqual(t, "reports", states(r.ztpd.got()), []string{"reboot running"})
	st := r.state()
	if st.Running == nil || st.Running.Step != "reboot" || st.Running.BootID != "boot-1" || !st.Running.Rebooting {
		t.Fatalf("state %+v", st)
	}

	r.once(0) // same boot: waiting
	if len(r.recorded()) != 1 || len(r.ztpd.got()) != 1 {
		t.Fatalf("acted in the same boot: %v %v", r.recorded(), states(r.ztpd.got()))
	}

	r.setBootID("boot-2")
	r.once(0)
	requireEqual(t, "commands", r.recorded(), []string{"reboot ", "hook post_upgrade"})
	reps := r.ztpd.got()
	requireEqual(t, "reports", states(reps), []string{"reboot running", "reboot succeeded", "post_upgrade running", "post_upgrade succeeded"})
	if reps[1].BootID != "boot-2" {
		t.Fatalf("reboot succeeded report %+v", reps[1])
	}
	if st := r.state(); !st.Complete {
		t.Fatalf("state %+v", st)
	}
}

// TestRebootCommandFails: a reboot that is refused fails the step at once.
func TestRebootCommandFails(t *testing.T) {
	r := newRig(t)
	os.WriteFile(filepath.Join(r.bin, "reboot.exit"), []byte("1"), 0o644)
	r.offer("op-1", "upgrade-image", step("reboot", "reboot", nil))
	r.once(0)
	requireEqual(t, "reports", states(r.ztpd.got()), []string{"reboot running", "reboot failed"})
}

func selfSignedPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "impostor"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestRefusals: an unverified server (other CA, or a name the certificate
// does not carry) is exit 3, a refused credential exit 4, an http URL exit 2,
// and nothing is run; a 409 on a report abandons the operation.
func TestRefusals(t *testing.T) {
	offerHook := func(r *rig) {
		url, sum := r.hook("h", r.recordLine("hook ran"))
		r.offer("op-1", "upgrade-kubernetes", step("pre_upgrade", "hook", map[string]string{"url": url, "sha256": sum}))
	}
	t.Run("other CA", func(t *testing.T) {
		r := newRig(t)
		offerHook(r)
		r.write(CAPath, string(selfSignedPEM(t)), 0o644)
		out := r.once(3)
		if !strings.Contains(out, "refusing unverified server") || r.recorded() != nil || r.ztpd.gets() != 0 {
			t.Fatalf("acted on an unverified server:\n%s", out)
		}
	})
	t.Run("name not in certificate", func(t *testing.T) {
		r := newRig(t)
		offerHook(r)
		cfg, _ := os.ReadFile(r.root + ConfigPath)
		r.write(ConfigPath, strings.Replace(string(cfg), "127.0.0.1", "localhost", 1), 0o600)
		if out := r.once(3); !strings.Contains(out, "refusing unverified server") || r.recorded() != nil {
			t.Fatalf("hostname not checked:\n%s", out)
		}
	})
	t.Run("http URL", func(t *testing.T) {
		r := newRig(t)
		cfg, _ := os.ReadFile(r.root + ConfigPath)
		r.write(ConfigPath, strings.Replace(string(cfg), "https://", "http://", 1), 0o600)
		if out := r.once(2); !strings.Contains(out, "only https:// is allowed") {
			t.Fatalf("http URL:\n%s", out)
		}
	})
	t.Run("credential refused", func(t *testing.T) {
		r := newRig(t)
		offerHook(r)
		r.ztpd.set(func(f *fakeZTPD) { f.refuse = true })
		out := r.once(4)
		if !strings.Contains(out, "agent credential revoked") || r.recorded() != nil {
			t.Fatalf("refused credential:\n%s", out)
		}
	})
	t.Run("409 abandons", func(t *testing.T) {
		r := newRig(t)
		offerHook(r)
		r.ztpd.set(func(f *fakeZTPD) { f.reportStatus = http.StatusConflict })
		out := r.once(0)
		st := r.state()
		if r.recorded() != nil || !st.Abandoned || st.Running != nil || len(st.Done) != 0 || len(st.PendingReports) != 0 {
			t.Fatalf("after 409: %v %+v\n%s", r.recorded(), st, out)
		}
		r.once(0) // the same operation id is not started again
		if r.recorded() != nil {
			t.Fatalf("abandoned operation ran: %v", r.recorded())
		}
	})
}

// TestUndeliveredReportsAreRetried: reports that cannot be delivered stay in
// the state file and are delivered, in order, first thing next run.
func TestUndeliveredReportsAreRetried(t *testing.T) {
	r := newRig(t)
	url, sum := r.hook("h", r.recordLine("hook $ZTPD_STEP"))
	r.offer("op-1", "upgrade-kubernetes", step("pre_upgrade", "hook", map[string]string{"url": url, "sha256": sum}))
	r.ztpd.set(func(f *fakeZTPD) { f.dropReports = true })
	out := r.once(1)
	st := r.state()
	if !st.Complete || len(st.PendingReports) != 2 || len(r.ztpd.got()) != 0 || !strings.Contains(out, "kept for later") {
		t.Fatalf("state %+v\n%s", st, out)
	}
	r.ztpd.set(func(f *fakeZTPD) { f.dropReports = false })
	r.once(0)
	requireEqual(t, "reports", states(r.ztpd.got()), []string{"pre_upgrade running", "pre_upgrade succeeded"})
	requireEqual(t, "commands", r.recorded(), []string{"hook pre_upgrade"})
	if st := r.state(); len(st.PendingReports) != 0 {
		t.Fatalf("pending after delivery: %+v", st.PendingReports)
	}
}

// TestKubeReset: on SONiC the switch leaves Kubernetes through its CLI
// (server disabled, features back to local), then kubeadm reset, then the
// kubelet credentials go; elsewhere only kubeadm reset and the files.
func TestKubeReset(t *testing.T) {
	r := newRig(t)
	r.write("/etc/os-release", "PRETTY_NAME=\"SONiC Software Version\"\nID=sonic\n", 0o644)
	r.write("/etc/kubernetes/kubelet.conf", "apiVersion: v1\n", 0o600)
	r.write("/var/lib/kubelet/pki/kubelet-client-current.pem", "key\n", 0o600)
	r.offer("op-1", "leave", step("leave", "kube-reset", map[string]string{"features": "telemetry,snmp"}))
	r.once(0)
	requireEqual(t, "commands", r.recorded(), []string{"config kube server disable on", "config feature owner telemetry local",
		"config feature owner snmp local", "kubeadm reset -f"})
	for _, p := range []string{"/etc/kubernetes/kubelet.conf", "/var/lib/kubelet/pki"} {
		if _, err := os.Stat(r.root + p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s not removed: %v", p, err)
		}
	}
	requireEqual(t, "reports", states(r.ztpd.got()), []string{"leave running", "leave succeeded"})

	os.Remove(r.root + "/etc/os-release")
	os.Remove(r.calls)
	r.offer("op-2", "leave", step("leave", "kube-reset", nil))
	r.once(0)
	requireEqual(t, "commands", r.recorded(), []string{"kubeadm reset -f"})
}

// TestJoin: the join action hands the installed join plugin a SONiC ZTP
// section with the enrollment and join URL, and removes it afterwards;
// without an installed plugin it fetches the one named by plugin_url.
func TestJoin(t *testing.T) {
	r := newRig(t)
	seen := filepath.Join(t.TempDir(), "section.json")
	plugin := "#!/bin/sh\necho \"ztpd-join-plugin $*\" >> " + r.calls + "\ncp \"$1\" " + seen + "\necho admitted\n"
	r.write("/usr/local/bin/ztpd-join-plugin", plugin, 0o755)
	args := map[string]string{"join_url": "http://10.99.0.1/join/", "enrollment": "enr-one-time", "mac": testDevice, "serial": "SN1", "hostname": "leaf-1"}
	r.offer("op-1", "join", step("join", "join", args))
	r.once(0)
	section := r.root + StateDir + "/join-section.json"
	requireEqual(t, "commands", r.recorded(), []string{"ztpd-join-plugin " + section})
	b, _ := os.ReadFile(seen)
	var got map[string]map[string]string
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("section %q: %v", b, err)
	}
	requireEqual(t, "section", got, map[string]map[string]string{"ztpd-join": {"enrollment": "enr-one-time", "join-url": "http://10.99.0.1/join/",
		"mac": testDevice, "serial": "SN1", "hostname": "leaf-1"}})
	if _, err := os.Stat(section); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("section with the enrollment secret left behind: %v", err)
	}
	reps := r.ztpd.got()
	requireEqual(t, "reports", states(reps), []string{"join running", "join succeeded"})
	if !strings.Contains(reps[1].Output, "admitted") {
		t.Fatalf("join output %q", reps[1].Output)
	}

	// No plugin installed: fetched from plugin_url, checked, run.
	os.Remove(r.root + "/usr/local/bin/ztpd-join-plugin")
	os.Remove(r.calls)
	pluginURL, pluginSum := r.hook("plugin", strings.TrimPrefix(plugin, "#!/bin/sh\n"))
	args["plugin_url"], args["plugin_sha256"] = pluginURL, pluginSum
	r.offer("op-2", "join", step("join", "join", args))
	r.once(0)
	requireEqual(t, "commands", r.recorded(), []string{"ztpd-join-plugin " + section})
	requireEqual(t, "reports", states(r.ztpd.got()[2:]), []string{"join running", "join succeeded"})
}

// TestRunLoop: `run` polls repeatedly (the foreground form of the timer).
func TestRunLoop(t *testing.T) {
	r := newRig(t)
	if code, out := r.agent("run", "--count", "2", "--interval", "1"); code != 0 || r.ztpd.gets() != 2 {
		t.Fatalf("run: exit %d, %d polls\n%s", code, r.ztpd.gets(), out)
	}
	if code, _ := r.agent("bogus"); code != 2 {
		t.Fatalf("unknown command: exit %d, want 2", code)
	}
}

// TestUnknownAction fails the step with the action named.
func TestUnknownAction(t *testing.T) {
	r := newRig(t)
	r.offer("op-1", "upgrade-kubernetes", step("x", "format-disk", nil))
	r.once(0)
	reps := r.ztpd.got()
	if len(reps) != 2 || reps[1].State != "failed" || !strings.Contains(reps[1].Output, "unknown action format-disk") {
		t.Fatalf("reports %+v", reps)
	}
}

func TestFiles(t *testing.T) {
	ca := string(selfSignedPEM(t))
	hostile := "dev\"}\n,\"url\":\"http://evil\""
	files, err := Files(InstallConfig{URL: "https://10.99.0.1:8443/agent/v1/", Credential: testCredential, CAPEM: ca, Device: hostile, Interval: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]os.FileMode{}
	byPath := map[string]string{}
	for _, f := range files {
		got[f.Path] = f.Mode
		byPath[f.Path] = string(f.Content)
		if f.Secret != (f.Path == ConfigPath) {
			t.Fatalf("%s secret=%v", f.Path, f.Secret)
		}
		if f.Path == ConfigPath && (strings.Contains(f.String(), "s3cret") || strings.Contains(f.GoString(), "s3cret")) {
			t.Fatalf("config prints its credential: %s", f)
		}
	}
	requireEqual(t, "files", got, map[string]os.FileMode{ScriptPath: 0o755, ServicePath: 0o644, TimerPath: 0o644, ConfigPath: 0o600, CAPath: 0o644})
	var cfg map[string]any
	if err := json.Unmarshal([]byte(byPath[ConfigPath]), &cfg); err != nil {
		t.Fatal(err)
	}
	requireEqual(t, "config", cfg, map[string]any{"url": "https://10.99.0.1:8443/agent/v1", "credential": testCredential,
		"ca_file": CAPath, "device": hostile, "state_dir": StateDir, "interval": 90, "linger_max": 3600})
	if byPath[CAPath] != ca || byPath[ScriptPath] != string(Script()) {
		t.Fatal("CA or script content differs")
	}
	for _, want := range []string{"OnUnitActiveSec=90s", "RandomizedDelaySec=45s", "OnBootSec=30s", "Persistent=true"} {
		if !strings.Contains(byPath[TimerPath], want) {
			t.Fatalf("timer lacks %s:\n%s", want, byPath[TimerPath])
		}
	}
	// 4h for an operation, 1h a run may poll on before it, and the 90 s interval.
	for _, want := range []string{"Type=oneshot", "ExecStart=/usr/bin/python3 /usr/local/bin/ztpd-agent once", "TimeoutStartSec=18090s"} {
		if !strings.Contains(byPath[ServicePath], want) || strings.Contains(byPath[ServicePath], "Restart=") {
			t.Fatalf("service:\n%s", byPath[ServicePath])
		}
	}
	// systemd's own check is a subtest: a missing tool skips it, with the
	// reason, and the checks below still run.
	t.Run("systemd-analyze verify", func(t *testing.T) {
		if _, err := exec.LookPath("systemd-analyze"); err != nil {
			t.Skip("systemd-analyze not installed: units not verified by systemd")
		}
		dir := t.TempDir()
		for _, p := range []string{ServicePath, TimerPath} {
			os.WriteFile(filepath.Join(dir, filepath.Base(p)), []byte(byPath[p]), 0o644)
		}
		out, err := exec.Command("systemd-analyze", "verify", filepath.Join(dir, "ztpd-agent.service"), filepath.Join(dir, "ztpd-agent.timer")).CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) != 0 {
			t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
		}
	})

	key := "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIA==\n-----END EC PRIVATE KEY-----\n"
	for name, c := range map[string]InstallConfig{
		"http":             {URL: "http://10.99.0.1/agent/v1", Credential: "c", CAPEM: ca},
		"no host":          {URL: "https:///agent/v1", Credential: "c", CAPEM: ca},
		"userinfo":         {URL: "https://u:p@10.99.0.1/agent/v1", Credential: "c", CAPEM: ca},
		"empty credential": {URL: "https://10.99.0.1/agent/v1", CAPEM: ca},
		"newline":          {URL: "https://10.99.0.1/agent/v1", Credential: "c\nX-Evil: 1", CAPEM: ca},
		"no CA":            {URL: "https://10.99.0.1/agent/v1", Credential: "c"},
		"garbage CA":       {URL: "https://10.99.0.1/agent/v1", Credential: "c", CAPEM: "not pem"},
		"key in CA":        {URL: "https://10.99.0.1/agent/v1", Credential: "c", CAPEM: ca + key},
		"interval":         {URL: "https://10.99.0.1/agent/v1", Credential: "c", CAPEM: ca, Interval: time.Second},
	} {
		if _, err := Files(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func (f *fakeZTPD) gets() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.desiredGets
}

// setConfig rewrites one field of the installed agent.json (intervals
// below what Files allows: the tests' timer never runs).
func (r *rig) setConfig(key string, value any) {
	r.t.Helper()
	b, err := os.ReadFile(r.root + ConfigPath)
	if err != nil {
		r.t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		r.t.Fatal(err)
	}
	cfg[key] = value
	b, _ = json.Marshal(cfg)
	r.write(ConfigPath, string(b), 0o600)
}

func (r *rig) setInterval(seconds int) { r.setConfig("interval", seconds) }

// background starts `ztpd-agent args...`; wait returns its exit code and
// output (the test fails when it has not exited within limit).
func (r *rig) background(args ...string) (start time.Time, wait func(limit time.Duration) (int, string)) {
	r.t.Helper()
	cmd := r.command(args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start = time.Now()
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return start, func(limit time.Duration) (int, string) {
		r.t.Helper()
		var err error
		select {
		case err = <-exited:
		case <-time.After(limit):
			cmd.Process.Kill()
			<-exited
			r.t.Fatalf("ztpd-agent %s did not exit within %v\n%s", strings.Join(args, " "), limit, out.String())
		}
		r.t.Logf("ztpd-agent %s: %v after %v\n%s", strings.Join(args, " "), err, time.Since(start).Round(time.Millisecond), out.String())
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return exitErr.ExitCode(), out.String()
		} else if err != nil {
			r.t.Fatal(err)
		}
		return 0, out.String()
	}
}

// firstPoll waits for the first GET desired and returns when it came.
func (r *rig) firstPoll() time.Time {
	r.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		r.ztpd.mu.Lock()
		var at time.Time
		if len(r.ztpd.getsAt) > 0 {
			at = r.ztpd.getsAt[0]
		}
		r.ztpd.mu.Unlock()
		if !at.IsZero() {
			return at
		}
	}
	r.t.Fatal("no poll within 30 s")
	return time.Time{}
}

func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// TestOnceFollowsFastPolls: while ztpd's document asks for polls every
// second (poll_seconds 1, interval 4), one `once` run polls on past the
// interval, runs the operation that appears 6 s after its first poll
// within about a second, and exits once ztpd asks for the interval again.
// Meanwhile a concurrent run exits at once saying what the running one
// does, and `status` shows it. With poll_seconds equal to the interval, or
// with --one-poll, a run is one poll.
func TestOnceFollowsFastPolls(t *testing.T) {
	r := newRig(t)
	r.setInterval(4)
	r.ztpd.set(func(f *fakeZTPD) { f.pollSeconds = 1 })
	url, sum := r.hook("h", r.recordLine("hook $ZTPD_STEP"))

	_, wait := r.background("once")
	first := r.firstPoll()
	sleepUntil(first.Add(6 * time.Second))
	offered := time.Now()
	r.offer("op-1", "upgrade-kubernetes", step("pre_upgrade", "hook", map[string]string{"url": url, "sha256": sum}))
	// The lock is held between the polls: a concurrent run does nothing
	// and says why; status shows the run polling on.
	if code, cout := r.agent("once"); code != 0 || !strings.Contains(cout, "another ztpd-agent run is in progress: pid ") ||
		!strings.Contains(cout, "polling every 1s") {
		t.Fatalf("concurrent run: exit %d\n%s", code, cout)
	}
	if code, sout := r.agent("status"); code != 0 || !strings.Contains(sout, `"polling_every": 1`) {
		t.Fatalf("status while a run polls on: exit %d\n%s", code, sout)
	}
	sleepUntil(first.Add(10 * time.Second))
	stopped := time.Now()
	r.ztpd.set(func(f *fakeZTPD) { f.pollSeconds = 4 })
	code, out := wait(30 * time.Second)
	exited := time.Now()
	if code != 0 {
		t.Fatalf("run: exit %d", code)
	}
	requireEqual(t, "commands", r.recorded(), []string{"hook pre_upgrade"})
	requireEqual(t, "reports", states(r.ztpd.got()), []string{"pre_upgrade running", "pre_upgrade succeeded"})
	r.ztpd.mu.Lock()
	ranAt := r.ztpd.reportedAt[1]
	getsAt := slices.Clone(r.ztpd.getsAt)
	r.ztpd.mu.Unlock()
	// Offered 2 s after the interval was over, picked up by a poll within
	// 1.1 s (plus the time a poll and the hook take).
	if d := ranAt.Sub(offered); d < 0 || d > 3500*time.Millisecond {
		t.Fatalf("operation offered %v after the first poll finished %v after it was offered", offered.Sub(first), d)
	}
	// Polls every second from first to last; the last one after ztpd
	// stopped asking.
	last := getsAt[len(getsAt)-1]
	if last.Before(stopped) || len(getsAt) < 7 {
		t.Fatalf("%d polls, the last %v after the first; ztpd stopped asking at %v", len(getsAt), last.Sub(first), stopped.Sub(first))
	}
	for i := 1; i < len(getsAt); i++ {
		if gap := getsAt[i].Sub(getsAt[i-1]); gap > 2500*time.Millisecond {
			t.Fatalf("poll %d came %v after the one before, want about 1 s", i, gap)
		}
	}
	// The next poll after ztpd stopped asking ends the run: within 1.1 s
	// plus a poll and python's exit (seconds under load).
	if d := exited.Sub(stopped); d > 6*time.Second || !strings.Contains(out, "polling on ended: ztpd asks for the 4s interval again") {
		t.Fatalf("the run exited %v after ztpd stopped asking", d)
	}
	if st := r.state(); !st.Complete {
		t.Fatalf("state %+v", st)
	}
	if b, err := os.ReadFile(r.root + StateDir + "/lock"); err != nil || len(b) != 0 {
		t.Fatalf("the lock file after the run: %q %v", b, err)
	}
	if _, sout := r.agent("status"); !strings.Contains(sout, `"run_in_progress": null`) {
		t.Fatalf("status after the run:\n%s", sout)
	}

	// poll_seconds == interval: one poll, as before.
	r.ztpd.set(func(f *fakeZTPD) { f.desiredGets = 0 })
	start := time.Now()
	if out := r.once(0); strings.Contains(out, "asks for a poll") {
		t.Fatalf("polled on at poll_seconds == interval:\n%s", out)
	}
	if took := time.Since(start); took > 3*time.Second || r.ztpd.gets() != 1 {
		t.Fatalf("run with poll_seconds == interval: %v, %d polls", took, r.ztpd.gets())
	}
	// --one-poll: one poll while ztpd asks for more.
	r.ztpd.set(func(f *fakeZTPD) { f.pollSeconds, f.desiredGets = 1, 0 })
	if code, out := r.agent("once", "--one-poll"); code != 0 || r.ztpd.gets() != 1 || strings.Contains(out, "asks for a poll") {
		t.Fatalf("once --one-poll: exit %d, %d polls", code, r.ztpd.gets())
	}
}

// TestPollingOnEnds: a run polling on gives up when ztpd stops answering
// (its polls then an interval apart, three failures in a row: the timer
// retries), and after linger_max even while ztpd still asks.
func TestPollingOnEnds(t *testing.T) {
	t.Run("ztpd unreachable", func(t *testing.T) {
		r := newRig(t)
		r.setInterval(2)
		r.ztpd.set(func(f *fakeZTPD) { f.pollSeconds = 1 })
		_, wait := r.background("once")
		first := r.firstPoll()
		sleepUntil(first.Add(2500 * time.Millisecond))
		failFrom := time.Now()
		r.ztpd.set(func(f *fakeZTPD) { f.desiredFails = 1 })
		code, out := wait(60 * time.Second)
		if code != 1 || !strings.Contains(out, "polling on ended: 3 polls in a row failed; the timer retries") {
			t.Fatalf("exit %d, want 1 after three failed polls", code)
		}
		r.ztpd.mu.Lock()
		var failed []time.Time
		for _, at := range r.ztpd.getsAt {
			if at.After(failFrom) {
				failed = append(failed, at)
			}
		}
		r.ztpd.mu.Unlock()
		if len(failed) != 3 {
			t.Fatalf("%d polls after ztpd went down, want 3", len(failed))
		}
		// After the first failure the polls back off to the interval.
		for i := 1; i < len(failed); i++ {
			if gap := failed[i].Sub(failed[i-1]); gap < 2*time.Second {
				t.Fatalf("failed polls %v apart, want the 2 s interval", gap)
			}
		}
	})
	t.Run("linger_max", func(t *testing.T) {
		r := newRig(t)
		r.setInterval(10)
		r.setConfig("linger_max", 3)
		r.ztpd.set(func(f *fakeZTPD) { f.pollSeconds = 1 })
		start, wait := r.background("once")
		code, out := wait(30 * time.Second)
		if code != 0 || !strings.Contains(out, "polled on for its most (3s)") {
			t.Fatalf("exit %d", code)
		}
		// 3 s from the run's start, which a loaded machine delays.
		if took := time.Since(start); took > 10*time.Second || r.ztpd.gets() < 2 || r.ztpd.gets() > 4 {
			t.Fatalf("the run took %v, %d polls; want about 3 s, 2..4 polls", took, r.ztpd.gets())
		}
	})
}

// TestJoinForwardsThePin: a join step's tls_pin (the device HTTPS
// listener's pins) reaches the plugin's section as tls-pin, as ztp.json
// names it.
func TestJoinForwardsThePin(t *testing.T) {
	r := newRig(t)
	seen := filepath.Join(t.TempDir(), "section.json")
	r.write("/usr/local/bin/ztpd-join-plugin", "#!/bin/sh\ncp \"$1\" "+seen+"\n", 0o755)
	args := map[string]string{"join_url": "https://10.99.0.1/join", "enrollment": "enr-one-time", "tls_pin": "sha256//AAAA;sha256//BBBB"}
	r.offer("op-1", "join", step("join", "join", args))
	r.once(0)
	b, _ := os.ReadFile(seen)
	var got map[string]map[string]string
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("section %q: %v", b, err)
	}
	requireEqual(t, "section", got, map[string]map[string]string{"ztpd-join": {"enrollment": "enr-one-time", "join-url": "https://10.99.0.1/join",
		"tls-pin": "sha256//AAAA;sha256//BBBB"}})
}
