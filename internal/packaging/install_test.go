package packaging

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ztpd/ztpd/testenv/freeport"
	"github.com/ztpd/ztpd/testenv/netns"
)

// The package installs for real on this machine (dpkg -i), the service
// starts as its own user with the unit's capabilities and answers /healthz,
// its state belongs to that user, the first admin key is in its file and the
// CLI reads the running server through the admin socket; the man pages and
// bash completion work; dpkg --purge leaves nothing behind, not even the
// profiles the operator wrote under /etc/ztpd.
//
// When systemd is PID 1 it runs through systemctl; otherwise (containers,
// this CI) the unit's ExecStart runs under setpriv as the unit's user with
// the unit's capabilities, umask and working directory, as systemd would.
func TestDebInstallStartsService(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: dpkg -i needs root")
	}
	needTool(t, "dpkg", "dpkg-deb", "dpkg-query", "curl", "setpriv", "userdel", "groupdel")
	// Never touch a real installation.
	if out, err := exec.Command("dpkg-query", "-W", "-f", "${Status}", PackageName).Output(); err == nil && strings.Contains(string(out), "installed") {
		t.Skipf("skipping: package %s is installed on this machine (%s); this test installs and purges its own", PackageName, out)
	}
	if _, err := user.Lookup(ServiceUserName); err == nil {
		t.Skipf("skipping: user %s exists on this machine; this test creates and removes its own", ServiceUserName)
	}
	if _, err := user.LookupGroup(ServiceUserName); err == nil {
		t.Skipf("skipping: group %s exists on this machine; this test creates and removes its own", ServiceUserName)
	}
	for _, p := range []string{StateDir, "/etc/ztpd", BinaryPath} {
		if _, err := os.Lstat(p); err == nil {
			t.Skipf("skipping: %s exists on this machine; this test installs and purges its own", p)
		}
	}
	deb := buildTestDeb(t)

	purged := false
	purge := func() error {
		var errs []error
		if out, err := exec.Command("dpkg", "--purge", PackageName).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("dpkg --purge: %v\n%s", err, out))
		}
		// Debian keeps system users on purge; this test made it, so it goes.
		if _, err := user.Lookup(ServiceUserName); err == nil {
			if out, err := exec.Command("userdel", ServiceUserName).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("userdel: %v: %s", err, out))
			}
		}
		if _, err := user.LookupGroup(ServiceUserName); err == nil {
			if out, err := exec.Command("groupdel", ServiceUserName).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("groupdel: %v: %s", err, out))
			}
		}
		os.RemoveAll(StateDir) // in case dpkg --purge failed
		purged = true
		return errors.Join(errs...)
	}
	t.Cleanup(func() {
		if !purged {
			if err := purge(); err != nil {
				t.Error(err)
			}
		}
	})

	out, err := exec.Command("dpkg", "-i", deb).CombinedOutput()
	if err != nil {
		t.Fatalf("dpkg -i: %v\n%s", err, out)
	}
	t.Logf("dpkg -i %s:\n%s", filepath.Base(deb), out)

	u, err := user.Lookup(ServiceUserName)
	if err != nil {
		t.Fatalf("postinst made no user %s: %v", ServiceUserName, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if g, err := user.LookupGroupId(u.Gid); err != nil || g.Name != ServiceUserName {
		t.Errorf("user %s's primary group is %v (%v), want %s", ServiceUserName, g, err, ServiceUserName)
	}
	if uid >= 1000 || uid == 0 {
		t.Errorf("user %s has uid %d, want a system uid (1..999)", ServiceUserName, uid)
	}
	if pw, err := exec.Command("getent", "passwd", ServiceUserName).Output(); err != nil || !strings.HasSuffix(strings.TrimSpace(string(pw)), ":/usr/sbin/nologin") {
		t.Errorf("user %s: %q (%v), want shell /usr/sbin/nologin", ServiceUserName, pw, err)
	}
	checkOwned(t, StateDir, uid, gid, 0o750)

	// The installed unit, with its man pages present now.
	if _, err := exec.LookPath("systemd-analyze"); err == nil {
		if out, err := exec.Command("systemd-analyze", "verify", UnitPath).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", UnitPath, err, out)
		}
	}

	// The operator's first edit: the HTTP port (8080 may be taken here).
	addr := freeport.Addr(t)
	conf, err := os.ReadFile(ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	edited := bytes.Replace(conf, []byte("  addr: 127.0.0.1:8080\n"), []byte("  addr: "+addr+"\n"), 1)
	if bytes.Equal(edited, conf) {
		t.Fatalf("%s has no http addr line to edit", ConfigPath)
	}
	if err := os.WriteFile(ConfigPath, edited, 0o644); err != nil {
		t.Fatal(err)
	}

	unit := unitDirectives(t, Unit())
	stop, pid, stdout, stderr := startService(t, unit)
	url := "http://" + addr + "/healthz"
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, _ := exec.Command("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "2", url).Output()
		if string(code) == "200" {
			break
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("curl %s: %q after 20 s\nstdout:\n%s\nstderr:\n%s", url, code, stdout, stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// It listens on loopback only (no DHCP or TFTP until configured).
	if ss, err := exec.Command("ss", "-H", "-ltunp").Output(); err == nil {
		n := 0
		for _, line := range strings.Split(string(ss), "\n") {
			if !strings.Contains(line, fmt.Sprintf(",pid=%d,", pid)) {
				continue
			}
			n++
			if f := strings.Fields(line); len(f) < 5 || !strings.HasPrefix(f[4], "127.") {
				t.Errorf("ztpd listens off loopback: %s", line)
			}
		}
		if n == 0 {
			t.Errorf("ss shows no listener of ztpd (pid %d):\n%s", pid, ss)
		}
	}

	// The first admin key: in its file, mode 0600, owner ztpd, never in the
	// log; the service said where it is.
	key, err := os.ReadFile(AdminKeyFile)
	if err != nil {
		stop()
		t.Fatalf("admin key file: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	checkOwned(t, AdminKeyFile, uid, gid, 0o600)
	apiKey := regexp.MustCompile(`(?m)^api_key: (\S+)$`).FindSubmatch(key)
	secret := regexp.MustCompile(`(?m)^secret_key: (\S+)$`).FindSubmatch(key)
	if apiKey == nil || secret == nil {
		t.Fatalf("admin key file has no api_key/secret_key:\n%s", key)
	}
	// Every file of the state directory belongs to the service's user.
	filepath.WalkDir(StateDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Error(err)
			return nil
		}
		st, err := os.Lstat(path)
		if err != nil {
			t.Error(err)
			return nil
		}
		if s := st.Sys().(*syscall.Stat_t); int(s.Uid) != uid || int(s.Gid) != gid {
			t.Errorf("%s is owned by %d:%d, want %s (%d:%d)", path, s.Uid, s.Gid, ServiceUserName, uid, gid)
		}
		return nil
	})
	for _, name := range []string{"ztpd.db", "secret.key", "ztpd.sock"} {
		if _, err := os.Lstat(filepath.Join(StateDir, name)); err != nil {
			t.Errorf("state directory: %v", err)
		}
	}
	// The CLI on the appliance, as root, reaches the running service through
	// its admin socket, found through the installed configuration: named,
	// and by default (no --config, no ZTPD_CONFIG).
	cli, err := exec.Command(BinaryPath, "--config", ConfigPath, "apikey", "list").CombinedOutput()
	if err != nil || !bytes.Contains(cli, apiKey[1]) {
		t.Errorf("ztpd --config %s apikey list: %v\n%s\n(want the admin key %s)", ConfigPath, err, cli, apiKey[1])
	}
	bare := exec.Command(BinaryPath, "apikey", "list")
	bare.Dir = t.TempDir()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ZTPD_CONFIG=") {
			bare.Env = append(bare.Env, kv)
		}
	}
	cli, err = bare.CombinedOutput()
	if err != nil || !bytes.Contains(cli, apiKey[1]) {
		t.Errorf("ztpd apikey list (the packaged config by default): %v\n%s\n(want the admin key %s)", err, cli, apiKey[1])
	}
	if _, err := os.Stat(filepath.Join(bare.Dir, "ztpd-data")); err == nil {
		t.Errorf("ztpd apikey list on the appliance created ./ztpd-data instead of using %s", ConfigPath)
	}

	code, logs := stop()
	if code != 0 {
		t.Errorf("ztpd exited %d on SIGTERM\nstderr:\n%s", code, logs)
	}
	if !strings.Contains(logs, "ztpd stopped") {
		t.Errorf("no \"ztpd stopped\" in the log:\n%s", logs)
	}
	if strings.Contains(logs+stdout.String(), string(secret[1])) {
		t.Error("the admin secret appears in the service's output")
	}
	if !strings.Contains(stdout.String(), AdminKeyFile) {
		t.Errorf("the service did not say where the admin key is; stdout:\n%s", stdout)
	}

	t.Run("unit capabilities serve DHCP and TFTP", func(t *testing.T) { unitCapabilities(t, unit, uid, gid) })

	// An upgrade keeps the operator's configuration, the user and the state.
	b := buildZtpdForPackage(t)
	deb2, err := BuildDeb(Options{Version: "0.0.0~pkgtest2", Arch: runtime.GOARCH, Binary: b.bin, ManDir: b.man,
		CompletionsDir: b.completions, OutDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("dpkg", "-i", deb2).CombinedOutput(); err != nil {
		t.Fatalf("dpkg -i (upgrade): %v\n%s", err, out)
	}
	if got, err := os.ReadFile(ConfigPath); err != nil || !bytes.Equal(got, edited) {
		t.Errorf("the upgrade changed the edited %s (%v)", ConfigPath, err)
	}
	if u2, err := user.Lookup(ServiceUserName); err != nil || u2.Uid != u.Uid {
		t.Errorf("after the upgrade user %s is %v (%v), was uid %s", ServiceUserName, u2, err, u.Uid)
	}
	checkOwned(t, filepath.Join(StateDir, "ztpd.db"), uid, gid, 0o600)
	if v, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", PackageName).Output(); err != nil || string(v) != "0.0.0~pkgtest2" {
		t.Errorf("installed version after the upgrade: %q (%v)", v, err)
	}

	// Man pages: through man's search path, and by file.
	t.Run("man pages", func(t *testing.T) {
		if _, err := exec.LookPath("man"); err != nil {
			t.Skip("needs man to render the installed man pages")
		}
		for _, args := range [][]string{{"ztpd-serve"}, {"-l", ManDir + "/ztpd.1.gz"}} {
			cmd := exec.Command("man", args...)
			cmd.Env = append(os.Environ(), "MANPAGER=cat", "PAGER=cat", "MANWIDTH=80")
			out, err := cmd.CombinedOutput()
			if err != nil || !bytes.Contains(out, []byte("ztpd")) || len(out) < 500 {
				t.Errorf("man %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			if args[0] == "ztpd-serve" && !bytes.Contains(out, []byte("shutdown-grace")) {
				t.Errorf("man ztpd-serve lacks --shutdown-grace:\n%s", out)
			}
		}
	})
	// Bash completion: bash-completion loads the installed script on
	// demand; it registers ztpd and completes a subcommand by asking the
	// installed binary (cobra's script needs bash-completion's helpers).
	const bashCompletionLib = "/usr/share/bash-completion/bash_completion"
	if _, err := os.Stat(bashCompletionLib); err != nil {
		t.Errorf("bash completion not tried: %v (apt-get install bash-completion)", err)
	} else {
		script := `source ` + bashCompletionLib + `
_completion_loader ztpd
complete -p ztpd
COMP_WORDS=(ztpd se); COMP_CWORD=1; COMP_LINE="ztpd se"; COMP_POINT=${#COMP_LINE}
__start_ztpd ztpd se ztpd
printf 'reply:%s\n' "${COMPREPLY[@]}"`
		bash, err := exec.Command("bash", "-c", script).CombinedOutput()
		if err != nil || !bytes.Contains(bash, []byte("-F __start_ztpd ztpd")) || !bytes.Contains(bash, []byte("reply:serve")) {
			t.Errorf("bash completion: %v\n%s", err, bash)
		}
	}

	// The operator's own profile, which dpkg alone would leave behind.
	if err := os.WriteFile(filepath.Join(ProfilesDir, "leaf.yaml"), []byte("name: leaf\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := purge(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{BinaryPath, UnitPath, ConfigPath, "/etc/ztpd", StateDir, BashCompletion, ManDir + "/ztpd.1.gz"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s is left after dpkg --purge", p)
		}
	}
	if out, err := exec.Command("dpkg-query", "-W", "-f", "${db:Status-Status}", PackageName).CombinedOutput(); err == nil && strings.TrimSpace(string(out)) != "not-installed" {
		t.Errorf("dpkg-query after purge: %s", out)
	}
}

func checkOwned(t *testing.T, path string, uid, gid int, mode fs.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Error(err)
		return
	}
	s := st.Sys().(*syscall.Stat_t)
	if int(s.Uid) != uid || int(s.Gid) != gid || st.Mode().Perm() != mode {
		t.Errorf("%s: owner %d:%d mode %v, want %d:%d %v", path, s.Uid, s.Gid, st.Mode().Perm(), uid, gid, mode)
	}
}

// syncBuffer is a bytes.Buffer safe to read while a process writes it.
type syncBuffer struct {
	mu chan struct{}
	b  bytes.Buffer
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{mu: make(chan struct{}, 1)} }

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu <- struct{}{}
	defer func() { <-s.mu }()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu <- struct{}{}
	defer func() { <-s.mu }()
	return s.b.String()
}

// startService starts ztpd.service as installed and returns a function that
// stops it (SIGTERM, as the unit's KillSignal) and gives its exit code and
// log, and its standard output and error as they come.
func startService(t *testing.T, unit map[string][]string) (stop func() (int, string), pid int, stdout, stderr *syncBuffer) {
	t.Helper()
	stdout, stderr = newSyncBuffer(), newSyncBuffer()
	if st, err := os.Stat("/run/systemd/system"); err == nil && st.IsDir() {
		for _, args := range [][]string{{"daemon-reload"}, {"start", "ztpd.service"}} {
			if out, err := exec.Command("systemctl", args...).CombinedOutput(); err != nil {
				t.Fatalf("systemctl %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		since := time.Now().Add(-time.Second).Format("2006-01-02 15:04:05")
		main, _ := exec.Command("systemctl", "show", "-p", "MainPID", "--value", "ztpd.service").Output()
		pid, _ = strconv.Atoi(strings.TrimSpace(string(main)))
		return func() (int, string) {
			out, err := exec.Command("systemctl", "stop", "ztpd.service").CombinedOutput()
			if err != nil {
				t.Errorf("systemctl stop: %v\n%s", err, out)
			}
			res, _ := exec.Command("systemctl", "show", "-p", "ExecMainStatus", "--value", "ztpd.service").Output()
			code, _ := strconv.Atoi(strings.TrimSpace(string(res)))
			logs, _ := exec.Command("journalctl", "-u", "ztpd.service", "--since", since, "--no-pager", "-o", "cat").CombinedOutput()
			stdout.Write(logs) // journald has both streams
			return code, string(logs)
		}, pid, stdout, stderr
	}

	// No systemd: run ExecStart as the unit says, under setpriv.
	cmd := unitCommand(t, unit, nil)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid = cmd.Process.Pid
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			cmd.Process.Kill()
			<-done
		}
	})
	stopTimeout, err := time.ParseDuration(unitOne(t, unit, "TimeoutStopSec"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("no systemd (PID 1 is not systemd): running %s", strings.Join(cmd.Args, " "))
	return func() (int, string) {
		cmd.Process.Signal(syscall.SIGTERM)
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		select {
		case <-done:
		case <-ctx.Done():
			t.Errorf("ztpd did not stop within TimeoutStopSec %s of SIGTERM", stopTimeout)
			cmd.Process.Kill()
			<-done
		}
		return cmd.ProcessState.ExitCode(), stderr.String()
	}, pid, stdout, stderr
}

func unitOne(t *testing.T, unit map[string][]string, key string) string {
	t.Helper()
	v := unit["Service."+key]
	if len(v) != 1 {
		t.Fatalf("unit %s = %q", key, v)
	}
	return v[0]
}

// unitCommand is the unit's ExecStart as systemd would run it without
// systemd: as its User and Group, with its capabilities (less those in
// drop), NoNewPrivileges, UMask, working directory and environment; extra
// arguments follow ExecStart's. exec keeps one process: sh sets the umask,
// setpriv the user and capabilities, then ztpd runs with the pid sh had.
func unitCommand(t *testing.T, unit map[string][]string, drop []string, extra ...string) *exec.Cmd {
	t.Helper()
	caps := func(k string) string {
		c := []string{"-all"}
		for _, name := range strings.Fields(unitOne(t, unit, k)) {
			if !slices.Contains(drop, name) {
				c = append(c, "+"+strings.ToLower(strings.TrimPrefix(name, "CAP_")))
			}
		}
		return strings.Join(c, ",")
	}
	if _, err := strconv.ParseUint(unitOne(t, unit, "UMask"), 8, 32); err != nil {
		t.Fatalf("UMask: %v", err)
	}
	args := []string{"--reuid=" + unitOne(t, unit, "User"), "--regid=" + unitOne(t, unit, "Group"), "--init-groups",
		"--inh-caps=" + caps("AmbientCapabilities"), "--ambient-caps=" + caps("AmbientCapabilities"),
		"--bounding-set=" + caps("CapabilityBoundingSet")}
	if unitOne(t, unit, "NoNewPrivileges") == "yes" {
		args = append(args, "--no-new-privs")
	}
	args = append(args, "--")
	args = append(args, strings.Fields(unitOne(t, unit, "ExecStart"))...)
	args = append(args, extra...)
	cmd := exec.Command("sh", append([]string{"-c", `umask "$0" && exec setpriv "$@"`, unitOne(t, unit, "UMask")}, args...)...)
	// systemd's environment for a User= service, and its working directory.
	user := unitOne(t, unit, "User")
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8",
		"HOME=" + StateDir, "USER=" + user, "LOGNAME=" + user, "SHELL=/usr/sbin/nologin"}
	cmd.Dir = "/"
	return cmd
}

// unitCapabilities checks, with the installed binary run as the unit runs
// it inside a network namespace, that the unit's capabilities serve DHCP
// (port 67, bound to the interface, a lease to busybox udhcpc) and TFTP
// (port 69), and that each is needed: without CAP_NET_BIND_SERVICE serve
// fails on port 67; without CAP_NET_RAW DHCP loses its AF_PACKET socket
// (layer-2 replies to clients that have no address yet).
func unitCapabilities(t *testing.T, unit map[string][]string, uid, gid int) {
	needTool(t, "ip", "busybox")
	pair := netns.ForTest(t, "ztpdpkg", "10.99.215.1/24", "")
	serve := func(name string, drop []string) (*exec.Cmd, *syncBuffer, chan struct{}) {
		dir := filepath.Join(StateDir, "captest-"+name)
		if err := os.Mkdir(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		c := unitCommand(t, unit, drop, "--data-dir", dir, "--admin-key-file", filepath.Join(dir, "admin-api-key.yaml"),
			"--dhcp-interface", pair.AIf, "--dhcp-range", "10.99.215.10-10.99.215.20", "--tftp",
			"--http-addr", "10.99.215.1:8080", "--advertise-addr", "10.99.215.1")
		cmd := exec.Command("ip", append([]string{"netns", "exec", pair.A.Name}, c.Args...)...)
		cmd.Env, cmd.Dir = c.Env, c.Dir
		logs := newSyncBuffer()
		cmd.Stdout, cmd.Stderr = logs, logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		t.Cleanup(func() {
			cmd.Process.Kill()
			<-done
		})
		deadline := time.After(20 * time.Second)
		for !strings.Contains(logs.String(), "ztpd started") {
			select {
			case <-done:
				return cmd, logs, done
			case <-deadline:
				t.Fatalf("%s: ztpd did not start in 20 s:\n%s", name, logs)
			case <-time.After(100 * time.Millisecond):
			}
		}
		return cmd, logs, done
	}
	stopServe := func(cmd *exec.Cmd, done chan struct{}) {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("ztpd did not stop in 30 s")
		}
	}
	// packetSockets counts ztpd's AF_PACKET sockets: /proc/net/packet of its
	// namespace against its file descriptors.
	packetSockets := func(pid int) int {
		out, err := pair.A.Command(context.Background(), "cat", "/proc/net/packet").Output()
		if err != nil {
			t.Fatal(err)
		}
		inodes := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n")[1:] {
			if f := strings.Fields(line); len(f) > 0 {
				inodes["socket:["+f[len(f)-1]+"]"] = true
			}
		}
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
		n := 0
		for _, fd := range fds {
			if l, err := os.Readlink(fd); err == nil && inodes[l] {
				n++
			}
		}
		return n
	}

	cmd, logs, done := serve("full", nil)
	select {
	case <-done:
		t.Fatalf("ztpd with the unit's capabilities exited:\n%s", logs)
	default:
	}
	// ip netns exec execs too: cmd's pid is ztpd's.
	if n := packetSockets(cmd.Process.Pid); n != 1 {
		t.Errorf("ztpd holds %d AF_PACKET sockets, want 1 (DHCP's layer-2 replies)", n)
	}
	dir := t.TempDir()
	env := filepath.Join(dir, "env")
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n[ \"$1\" = bound ] && env > "+env+"\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := pair.B.Command(ctx, "busybox", "udhcpc", "-f", "-q", "-n", "-t", "5", "-T", "1", "-A", "1", "-i", pair.BIf, "-s", script).CombinedOutput()
	lease, _ := os.ReadFile(env)
	ip := regexp.MustCompile(`(?m)^ip=(10\.99\.215\.(1\d|20))$`).FindSubmatch(lease)
	if err != nil || ip == nil {
		t.Fatalf("udhcpc got no lease from ztpd: %v\n%s\n%s\nztpd:\n%s", err, out, lease, logs)
	}
	t.Logf("udhcpc: lease %s from ztpd running with %s", ip[1], unit["Service.AmbientCapabilities"])
	if err := pair.B.IP("addr", "add", string(ip[1])+"/24", "dev", pair.BIf); err != nil {
		t.Fatal(err)
	}
	// Any TFTP answer shows port 69 is served; an unknown file gets an error.
	out, _ = pair.B.Command(ctx, "busybox", "tftp", "-g", "-r", "no-such-file", "-l", filepath.Join(dir, "got"), "10.99.215.1").CombinedOutput()
	if !strings.Contains(string(out), "server error") {
		t.Errorf("busybox tftp: no answer from ztpd on port 69: %s\nztpd:\n%s", out, logs)
	}
	t.Logf("busybox tftp: %s", bytes.TrimSpace(out))
	stopServe(cmd, done)

	// Without CAP_NET_BIND_SERVICE: no port 67.
	_, logs, done = serve("no-bind", []string{"CAP_NET_BIND_SERVICE"})
	select {
	case <-done:
		if !strings.Contains(logs.String(), "permission denied") {
			t.Errorf("ztpd without CAP_NET_BIND_SERVICE failed otherwise:\n%s", logs)
		}
		t.Logf("without CAP_NET_BIND_SERVICE: %s", strings.TrimSpace(logs.String()))
	case <-time.After(10 * time.Second):
		t.Errorf("ztpd without CAP_NET_BIND_SERVICE kept running:\n%s", logs)
	}

	// Without CAP_NET_RAW: DHCP runs, but without its AF_PACKET socket.
	cmd, logs, done = serve("no-raw", []string{"CAP_NET_RAW"})
	select {
	case <-done:
		t.Logf("ztpd without CAP_NET_RAW exited:\n%s", logs)
	default:
		if n := packetSockets(cmd.Process.Pid); n != 0 {
			t.Errorf("ztpd without CAP_NET_RAW holds %d AF_PACKET sockets", n)
		} else {
			t.Log("without CAP_NET_RAW: DHCP runs without its AF_PACKET socket")
		}
		stopServe(cmd, done)
	}
}
