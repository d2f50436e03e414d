package hermetic

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Every variable ztpd reads is one Isolate removes: a new one in cmd/ztpd
// would otherwise leak from the host into the tests.
func TestVariablesAreZtpds(t *testing.T) {
	files, err := filepath.Glob("../../cmd/ztpd/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("cmd/ztpd sources: %v %v", files, err)
	}
	re := regexp.MustCompile(`"(ZTPD_[A-Z0-9_]+)"`)
	read := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(raw), -1) {
			read[m[1]] = true
		}
	}
	for v := range read {
		if !slices.Contains(Variables, v) {
			t.Errorf("cmd/ztpd reads %s, which Variables does not list", v)
		}
	}
}

func TestEnvDropsTheHostsZtpdVariables(t *testing.T) {
	t.Setenv("ZTPD_API_URL", "http://host.example")
	t.Setenv("ZTPD_CONFIG", "/etc/ztpd/ztpd.yaml")
	t.Setenv("ZTPD_K8S_CACHE", "/cache")
	home := t.TempDir()
	env := Env(home, "ZTPD_API_KEY=k")
	for _, kv := range env {
		if strings.HasPrefix(kv, "ZTPD_") && kv != "ZTPD_CONFIG=" && kv != "ZTPD_API_KEY=k" {
			t.Errorf("inherited %s", kv)
		}
	}
	for _, want := range []string{"HOME=" + home, "ZTPD_CONFIG=", "ZTPD_API_KEY=k"} {
		if !slices.Contains(env, want) {
			t.Errorf("no %s in %v", want, env)
		}
	}
}

func TestIsolateKeepsTheToolingsVariables(t *testing.T) {
	t.Setenv("ZTPD_API_URL", "http://host.example")
	t.Setenv("ZTPD_CONFIG", "/etc/ztpd/ztpd.yaml")
	t.Setenv("ZTPD_K8S_CACHE", "/cache")
	Isolate()
	if v, ok := os.LookupEnv("ZTPD_CONFIG"); !ok || v != "" {
		t.Errorf("ZTPD_CONFIG=%q (set %v), want set and empty", v, ok)
	}
	if _, ok := os.LookupEnv("ZTPD_API_URL"); ok {
		t.Error("ZTPD_API_URL still set")
	}
	if os.Getenv("ZTPD_K8S_CACHE") != "/cache" {
		t.Error("ZTPD_K8S_CACHE removed")
	}
}
