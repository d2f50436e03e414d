package freeport

import (
	"net"
	"testing"
)

// TestNeverTheSamePortTwice: many calls in a row, each port closed before
// the next call (as the kernel is free to reuse it), return distinct ports,
// and each can be bound by the caller.
func TestNeverTheSamePortTwice(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		addr := Addr(t)
		if seen[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		seen[addr] = true
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("bind %s: %v", addr, err)
		}
		l.Close()
	}
}

// TestForms: URL names the loopback host, On the host asked for (for
// 0.0.0.0 the listener reports the unspecified address, [::]).
func TestForms(t *testing.T) {
	u := URL(t, "https")
	if host, _, err := net.SplitHostPort(u[len("https://"):]); err != nil || u[:len("https://")] != "https://" || host != "127.0.0.1" {
		t.Fatalf("URL = %q", u)
	}
	a := On(t, "0.0.0.0")
	if host, _, err := net.SplitHostPort(a); err != nil || !net.ParseIP(host).IsUnspecified() {
		t.Fatalf("On(0.0.0.0) = %q", a)
	}
	if _, err := Take("192.0.2.1"); err == nil {
		t.Fatal("Take on an address this host does not have: no error")
	}
}
