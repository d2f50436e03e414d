package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A one-argument command without its argument (or with two) says what is
// missing in its own terms, not cobra's "accepts 1 arg(s), received 0".
func TestOneArgCommandsSayWhatIsMissing(t *testing.T) {
	dd := "--data-dir=" + filepath.Join(t.TempDir(), "data")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"cluster", "create"}, "missing NAME: usage: ztpd cluster create NAME"},
		{[]string{"cluster", "show"}, "missing NAME: usage: ztpd cluster show NAME"},
		{[]string{"device", "approve"}, "missing MAC: usage: ztpd device approve MAC"},
		{[]string{"cluster", "create", "a", "b"}, "ztpd cluster create takes one NAME, given 2 (a b)"},
	} {
		_, err := runCLI(t, append([]string{dd}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "arg(s)") {
			t.Errorf("ztpd %s: %v, want %q", strings.Join(c.args, " "), err, c.want)
		}
	}
}

// As a user who may not read ztpd's data directory, API commands and
// profile check say permission denied and suggest sudo, instead of "no
// ztpd data directory" or "no store".
func TestDataDirPermissionDeniedSaysSo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test runs the CLI as nobody against a root-owned data directory")
	}
	// A copy of the binary nobody may run, and a data directory it may not enter.
	src, err := os.Open(buildZtpd(t))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	pub, err := os.MkdirTemp("", "ztpd-pub-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(pub) })
	os.Chmod(pub, 0o755)
	bin := filepath.Join(pub, "ztpd")
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	data := filepath.Join(pub, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(data, "ztpd.db"), nil, 0o600)
	profiles := filepath.Join(pub, "p.yaml")
	os.WriteFile(profiles, []byte("name: leaf\nmatch:\n  kind: [sonic]\n"), 0o644)

	run := func(args ...string) string {
		cmd := exec.Command(bin, append([]string{"--data-dir", data}, args...)...)
		cmd.Env = append(cliEnv(t), "HOME="+pub, "XDG_CONFIG_HOME="+filepath.Join(pub, ".config"))
		cmd.Dir = pub
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	for _, args := range [][]string{{"device", "list"}, {"profile", "check", "--profiles", profiles, "--device", "02:00:00:00:01:01"}} {
		out := run(args...)
		if !strings.Contains(out, "permission denied") || !strings.Contains(out, "sudo") ||
			strings.Contains(out, "no ztpd data directory") || strings.Contains(out, "no store in data directory") {
			t.Errorf("ztpd %s as nobody:\n%s", strings.Join(args, " "), out)
		}
	}
}
