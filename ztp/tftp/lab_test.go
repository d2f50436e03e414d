package tftp_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ztpd/ztpd/testenv/e2etest"
	"github.com/ztpd/ztpd/testenv/hermetic"
	"github.com/ztpd/ztpd/testenv/netns"
)

// zlab is a server namespace and a client namespace (zt-tftp-<name>-<pid>-a
// and -b) joined by a veth, on 10.99.<octet>.0/24 (octet 60..63): servers
// at .1, .3, ..., clients at .10 and up.
type zlab struct {
	t    *testing.T
	pair *netns.Pair
	net  string
	dir  string
}

func newZLab(t *testing.T, name string, octet int, srvHosts, cliHosts []int, tools ...string) *zlab {
	t.Helper()
	e2etest.RequireRoot(t, tools...)
	l := &zlab{t: t, net: fmt.Sprintf("10.99.%d", octet), dir: t.TempDir()}
	var srv, cli []string
	for _, h := range srvHosts {
		srv = append(srv, fmt.Sprintf("%s.%d/24", l.net, h))
	}
	for _, h := range cliHosts {
		cli = append(cli, fmt.Sprintf("%s.%d/24", l.net, h))
	}
	l.pair = netns.ForTest(t, "zt-tftp-"+name, strings.Join(srv, " "), strings.Join(cli, " "))
	// tftpd-hpa drops to nobody: let it into the scratch directory.
	os.Chmod(l.dir, 0o755)
	os.Chmod(filepath.Dir(l.dir), 0o755)
	return l
}

func (l *zlab) addr(h int) string { return fmt.Sprintf("%s.%d", l.net, h) }

// start runs a server in the server namespace until the test ends and
// waits until it listens on ip:69.
func (l *zlab) start(name, ip string, args ...string) *bytes.Buffer {
	l.t.Helper()
	out := &bytes.Buffer{}
	cmd := l.pair.A.Command(context.Background(), args[0], args[1:]...)
	cmd.Env = hermetic.TestEnv(l.t) // ztpd sees only its --config, not the host's
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	l.t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		ss, _ := exec.Command("ip", "netns", "exec", l.pair.A.Name, "ss", "-Hlun", "src "+ip+" and sport = :69").Output()
		if len(bytes.TrimSpace(ss)) > 0 {
			return out
		}
		select {
		case <-done:
			l.t.Fatalf("%s exited:\n%s", name, out)
		case <-time.After(50 * time.Millisecond):
		}
	}
	l.t.Fatalf("%s not listening on %s:69:\n%s", name, ip, out)
	return nil
}

// ztpd starts `ztpd serve` on ip:69 with the tftp settings in tftpYAML
// (a YAML flow mapping body, may be empty), serving files.
func (l *zlab) ztpd(name, ip, tftpYAML string, httpPort int, files map[string][]byte) *bytes.Buffer {
	l.t.Helper()
	data := filepath.Join(l.dir, name)
	for n, b := range files {
		p := filepath.Join(data, "files", n)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			l.t.Fatal(err)
		}
	}
	if tftpYAML != "" {
		tftpYAML = ", " + tftpYAML
	}
	cfg := filepath.Join(l.dir, name+".yaml")
	os.WriteFile(cfg, fmt.Appendf(nil, "http: {addr: '127.0.0.1:%d'}\ntftp: {enabled: true, addr: '%s:69'%s}\n", httpPort, ip, tftpYAML), 0o644)
	return l.start(name, ip, e2etest.Ztpd(l.t), "serve", "--config", cfg, "--data-dir", data, "--log-level", "info")
}

// client runs a command in the client namespace.
func (l *zlab) client(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := l.pair.B.Command(ctx, args[0], args[1:]...).CombinedOutput()
	return string(out), err
}

func (l *zlab) server(args ...string) (string, error) {
	out, err := l.pair.A.Command(context.Background(), args[0], args[1:]...).CombinedOutput()
	return string(out), err
}

// udp opens a socket on ip in the client namespace.
func (l *zlab) udp(ip string) *net.UDPConn {
	l.t.Helper()
	var c *net.UDPConn
	if err := l.pair.B.Do(func() error {
		var err error
		c, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(ip)})
		return err
	}); err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() { c.Close() })
	return c
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestLossyLinkRealClients: over a link that silently drops one UDP
// datagram in 300 each way (nftables numgen on the input hook of both
// namespaces: DATA/OACK at the client, ACKs at the server), tftp-hpa,
// atftp, curl and busybox tftp fetch a 2 MiB file intact from ztpd in the
// default (port per transfer) and single-port modes, lock-step and, where
// the client asks for one (atftp windowsize), with a window; each in no
// more than about twice tftpd-hpa's time on the same link with the same
// client. Timing does not gate CI tightly: the bound asserted is 4x + 2 s,
// and the figures are logged. Before, the default mode sent 8 blocks ahead
// to clients that never asked and every one of these clients failed.
func TestLossyLinkRealClients(t *testing.T) {
	l := newZLab(t, "loss", 60, []int{1, 3, 4}, []int{10}, "curl", "tftp", "atftp", "busybox", "in.tftpd", "nft")
	file := make([]byte, 2<<20+333)
	rand.Read(file)
	want := sha(file)
	const name = "lossy.bin"
	servers := []struct{ name, ip string }{{"ztpd", l.addr(1)}, {"ztpd single-port", l.addr(3)}, {"tftpd-hpa", l.addr(4)}}
	l.ztpd("mp", l.addr(1), "", 18201, map[string][]byte{name: file})
	l.ztpd("sp", l.addr(3), "single_port: true", 18202, map[string][]byte{name: file})
	root := filepath.Join(l.dir, "hpa")
	os.MkdirAll(root, 0o755)
	os.WriteFile(filepath.Join(root, name), file, 0o644)
	l.start("tftpd-hpa", l.addr(4), "in.tftpd", "-L", "-s", root, "-a", l.addr(4)+":69")

	// One drop rule (and counter) per server and direction, so the loss
	// pattern of one server does not depend on the others' traffic. The
	// 151st datagram is the first dropped, not the first one of all. ACK 0
	// is spared: atftp 0.8 aborts ("unexpected OACK") when the server sends
	// its OACK again after losing ACK 0, whatever the server (tftpd-hpa
	// too), and resending the OACK is the only correct thing to do.
	const every = 300
	var cliRules, srvRules strings.Builder
	for _, s := range servers {
		fmt.Fprintf(&cliRules, "    ip saddr %s meta l4proto udp numgen inc mod %d 150 counter drop\n", s.ip, every)
		fmt.Fprintf(&srvRules, "    ip daddr %s udp length 12 @th,80,16 != 0 numgen inc mod %d 150 counter drop\n", s.ip, every)
	}
	for _, ns := range []struct {
		ns    *netns.NS
		rules string
	}{{l.pair.B, cliRules.String()}, {l.pair.A, srvRules.String()}} {
		cmd := ns.ns.Command(context.Background(), "nft", "-f", "-")
		cmd.Stdin = strings.NewReader("table inet ztloss {\n  chain in {\n    type filter hook input priority 0; policy accept;\n" + ns.rules + "  }\n}\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nft: %v\n%s", err, out)
		}
	}

	type client struct {
		name string
		cmd  func(server, dst string) []string
	}
	clients := []client{
		{"tftp-hpa (512)", func(s, d string) []string { return []string{"tftp", "-m", "binary", s, "-c", "get", name, d} }},
		{"atftp (1468)", func(s, d string) []string {
			return []string{"atftp", "--option", "blksize 1468", "--option", "tsize 0", "-g", "-r", name, "-l", d, s}
		}},
		{"atftp windowsize 8", func(s, d string) []string {
			return []string{"atftp", "--option", "blksize 1468", "--option", "windowsize 8", "-g", "-r", name, "-l", d, s}
		}},
		{"curl (1468)", func(s, d string) []string {
			return []string{"curl", "-sS", "--tftp-blksize", "1468", "-o", d, "tftp://" + s + "/" + name}
		}},
		{"busybox (1468)", func(s, d string) []string {
			return []string{"busybox", "tftp", "-b", "1468", "-g", "-r", name, "-l", d, s}
		}},
	}
	type result struct {
		d   time.Duration
		ok  bool
		msg string
	}
	fetch := func(c client, server string, limit time.Duration) result {
		dst := filepath.Join(l.dir, fmt.Sprintf("got-%s-%s", server, strings.Fields(c.name)[0]))
		os.Remove(dst)
		start := time.Now()
		out, err := l.client(limit, c.cmd(server, dst)...)
		r := result{d: time.Since(start)}
		b, _ := os.ReadFile(dst)
		os.Remove(dst)
		switch {
		case err != nil:
			r.msg = fmt.Sprintf("%v: %s", err, strings.TrimSpace(out))
		case sha(b) != want:
			r.msg = fmt.Sprintf("%d bytes, sha256 differs", len(b))
		default:
			r.ok = true
		}
		return r
	}

	// tftpd-hpa, the reference: all clients at once (it mostly waits out
	// its 1 s timeouts, or the 6 s curl asks for), each capped: beyond the
	// cap the comparison is moot and CI time is better spent elsewhere.
	const refCap = 30 * time.Second
	ref := make([]result, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Add(1)
		go func() { defer wg.Done(); ref[i] = fetch(c, l.addr(4), refCap) }()
	}
	// ztpd, one fetch at a time, while the reference runs.
	got := map[string]result{}
	for _, s := range servers[:2] {
		for _, c := range clients {
			got[s.name+"/"+c.name] = fetch(c, s.ip, 60*time.Second)
		}
	}
	wg.Wait()

	var table strings.Builder
	fmt.Fprintf(&table, "2 MiB over a link dropping 1 UDP datagram in %d each way; seconds (x tftpd-hpa)\n", every)
	fmt.Fprintf(&table, "%-20s %-18s %-18s %s\n", "client", "ztpd", "ztpd single-port", "tftpd-hpa")
	for i, c := range clients {
		refD := min(ref[i].d, refCap)
		cell := func(r result) string {
			if !r.ok {
				return "FAILED"
			}
			return fmt.Sprintf("%.2f (%.2fx)", r.d.Seconds(), r.d.Seconds()/refD.Seconds())
		}
		refCell := fmt.Sprintf("%.2f", ref[i].d.Seconds())
		if ref[i].d >= refCap {
			refCell = fmt.Sprintf("> %.0f (stopped)", refCap.Seconds())
		} else if !ref[i].ok {
			refCell += " (did not deliver: " + ref[i].msg + ")"
		}
		fmt.Fprintf(&table, "%-20s %-18s %-18s %s\n", c.name, cell(got["ztpd/"+c.name]), cell(got["ztpd single-port/"+c.name]), refCell)
		for _, s := range servers[:2] {
			r := got[s.name+"/"+c.name]
			if !r.ok {
				t.Errorf("%s from %s: %s", c.name, s.name, r.msg)
			} else if bound := 4*refD + 2*time.Second; r.d > bound {
				t.Errorf("%s from %s took %v, more than 4 x tftpd-hpa's %v + 2 s", c.name, s.name, r.d, refD)
			}
		}
	}
	t.Log("\n" + table.String())

	// The link did lose datagrams, in both directions, for every server.
	for _, ns := range []*netns.NS{l.pair.A, l.pair.B} {
		out, _ := ns.Command(context.Background(), "nft", "list", "table", "inet", "ztloss").CombinedOutput()
		for _, m := range regexp.MustCompile(`(\d+\.\d+\.\d+\.\d+) .*packets (\d+)`).FindAllStringSubmatch(string(out), -1) {
			if n, _ := strconv.Atoi(m[2]); n == 0 {
				t.Errorf("%s: nothing dropped for %s", ns.Name, m[1])
			}
		}
	}
}

// labRRQ is a read request for f.bin with options.
func labRRQ(opts ...string) []byte {
	b := []byte{0, 1}
	for _, f := range append([]string{"f.bin", "octet"}, opts...) {
		b = append(append(b, f...), 0)
	}
	return b
}

type dgram struct {
	op, block uint16
	text      string
	at        time.Duration
}

func (d dgram) String() string {
	if d.op == 5 {
		return fmt.Sprintf("{ERROR %d %q at %v}", d.block, d.text, d.at.Round(time.Millisecond))
	}
	return fmt.Sprintf("{op %d block %d at %v}", d.op, d.block, d.at.Round(time.Millisecond))
}

// listen collects what arrives on c for d, with times from start.
func listen(c *net.UDPConn, start time.Time, d time.Duration) []dgram {
	var got []dgram
	buf := make([]byte, 2048)
	c.SetReadDeadline(time.Now().Add(d))
	for {
		n, _, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			return got
		}
		if n >= 4 {
			got = append(got, dgram{op: binary.BigEndian.Uint16(buf), block: binary.BigEndian.Uint16(buf[2:]),
				text: strings.TrimRight(string(buf[4:n]), "\x00"), at: time.Since(start)})
		}
	}
}

func sendTo(t *testing.T, c *net.UDPConn, server string, p []byte) time.Time {
	t.Helper()
	if _, err := c.WriteToUDPAddrPort(p, netip.AddrPortFrom(netip.MustParseAddr(server), 69)); err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

// metrics returns the ztpd_tftp_* samples of the ztpd whose HTTP listener
// is on 127.0.0.1:port in the server namespace.
func (l *zlab) metrics(port int) map[string]float64 {
	l.t.Helper()
	out, err := l.server("curl", "-sS", fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		l.t.Fatalf("metrics: %v %s", err, out)
	}
	m := map[string]float64{}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "ztpd_tftp_") {
			f := strings.Fields(line)
			m[f[0]], _ = strconv.ParseFloat(f[len(f)-1], 64)
		}
	}
	return m
}

func wantMetrics(t *testing.T, got map[string]float64, want map[string]float64) {
	t.Helper()
	for k, min := range want {
		if got[k] < min {
			keys := make([]string, 0, len(got))
			for k := range got {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			t.Errorf("%s = %v, want >= %v (have %v)", k, got[k], min, keys)
		}
	}
}

// TestSilentClientGetsOneDatagramPerTimeout: against the ztpd binary in
// its default configuration (retransmit_timeout 1s, max_retransmits 5), a
// client that never acknowledges, as a forged source cannot, and was never
// heard from gets one datagram (DATA 1, or the OACK) per second, two in
// all, then nothing: a 16-byte RRQ from a forged address costs its victim
// at most that. Both modes, with and without options. Before, it got 8
// blocks at once and 73 datagrams over ~9 s, then six over 6 s.
func TestSilentClientGetsOneDatagramPerTimeout(t *testing.T) {
	t.Parallel()
	l := newZLab(t, "silent", 62, []int{1, 3}, []int{20, 21}, "curl")
	files := map[string][]byte{"f.bin": bytes.Repeat([]byte("z"), 1<<20)}
	l.ztpd("mp", l.addr(1), "", 18211, files)
	l.ztpd("sp", l.addr(3), "single_port: true", 18212, files)
	var wg sync.WaitGroup
	for i, tc := range []struct {
		server string
		opts   []string
	}{{l.addr(1), nil}, {l.addr(1), []string{"blksize", "1468", "windowsize", "8"}}, {l.addr(3), nil}, {l.addr(3), []string{"tsize", "0"}}} {
		c := l.udp(l.addr(20 + i%2))
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := sendTo(t, c, tc.server, labRRQ(tc.opts...))
			got := listen(c, start, 8*time.Second)
			wantOp := uint16(3)
			if tc.opts != nil {
				wantOp = 6
			}
			if len(got) != 2 {
				t.Errorf("%s %v: %d datagrams, want 2 (one per second, 1 retransmission to an address never heard): %v", tc.server, tc.opts, len(got), got)
				return
			}
			for k, d := range got {
				if d.op != wantOp || wantOp == 3 && d.block != 1 {
					t.Errorf("%s %v: datagram %d is opcode %d block %d", tc.server, tc.opts, k, d.op, d.block)
				}
				if lo, hi := time.Duration(k)*time.Second-50*time.Millisecond, time.Duration(k)*time.Second+300*time.Millisecond; d.at < lo || d.at > hi {
					t.Errorf("%s %v: datagram %d at %v, want ~%ds", tc.server, tc.opts, k, d.at, k)
				}
			}
		}()
	}
	wg.Wait()
	for _, port := range []int{18211, 18212} {
		wantMetrics(t, l.metrics(port), map[string]float64{
			`ztpd_tftp_transfers_total{result="failed"}`: 2,
			`ztpd_tftp_unanswered_total`:                 2,
			`ztpd_tftp_retransmissions_total`:            2,
			`ztpd_tftp_datagrams_sent_total`:             4,
		})
	}
}

// TestTransferCaps: the fifth concurrent transfer from one address
// (default tftp.max_transfers_per_source 4) and the one beyond
// tftp.max_transfers get a TFTP ERROR from ztpd (tftp-hpa prints its
// text), counted in ztpd_tftp_refused_total; other addresses still get
// in; slots free up when the silent transfers end (2 s: their address
// was never heard, so they get one retransmission).
func TestTransferCaps(t *testing.T) {
	t.Parallel()
	l := newZLab(t, "caps", 63, []int{1, 5}, []int{10, 11, 12, 13}, "curl", "tftp")
	files := map[string][]byte{"f.bin": bytes.Repeat([]byte("z"), 1<<20)}
	l.ztpd("mp", l.addr(1), "", 18221, files)
	lastOpen := map[string]time.Time{}
	open := func(ip, server string) dgram {
		t.Helper()
		c := l.udp(ip)
		start := sendTo(t, c, server, labRRQ())
		buf := make([]byte, 2048)
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, _, err := c.ReadFromUDPAddrPort(buf)
		if err != nil || n < 4 {
			t.Fatalf("no answer to %s from %s: %v", server, ip, err)
		}
		lastOpen[server] = start
		return dgram{op: binary.BigEndian.Uint16(buf), block: binary.BigEndian.Uint16(buf[2:]), text: strings.TrimRight(string(buf[4:n]), "\x00")}
	}
	// Default configuration: 4 per source.
	for range 4 {
		if d := open(l.addr(10), l.addr(1)); d.op != 3 {
			t.Fatalf("transfer within the per-source cap refused: %+v", d)
		}
	}
	if d := open(l.addr(10), l.addr(1)); d.op != 5 || !strings.Contains(d.text, "tftp.max_transfers_per_source") {
		t.Fatalf("fifth transfer from one address: %+v, want an ERROR", d)
	}
	// A real client (from .10, the client's first address) shows why.
	out, _ := l.client(10*time.Second, "tftp", "-m", "binary", l.addr(1), "-c", "get", "f.bin", "/dev/null")
	if !strings.Contains(out, "Error code 0: too many transfers: 4 running for "+l.addr(10)) {
		t.Errorf("tftp-hpa over the per-source cap: %s", out)
	}
	if d := open(l.addr(11), l.addr(1)); d.op != 3 {
		t.Fatalf("another address refused: %+v", d)
	}

	// tftp.max_transfers 3, per source 2.
	l.ztpd("cap", l.addr(5), "max_transfers: 3, max_transfers_per_source: 2", 18222, files)
	for _, ip := range []string{l.addr(10), l.addr(10), l.addr(11)} {
		if d := open(ip, l.addr(5)); d.op != 3 {
			t.Fatalf("within the caps: %+v", d)
		}
	}
	if d := open(l.addr(10), l.addr(5)); d.op != 5 || !strings.Contains(d.text, "tftp.max_transfers_per_source") {
		t.Fatalf("third from one address with a cap of 2: %+v, want an ERROR", d)
	}
	if d := open(l.addr(12), l.addr(5)); d.op != 5 || !strings.Contains(d.text, "(tftp.max_transfers)") {
		t.Fatalf("fourth transfer overall: %+v, want an ERROR", d)
	}
	// The silent transfers end 2 s after they started: room again.
	for _, server := range []string{l.addr(1), l.addr(5)} {
		time.Sleep(time.Until(lastOpen[server].Add(6500 * time.Millisecond)))
		if d := open(l.addr(10), server); d.op != 3 {
			t.Fatalf("%s after the silent transfers ended: %+v", server, d)
		}
	}
	wantMetrics(t, l.metrics(18221), map[string]float64{`ztpd_tftp_refused_total{reason="busy_source"}`: 2}) // raw and tftp-hpa
	wantMetrics(t, l.metrics(18222), map[string]float64{
		`ztpd_tftp_refused_total{reason="busy_source"}`: 1,
		`ztpd_tftp_refused_total{reason="busy_global"}`: 1,
	})
}
