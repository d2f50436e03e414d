package tftp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// These tests run the engine in-process on loopback (127.0.0.0/8), with a
// raw UDP client written here, so each TFTP rule can be checked datagram by
// datagram. The namespace tests (lab_test.go) run the ztpd binary against
// the real clients.

type testServer struct {
	e    *engine
	addr netip.AddrPort
}

func startEngine(t *testing.T, cfg engineConfig, files map[string][]byte) *testServer {
	t.Helper()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	open := func(ctx context.Context, tr *transfer) (*payload, error) {
		if tr.Name() == "slow" {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		b, ok := files[tr.Name()]
		if !ok {
			return nil, &refusal{code: errNotFound, msg: "no such file", reason: "404"}
		}
		return &payload{data: b, size: int64(len(b))}, nil
	}
	e := newEngine(cfg, open, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	addr := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	go func() { done <- e.serve(ctx, conn, 2*time.Second) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return &testServer{e: e, addr: addr}
}

func (s *testServer) active() int {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	return len(s.e.active)
}

// waitIdle waits until no transfer runs, up to d.
func (s *testServer) waitIdle(t *testing.T, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for s.active() > 0 {
		if time.Since(start) > d {
			t.Fatalf("%d transfers still running after %v", s.active(), d)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

type client struct {
	t    *testing.T
	conn *net.UDPConn
	buf  []byte
}

func newClient(t *testing.T, ip string) *client {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, conn: c, buf: make([]byte, 70000)}
}

func (c *client) send(to netip.AddrPort, p []byte) {
	c.t.Helper()
	if _, err := c.conn.WriteToUDPAddrPort(p, to); err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) rrq(to netip.AddrPort, name string, opts ...string) {
	c.send(to, rrq(append([]string{name, "octet"}, opts...)...))
}

func (c *client) ack(to netip.AddrPort, block uint16) {
	c.send(to, []byte{0, opACK, byte(block >> 8), byte(block)})
}

type pkt struct {
	op, block uint16 // block: DATA/ACK block, ERROR code
	data      []byte
	from      netip.AddrPort
	at        time.Time
}

// recv returns the next datagram, or ok false after d.
func (c *client) recv(d time.Duration) (pkt, bool) {
	c.t.Helper()
	buf := c.buf
	c.conn.SetReadDeadline(time.Now().Add(d))
	n, from, err := c.conn.ReadFromUDPAddrPort(buf)
	if err != nil {
		return pkt{}, false
	}
	if n < 4 && !(n >= 2 && binary.BigEndian.Uint16(buf) == opOACK) {
		c.t.Fatalf("runt datagram %x", buf[:n])
	}
	p := pkt{op: binary.BigEndian.Uint16(buf), block: binary.BigEndian.Uint16(buf[2:]), data: bytes.Clone(buf[4:n]), from: from, at: time.Now()}
	if p.op == opOACK {
		p.block, p.data = 0, bytes.Clone(buf[2:n])
	}
	return p, true
}

func (c *client) must(d time.Duration, op uint16) pkt {
	c.t.Helper()
	p, ok := c.recv(d)
	if !ok {
		c.t.Fatalf("nothing within %v, want opcode %d", d, op)
	}
	if p.op != op {
		c.t.Fatalf("opcode %d (%d %q), want %d", p.op, p.block, p.data, op)
	}
	return p
}

// drain discards the datagrams already waiting in the socket.
func (c *client) drain() {
	c.t.Helper()
	for {
		if _, ok := c.recv(20 * time.Millisecond); !ok {
			return
		}
	}
}

// quiet fails if anything arrives within d.
func (c *client) quiet(d time.Duration, why string) {
	c.t.Helper()
	if p, ok := c.recv(d); ok {
		c.t.Fatalf("%s: got opcode %d block %d", why, p.op, p.block)
	}
}

// fetch downloads name as an RFC 1350 / RFC 7440 receiver would and
// returns the data and the DATA datagrams received per block number.
func (c *client) fetch(server netip.AddrPort, name string, opts ...string) ([]byte, map[int]int) {
	c.t.Helper()
	c.rrq(server, name, opts...)
	blksize, window := 512, 1
	var out []byte
	counts := map[int]int{}
	exp := 1 // next block, not wrapped
	inWin := 0
	for {
		p, ok := c.recv(5 * time.Second)
		if !ok {
			c.t.Fatalf("%s: stalled at block %d", name, exp)
		}
		switch p.op {
		case opOACK:
			f := splitZ(p.data)
			for i := 0; i+1 < len(f); i += 2 {
				v, _ := parseDecimal(string(f[i+1]))
				switch string(f[i]) {
				case "blksize":
					blksize = v
				case "windowsize":
					window = v
				}
			}
			server = p.from
			c.ack(server, 0)
		case opDATA:
			server = p.from
			if p.block != uint16(exp) {
				c.ack(server, uint16(exp-1))
				continue
			}
			counts[exp]++
			out = append(out, p.data...)
			exp++
			inWin++
			last := len(p.data) < blksize
			if inWin == window || last {
				inWin = 0
				c.ack(server, uint16(exp-1))
			}
			if last {
				return out, counts
			}
		case opERROR:
			c.t.Fatalf("%s: error %d %q", name, p.block, p.data)
		}
	}
}

func splitZ(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			return append(out, b)
		}
		out = append(out, b[:i])
		b = b[i+1:]
	}
	return out
}

// counterValue reads a counter (the metrics are process-wide: tests
// compare before and after).
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func testCfg() engineConfig {
	return engineConfig{window: 8, timeout: time.Second, retransmits: 5, maxTransfers: 16, maxPerSource: 4,
		blkCap: func(int, bool) int { return 1468 }}
}

func TestEngineLockStepNoSendAhead(t *testing.T) {
	for _, single := range []bool{false, true} {
		cfg := testCfg()
		cfg.singlePort = single
		data := randomBytes(5000)
		s := startEngine(t, cfg, map[string][]byte{"f": data})
		c := newClient(t, "127.0.0.1")

		// No options: block 1 alone, nothing more before its ACK.
		c.rrq(s.addr, "f")
		d1 := c.must(time.Second, opDATA)
		if d1.block != 1 || len(d1.data) != 512 {
			t.Fatalf("first datagram: block %d, %d bytes", d1.block, len(d1.data))
		}
		if single != (d1.from == s.addr) {
			t.Fatalf("single-port %v: answer from %v, listener %v", single, d1.from, s.addr)
		}
		c.quiet(400*time.Millisecond, "sent ahead of ACK 1")
		c.ack(d1.from, 1)
		if d2 := c.must(time.Second, opDATA); d2.block != 2 {
			t.Fatalf("after ACK 1: block %d", d2.block)
		}
		c.quiet(100*time.Millisecond, "sent ahead of ACK 2")
		c.send(d1.from, appendError(nil, 0, "done"))

		// Options without windowsize: the OACK, then lock-step from ACK 0.
		c = newClient(t, "127.0.0.1")
		c.rrq(s.addr, "f", "blksize", "1000", "tsize", "0")
		o := c.must(time.Second, opOACK)
		if got := string(bytes.ReplaceAll(o.data, []byte{0}, []byte{' '})); got != "blksize 1000 tsize 5000 " {
			t.Fatalf("OACK %q", got)
		}
		c.quiet(400*time.Millisecond, "data before ACK 0")
		c.ack(o.from, 0)
		if d := c.must(time.Second, opDATA); d.block != 1 || len(d.data) != 1000 {
			t.Fatalf("after ACK 0: block %d, %d bytes", d.block, len(d.data))
		}
		c.quiet(100*time.Millisecond, "sent ahead of ACK 1")
		c.send(o.from, appendError(nil, 0, "done"))

		got, counts := newClient(t, "127.0.0.1").fetch(s.addr, "f", "blksize", "1468")
		if !bytes.Equal(got, data) {
			t.Fatal("content differs")
		}
		for b, n := range counts {
			if n != 1 {
				t.Errorf("block %d received %d times", b, n)
			}
		}
	}
}

func TestEngineWindowOnlyWhenAsked(t *testing.T) {
	cfg := testCfg()
	data := randomBytes(100 * 1468)
	s := startEngine(t, cfg, map[string][]byte{"f": data})
	c := newClient(t, "127.0.0.1")
	c.rrq(s.addr, "f", "blksize", "1468", "windowsize", "16")
	o := c.must(time.Second, opOACK)
	if got := string(bytes.ReplaceAll(o.data, []byte{0}, []byte{' '})); got != "blksize 1468 windowsize 8 " {
		t.Fatalf("OACK %q: want windowsize min(16, tftp.window 8)", got)
	}
	c.quiet(300*time.Millisecond, "data before ACK 0")
	c.ack(o.from, 0)
	for k := uint16(1); k <= 8; k++ {
		if d := c.must(time.Second, opDATA); d.block != k {
			t.Fatalf("window: block %d, want %d", d.block, k)
		}
	}
	c.quiet(20*time.Millisecond, "beyond the window") // the tail probe comes later
	c.ack(o.from, 8)
	if d := c.must(time.Second, opDATA); d.block != 9 {
		t.Fatalf("after ACK 8: block %d", d.block)
	}
	c.send(o.from, appendError(nil, 0, "done"))

	got, _ := newClient(t, "127.0.0.1").fetch(s.addr, "f", "blksize", "1468", "windowsize", "8")
	if !bytes.Equal(got, data) {
		t.Fatal("content differs")
	}

	// tftp.window 1 never grants a window.
	cfg.window = 1
	s = startEngine(t, cfg, map[string][]byte{"f": data})
	c = newClient(t, "127.0.0.1")
	c.rrq(s.addr, "f", "windowsize", "8")
	if d := c.must(time.Second, opDATA); d.block != 1 {
		t.Fatalf("windowsize with tftp.window 1: block %d, want DATA 1 without OACK", d.block)
	}
}

// A client that never answers (a forged source) gets one datagram per
// retransmit timeout, and the transfer ends: two datagrams in all when its
// address never acknowledged anything (the request may carry a forged
// source), max_retransmits+1 when it did lately.
func TestEngineNeverAckingClient(t *testing.T) {
	for _, single := range []bool{false, true} {
		for _, opts := range [][]string{nil, {"blksize", "1468", "windowsize", "8"}} {
			for _, heardBefore := range []bool{false, true} {
				t.Run(fmt.Sprintf("single=%v/options=%v/heard=%v", single, opts != nil, heardBefore), func(t *testing.T) {
					t.Parallel()
					neverAck(t, single, opts, heardBefore)
				})
			}
		}
	}
}

func neverAck(t *testing.T, single bool, opts []string, heardBefore bool) {
	cfg := testCfg()
	cfg.singlePort = single
	cfg.timeout, cfg.retransmits = 300*time.Millisecond, 3
	s := startEngine(t, cfg, map[string][]byte{"f": randomBytes(1 << 20), "small": randomBytes(1000)})
	failed := counterValue(s.e.cfg.metrics.transfers.WithLabelValues(resultFailed))
	unansweredBefore := counterValue(s.e.cfg.metrics.unanswered)
	c := newClient(t, "127.0.0.1")
	if heardBefore {
		if got, _ := c.fetch(s.addr, "small"); len(got) != 1000 {
			t.Fatalf("first fetch: %d bytes", len(got))
		}
		s.waitIdle(t, time.Second)
		// Under load the first fetch's last ACK can arrive after the
		// engine's timeout, and its retransmitted DATA then waits in the
		// socket; it belongs to the finished transfer, not to this one.
		c.drain()
	}
	start := time.Now()
	c.rrq(s.addr, "f", opts...)
	var got []pkt
	for {
		p, ok := c.recv(800 * time.Millisecond)
		if !ok {
			break
		}
		got = append(got, p)
	}
	want := uint16(opDATA)
	if opts != nil {
		want = opOACK
	}
	sends := 2 // 1 + unheardRetransmits
	if heardBefore {
		sends = 4 // 1 + max_retransmits
	}
	if len(got) != sends {
		t.Fatalf("single %v opts %v heard before %v: %d datagrams, want %d", single, opts, heardBefore, len(got), sends)
	}
	for i, p := range got {
		if p.op != want || p.op == opDATA && p.block != 1 {
			t.Fatalf("datagram %d: opcode %d block %d", i, p.op, p.block)
		}
		if at := p.at.Sub(start); at < time.Duration(i)*300*time.Millisecond-20*time.Millisecond || at > time.Duration(i)*300*time.Millisecond+150*time.Millisecond {
			t.Errorf("datagram %d at %v, want ~%v", i, at, time.Duration(i)*300*time.Millisecond)
		}
	}
	if s.active() != 0 {
		t.Fatalf("transfer still running after %v", time.Since(start))
	}
	if d := counterValue(s.e.cfg.metrics.transfers.WithLabelValues(resultFailed)) - failed; d < 1 {
		t.Errorf("failed transfers +%v", d)
	}
	if !heardBefore {
		if d := counterValue(s.e.cfg.metrics.unanswered) - unansweredBefore; d < 1 {
			t.Errorf("ztpd_tftp_unanswered_total +%v", d)
		}
	}
}

func TestEngineTransferCaps(t *testing.T) {
	for _, single := range []bool{false, true} {
		cfg := testCfg()
		cfg.singlePort = single
		cfg.maxPerSource, cfg.maxTransfers = 2, 3
		cfg.timeout, cfg.retransmits = 200*time.Millisecond, 1
		s := startEngine(t, cfg, map[string][]byte{"f": randomBytes(10000)})
		busySrc := counterValue(s.e.cfg.metrics.refused.WithLabelValues("busy_source"))
		busyAll := counterValue(s.e.cfg.metrics.refused.WithLabelValues("busy_global"))
		start := func(ip string) *client {
			c := newClient(t, ip)
			c.rrq(s.addr, "f")
			return c
		}
		for _, ip := range []string{"127.0.0.1", "127.0.0.1"} {
			start(ip).must(time.Second, opDATA)
		}
		e := start("127.0.0.1").must(time.Second, opERROR)
		if !strings.Contains(string(e.data), "max_transfers_per_source") || e.from != s.addr {
			t.Fatalf("third from one address: %q from %v", e.data, e.from)
		}
		start("127.0.0.2").must(time.Second, opDATA) // another address still gets in
		e = start("127.0.0.3").must(time.Second, opERROR)
		if !strings.Contains(string(e.data), "(tftp.max_transfers)") {
			t.Fatalf("fourth overall: %q", e.data)
		}
		if d := counterValue(s.e.cfg.metrics.refused.WithLabelValues("busy_source")) - busySrc; d != 1 {
			t.Errorf("busy_source +%v", d)
		}
		if d := counterValue(s.e.cfg.metrics.refused.WithLabelValues("busy_global")) - busyAll; d != 1 {
			t.Errorf("busy_global +%v", d)
		}
		// The silent transfers end within (1+1) x 200 ms; then there is room.
		s.waitIdle(t, time.Second)
		start("127.0.0.1").must(time.Second, opDATA)
	}
}

func TestEngineRetransmittedAndNewRequests(t *testing.T) {
	s := startEngine(t, testCfg(), map[string][]byte{"a": randomBytes(3000), "b": []byte("bee")})
	c := newClient(t, "127.0.0.1")
	c.rrq(s.addr, "a")
	c.rrq(s.addr, "a") // the client's own retransmission: one transfer
	d := c.must(time.Second, opDATA)
	c.quiet(300*time.Millisecond, "second transfer for a repeated RRQ")
	if s.active() != 1 {
		t.Fatalf("%d transfers", s.active())
	}
	// A different request from the same port replaces the transfer (a
	// boot ROM's tsize probe followed by the real request).
	c.rrq(s.addr, "b")
	nb := c.must(time.Second, opDATA)
	if string(nb.data) != "bee" || nb.from == d.from {
		t.Fatalf("new request: %q from %v (old transfer %v)", nb.data, nb.from, d.from)
	}
	c.ack(nb.from, 1)
	s.waitIdle(t, time.Second)
}

func TestEngineRefusals(t *testing.T) {
	s := startEngine(t, testCfg(), map[string][]byte{"f": []byte("x")})
	c := newClient(t, "127.0.0.1")
	for _, tc := range []struct {
		req  []byte
		code uint16
		text string
	}{
		{[]byte("\x00\x02up\x00octet\x00"), errAccess, "read-only"},
		{[]byte("\x00\x01\x00octet\x00"), errIllegalOp, "malformed"},
		{rrq("f", "mail"), errIllegalOp, "unsupported transfer mode"},
		{rrq("nothere", "octet"), errNotFound, "no such file"},
	} {
		c.send(s.addr, tc.req)
		e := c.must(time.Second, opERROR)
		if e.block != tc.code || !strings.Contains(string(e.data), tc.text) {
			t.Errorf("%q: error %d %q, want %d %q", tc.req, e.block, e.data, tc.code, tc.text)
		}
	}
	// Stray datagrams get no answer.
	c.ack(s.addr, 7)
	c.quiet(200*time.Millisecond, "answer to a stray ACK")
	s.waitIdle(t, time.Second)
}

func TestEngineNetascii(t *testing.T) {
	text := []byte(strings.Repeat("line\nwith cr\r here\n", 50))
	want := bytes.ReplaceAll(bytes.ReplaceAll(text, []byte("\r"), []byte("\r\x00")), []byte("\n"), []byte("\r\n"))
	s := startEngine(t, testCfg(), map[string][]byte{"t": text})
	for _, opts := range [][]string{nil, {"blksize", "64", "windowsize", "4", "tsize", "0"}} {
		c := newClient(t, "127.0.0.1")
		c.send(s.addr, rrq(append([]string{"t", "NetASCII"}, opts...)...))
		// Reuse fetch's receive loop by re-sending nothing: fetch sends its
		// own octet RRQ, so read by hand here.
		got := fetchRequested(t, c, s.addr)
		if !bytes.Equal(got, want) {
			t.Fatalf("opts %v: netascii %q...", opts, got[:min(40, len(got))])
		}
	}
}

// fetchRequested completes a transfer whose RRQ c already sent (lock-step
// or window per the OACK).
func fetchRequested(t *testing.T, c *client, server netip.AddrPort) []byte {
	t.Helper()
	blksize, window, exp, inWin := 512, 1, 1, 0
	var out []byte
	for {
		p, ok := c.recv(5 * time.Second)
		if !ok {
			t.Fatalf("stalled at block %d", exp)
		}
		switch p.op {
		case opOACK:
			f := splitZ(p.data)
			for i := 0; i+1 < len(f); i += 2 {
				v, _ := parseDecimal(string(f[i+1]))
				switch string(f[i]) {
				case "blksize":
					blksize = v
				case "windowsize":
					window = v
				case "tsize":
					t.Fatalf("tsize answered in netascii mode")
				}
			}
			c.ack(p.from, 0)
		case opDATA:
			if p.block != uint16(exp) {
				c.ack(p.from, uint16(exp-1))
				continue
			}
			out = append(out, p.data...)
			exp++
			inWin++
			if last := len(p.data) < blksize; inWin == window || last {
				inWin = 0
				c.ack(p.from, uint16(exp-1))
				if last {
					return out
				}
			}
		default:
			t.Fatalf("opcode %d %q", p.op, p.data)
		}
	}
}

// A forged source that answers with ICMP port unreachable (here: a port
// closed after the request) ends the transfer at once in the default mode,
// without waiting for the retransmissions.
//
// "At once" is "before the first retransmission": the retransmit timeout
// is 3 s here, so a loaded machine (make test runs packages in parallel)
// delaying the ICMP error by a second cannot fail the test, while a
// transfer that waited for its retransmissions would run for 15 s.
func TestEngineICMPUnreachableEndsTransfer(t *testing.T) {
	cfg := testCfg()
	cfg.timeout = 3 * time.Second
	s := startEngine(t, cfg, map[string][]byte{"f": randomBytes(100000)})
	sent := counterValue(s.e.cfg.metrics.datagrams)
	c := newClient(t, "127.0.0.1")
	c.rrq(s.addr, "f")
	c.conn.Close()
	if d := s.waitIdle(t, 2900*time.Millisecond); d > 2500*time.Millisecond {
		t.Fatalf("transfer ended after %v", d)
	}
	if n := counterValue(s.e.cfg.metrics.datagrams) - sent; n > 2 {
		t.Fatalf("%v datagrams to a closed port", n)
	}
}

// The Sorcerer's Apprentice on the wire: a client acknowledging every
// block twice still gets every block once. Answering duplicate ACKs would
// send every block twice in every run; a run here may still see a
// duplicate or two when the machine stalls the client or the server past
// the tail-probe round trip (10 ms: make test runs packages in parallel),
// which is the timer doing its job. So a transfer is tried up to three
// times and one run must be free of duplicates.
func TestEngineDuplicateAcksOnTheWire(t *testing.T) {
	data := randomBytes(200 * 512)
	s := startEngine(t, testCfg(), map[string][]byte{"f": data})
	for _, opts := range [][]string{nil, {"windowsize", "4"}} {
		var runs []string
		for range 3 {
			dups := doubleAckTransfer(t, s.addr, data, opts)
			if len(dups) == 0 {
				runs = nil
				break
			}
			runs = append(runs, fmt.Sprintf("blocks received more than once: %v", dups))
		}
		if runs != nil {
			t.Errorf("opts %v: every run had duplicates:\n%s", opts, strings.Join(runs, "\n"))
		}
	}
}

// doubleAckTransfer reads the file acknowledging everything twice and
// returns the blocks that arrived more than once, with their counts.
func doubleAckTransfer(t *testing.T, server netip.AddrPort, data []byte, opts []string) map[uint16]int {
	t.Helper()
	c := newClient(t, "127.0.0.1")
	c.rrq(server, "f", opts...)
	window, exp, inWin := 1, 1, 0
	counts := map[uint16]int{}
	var out []byte
loop:
	for {
		p, ok := c.recv(3 * time.Second)
		if !ok {
			t.Fatal("stalled")
		}
		switch p.op {
		case opOACK:
			window = 4
			c.ack(p.from, 0)
			c.ack(p.from, 0)
		case opDATA:
			counts[p.block]++
			if p.block != uint16(exp) {
				continue
			}
			out = append(out, p.data...)
			exp++
			inWin++
			if last := len(p.data) < 512; inWin == window || last {
				inWin = 0
				c.ack(p.from, uint16(exp-1))
				c.ack(p.from, uint16(exp-1))
				if last {
					break loop
				}
			}
		}
	}
	if !bytes.Equal(out, data) {
		t.Fatal("content differs")
	}
	dups := map[uint16]int{}
	for b, n := range counts {
		if n != 1 {
			dups[b] = n
		}
	}
	return dups
}

// Block numbers wrap past 65535 (to 0) for a file of more than 65535
// blocks; the content arrives whole and in order.
func TestEngineBlockNumberWrap(t *testing.T) {
	data := randomBytes(65536*16 + 1000) // blksize 16: 65,599 blocks
	s := startEngine(t, testCfg(), map[string][]byte{"f": data})
	got, _ := newClient(t, "127.0.0.1").fetch(s.addr, "f", "blksize", "16", "windowsize", "8")
	if !bytes.Equal(got, data) {
		t.Fatalf("%d bytes, want %d; first difference at %d", len(got), len(data), firstDiff(got, data))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestEngineShutdownAbandonsSilentTransfers(t *testing.T) {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	e := newEngine(testCfg(), func(ctx context.Context, tr *transfer) (*payload, error) {
		return &payload{data: randomBytes(5000), size: 5000}, nil
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.serve(ctx, conn, 200*time.Millisecond) }()
	c := newClient(t, "127.0.0.1")
	c.rrq(addr, "f")
	c.must(time.Second, opDATA)
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("serve did not return")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("shutdown took %v", d)
	}
	// The listener is gone: a new request gets no answer.
	c2 := newClient(t, "127.0.0.1")
	c2.rrq(addr, "f")
	c2.quiet(200*time.Millisecond, "answer after shutdown")
}

// Requests from many addresses that never answer (forged sources) take at
// most 3/4 of max_transfers: a device that answered before still gets a
// transfer.
func TestEngineUnheardSourcesLeaveRoom(t *testing.T) {
	cfg := testCfg()
	cfg.maxTransfers, cfg.maxPerSource = 8, 4
	cfg.timeout, cfg.retransmits = 500*time.Millisecond, 3
	s := startEngine(t, cfg, map[string][]byte{"f": randomBytes(10000)})
	device := newClient(t, "127.0.0.1")
	if got, _ := device.fetch(s.addr, "f"); len(got) != 10000 {
		t.Fatalf("device's first fetch: %d bytes", len(got))
	}
	s.waitIdle(t, time.Second)
	busy := counterValue(s.e.cfg.metrics.refused.WithLabelValues("busy_unheard"))
	// Eight forged sources, one request each.
	refusedN := 0
	for i := range 8 {
		c := newClient(t, fmt.Sprintf("127.0.1.%d", i+1))
		c.rrq(s.addr, "f")
		p, ok := c.recv(time.Second)
		if !ok {
			t.Fatalf("forged source %d: no answer", i)
		}
		if p.op == opERROR {
			refusedN++
		}
	}
	if refusedN != 2 || counterValue(s.e.cfg.metrics.refused.WithLabelValues("busy_unheard"))-busy != 2 {
		t.Fatalf("%d of 8 unheard requests refused (busy_unheard +%v), want 2 (max_transfers 8 less a quarter)",
			refusedN, counterValue(s.e.cfg.metrics.refused.WithLabelValues("busy_unheard"))-busy)
	}
	// The device that answered before still gets its file meanwhile.
	if got, _ := device.fetch(s.addr, "f"); len(got) != 10000 {
		t.Fatalf("device's fetch while forged requests wait: %d bytes", len(got))
	}
}
