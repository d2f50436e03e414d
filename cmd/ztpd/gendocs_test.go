package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The package's man pages and completions come from the live command tree:
// one page per visible command, flags included, hidden commands left out.
func TestGendocsManPagesAndCompletions(t *testing.T) {
	dir := t.TempDir()
	manDir, complDir := filepath.Join(dir, "man"), filepath.Join(dir, "completions")
	if _, err := runCLI(t, "gendocs", "--man", manDir, "--completions", complDir); err != nil {
		t.Fatal(err)
	}
	serve, err := os.ReadFile(filepath.Join(manDir, "ztpd-serve.1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`.TH "ZTPD-SERVE" "1"`, "shutdown-grace", "dhcp-interface"} {
		if !strings.Contains(string(serve), want) {
			t.Errorf("ztpd-serve.1 lacks %q", want)
		}
	}
	for _, page := range []string{"ztpd.1", "ztpd-cluster-create.1", "ztpd-device-list.1", "ztpd-backup.1"} {
		if _, err := os.Stat(filepath.Join(manDir, page)); err != nil {
			t.Errorf("man page missing: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(manDir, "ztpd-gendocs.1")); err == nil {
		t.Error("the hidden gendocs command got a man page")
	}
	for name, want := range map[string]string{"ztpd.bash": "__start_ztpd", "_ztpd": "#compdef ztpd", "ztpd.fish": "complete -c ztpd"} {
		b, err := os.ReadFile(filepath.Join(complDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %q", name, want)
		}
	}
	if _, err := runCLI(t, "gendocs"); err == nil {
		t.Error("gendocs with no directory succeeded")
	}
	// The bash script must at least parse.
	if bash, err := exec.LookPath("bash"); err == nil {
		if out, err := exec.Command(bash, "-n", filepath.Join(complDir, "ztpd.bash")).CombinedOutput(); err != nil {
			t.Errorf("bash -n ztpd.bash: %v\n%s", err, out)
		}
	}
}
