package httpserve

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// value reads a counter or gauge.
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

// serve runs a Listener on a loopback port and returns its address.
func serve(t *testing.T, name string, h http.Handler, lim Limits, grace time.Duration) (string, context.CancelFunc, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Listener{Name: name, Ln: ln, Handler: h, Limits: lim, Log: slog.New(slog.DiscardHandler), Grace: grace, Metrics: testMetrics}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	stopped := make(chan struct{})
	go func() { done <- l.Run(ctx); close(stopped) }()
	t.Cleanup(func() { cancel(); <-stopped })
	return ln.Addr().String(), cancel, done
}

// testRegistry holds the metrics of the listeners the tests serve.
var (
	testRegistry = prometheus.NewRegistry()
	testMetrics  = NewMetrics(testRegistry)
)

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })

// closedWithin waits until the server closes c (read returns EOF or an
// error) and reports how long that took; it fails after limit.
func closedWithin(t *testing.T, c net.Conn, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	c.SetReadDeadline(start.Add(limit))
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection still open after %s", limit)
			}
			return time.Since(start)
		}
	}
}

func TestIdleConnectionClosed(t *testing.T) {
	addr, _, _ := serve(t, "t-idle", okHandler, Limits{IdleTimeout: 500 * time.Millisecond}, time.Second)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	if d := closedWithin(t, c, 3*time.Second); d < 400*time.Millisecond {
		t.Fatalf("closed after %s, before the idle timeout", d)
	}
}

func TestSlowlorisCutOffAtHeaderTimeout(t *testing.T) {
	addr, _, _ := serve(t, "t-slow", okHandler, Limits{ReadHeaderTimeout: time.Second}, time.Second)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	req := "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 200)
	go func() {
		for i := 0; i < len(req); i++ {
			if _, err := c.Write([]byte{req[i]}); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	closedWithin(t, c, 4*time.Second)
	if d := time.Since(start); d < 900*time.Millisecond || d > 2500*time.Millisecond {
		t.Fatalf("slowloris cut off after %s, want about the 1s header timeout", d)
	}
}

func TestConnectionLimitHoldsAndCounts(t *testing.T) {
	addr, _, _ := serve(t, "t-limit", okHandler, Limits{MaxConns: 2, MaxConnsPerSource: 3, IdleTimeout: time.Minute}, time.Second)
	held := testMetrics.connsHeld.WithLabelValues("t-limit")
	before := value(held)
	get := func(c net.Conn) error {
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	var open []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := get(c); err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
	}
	third, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	answered := make(chan error, 1)
	go func() { answered <- get(third) }()
	select {
	case err := <-answered:
		t.Fatalf("third connection answered at max_conns=2 (err %v)", err)
	case <-time.After(700 * time.Millisecond):
	}
	if got := value(held) - before; got != 1 {
		t.Fatalf("held counter rose by %v, want 1", got)
	}
	if got := value(testMetrics.connsOpen.WithLabelValues("t-limit")); got != 2 {
		t.Fatalf("open gauge %v, want 2", got)
	}
	open[0].Close()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("third connection not answered after a slot freed")
	}
}

// fileHandler serves path with http.ServeContent (the sendfile path).
func fileHandler(path string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(path)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		defer f.Close()
		http.ServeContent(w, r, "", time.Time{}, f)
	})
}

func bigFile(t *testing.T, size int) (string, [32]byte) {
	t.Helper()
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i*7 + i>>13)
	}
	p := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, sha256.Sum256(b)
}

// A download slower than the write timeout in total completes: the
// deadline moves with each piece sent.
func TestSlowDownloadOutlivesWriteTimeout(t *testing.T) {
	path, sum := bigFile(t, 8<<20)
	addr, _, _ := serve(t, "t-slowdl", fileHandler(path), Limits{WriteTimeout: 700 * time.Millisecond}, time.Second)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(64 << 10)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	start := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	buf := make([]byte, 32<<10)
	for { // about 3 MiB/s: 2.7 s for 8 MiB, four write timeouts
		n, err := resp.Body.Read(buf)
		h.Write(buf[:n])
		if err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("after %s: %v", time.Since(start), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d := time.Since(start); d < 1400*time.Millisecond {
		t.Fatalf("download took %s, not longer than two write timeouts: the test proves nothing", d)
	}
	if [32]byte(h.Sum(nil)) != sum {
		t.Fatal("content differs")
	}
}

func TestStalledReaderCutOff(t *testing.T) {
	path, _ := bigFile(t, 32<<20)
	addr, _, _ := serve(t, "t-stall", fileHandler(path), Limits{WriteTimeout: time.Second}, time.Second)
	timeouts := testMetrics.writeTimeouts.WithLabelValues("t-stall")
	before := value(timeouts)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(64 << 10)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	start := time.Now()
	for value(timeouts) == before {
		if time.Since(start) > 5*time.Second {
			t.Fatal("a client that stopped reading still connected after 5s (write timeout 1s)")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d := time.Since(start); d < 800*time.Millisecond || d > 2500*time.Millisecond {
		t.Fatalf("stalled reader cut off after %s, want about the 1s write timeout", d)
	}
	// The timeout is counted as the write fails; the connection's close,
	// which lowers the gauge, follows on the server's goroutine.
	for deadline := time.Now().Add(time.Second); value(testMetrics.connsOpen.WithLabelValues("t-stall")) != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("open gauge %v a second after the cut, want 0", value(testMetrics.connsOpen.WithLabelValues("t-stall")))
		}
	}
}

func TestGuardBodyCap(t *testing.T) {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("handler read: %v", err)
		}
		w.Write(b)
	})
	g := Guard{Listener: "t", MaxBody: 1024, Log: slog.New(slog.DiscardHandler)}.Wrap(echo)
	addr, _, _ := serve(t, "t-guard", g, Limits{}, time.Second)
	for _, chunked := range []bool{false, true} {
		var body io.Reader = strings.NewReader(strings.Repeat("x", 2000))
		if chunked {
			body = io.MultiReader(body) // unknown length: sent chunked
		}
		resp, err := http.Post("http://"+addr+"/join", "application/json", body)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 413 || !strings.Contains(string(raw), `{"error":{"code":"too_large","message":"request body`) {
			t.Fatalf("chunked=%v: %d %s, want 413 with a JSON reason", chunked, resp.StatusCode, raw)
		}
	}
	resp, err := http.Post("http://"+addr+"/join", "application/json", strings.NewReader("small"))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(raw) != "small" {
		t.Fatalf("small body: %d %q", resp.StatusCode, raw)
	}
}

func TestGuardHidesServerErrorDetail(t *testing.T) {
	cases := []struct{ reason, want string }{
		{"image x.bin: content missing: open /var/lib/ztpd/images/ab/cd: no such file or directory", "request id"},
		{`profile "p" wants SONiC image "s.bin", which is not in the image store (ztpd image add)`, "not in the image store (ztpd image add)"},
	}
	for _, c := range cases {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "999")
			w.WriteHeader(503)
			w.Write(ErrorBodyOf(503, c.reason))
		})
		g := Guard{Listener: "t", HideErrors: true, Log: slog.New(slog.DiscardHandler)}.Wrap(h)
		addr, _, _ := serve(t, "t-hide", g, Limits{}, time.Second)
		resp, err := http.Get("http://" + addr + "/images/x.bin")
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 503 || strings.Contains(string(raw), "/var/") || !strings.Contains(string(raw), c.want) ||
			!strings.Contains(string(raw), resp.Header.Get("X-Request-Id")) {
			t.Fatalf("%d %s", resp.StatusCode, raw)
		}
		// The one error shape: {"error":{"code","message","request_id"}}.
		var doc ErrorBody
		if err := json.Unmarshal(raw, &doc); err != nil || doc.Error.Code != "unavailable" ||
			!strings.Contains(doc.Error.Message, c.want) || doc.Error.RequestID != resp.Header.Get("X-Request-Id") {
			t.Fatalf("hidden body %s: %+v %v", raw, doc, err)
		}
	}
}

// TestGuardPassesAMarkedPublicBody: a handler that wrote its 5xx body for
// the client (MarkPublic: /healthz without a store) gets it through as
// written, and the marker never reaches the client.
func TestGuardPassesAMarkedPublicBody(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		MarkPublic(w)
		WriteJSON(w, 503, map[string]any{"status": "unhealthy", "group": map[string]int{"buckets": 0}})
	})
	g := Guard{Listener: "t", HideErrors: true, Log: slog.New(slog.DiscardHandler)}.Wrap(h)
	addr, _, _ := serve(t, "t-public", g, Limits{}, time.Second)
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(raw), `"group":{"buckets":0}`) || resp.Header.Get(publicBodyHeader) != "" {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, raw)
	}
}

func TestShutdownGrace(t *testing.T) {
	started := make(chan struct{}, 1)
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		time.Sleep(600 * time.Millisecond)
		io.WriteString(w, "done")
	})
	for _, grace := range []time.Duration{2 * time.Second, 100 * time.Millisecond} {
		addr, cancel, done := serve(t, "t-grace", slow, Limits{}, grace)
		got := make(chan error, 1)
		go func() {
			resp, err := http.Get("http://" + addr + "/")
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			got <- err
		}()
		<-started
		start := time.Now()
		cancel()
		<-done
		stopped := time.Since(start)
		err := <-got
		if grace > time.Second && (err != nil || stopped < 400*time.Millisecond) {
			t.Fatalf("grace %s: request err %v, stopped after %s; want it finished", grace, err, stopped)
		}
		if grace < time.Second && (err == nil || stopped > 400*time.Millisecond) {
			t.Fatalf("grace %s: request err %v, stopped after %s; want it cut at the grace", grace, err, stopped)
		}
	}
}
