// Package freeport hands tests TCP ports that nothing listens on, for
// servers and etcd members that must bind the port themselves.
//
// A port is found by listening on port 0 and closing the listener, and the
// kernel may return the same port to the next such listen. So every port
// handed out is remembered for the life of the process and never handed out
// again: two calls in a row (an etcd member's peer and client URLs) always
// differ.
package freeport

import (
	"fmt"
	"net"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	given = map[string]bool{} // port numbers handed out by this process
)

// Addr returns "127.0.0.1:port" with a port free now.
func Addr(t testing.TB) string {
	t.Helper()
	return On(t, "127.0.0.1")
}

// URL returns scheme://127.0.0.1:port with a port free now.
func URL(t testing.TB, scheme string) string {
	t.Helper()
	return scheme + "://" + Addr(t)
}

// On returns host:port with a port free on host now ("0.0.0.0" for every
// address of the network namespace the caller runs in).
func On(t testing.TB, host string) string {
	t.Helper()
	addr, err := Take(host)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// Take is On for callers without a testing.TB.
func Take(host string) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	// A port handed out before is held open while the next listen runs, so
	// the kernel gives a different one.
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for range 64 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return "", fmt.Errorf("free port on %s: %w", host, err)
		}
		held = append(held, l)
		addr := l.Addr().String()
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return "", err
		}
		if !given[port] {
			given[port] = true
			return addr, nil
		}
	}
	return "", fmt.Errorf("free port on %s: 64 listens returned only ports handed out before", host)
}
