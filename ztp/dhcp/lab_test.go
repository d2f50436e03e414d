package dhcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/internal/store/storetest"
	"github.com/ztpd/ztpd/testenv/hermetic"
	"github.com/ztpd/ztpd/testenv/netns"
)

// lab is a server namespace (a0, 10.99.<n>.1/24) and a client namespace
// (b0) joined by a veth, with an in-process Server listening on a0.
type lab struct {
	t      *testing.T
	pair   *netns.Pair
	n      int // third octet of the lab's /24
	opt    Options
	srv    *Server
	st     *boltstore.Store
	logs   *syncBuffer
	cancel context.CancelFunc
	done   chan error
}

func needTools(t *testing.T, tools ...string) {
	t.Helper()
	if err := netns.Check(); err != nil {
		t.Skip("skipping:", err)
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: %s is not installed", tool)
		}
	}
}

// labOptions serve the lab's /24 on a0 (pool .100-.199, the server as
// router) with the configuration's default timers.
func labOptions(t testing.TB, n int) Options {
	server := fmt.Sprintf("10.99.%d.1", n)
	opt := Options{Interfaces: []string{"a0"}, OfferHold: 30 * time.Second, DeclineQuarantine: 10 * time.Minute,
		Subnets: []Subnet{{Name: "lab", Prefix: prefix(fmt.Sprintf("10.99.%d.0/24", n)), Interface: "a0",
			Pools: pools(fmt.Sprintf("10.99.%d.100-10.99.%d.199", n, n)), Router: addr(server), LeaseTime: time.Hour}},
		// relayClient in b0 relays from its own address
		Relays: []Relay{{Sources: addrs(fmt.Sprintf("10.99.%d.2", n)), GIAddrs: addrs(fmt.Sprintf("10.99.%d.2", n))}}}
	withEndpoints(t, &opt, server, server+":8080")
	return opt
}

// newLab starts the namespaces and the server; name must be short (it
// prefixes the namespace names).
func newLab(t *testing.T, name string, n int, mutate func(*Options)) *lab {
	t.Helper()
	l := newLabNS(t, name, n)
	l.start(mutate)
	return l
}

// newLabNS creates the namespaces only; start runs the server.
func newLabNS(t *testing.T, name string, n int) *lab {
	t.Helper()
	needTools(t)
	l := &lab{t: t, n: n}
	l.pair = netns.ForTest(t, "zd-"+name, fmt.Sprintf("10.99.%d.1/24", n), fmt.Sprintf("10.99.%d.2/24", n))
	return l
}

// start runs an in-process server with labOptions changed by mutate.
func (l *lab) start(mutate func(*Options)) {
	t := l.t
	t.Helper()
	l.logs = &syncBuffer{}
	l.opt = labOptions(t, l.n)
	if mutate != nil {
		mutate(&l.opt)
	}
	l.st = storetest.Store(t)
	log := slog.New(slog.NewTextHandler(l.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	devs := devices.New(devices.Options{Store: l.st, Log: log})
	t.Cleanup(func() { devs.Close() })
	opt := l.opt
	opt.Store, opt.Devices, opt.Log = l.st, devs, log
	var err error
	l.srv, err = New(opt)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.pair.A.Do(l.srv.Listen); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel, l.done = cancel, make(chan error, 1)
	go func() { l.done <- l.srv.Run(ctx) }()
	t.Cleanup(l.stop)
}

func (l *lab) stop() {
	if l.cancel == nil {
		return
	}
	l.cancel()
	l.cancel = nil
	select {
	case err := <-l.done:
		if err != nil {
			l.t.Errorf("server: %v", err)
		}
	case <-time.After(10 * time.Second):
		l.t.Error("server did not stop")
	}
	l.st.Close()
	if l.t.Failed() {
		l.t.Logf("server log:\n%s", l.logs)
	}
}

func (l *lab) ip(host int) string { return fmt.Sprintf("10.99.%d.%d", l.n, host) }

func (l *lab) device(id string) core.Device {
	l.t.Helper()
	var d core.Device
	var err error
	// Devices are written behind the lease; give the committer a moment.
	for i := 0; i < 50; i++ {
		err = l.st.View(func(tx core.Tx) error {
			var e error
			d, e = tx.Devices().Get(id)
			return e
		})
		if err == nil && d.State == core.StateLeased {
			return d
		}
		time.Sleep(50 * time.Millisecond)
	}
	l.t.Fatalf("device %s: %+v, %v", id, d, err)
	return d
}

// runUntil runs a client in ns until check passes (polled) or the timeout,
// then stops it (by its own PID) and returns its output.
func runUntil(t *testing.T, ns *netns.NS, timeout time.Duration, check func() bool, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := ns.Command(ctx, name, args...)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-exited:
			if !check() {
				t.Fatalf("%s exited without the expected result:\n%s", name, out.String())
			}
			return out.String()
		case <-ctx.Done():
			<-exited
			t.Fatalf("%s: no result within %s:\n%s", name, timeout, out.String())
		case <-tick.C:
			if check() {
				cmd.Process.Kill()
				<-exited
				return out.String()
			}
		}
	}
}

// binDir holds the ztpd binary built for this test run; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	hermetic.Isolate()
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// ztpdBinary builds cmd/ztpd once per test run.
var ztpdBinary = sync.OnceValues(func() (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = "/usr/local/go/bin/go" // where CI installs it
	}
	dir, err := os.MkdirTemp("", "ztpd-dhcp-test-")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "ztpd")
	cmd := exec.Command(goTool, "build", "-o", bin, "../../cmd/ztpd")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// relayClient is a DHCP relay agent written with the dhcpv4 library: it
// sends requests with giaddr set from a socket on the relay address (port
// 67) and matches replies by transaction id.
type relayClient struct {
	conn    net.PacketConn
	server  *net.UDPAddr
	giaddr  net.IP
	mu      sync.Mutex
	waiting map[dhcpv4.TransactionID]chan *dhcpv4.DHCPv4
}

func newRelayClient(t *testing.T, ns *netns.NS, giaddr, server string) *relayClient {
	t.Helper()
	rc := &relayClient{server: &net.UDPAddr{IP: net.ParseIP(server), Port: 67}, giaddr: net.ParseIP(giaddr).To4(),
		waiting: map[dhcpv4.TransactionID]chan *dhcpv4.DHCPv4{}}
	err := ns.Do(func() error {
		var err error
		rc.conn, err = net.ListenPacket("udp4", giaddr+":67")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.conn.Close() })
	go rc.read()
	return rc
}

func (rc *relayClient) read() {
	buf := make([]byte, 1500)
	for {
		n, _, err := rc.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		m, err := dhcpv4.FromBytes(buf[:n])
		if err != nil {
			continue
		}
		rc.mu.Lock()
		ch := rc.waiting[m.TransactionID]
		rc.mu.Unlock()
		if ch != nil {
			select {
			case ch <- m:
			default:
			}
		}
	}
}

var errNoReply = errors.New("no reply")

// do sends m (relayed) and waits for the reply, retrying on silence.
func (rc *relayClient) do(m *dhcpv4.DHCPv4, tries int, wait time.Duration) (*dhcpv4.DHCPv4, error) {
	m.GatewayIPAddr = rc.giaddr
	m.HopCount = 1
	ch := make(chan *dhcpv4.DHCPv4, 1)
	rc.mu.Lock()
	rc.waiting[m.TransactionID] = ch
	rc.mu.Unlock()
	defer func() {
		rc.mu.Lock()
		delete(rc.waiting, m.TransactionID)
		rc.mu.Unlock()
	}()
	for i := 0; i < tries; i++ {
		if _, err := rc.conn.WriteTo(m.ToBytes(), rc.server); err != nil {
			return nil, err
		}
		select {
		case r := <-ch:
			return r, nil
		case <-time.After(wait):
		}
	}
	return nil, errNoReply
}

// dora runs a relayed DORA for hw and returns the ACKed address.
func (rc *relayClient) dora(hw net.HardwareAddr) (net.IP, error) {
	offer, err := rc.do(discover(hw), 3, time.Second)
	if err != nil {
		return nil, err
	}
	if offer.MessageType() != dhcpv4.MessageTypeOffer {
		return nil, fmt.Errorf("got %s instead of an OFFER", offer.MessageType())
	}
	ack, err := rc.do(requestFor(offer), 3, time.Second)
	if err != nil {
		return nil, err
	}
	if ack.MessageType() != dhcpv4.MessageTypeAck {
		return nil, fmt.Errorf("got %s instead of an ACK", ack.MessageType())
	}
	return ack.YourIPAddr, nil
}

func writeFile(t *testing.T, path, text string, mode os.FileMode) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	return path
}

func fileContains(path string, subs ...string) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, s := range subs {
		if !strings.Contains(string(b), s) {
			return false
		}
	}
	return true
}
