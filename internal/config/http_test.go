package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func load(t *testing.T, yaml string) Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestHTTPLimitsDefaultsAndErrors(t *testing.T) {
	c := Default()
	l := c.HTTP.Limits()
	if l.ReadHeaderTimeout != 10*time.Second || l.IdleTimeout != 60*time.Second || l.WriteTimeout != 60*time.Second ||
		l.MaxConns != 4096 || l.MaxHeaderBytes != 64<<10 || l.ReadBodyTimeout != 30*time.Second {
		t.Fatalf("defaults %+v", l)
	}
	c = load(t, "http:\n  idle_timeout: 1s\n  write_timeout: 2m\n  max_conns: 8\n")
	if err := c.Validate(); err != nil || c.HTTP.IdleTimeout.D() != time.Second || c.HTTP.MaxConns != 8 || c.HTTP.WriteTimeout.D() != 2*time.Minute {
		t.Fatalf("%v %+v", err, c.HTTP)
	}
	c = load(t, "http:\n  read_header_timeout: 0s\n  idle_timeout: 48h\n  max_conns: 0\n  max_header_bytes: 10\n")
	err := c.Validate()
	for _, want := range []string{"http.read_header_timeout: 0s is outside", "http.idle_timeout: 48h0m0s is outside",
		"http.max_conns: 0 is outside", "http.max_header_bytes: 10 is outside"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
}

func TestAPIListenerDefaultsToTLSOffLoopback(t *testing.T) {
	for _, c := range []struct {
		yaml, addr string
		tls        bool
		err        string
	}{
		{"", "", false, ""}, // loopback: the API stays on http.addr
		{"http: {addr: \"[::1]:8080\"}\n", "", false, ""},
		{"http: {addr: 10.99.70.1:8080}\n", "10.99.70.1:8443", true, ""},
		{"http: {addr: \":8080\"}\n", ":8443", true, ""},
		{"http: {addr: 10.99.70.1:8080}\napi: {insecure_plain_http: true}\n", "", false, ""},
		{"http: {addr: 10.99.70.1:8080}\napi: {addr: 127.0.0.1:9000, tls: {enabled: false}}\n", "127.0.0.1:9000", false, ""},
		{"http: {addr: 10.99.70.1:8080}\napi: {tls: {enabled: false}}\n", "10.99.70.1:8443", true, "api.tls.enabled: false, but http.addr 10.99.70.1:8080 is not loopback"},
		{"api: {addr: 10.99.70.1:9000, tls: {enabled: false}}\n", "10.99.70.1:9000", false, "api.tls.enabled: false would serve the API in plain HTTP on 10.99.70.1:9000"},
		{"api: {addr: 10.99.70.1:9000, tls: {enabled: false}, insecure_plain_http: true}\n", "10.99.70.1:9000", false, ""},
		{"http: {addr: 10.99.70.1:8443}\n", "10.99.70.1:8443", true, "api.addr: not set"},
	} {
		cfg := load(t, c.yaml)
		addr, useTLS := cfg.APIListener()
		if addr != c.addr || useTLS != c.tls {
			t.Errorf("%q: API at %q tls=%v, want %q tls=%v", c.yaml, addr, useTLS, c.addr, c.tls)
		}
		err := cfg.Validate()
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%q: %v, want %q", c.yaml, err, c.err)
		}
	}
}

func TestHTTPSourceLimitsDefaultsAndErrors(t *testing.T) {
	c := Default()
	if c.HTTP.MaxBodyBytesInFlight != 64<<20 || c.HTTP.MaxBodyBytesPerSource != 8<<20 || c.HTTP.MaxConnsPerSource != 0 {
		t.Fatalf("defaults %+v", c.HTTP)
	}
	if l := c.HTTP.Limits(); l.WithDefaults().MaxConnsPerSource != 256 {
		t.Fatalf("max_conns_per_source 0 with max_conns 4096: %d, want 256", l.WithDefaults().MaxConnsPerSource)
	}
	c = load(t, "http:\n  max_conns: 8\n")
	if err := c.Validate(); err != nil || c.HTTP.Limits().WithDefaults().MaxConnsPerSource != 4 {
		t.Fatalf("%v: max_conns_per_source with max_conns 8: %d, want 4", err, c.HTTP.Limits().WithDefaults().MaxConnsPerSource)
	}
	c = load(t, "http:\n  max_conns_per_source: -1\n  max_body_bytes_in_flight: 1000\n  max_body_bytes_per_source: 4096\n")
	err := c.Validate()
	for _, want := range []string{"http.max_conns_per_source: -1 is outside", "http.max_body_bytes_in_flight: 1000 is outside",
		"http.max_body_bytes_per_source: 4096 is outside"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
	c = load(t, "http:\n  max_body_bytes_in_flight: 16777216\n  max_body_bytes_per_source: 33554432\n")
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "http.max_body_bytes_per_source: 33554432 is outside") {
		t.Errorf("per source over in flight: %v", err)
	}
}

func TestDeviceTLSListener(t *testing.T) {
	for _, c := range []struct {
		yaml, addr, err string
	}{
		{"", "127.0.0.1:0", ""}, // on by default; on loopback a free port (no root needed)
		{"http: {addr: 10.99.70.1:8080}\n", "10.99.70.1:443", ""},
		{"http: {addr: 10.99.70.1:8080, tls: {enabled: true}}\n", "10.99.70.1:443", ""},
		{"http: {addr: \":8080\", tls: {enabled: true}}\n", ":443", ""},
		{"http: {addr: \"[::1]:8080\"}\n", "[::1]:0", ""},
		{"http: {addr: 10.99.70.1:8080, tls: {enabled: true, addr: 10.99.70.1:8444}}\n", "10.99.70.1:8444", ""},
		{"http: {addr: 10.99.70.1:8080, tls: {addr: 10.99.70.1:8444}}\n", "10.99.70.1:8444", ""},
		{"http: {addr: 10.99.70.1:8080, tls: {addr: 10.99.70.1:0}}\n", "10.99.70.1:0", ""},
		{"http: {addr: 10.99.70.1:8080, tls: {enabled: false, addr: 10.99.70.1:8444}}\n", "", ""}, // off
		{"http: {addr: 10.99.70.1:8080, tls: {enabled: true, addr: 0.0.0.0:8080}}\n", "0.0.0.0:8080", "http.tls.addr: 0.0.0.0:8080 is the address of http.addr"},
		{"http: {addr: 10.99.70.1:8080, tls: {enabled: true, addr: 10.99.70.1:8443}}\n", "10.99.70.1:8443", "http.tls.addr: 10.99.70.1:8443 is the API's address"},
		{"http: {tls: {enabled: true, cert_file: /x.pem}}\n", "127.0.0.1:0", "http.tls: cert_file and key_file must be given together"},
		{"http: {tls: {enabled: true, rotation_grace: 10s}}\n", "127.0.0.1:0", "http.tls.rotation_grace: 10s is outside"},
		{"http: {tls: {enabled: true, addr: nothost}}\n", "nothost", "http.tls.addr: \"nothost\" is not host:port"},
	} {
		cfg := load(t, c.yaml)
		if got := cfg.DeviceTLSListener(); got != c.addr {
			t.Errorf("%q: device TLS at %q, want %q", c.yaml, got, c.addr)
		}
		err := cfg.Validate()
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%q: %v, want %q", c.yaml, err, c.err)
		}
	}
}
