package dhcp6

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
	"golang.org/x/sys/unix"

	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/testenv/netns"
)

// The crash test runs the server as a child process (this test binary,
// re-executed in the server's namespace) so that it can be killed with
// SIGKILL mid-storm, as ztpd would be.
const (
	crashChildEnv   = "ZTPD_DHCP6_CRASH_STORE"
	crashPrefixEnv  = "ZTPD_DHCP6_CRASH_PREFIX"
	crashReadyLine  = "dhcp6 child ready"
	crashStormCount = 2000
)

// crashChild serves the lab subnet from the store in $ZTPD_DHCP6_CRASH_STORE
// until killed.
func crashChild() int {
	dir, p := os.Getenv(crashChildEnv), os.Getenv(crashPrefixEnv)
	st, err := boltstore.Open(dir, boltstore.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	devs := devices.New(devices.Options{Store: st, Log: log})
	s, err := New(Options{Interfaces: []string{"a0"}, OfferHold: 30 * time.Second, DeclineQuarantine: time.Minute,
		Subnets: []Subnet{{Name: "lab6", Prefix: mustPrefix(p + "/64"), Interface: "a0",
			// Barely larger than the storm: an address lost in the crash
			// would be handed to a client of the second half.
			Pools: []Range{{addr(p + "1000"), addr(fmt.Sprintf("%s%x", p, 0x1000+crashStormCount+9))}}, LeaseTime: time.Hour}},
		Store: st, Devices: devs, Log: log})
	if err == nil {
		err = s.Listen()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(crashReadyLine)
	_ = s.Run(context.Background())
	return 0
}

type crashServer struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startCrashServer(t *testing.T, ns *netns.NS, dir, prefix string) *crashServer {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := ns.Command(context.Background(), exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, crashPrefixEnv+"="+prefix)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cs := &crashServer{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(cs.done) }()
	t.Cleanup(func() { cs.kill() })
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == crashReadyLine {
				ready <- true
				io.Copy(io.Discard, stdout)
				return
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("server child exited before it was ready")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("server child not ready within 20 s")
	}
	return cs
}

func (cs *crashServer) kill() {
	if cs.cmd.Process != nil {
		cs.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-cs.done
}

// stormClient is many DHCPv6 clients on one socket in the client
// namespace: each Solicits, Requests what it is advertised and keeps the
// address its Reply grants.
type stormClient struct {
	t       *testing.T
	conn    *net.UDPConn
	dst     netip.AddrPort
	mu      sync.Mutex
	clients []*stormPeer
	byXID   map[[3]byte]*stormPeer
	grants  map[string][]string // address -> DUIDs a Reply granted it to
}

type stormPeer struct {
	duid    dhcpv6.DUID
	key     string
	xid     [3]byte
	server  dhcpv6.DUID
	offered string
	granted string
	renewed string
}

func newStormClient(t *testing.T, ns *netns.NS, n int) *stormClient {
	t.Helper()
	sc := &stormClient{t: t, byXID: map[[3]byte]*stormPeer{}, grants: map[string][]string{},
		dst: netip.AddrPortFrom(netip.MustParseAddr("ff02::1:2").WithZone("b0"), 547)}
	err := ns.Do(func() error {
		lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) { serr = unix.BindToDevice(int(fd), "b0") })
			if err != nil {
				return err
			}
			return serr
		}}
		pc, err := lc.ListenPacket(context.Background(), "udp6", "[::]:546")
		if err != nil {
			return err
		}
		sc.conn = pc.(*net.UDPConn)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.conn.Close() })
	for i := range n {
		mac := net.HardwareAddr{0x02, 0xcc, byte(i >> 16), byte(i >> 8), byte(i), byte(rand.IntN(256))}
		d := &dhcpv6.DUIDLL{HWType: iana.HWTypeEthernet, LinkLayerAddr: mac}
		sc.clients = append(sc.clients, &stormPeer{duid: d, key: mac.String()})
	}
	go sc.read()
	return sc
}

func (sc *stormClient) send(p *stormPeer, mt dhcpv6.MessageType, addr string) {
	m, _ := dhcpv6.NewMessage()
	m.MessageType = mt
	p.xid = m.TransactionID
	m.AddOption(dhcpv6.OptClientID(p.duid))
	m.AddOption(dhcpv6.OptElapsedTime(0))
	ia := &dhcpv6.OptIANA{IaId: [4]byte{0, 0, 0, 1}}
	if addr != "" {
		ia.Options.Add(&dhcpv6.OptIAAddress{IPv6Addr: net.ParseIP(addr), PreferredLifetime: time.Hour, ValidLifetime: time.Hour})
	}
	m.AddOption(ia)
	if p.server != nil && mt != dhcpv6.MessageTypeSolicit {
		m.AddOption(dhcpv6.OptServerID(p.server))
	}
	sc.mu.Lock()
	sc.byXID[p.xid] = p
	sc.mu.Unlock()
	sc.conn.WriteToUDPAddrPort(m.ToBytes(), sc.dst)
}

func (sc *stormClient) read() {
	buf := make([]byte, 4096)
	for {
		n, _, err := sc.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		m, err := dhcpv6.MessageFromBytes(buf[:n])
		if err != nil {
			continue
		}
		sc.mu.Lock()
		p := sc.byXID[m.TransactionID]
		if p == nil {
			sc.mu.Unlock()
			continue
		}
		got := addrOf(m)
		switch m.MessageType {
		case dhcpv6.MessageTypeAdvertise:
			if p.granted == "" && got != "" {
				p.offered, p.server = got, m.Options.ServerID()
			}
		case dhcpv6.MessageTypeReply:
			if got != "" && p.granted == "" {
				p.granted = got
				sc.grants[got] = append(sc.grants[got], p.key)
			} else if got != "" {
				p.renewed = got
			}
		}
		sc.mu.Unlock()
	}
}

// step sends up to limit clients without an address their next message:
// Solicit, or Request for what they were advertised; it returns how many
// hold a granted address.
func (sc *stormClient) step(limit int) int {
	n, sent := 0, 0
	for _, p := range sc.clients {
		sc.mu.Lock()
		granted, offered := p.granted, p.offered
		sc.mu.Unlock()
		switch {
		case granted != "":
			n++
		case sent == limit:
		case offered != "":
			sc.send(p, dhcpv6.MessageTypeRequest, offered)
			sent++
		default:
			sc.send(p, dhcpv6.MessageTypeSolicit, "")
			sent++
		}
	}
	return n
}

func (sc *stormClient) grantedCount() int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	n := 0
	for _, p := range sc.clients {
		if p.granted != "" {
			n++
		}
	}
	return n
}

// A server killed with SIGKILL in the middle of a storm and restarted
// never grants an address twice, and every client it had answered renews
// the address it was given.
func TestCrashMidStormGrantsNoAddressTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a storm against a killed and restarted server; skipped with -short")
	}
	needTools(t)
	l := newLabNS(t, "crash", 0x25)
	dir, prefix := t.TempDir(), l.prefix(1)
	srv := startCrashServer(t, l.a, dir, prefix)
	sc := newStormClient(t, l.b, crashStormCount)
	deadline := time.Now().Add(30 * time.Second)
	// A steady stream (about 20,000 messages a second), so that the kill
	// lands with Requests in flight and commits pending.
	for sc.step(100) < crashStormCount/3 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d clients granted before the crash", sc.grantedCount())
		}
		time.Sleep(5 * time.Millisecond)
	}
	srv.kill()
	before := sc.grantedCount()
	t.Logf("killed with %d of %d clients granted", before, crashStormCount)
	time.Sleep(200 * time.Millisecond)
	startCrashServer(t, l.a, dir, prefix)
	deadline = time.Now().Add(60 * time.Second)
	for sc.step(crashStormCount) < crashStormCount {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d clients granted after the restart", sc.grantedCount(), crashStormCount)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Every client renews what it was granted, before or after the crash
	// (an address lost in the crash comes back with lifetime 0, or not at
	// all).
	deadline = time.Now().Add(10 * time.Second)
	for {
		pending := 0
		for _, p := range sc.clients {
			sc.mu.Lock()
			done, granted := p.renewed != "", p.granted
			sc.mu.Unlock()
			if !done {
				pending++
				sc.send(p, dhcpv6.MessageTypeRenew, granted)
			}
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d clients could not renew the address they were granted", pending)
		}
		time.Sleep(100 * time.Millisecond)
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	var twice []string
	for a, keys := range sc.grants {
		if len(keys) > 1 {
			twice = append(twice, fmt.Sprintf("%s to %s", a, strings.Join(keys, ", ")))
		}
	}
	if len(twice) > 0 {
		t.Fatalf("addresses granted twice across the crash:\n%s", strings.Join(twice, "\n"))
	}
	for _, p := range sc.clients {
		if p.renewed != p.granted {
			t.Fatalf("client %s was granted %s and renewed %s", p.key, p.granted, p.renewed)
		}
	}
}
