package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestProfileCheckRendersSamples(t *testing.T) {
	bin := buildZtpd(t)
	out, err := exec.Command(bin, "profile", "check", "--profiles", "../../examples/profiles", "-o", "json",
		"--serial", "LEAF0010", "--product", "Accton-AS7712-32X", "--ip", "10.99.40.10", "--sonic-version", "N.A").CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var res struct {
		Matched  string                    `json:"matched"`
		ZTPJSON  map[string]map[string]any `json:"ztp_json"`
		ConfigDB map[string]map[string]any `json:"config_db"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if res.Matched != "leaf" {
		t.Fatalf("matched %q", res.Matched)
	}
	if _, ok := res.ZTPJSON["ztp"]["01-firmware"]; !ok {
		t.Errorf("no firmware section for an unknown version: %v", res.ZTPJSON)
	}
	if lh := res.ConfigDB["DEVICE_METADATA"]["localhost"].(map[string]any); lh["hostname"] != "leaf0010" {
		t.Errorf("config_db %v", res.ConfigDB)
	}
}

func TestProfileCheckReportsTemplateErrors(t *testing.T) {
	bin := buildZtpd(t)
	dir := t.TempDir()
	// A load-time error: unknown field in a template.
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("name: a\nmatch: {kind: sonic}\n\nhostname: 'sw-{{ .Serail }}'\n"), 0o644)
	out, err := exec.Command(bin, "profile", "check", "--profiles", dir).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `a.yaml:4:18: profile "a": hostname: unknown field .Serail (did you mean .Serial?)`) || !strings.Contains(string(out), "Serail") {
		t.Fatalf("want load error naming file, line, profile, field; got %v\n%s", err, out)
	}
	// A render-time error: the template is fine, the device makes it invalid.
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("name: a\nmgmt:\n  ip: '10.99.45.{{ .Serial }}'\n  prefix: 24\n"), 0o644)
	out, err = exec.Command(bin, "profile", "check", "--profiles", dir, "--serial", "X1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `a.yaml:3: profile "a": mgmt.ip: rendered "10.99.45.X1"`) {
		t.Fatalf("want render error; got %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "profile", "check", "--profiles", dir, "--serial", "7").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "eth0|10.99.45.7/24") {
		t.Fatalf("want success; got %v\n%s", err, out)
	}
	// A serve with a broken profile refuses to start.
	data := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("name: a\nhostname: '{{ .Nope }}'\n"), 0o644)
	os.WriteFile(cfg, []byte("profiles: ["+dir+"]\nhttp: {addr: '127.0.0.1:0'}\n"), 0o644)
	out, err = exec.Command(bin, "serve", "--config", cfg, "--data-dir", data).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `profile "a": hostname`) {
		t.Fatalf("serve with a broken profile: %v\n%s", err, out)
	}
}
