package packaging

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/config"
)

// The repository root, seen from this package's directory (go test runs
// tests there).
const repoRoot = "../.."

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// built is the real ztpd binary (static, as make package builds it) and
// the man pages and completions its gendocs wrote, built once per run.
type builtFiles struct{ bin, man, completions string }

func buildZtpdForPackage(t *testing.T) builtFiles {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "ztpd-pkg-build-")
		if buildErr != nil {
			return
		}
		bin := filepath.Join(buildDir, "ztpd")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version=0.0.0~pkgtest", "-o", bin, "./cmd/ztpd")
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/ztpd: %v\n%s", err, out)
			return
		}
		out, err := exec.Command(bin, "gendocs", "--man", filepath.Join(buildDir, "man"),
			"--completions", filepath.Join(buildDir, "completions")).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("ztpd gendocs: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtFiles{filepath.Join(buildDir, "ztpd"), filepath.Join(buildDir, "man"), filepath.Join(buildDir, "completions")}
}

func buildTestDeb(t *testing.T) string {
	t.Helper()
	b := buildZtpdForPackage(t)
	deb, err := BuildDeb(Options{Version: "0.0.0~pkgtest", Arch: runtime.GOARCH, Binary: b.bin, ManDir: b.man,
		CompletionsDir: b.completions, ExamplesDir: filepath.Join(repoRoot, "examples", "profiles"), OutDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return deb
}

// The shipped /etc/ztpd/ztpd.yaml is a valid configuration as it stands,
// says what the package promises (state under /var/lib/ztpd, HTTP on
// loopback, the first admin key into a file there, no DHCP or TFTP until
// the operator sets them up), and every example setting in its comments is
// a real field of internal/config.
func TestDefaultConfigIsValid(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ztpd.yaml")
	if err := os.WriteFile(path, DefaultConfig(), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.DataDir != StateDir || cfg.API.AdminKeyFile != AdminKeyFile || cfg.HTTP.Addr != "127.0.0.1:8080" ||
		cfg.DHCP.Enabled() || cfg.TFTP.Enabled || len(cfg.Profiles) != 1 || cfg.Profiles[0] != ProfilesDir {
		t.Fatalf("default config: data_dir %q admin_key_file %q http.addr %q dhcp %v tftp %v profiles %v",
			cfg.DataDir, cfg.API.AdminKeyFile, cfg.HTTP.Addr, cfg.DHCP.Interfaces, cfg.TFTP.Enabled, cfg.Profiles)
	}
	if addr, tls := cfg.APIListener(); addr != "" || tls {
		t.Errorf("the API moves to %s (TLS %v); on the loopback default it shares http.addr", addr, tls)
	}
	if filepath.Dir(cfg.API.AdminKeyFile) != StateDir {
		t.Errorf("admin key file %s is outside the state directory", cfg.API.AdminKeyFile)
	}

	// Examples are lines "#" directly followed by the setting (or by two or
	// more spaces for nested ones); prose is "# text".
	example := regexp.MustCompile(`^#([^ #]|  )`)
	var uncommented bytes.Buffer
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(DefaultConfig()))
	for sc.Scan() {
		line := sc.Text()
		if example.MatchString(line) {
			line, n = line[1:], n+1
		}
		uncommented.WriteString(line + "\n")
	}
	if n < 10 {
		t.Fatalf("only %d example lines found; the pattern no longer matches the file", n)
	}
	all := filepath.Join(dir, "all.yaml")
	if err := os.WriteFile(all, uncommented.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	// Load decodes strictly: an unknown or misspelt field is an error.
	if _, err := config.Load(all); err != nil {
		t.Fatalf("the examples in ztpd.yaml, uncommented, do not load: %v\n%s", err, uncommented.String())
	}
}

// unitDirectives reads a unit file into section.key -> values (a key may
// repeat).
func unitDirectives(t *testing.T, unit []byte) map[string][]string {
	t.Helper()
	d := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(unit))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("unit line %q is not key=value", line)
			}
			d[section+"."+k] = append(d[section+"."+k], v)
		}
	}
	return d
}

// The unit says what the package promises: its own user, capabilities for
// the DHCP/TFTP/metadata ports and DHCP's layer-2 replies only, the state
// and configuration directories, a read-only system, and a stop timeout
// longer than serve's shutdown grace.
func TestUnitHardening(t *testing.T) {
	d := unitDirectives(t, Unit())
	want := map[string]string{
		"Service.Type":                    "simple",
		"Service.User":                    ServiceUserName,
		"Service.Group":                   ServiceUserName,
		"Service.ExecStart":               BinaryPath + " serve --config " + ConfigPath + " --data-dir " + StateDir,
		"Service.ExecReload":              "/bin/kill -HUP $MAINPID",
		"Service.StateDirectory":          "ztpd",
		"Service.ConfigurationDirectory":  "ztpd",
		"Service.AmbientCapabilities":     "CAP_NET_BIND_SERVICE CAP_NET_RAW",
		"Service.CapabilityBoundingSet":   "CAP_NET_BIND_SERVICE CAP_NET_RAW",
		"Service.NoNewPrivileges":         "yes",
		"Service.ProtectSystem":           "strict",
		"Service.ProtectHome":             "yes",
		"Service.PrivateTmp":              "yes",
		"Service.ProtectKernelTunables":   "yes",
		"Service.ProtectKernelModules":    "yes",
		"Service.ProtectControlGroups":    "yes",
		"Service.LockPersonality":         "yes",
		"Service.MemoryDenyWriteExecute":  "yes",
		"Service.RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_NETLINK AF_PACKET",
		"Service.SystemCallFilter":        "@system-service",
		"Service.KillSignal":              "SIGTERM",
		"Service.Restart":                 "on-failure",
		"Install.WantedBy":                "multi-user.target",
	}
	for k, v := range want {
		if got := d[k]; len(got) != 1 || got[0] != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if got := d["Service.TimeoutStopSec"]; len(got) != 1 {
		t.Errorf("TimeoutStopSec = %q", got)
	} else if stop, err := time.ParseDuration(got[0]); err != nil || stop <= 10*time.Second {
		t.Errorf("TimeoutStopSec %s is not longer than serve's default --shutdown-grace 10s", got[0])
	}
}

// systemdVerify runs systemd-analyze verify on unit (named ztpd.service in a
// directory of its own) with ExecStart pointing at bin, and returns every
// problem it found. systemd 252 reports a bad address family only at debug
// level and drops an unknown capability without a word, so it runs twice:
// plainly (must say nothing and succeed), and at debug level, where every
// line about the unit file is a problem and the capabilities systemd parsed
// must be the ones the unit names.
func systemdVerify(t *testing.T, unit []byte, bin string) []string {
	t.Helper()
	dir := t.TempDir()
	unit = bytes.ReplaceAll(unit, []byte("ExecStart="+BinaryPath+" "), []byte("ExecStart="+bin+" "))
	path := filepath.Join(dir, "ztpd.service")
	if err := os.WriteFile(path, unit, 0o644); err != nil {
		t.Fatal(err)
	}
	var problems []string
	// --man=no: the man pages the unit names are installed only with the
	// package (the install test verifies the installed unit with them).
	out, err := exec.Command("systemd-analyze", "verify", "--man=no", path).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		problems = append(problems, fmt.Sprintf("systemd-analyze verify: %v: %s", err, bytes.TrimSpace(out)))
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("systemd-analyze", "verify", "--man=no", path)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_LEVEL=debug")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		problems = append(problems, fmt.Sprintf("systemd-analyze verify (debug): %v", err))
	}
	// @system-service lists system calls newer than this libseccomp knows
	// (riscv_hwprobe, ...): harmless unless the unit names one itself.
	unknownSyscall := regexp.MustCompile(`Failed to parse system call, ignoring: (\S+)$`)
	for _, line := range strings.Split(stderr.String(), "\n") {
		if !strings.HasPrefix(line, path+":") {
			continue
		}
		if m := unknownSyscall.FindStringSubmatch(line); m != nil && !bytes.Contains(unit, []byte(m[1])) {
			continue
		}
		problems = append(problems, line)
	}
	d := unitDirectives(t, unit)
	for _, k := range []string{"CapabilityBoundingSet", "AmbientCapabilities"} {
		want := "\t\t" + k + ": " + strings.ToLower(strings.Join(d["Service."+k], " "))
		if !strings.Contains(stdout.String()+"\n", want+"\n") {
			problems = append(problems, fmt.Sprintf("systemd parsed %s differently from %q", k, d["Service."+k]))
		}
	}
	return problems
}

// systemd-analyze verify accepts the unit without a word; broken copies of
// it are caught, so the check itself is known to work.
func TestUnitVerifies(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("skipping: systemd-analyze not installed (apt-get install systemd)")
	}
	b := buildZtpdForPackage(t)
	if problems := systemdVerify(t, Unit(), b.bin); len(problems) > 0 {
		t.Fatalf("ztpd.service:\n%s", strings.Join(problems, "\n"))
	}
	for name, broken := range map[string][]byte{
		"misspelt key":        bytes.Replace(Unit(), []byte("ProtectSystem="), []byte("ProtectSytem="), 1),
		"unknown capability":  bytes.Replace(Unit(), []byte("CAP_NET_RAW\nNoNew"), []byte("CAP_NET_RAWW\nNoNew"), 1),
		"missing executable":  bytes.Replace(Unit(), []byte("ExecStart="+BinaryPath), []byte("ExecStart=/nonexistent/ztpd"), 1),
		"bad address family":  bytes.Replace(Unit(), []byte("AF_NETLINK AF_PACKET"), []byte("AF_NETLINK AF_PAKET"), 1),
		"bad section for key": bytes.Replace(Unit(), []byte("[Install]\nWantedBy"), []byte("[Install]\nUser=x\nWantedBy"), 1),
		"bad system call":     bytes.Replace(Unit(), []byte("=@system-service"), []byte("=@system-service nosuchcall"), 1),
	} {
		if bytes.Equal(broken, Unit()) {
			t.Fatalf("%s: the replacement did not apply; update the test", name)
		}
		if problems := systemdVerify(t, broken, b.bin); len(problems) == 0 {
			t.Errorf("%s: systemd-analyze verify found nothing", name)
		} else {
			t.Logf("%s: %s", name, strings.Join(problems, "; "))
		}
	}
}

func needTool(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			t.Skipf("skipping: %s not installed", n)
		}
	}
}

// The .deb holds what the package promises, with the right modes, a
// conffile for the configuration and the maintainer scripts, as dpkg-deb
// reads it.
func TestDebContents(t *testing.T) {
	needTool(t, "dpkg-deb")
	deb := buildTestDeb(t)
	if want := "ztpd_0.0.0~pkgtest_" + DebianArch(runtime.GOARCH) + ".deb"; filepath.Base(deb) != want {
		t.Errorf("package file %s, want %s", filepath.Base(deb), want)
	}
	info := dpkgDeb(t, "-I", deb)
	for _, want := range []string{"Package: ztpd", "Version: 0.0.0~pkgtest", "Architecture: " + DebianArch(runtime.GOARCH),
		"Depends: adduser | passwd", "Recommends: bash-completion", "Section: net", "Maintainer: ", " postinst", " prerm", " postrm", " conffiles"} {
		if !strings.Contains(info, want) {
			t.Errorf("dpkg-deb -I lacks %q:\n%s", want, info)
		}
	}
	if conf := strings.TrimSpace(dpkgDeb(t, "-I", deb, "conffiles")); conf != ConfigPath {
		t.Errorf("conffiles = %q, want %s", conf, ConfigPath)
	}

	// dpkg-deb -c: "-rwxr-xr-x root/root 123 2026-01-01 00:00 ./usr/bin/ztpd"
	listed := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(dpkgDeb(t, "-c", deb)), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			t.Fatalf("dpkg-deb -c line %q", line)
		}
		listed[strings.TrimSuffix(strings.TrimPrefix(f[5], "."), "/")] = f[0] + " " + f[1]
	}
	for path, want := range map[string]string{
		BinaryPath:                    "-rwxr-xr-x root/root",
		UnitPath:                      "-rw-r--r-- root/root",
		ConfigPath:                    "-rw-r--r-- root/root",
		ProfilesDir:                   "drwxr-xr-x root/root",
		ManDir + "/ztpd.1.gz":         "-rw-r--r-- root/root",
		ManDir + "/ztpd-serve.1.gz":   "-rw-r--r-- root/root",
		ManDir + "/ztpd-backup.1.gz":  "-rw-r--r-- root/root",
		BashCompletion:                "-rw-r--r-- root/root",
		ZshCompletion:                 "-rw-r--r-- root/root",
		FishCompletion:                "-rw-r--r-- root/root",
		ExamplesDir + "/leaf.yaml":    "-rw-r--r-- root/root",
		ExamplesDir + "/default.yaml": "-rw-r--r-- root/root",
	} {
		if got, ok := listed[path]; !ok {
			t.Errorf("%s is not in the package", path)
		} else if got != want {
			t.Errorf("%s: %s, want %s", path, got, want)
		}
	}
	for path := range listed {
		if strings.HasPrefix(path, "/var/") || strings.Contains(path, "gendocs") {
			t.Errorf("%s should not be in the package", path)
		}
	}

	// The files themselves: what is embedded here, gzipped man pages,
	// maintainer scripts that parse.
	root := t.TempDir()
	dpkgDeb(t, "-x", deb, root)
	for path, want := range map[string][]byte{UnitPath: Unit(), ConfigPath: DefaultConfig()} {
		if got, err := os.ReadFile(filepath.Join(root, path)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s in the package differs from internal/packaging (%v)", path, err)
		}
	}
	zf, err := os.Open(filepath.Join(root, ManDir, "ztpd-serve.1.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer zf.Close()
	zr, err := gzip.NewReader(zf)
	if err != nil {
		t.Fatal(err)
	}
	page, err := io.ReadAll(zr)
	if err != nil || !bytes.Contains(page, []byte(`.TH "ZTPD-SERVE" "1"`)) || !bytes.Contains(page, []byte("shutdown-grace")) {
		t.Errorf("ztpd-serve.1.gz is not the serve man page (%v)", err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("man page gzip header has name %q, time %v (gzip -n has neither)", zr.Name, zr.ModTime)
	}
	control := t.TempDir()
	dpkgDeb(t, "-e", deb, control)
	for _, s := range []string{"postinst", "prerm", "postrm"} {
		st, err := os.Stat(filepath.Join(control, s))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o755 {
			t.Errorf("%s mode %v", s, st.Mode())
		}
		if out, err := exec.Command("sh", "-n", filepath.Join(control, s)).CombinedOutput(); err != nil {
			t.Errorf("sh -n %s: %v\n%s", s, err, out)
		}
	}
}

func dpkgDeb(t *testing.T, args ...string) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command("dpkg-deb", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("dpkg-deb %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

func TestBuildDebRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "ztpd")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Version: "v1.2.0", Arch: "amd64", Binary: bin, ManDir: dir, CompletionsDir: dir}, "not a Debian version"},
		{Options{Version: "e145c11", Arch: "amd64", Binary: bin, ManDir: dir, CompletionsDir: dir}, "not a Debian version"},
		{Options{Version: "1.2.0", Arch: "amd64", Binary: filepath.Join(dir, "nosuch"), ManDir: dir, CompletionsDir: dir}, "binary"},
		{Options{Version: "1.2.0", Arch: "amd64", Binary: bin, ManDir: dir, CompletionsDir: dir, OutDir: dir}, "no man pages"},
	} {
		if _, err := BuildDeb(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("BuildDeb(%+v) = %v, want an error containing %q", tc.o, err, tc.want)
		}
	}
}
