package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/testenv/e2etest"
	"github.com/ztpd/ztpd/testenv/netns"
)

// TestListenersOffLoopback runs the real ztpd on a lab address (not
// loopback) with short HTTP limits and checks, with curl and raw sockets
// from another namespace, every protection of its listeners.
func TestListenersOffLoopback(t *testing.T) {
	e2etest.RequireRoot(t, "curl", "sha256sum", "bash")
	lab := e2etest.NewLabPrefix(t, "zt-http", "l", 70, nil, nil)
	const bigSize = 512 << 20
	var bigSHA string
	var goneBlob string
	lab.Seed(func(db *boltstore.Store, ims *imagestore.Store) {
		ctx := context.Background()
		im, _, err := ims.Add(ctx, io.LimitReader(randReader{rand.NewChaCha8([32]byte{7})}, bigSize),
			imagestore.Meta{Name: "big.bin", Kind: "file"}, "")
		if err != nil {
			t.Fatal(err)
		}
		bigSHA = im.SHA256
		gone, _, err := ims.Add(ctx, strings.NewReader("content that will go missing\n"), imagestore.Meta{Name: "gone.bin", Kind: "file"}, "")
		if err != nil {
			t.Fatal(err)
		}
		goneBlob = ims.BlobPath(gone.SHA256)
	})
	if err := os.Remove(goneBlob); err != nil {
		t.Fatal(err)
	}
	srv := lab.SrvIP
	cfg := fmt.Sprintf(`advertise_addr: %[1]s
http:
  addr: %[1]s:8080
  metadata_addr: %[1]s:80
  idle_timeout: 1s
  read_header_timeout: 2s
  write_timeout: 2s
  max_conns: 4
  max_conns_per_source: 8   # the client namespace is one address: let it reach max_conns
`, srv)
	lab.Start(cfg)
	cfgPath := filepath.Join(lab.Dir, "ztpd.yaml")
	main, meta, apiAddr := srv+":8080", srv+":80", srv+":8443"
	certPath := filepath.Join(lab.DataDir, "api-tls", "cert.pem")
	waitFor(t, "API TLS listener", func() bool {
		out, err := lab.Run("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", certPath, "https://"+apiAddr+"/api/v1/devices")
		return err == nil && out == "401"
	})
	cli := &netns.NS{Name: lab.Cli}
	dial := func(addr string, useTLS bool) net.Conn {
		t.Helper()
		var c net.Conn
		err := cli.Do(func() error {
			var err error
			c, err = net.DialTimeout("tcp", addr, 3*time.Second)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if useTLS {
			pem, err := os.ReadFile(certPath)
			if err != nil {
				t.Fatal(err)
			}
			roots := x509.NewCertPool()
			roots.AppendCertsFromPEM(pem)
			tc := tls.Client(c, &tls.Config{RootCAs: roots, ServerName: srv})
			if err := tc.Handshake(); err != nil {
				t.Fatal(err)
			}
			c = tc
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	metric := func(name, listener string) float64 {
		t.Helper()
		out, err := lab.Run("curl", "-sf", "-m", "5", "http://"+main+"/metrics")
		if err != nil {
			t.Fatalf("metrics: %v %s", err, out)
		}
		m := regexp.MustCompile(`(?m)^` + name + `\{listener="` + listener + `"\} (\S+)$`).FindStringSubmatch(out)
		if m == nil {
			return 0
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}

	t.Run("API is TLS on :8443, not plain HTTP on http.addr", func(t *testing.T) {
		for _, p := range []string{"/api/v1/devices", "/client/api?command=listZones"} {
			out, _ := lab.Run("curl", "-s", "-w", "\n%{http_code}", "http://"+main+p)
			if !strings.HasSuffix(out, "\n404") || !strings.Contains(out, "https://"+apiAddr) {
				t.Fatalf("plain %s on http.addr: %q, want 404 naming https://%s", p, out, apiAddr)
			}
		}
		key := ztpdCLI(t, lab, cfgPath, "apikey", "create", "--role", "admin", "--name", "e2e", "-o", "json")
		var k struct {
			APIKey    string `json:"api_key"`
			SecretKey string `json:"secret_key"`
		}
		if err := json.Unmarshal([]byte(key), &k); err != nil || k.APIKey == "" {
			t.Fatalf("apikey create: %v %q", err, key)
		}
		// The CLI finds https://<http host>:8443 from the config and trusts
		// the pinned self-signed certificate of the data directory.
		out := ztpdCLI(t, lab, cfgPath, "device", "list", "--api-key", k.APIKey, "--secret-key", k.SecretKey, "-o", "json")
		if !strings.HasPrefix(strings.TrimSpace(out), "[") {
			t.Fatalf("device list over TLS: %q", out)
		}
	})

	t.Run("idle connection closed on every listener", func(t *testing.T) {
		for _, l := range []struct {
			name, addr, path string
			tls              bool
		}{{"http", main, "/healthz", false}, {"metadata", meta, "/latest/meta-data/", false}, {"api", apiAddr, "/api/v1/devices", true}} {
			c := dial(l.addr, l.tls)
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", l.path, l.addr)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("%s: %v", l.name, err)
			}
			io.Copy(io.Discard, resp.Body)
			if d := closedAfter(t, c, 5*time.Second); d < 700*time.Millisecond || d > 2500*time.Millisecond {
				t.Fatalf("%s: idle connection closed after %s, want about the 1s idle timeout", l.name, d)
			}
		}
	})

	t.Run("slowloris cut off at the header timeout", func(t *testing.T) {
		c := dial(main, false)
		start := time.Now()
		go func() {
			req := "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 100)
			for i := range len(req) {
				if _, err := c.Write([]byte{req[i]}); err != nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
		closedAfter(t, c, 6*time.Second)
		if d := time.Since(start); d < 1800*time.Millisecond || d > 3500*time.Millisecond {
			t.Fatalf("slowloris cut off after %s, want about the 2s header timeout", d)
		}
	})

	t.Run("connection limit holds the fifth connection and counts it", func(t *testing.T) {
		time.Sleep(1500 * time.Millisecond) // earlier connections idle out
		before := metric("ztpd_http_connections_held_total", "http")
		for range 4 { // each holds a slot until the 2s header timeout
			c := dial(main, false)
			io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n")
		}
		time.Sleep(300 * time.Millisecond)
		out, err := lab.Run("curl", "-s", "-m", "10", "-o", "/dev/null", "-w", "%{http_code} %{time_total}", "http://"+main+"/healthz")
		var code int
		var secs float64
		fmt.Sscanf(out, "%d %g", &code, &secs)
		if err != nil || code != 200 || secs < 1.2 {
			t.Fatalf("fifth connection at max_conns=4: %q (%v); want 200 only after a slot freed (~1.7s)", out, err)
		}
		if got := metric("ztpd_http_connections_held_total", "http") - before; got < 1 {
			t.Fatalf("ztpd_http_connections_held_total rose by %v, want >= 1", got)
		}
	})

	t.Run("oversized bodies get 413", func(t *testing.T) {
		big := filepath.Join(lab.Dir, "body-2m.json")
		os.WriteFile(big, []byte(`{"x":"`+strings.Repeat("a", 2<<20)+`"}`), 0o644)
		for _, c := range []struct{ url, extra string }{
			{"http://" + main + "/join", ""},
			{"https://" + apiAddr + "/api/v1/clusters", certPath},
			{"https://" + apiAddr + "/client/api", certPath},
		} {
			args := []string{"-s", "-w", "\n%{http_code}", "-X", "POST", "-H", "Content-Type: application/json", "--data-binary", "@" + big}
			if c.extra != "" {
				args = append(args, "--cacert", c.extra)
			}
			out, _ := lab.Run("curl", append(args, c.url)...)
			if !strings.HasSuffix(out, "\n413") || !strings.Contains(out, `"error"`) {
				t.Fatalf("POST 2 MiB to %s: %.300q, want 413 with a JSON reason", c.url, out)
			}
		}
	})

	t.Run("missing image content: 503 without a server path", func(t *testing.T) {
		out, _ := lab.Run("curl", "-s", "-w", "\n%{http_code}", "http://"+main+"/images/gone.bin")
		i := strings.LastIndexByte(out, '\n')
		body, code := out[:max(i, 0)], out[i+1:]
		if code != "503" || strings.Contains(body, "/") || strings.Contains(body, "no such file") {
			t.Fatalf("image with missing content: %q %q, want 503 with no path", code, body)
		}
		var doc struct {
			Error struct {
				RequestID string `json:"request_id"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &doc); err != nil || doc.Error.RequestID == "" {
			t.Fatalf("503 body %q has no request id", body)
		}
		waitFor(t, "the detail in the log", func() bool {
			for _, line := range strings.Split(lab.Log(), "\n") {
				if strings.Contains(line, doc.Error.RequestID) && strings.Contains(line, goneBlob) {
					return true
				}
			}
			return false
		})
	})

	t.Run("slow 512 MiB download completes with a 2s write timeout", func(t *testing.T) {
		start := time.Now()
		out, err := lab.Run("bash", "-c", "set -o pipefail; curl -sf --limit-rate 48M http://"+main+"/images/big.bin | sha256sum >"+
			filepath.Join(lab.Dir, "big.sha"))
		if err != nil {
			t.Fatalf("download: %v %s\n%s", err, out, tailLog(lab))
		}
		if d := time.Since(start); d < 5*time.Second {
			t.Fatalf("download took %s, not much longer than the 2s write timeout: the test proves nothing", d)
		}
		sum, _ := os.ReadFile(filepath.Join(lab.Dir, "big.sha"))
		if got, _, _ := strings.Cut(string(sum), " "); got != bigSHA {
			t.Fatalf("sha256 %q, want %s", got, bigSHA)
		}
	})

	t.Run("a client that stops reading is cut off within the write timeout", func(t *testing.T) {
		before := metric("ztpd_http_write_timeouts_total", "http")
		c := dial(main, false)
		c.(*net.TCPConn).SetReadBuffer(64 << 10)
		start := time.Now()
		io.WriteString(c, "GET /images/big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
		for metric("ztpd_http_write_timeouts_total", "http") == before {
			if time.Since(start) > 8*time.Second {
				t.Fatal("stalled client still connected after 8s (write timeout 2s)")
			}
			time.Sleep(100 * time.Millisecond)
		}
		if d := time.Since(start); d < 1500*time.Millisecond || d > 4500*time.Millisecond {
			t.Fatalf("stalled client cut off after %s, want about the 2s write timeout", d)
		}
	})
}

// ztpdCLI runs the ztpd binary in the lab's server namespace (where the
// API address is local) and returns its stdout.
func ztpdCLI(t *testing.T, lab *e2etest.Lab, cfg string, args ...string) string {
	t.Helper()
	full := append([]string{"netns", "exec", lab.Srv, e2etest.Ztpd(t), "--config", cfg, "--data-dir", lab.DataDir}, args...)
	cmd := exec.Command("ip", full...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ztpd %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// closedAfter waits until the server closes c and says how long it took.
func closedAfter(t *testing.T, c net.Conn, limit time.Duration) time.Duration {
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

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !ok(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 15s", what)
		}
	}
}

func tailLog(lab *e2etest.Lab) string {
	l := lab.Log()
	return l[max(0, len(l)-3000):]
}

// randReader fills with a seeded ChaCha8 stream: incompressible content
// without reading /dev/urandom.
type randReader struct{ c *rand.ChaCha8 }

func (r randReader) Read(p []byte) (int, error) { return r.c.Read(p) }
