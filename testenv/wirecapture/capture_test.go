package wirecapture

import (
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/testenv/netns"
)

// TestCaptureLive: tcpdump in a namespace records an HTTP exchange whose
// response is gzip-compressed and chunked; after Stop the file holds all
// of it and the scan finds the key inside.
func TestCaptureLive(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	p := netns.ForTest(t, "zwc", "10.77.0.1/24", "10.77.0.2/24")
	var ln net.Listener
	if err := p.A.Do(func() (err error) { ln, err = net.Listen("tcp", "10.77.0.1:8080"); return err }); err != nil {
		t.Fatal(err)
	}
	key := testKeyPEM(t)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		io.WriteString(zw, `{"key":"`+strings.ReplaceAll(key, "\n", `\n`)+`"}`)
		zw.Close()
	})}
	go srv.Serve(ln)
	defer srv.Close()

	path := filepath.Join(t.TempDir(), "wire.pcap")
	c, err := Start(p.A, p.AIf, path)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableCompression: true,
		DialContext: func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
			err = p.B.Do(func() error {
				var d net.Dialer
				conn, err = d.DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		}}}
	resp, err := client.Post("http://10.77.0.1:8080/join", "application/json", strings.NewReader(`{"csr":"none"}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	st, err := c.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if st.Captured == 0 || st.Dropped != 0 {
		t.Errorf("tcpdump: %+v", st)
	}
	if st2, err := c.Stop(); err != nil || st2 != st {
		t.Errorf("second Stop: %+v %v", st2, err)
	}
	r, err := ScanFile(path, NewScanner(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tcpdump %+v\n%s", st, r.Table())
	if len(r.Findings) != 1 || r.Findings[0].Kind != PEMPrivateKey ||
		r.Findings[0].Where != "HTTP response to POST /join body (Content-Encoding: gzip)" {
		t.Fatalf("findings: %v", r.Findings)
	}
}
