// Package hermetic keeps tests that run ztpd from reading the host's ztpd
// set-up. An installed package puts /etc/ztpd/ztpd.yaml on the machine
// (the packaging test installs one while other tests run), an operator's
// shell may export ZTPD_API_URL or ZTPD_CONFIG, and ~/.config/ztpd/cli.yaml
// may hold credentials: a ztpd that a test starts must see none of them,
// only the configuration file, data directory and variables the test
// names.
package hermetic

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Variables are the environment variables ztpd itself reads (cmd/ztpd);
// a test names them explicitly or they are unset.
var Variables = []string{
	"ZTPD_CONFIG",
	"ZTPD_API_URL",
	"ZTPD_API_KEY",
	"ZTPD_SECRET_KEY",
	"ZTPD_API_CA",
	"ZTPD_BACKUP_PASSPHRASE",
}

// Isolate, for TestMain, removes ztpd's variables from the test process
// and sets ZTPD_CONFIG empty ("no configuration file"), so a command run
// in-process, and any child started without its own environment, reads
// the embedded defaults unless the test names a file: never the host's
// /etc/ztpd/ztpd.yaml. The test tooling's own ZTPD_ variables (the
// Kubernetes binaries' cache, chromium, ...) stay.
func Isolate() {
	for _, v := range Variables {
		os.Unsetenv(v)
	}
	os.Setenv("ZTPD_CONFIG", "")
}

// Env is the environment for a ztpd child process: the test process's
// without any ZTPD_ variable, HOME and XDG_CONFIG_HOME in home (no
// ~/.config/ztpd/cli.yaml of the user's), ZTPD_CONFIG empty, then extra
// ("KEY=value", later ones win).
func Env(home string, extra ...string) []string {
	env := []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "ZTPD_CONFIG="}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ZTPD_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_CONFIG_HOME=") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// TestEnv is Env with a home of the test's own, removed after it.
func TestEnv(t testing.TB, extra ...string) []string {
	t.Helper()
	return Env(t.TempDir(), extra...)
}

// Config writes yaml as ztpd.yaml in a directory of the test's own and
// returns its path, for `--config`.
func Config(t testing.TB, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ztpd.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
