package app

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/config"
)

// The API's body guard lets an image upload's body through unread (the
// API streams it into the image store) and keeps the 1 MiB cap for every
// other request.
func TestAPIGuardStreamsOnlyUploads(t *testing.T) {
	a := &App{Cfg: config.Default(), Log: NewLogger(io.Discard, "error", "text")}
	var read int
	h := a.apiGuard("api").Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("%s: %v", r.URL.Path, err)
		}
		read = len(b)
		w.WriteHeader(http.StatusNoContent)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	body := bytes.Repeat([]byte("x"), 3<<20)
	post := func(path string) int {
		resp, err := http.Post(srv.URL+path, "application/octet-stream", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("/api/v1/images?name=x&kind=file"); code != 204 || read != len(body) {
		t.Errorf("upload: %d, handler read %d bytes", code, read)
	}
	read = 0
	if code := post("/api/v1/versions"); code != 413 || read != 0 {
		t.Errorf("3 MiB to another route: %d, handler read %d bytes", code, read)
	}
}

func TestRedactedConfig(t *testing.T) {
	cfg := config.Default()
	cfg.DataDir = "/var/lib/ztpd"
	cfg.API.TLS.CertFile, cfg.API.TLS.KeyFile = "/etc/ztpd/api.crt", "/etc/ztpd/api.key"
	a := &App{Cfg: cfg}
	raw, err := json.Marshal(a.redactedConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"data_dir":"/var/lib/ztpd"`, `"key_file":"/etc/ztpd/api.key"`, `"cert_file":"/etc/ztpd/api.crt"`, `"dhcp":`} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("config lacks %s: %s", want, raw)
		}
	}
	// A secret-named setting, should one appear, is redacted; paths to
	// key files and durations named after tokens are not.
	got := redactSettings(map[string]any{"radius": map[string]any{"password": "s3cret", "key_file": "/k"},
		"token_ttl": "24h", "psk": "p", "list": []any{map[any]any{"secret": "x", 43: "y"}}})
	raw, _ = json.Marshal(got)
	if s := string(raw); strings.Contains(s, "s3cret") || strings.Contains(s, `"psk":"p"`) || strings.Contains(s, `"secret":"x"`) ||
		!strings.Contains(s, `"key_file":"/k"`) || !strings.Contains(s, `"token_ttl":"24h"`) || !strings.Contains(s, `"43":"y"`) {
		t.Errorf("redacted: %s", s)
	}
}

// Warnings are computed now, from the profiles in use: none are loaded
// here, and device URLs use a loopback address.
func TestWarningsLive(t *testing.T) {
	cfg := keysTestConfig(t)
	cfg.HTTP.TLS.Enabled = true // the default
	a, err := keysOpen(t, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	w := a.Warnings()
	if len(w) != 2 || !strings.Contains(w[0], "no device profiles are loaded") || !strings.Contains(w[1], "127.0.0.1") {
		t.Errorf("warnings: %q", w)
	}
}

// TestWarnsWhileDeviceHTTPSIsOff: with http.tls.enabled false, every
// start (and the console) says that join answers and reports then cross
// the network in clear.
func TestWarnsWhileDeviceHTTPSIsOff(t *testing.T) {
	cfg := keysTestConfig(t)
	cfg.HTTP.TLS.Enabled = false
	var log bytes.Buffer
	a, err := keysOpen(t, cfg, &log)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if !slices.Contains(a.Warnings(), config.DeviceTLSOffWarning) {
		t.Errorf("warnings: %q", a.Warnings())
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "http.tls.enabled: false") {
		t.Errorf("no warning at start:\n%s", log.String())
	}
}
