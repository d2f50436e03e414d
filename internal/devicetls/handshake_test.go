package devicetls

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ztpd/ztpd/internal/store/storetest"
)

// What a switch's connection to the device listener costs the appliance:
// the server side of one connection, measured as the CPU time of the one
// OS thread that serves it (accept, handshake, the request read, the answer
// written, close), so the client's own work is not counted. The listener's
// configuration is the one ztpd serves (TLSConfig, HTTP/1.1 only) with the
// P-256 pair it generates.
//
//	go test ./internal/devicetls -run '^$' -bench Handshake -benchtime 200x
//
// curl-https is what a SONiC switch does: a new curl process per request
// (the join plugin's and the report's --pinnedpubkey), so a full handshake
// each time with the groups and key share its OpenSSL sends; curl-http is
// the same request in clear, so the difference is TLS. go-x25519 is Go's
// client offering what that OpenSSL offers (X25519 first, resumption it
// never uses), many times faster to run; go-http the same in clear.
func BenchmarkHandshake(b *testing.B) {
	s, err := New(Options{Store: storetest.Store(b), Keys: keyring(b), Grace: time.Hour, Names: []string{"127.0.0.1"}})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Load(); err != nil {
		b.Fatal(err)
	}
	listener := s.TLSConfig()
	listener.NextProtos = []string{"http/1.1"} // as httpserve.Listener serves it
	pin := s.PinList()
	goClient := func(url string) error {
		tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true,
			CurvePreferences:   []tls.CurveID{tls.X25519, tls.CurveP256, tls.CurveP384, tls.CurveP521},
			ClientSessionCache: forgetfulSessionCache{}}}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Post(url, "application/json", nil)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	curl := func(url string) error {
		args := []string{"-sS", "-o", "/dev/null", "--max-time", "10", "-X", "POST", "--data-binary", "{}"}
		if url[:5] == "https" {
			args = append(args, "-k", "--pinnedpubkey", pin)
		}
		return exec.Command("curl", append(args, url)...).Run()
	}
	for _, c := range []struct {
		name   string
		tls    *tls.Config
		client func(string) error
		needs  string
	}{
		{"go-x25519", listener, goClient, ""},
		{"go-http", nil, goClient, ""},
		{"curl-https", listener, curl, "curl"},
		{"curl-http", nil, curl, "curl"},
	} {
		b.Run(c.name, func(b *testing.B) {
			if c.needs != "" {
				if _, err := exec.LookPath(c.needs); err != nil {
					b.Skipf("%s is not installed: it is the client switches run", c.needs)
				}
			}
			serverCPU := serveThreadTimed(b, c.tls, func(url string) error { return c.client(url) })
			b.ReportMetric(float64(serverCPU.Microseconds())/float64(b.N), "server-µs/conn")
		})
	}
}

// serveThreadTimed runs client b.N times against a listener on loopback
// whose connections are served one at a time by a goroutine locked to its
// own OS thread, and returns that thread's CPU time: the server's work.
func serveThreadTimed(b *testing.B, cfg *tls.Config, client func(url string) error) time.Duration {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	url := "http://" + ln.Addr().String() + "/join"
	if cfg != nil {
		url = "https://" + ln.Addr().String() + "/join"
	}
	served := make(chan time.Duration, 1)
	errs := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var total time.Duration
		for i := 0; i < b.N; i++ {
			t0 := threadCPU()
			if err := serveOne(ln, cfg); err != nil {
				errs <- err
				return
			}
			total += threadCPU() - t0
		}
		served <- total
	}()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := client(url); err != nil {
			b.Fatalf("client: %v", err)
		}
	}
	b.StopTimer()
	select {
	case d := <-served:
		return d
	case err := <-errs:
		b.Fatal(err)
	}
	return 0
}

// serveOne accepts one connection and answers its one request as an
// HTTP/1.1 server does, then closes it.
func serveOne(ln net.Listener, cfg *tls.Config) error {
	conn, err := ln.Accept()
	if err != nil {
		return err
	}
	defer conn.Close()
	if cfg != nil {
		tc := tls.Server(conn, cfg)
		if err := tc.Handshake(); err != nil {
			return err
		}
		conn = tc
	}
	req, err := http.ReadRequest(bufio.NewReader(conn))
	if err != nil {
		return err
	}
	io.Copy(io.Discard, req.Body)
	// A SONiC join answer's size, written as net/http writes it: the
	// first 4 KB from its buffer with the header, then the rest at once.
	answer := append([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(joinAnswer))+
		"\r\nConnection: close\r\n\r\n"), joinAnswer...)
	if _, err = conn.Write(answer[:4096]); err == nil {
		_, err = conn.Write(answer[4096:])
	}
	if tc, ok := conn.(*tls.Conn); ok && err == nil {
		err = tc.CloseWrite() // close_notify, as net/http's server sends it
	}
	return err
}

// forgetfulSessionCache makes Go's client offer resumption in its
// ClientHello, as curl's OpenSSL does, while never holding a session, as
// curl in a new process does not.
type forgetfulSessionCache struct{}

func (forgetfulSessionCache) Get(string) (*tls.ClientSessionState, bool) { return nil, false }
func (forgetfulSessionCache) Put(string, *tls.ClientSessionState)        {}

// joinAnswer stands for a SONiC join answer: 19 KB of JSON.
var joinAnswer = []byte(`{"files":"` + strings.Repeat("x", 19*1024-12) + `"}`)

// threadCPU is the CPU time the calling OS thread has used.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
