package hosturl

import (
	"net/netip"
	"testing"
)

func TestBase(t *testing.T) {
	for _, c := range []struct{ scheme, host, port, want string }{
		{"http", "10.99.0.1", "80", "http://10.99.0.1"},
		{"http", "10.99.0.1", "8080", "http://10.99.0.1:8080"},
		{"http", "fd99::1", "80", "http://[fd99::1]"},
		{"http", "fd99::1", "8080", "http://[fd99::1]:8080"},
		{"https", "fd99::1", "443", "https://[fd99::1]"},
		{"https", "fd99::1", "8443", "https://[fd99::1]:8443"},
		{"http", "fe80::1%eth0", "80", "http://[fe80::1]"},
		{"http", "::ffff:10.0.0.1", "8080", "http://10.0.0.1:8080"},
		{"https", "ztpd.example", "", "https://ztpd.example"},
	} {
		if got := Base(c.scheme, c.host, c.port); got != c.want {
			t.Errorf("Base(%q, %q, %q) = %q, want %q", c.scheme, c.host, c.port, got, c.want)
		}
	}
	if got := HostPort("fe80::1%eth0", "2380"); got != "[fe80::1]:2380" {
		t.Errorf("HostPort: %q", got)
	}
	if !Is6(netip.MustParseAddr("fd99::1")) || Is6(netip.MustParseAddr("::ffff:10.0.0.1")) || Is6(netip.Addr{}) {
		t.Error("Is6")
	}
}
