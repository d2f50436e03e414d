package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The configuration file a command reads: --config, else ZTPD_CONFIG (empty:
// none), else the packaged file when it exists.
func TestConfigFileChoice(t *testing.T) {
	named := filepath.Join(t.TempDir(), "named.yaml")
	t.Setenv("ZTPD_CONFIG", "/from/env.yaml")
	if got := configFile(&rootOptions{configPath: named}); got != named {
		t.Errorf("--config: got %q", got)
	}
	if got := configFile(&rootOptions{}); got != "/from/env.yaml" {
		t.Errorf("ZTPD_CONFIG: got %q", got)
	}
	t.Setenv("ZTPD_CONFIG", "")
	if got := configFile(&rootOptions{}); got != "" {
		t.Errorf("ZTPD_CONFIG set but empty: got %q, want no file", got)
	}
	os.Unsetenv("ZTPD_CONFIG")
	_, err := os.Stat(systemConfigFile)
	want := ""
	if err == nil {
		want = systemConfigFile
	}
	if got := configFile(&rootOptions{}); got != want {
		t.Errorf("no --config, no ZTPD_CONFIG: got %q, want %q", got, want)
	}
}
