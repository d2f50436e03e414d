package httpserve

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// gathered is the value of a sample of name with label listener=l in the
// tests' registry (0 when absent).
func gathered(t *testing.T, name, l string) float64 {
	t.Helper()
	mfs, err := testRegistry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "listener" && lp.GetValue() == l {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// One host opening as many connections as the listener serves, and
// sending nothing on them, must not delay another host's request: the
// connections past its per-source share are closed at accept.
func TestOneSourceCannotHoldTheListener(t *testing.T) {
	const maxConns = 8
	addr, _, _ := serve(t, "t-source", okHandler, Limits{MaxConns: maxConns, IdleTimeout: time.Minute}, time.Second)
	before := gathered(t, "ztpd_http_connections_refused_total", "t-source")
	from := func(ip string) *net.Dialer {
		return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: time.Second}
	}
	var hog []net.Conn
	for range maxConns {
		c, err := from("127.0.0.1").Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		hog = append(hog, c)
	}
	// The other host's request is answered at once, not after the hog's
	// header timeout frees a slot.
	start := time.Now()
	c, err := from("127.0.0.2").Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("other host not answered while one host holds %d connections: %v", maxConns, err)
	}
	resp.Body.Close()
	if d := time.Since(start); d > time.Second {
		t.Fatalf("other host answered after %s while one host held %d connections", d, maxConns)
	}
	// Half of the hog's connections were closed at accept.
	closed := 0
	for _, h := range hog {
		h.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := h.Read(make([]byte, 1)); err != nil {
			if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
				closed++
			}
		}
	}
	if closed != maxConns/2 {
		t.Fatalf("%d of the host's %d connections closed, want %d (max_conns/2)", closed, maxConns, maxConns/2)
	}
	if got := gathered(t, "ztpd_http_connections_refused_total", "t-source") - before; got != maxConns/2 {
		t.Fatalf("ztpd_http_connections_refused_total rose by %v, want %d", got, maxConns/2)
	}
}

// The peer listener's shape (mutual TLS): a client that connects and never
// completes a handshake holds its slot for the header timeout at most, and
// one address's connections past its share are closed at accept, before any
// handshake work.
func TestTLSListenerBoundsHandshakesWithoutProgress(t *testing.T) {
	certPath, keyPath, _, err := SelfSignedCert(t.TempDir(), "peer", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Listener{Name: "t-peer", Ln: ln, Handler: okHandler, Log: slog.New(slog.DiscardHandler), Grace: time.Second, Metrics: testMetrics,
		TLS:    &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAnyClientCert},
		Limits: Limits{MaxConns: 8, ReadHeaderTimeout: time.Second}}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { l.Run(ctx); close(stopped) }()
	defer func() { cancel(); <-stopped }()
	addr := ln.Addr().String()

	var conns []net.Conn
	for range 8 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	start := time.Now()
	closedAt := make([]time.Duration, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(start.Add(4 * time.Second))
			c.Read(make([]byte, 1))
			closedAt[i] = time.Since(start)
		}()
	}
	wg.Wait()
	for i, d := range closedAt {
		switch {
		case i >= 4 && d > 500*time.Millisecond:
			t.Errorf("connection %d, past max_conns/2 from one address, closed after %s, want at accept", i, d)
		case i < 4 && (d < 800*time.Millisecond || d > 2500*time.Millisecond):
			t.Errorf("connection %d, a handshake without progress, closed after %s, want about the 1s header timeout", i, d)
		}
	}
}
