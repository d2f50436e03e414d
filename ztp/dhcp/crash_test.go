package dhcp

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/testenv/hermetic"
	"github.com/ztpd/ztpd/testenv/netns"
)

// ztpdProc is a real `ztpd serve` running in a namespace.
type ztpdProc struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan error
}

func startZtpd(t *testing.T, ns *netns.NS, args ...string) *ztpdProc {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the ztpd binary; skipped with -short")
	}
	bin, err := ztpdBinary()
	if err != nil {
		t.Fatal(err)
	}
	p := &ztpdProc{out: &syncBuffer{}, done: make(chan error, 1)}
	// `ip netns exec` execs in place: the PID is ztpd's. Its own empty
	// configuration file and environment: the flags are the whole set-up,
	// whatever ztpd is installed on the host.
	cfg := hermetic.Config(t, "")
	p.cmd = ns.Command(context.Background(), bin, append([]string{"serve", "--config", cfg}, args...)...)
	p.cmd.Env = hermetic.TestEnv(t)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() { p.stop(syscall.SIGKILL) })
	return p
}

// stop signals the process and waits for it.
func (p *ztpdProc) stop(sig syscall.Signal) error {
	if p.cmd.ProcessState != nil {
		return nil
	}
	p.cmd.Process.Signal(sig)
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		return fmt.Errorf("ztpd did not exit after %v", sig)
	}
}

// waitServing polls with DORAs of a probe client until the server answers.
func waitServing(t *testing.T, rc *relayClient, p *ztpdProc, probe net.HardwareAddr) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := rc.dora(probe); err == nil {
			return
		}
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("ztpd exited: %v\n%s", err, p.out)
		default:
		}
	}
	t.Fatalf("ztpd not serving after 20s:\n%s", p.out)
}

const crashConfig = `data_dir: %s
advertise_addr: 10.99.17.1
log:
  level: warn
http:
  addr: 10.99.17.1:8080
dhcp:
  interfaces: [a0]
  relays: [{address: 10.99.24.1}]
  subnets:
    - name: link
      subnet: 10.99.17.0/24
      interface: a0
      pools: ["10.99.17.100-10.99.17.199"]
    - name: rack
      subnet: 10.99.24.0/21
      pools: ["10.99.24.10-10.99.31.250"]
      router: 10.99.24.1
`

// Crash test: about 1,200 relayed clients DORA while the real binary is
// killed with SIGKILL once 1,000 have their ACK. After a restart every
// client that got an ACK keeps its address, and no address goes to two
// clients.
func TestCrashKeepsEveryAckedLease(t *testing.T) {
	l := newLabNS(t, "crash", 17)
	if err := l.pair.B.IP("addr", "add", "10.99.24.1/21", "dev", "b0"); err != nil {
		t.Fatal(err)
	}
	if err := l.pair.A.IP("route", "add", "10.99.24.0/21", "via", "10.99.17.2"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfgPath := writeFile(t, filepath.Join(dir, "ztpd.yaml"), fmt.Sprintf(crashConfig, data), 0o644)
	rc := newRelayClient(t, l.pair.B, "10.99.24.1", "10.99.17.1")

	srv := startZtpd(t, l.pair.A, "--config", cfgPath)
	waitServing(t, rc, srv, mac(0xfff0))

	const clients, killAt = 1200, 1000
	var mu sync.Mutex
	acked := map[string]string{} // MAC -> address
	var killed atomic.Bool
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < 48; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				hw := crashMAC(i)
				ip, err := rc.dora(hw)
				if err != nil {
					continue // the server died under this client
				}
				mu.Lock()
				acked[hw.String()] = ip.String()
				n := len(acked)
				mu.Unlock()
				if n >= killAt && killed.CompareAndSwap(false, true) {
					srv.cmd.Process.Signal(syscall.SIGKILL)
				}
			}
		}()
	}
	for i := 0; i < clients; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	if !killed.Load() {
		t.Fatalf("only %d of %d clients got an ACK before the kill", len(acked), clients)
	}
	<-srv.done
	srv.done <- nil
	t.Logf("%d clients got an ACK before and while ztpd was killed", len(acked))
	if len(acked) < killAt {
		t.Fatalf("%d ACKs, want at least %d", len(acked), killAt)
	}
	owner := map[string]string{}
	for hw, ip := range acked {
		if o, dup := owner[ip]; dup {
			t.Fatalf("before the crash %s was ACKed to %s and %s", ip, o, hw)
		}
		owner[ip] = hw
	}

	srv = startZtpd(t, l.pair.A, "--config", cfgPath)
	waitServing(t, rc, srv, mac(0xfff0))

	// Every client confirms its address (INIT-REBOOT) and is offered it again.
	type result struct{ hw, want, got, how string }
	results := make(chan result, len(acked))
	sem := make(chan struct{}, 48)
	for hw, ip := range acked {
		sem <- struct{}{}
		go func(hw, ip string) {
			defer func() { <-sem }()
			mac, _ := net.ParseMAC(hw)
			r, _ := dhcpv4.New(dhcpv4.WithHwAddr(mac), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
				dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP(ip))))
			rep, err := rc.do(r, 3, time.Second)
			switch {
			case err != nil:
				results <- result{hw, ip, err.Error(), "init-reboot"}
				return
			case rep.MessageType() != dhcpv4.MessageTypeAck:
				results <- result{hw, ip, rep.MessageType().String(), "init-reboot"}
				return
			}
			offer, err := rc.do(discover(mac), 3, time.Second)
			if err != nil {
				results <- result{hw, ip, err.Error(), "discover"}
				return
			}
			results <- result{hw, ip, offer.YourIPAddr.String(), "discover"}
		}(hw, ip)
	}
	for range acked {
		r := <-results
		if r.got != r.want {
			t.Errorf("after restart %s (%s): got %s, had %s", r.hw, r.how, r.got, r.want)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	// New clients never get an address someone holds.
	for i := 5000; i < 5300; i++ {
		ip, err := rc.dora(crashMAC(i))
		if err != nil {
			t.Fatalf("new client after restart: %v", err)
		}
		if o, taken := owner[ip.String()]; taken {
			t.Fatalf("new client %s got %s, which belongs to %s", crashMAC(i), ip, o)
		}
		owner[ip.String()] = crashMAC(i).String()
	}
	if err := srv.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("graceful stop: %v\n%s", err, srv.out)
	}

	// The store agrees: each ACKed address is an active lease of its client.
	st, err := boltstore.Open(data, boltstore.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	activeByMAC := map[string]string{}
	err = st.View(func(tx core.Tx) error {
		return tx.Leases().List("", func(ls core.Lease) (bool, error) {
			if ls.State == core.LeaseActive {
				if prev, dup := activeByMAC[ls.MAC]; dup {
					return false, fmt.Errorf("%s holds two active leases: %s and %s", ls.MAC, prev, ls.IP)
				}
				activeByMAC[ls.MAC] = ls.IP
			}
			return true, nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	for hw, ip := range acked {
		if activeByMAC[hw] != ip {
			t.Errorf("store: %s has %q, was ACKed %s", hw, activeByMAC[hw], ip)
		}
	}
}

func crashMAC(i int) net.HardwareAddr {
	return net.HardwareAddr{0x02, 0xcc, 0, 0, byte(i >> 8), byte(i)}
}

// A second ztpd on the same interface is refused with a clear message (the
// socket option SO_REUSEPORT would let it bind), and so is ztpd on an
// interface where another DHCP server already listens.
func TestSecondInstanceRefused(t *testing.T) {
	l := newLabNS(t, "twice", 19)
	dir := t.TempDir()
	args := func(data string) []string {
		return []string{"--data-dir", filepath.Join(dir, data), "--dhcp-interface", "a0",
			"--dhcp-range", "10.99.19.100-10.99.19.199", "--dhcp-relay", "10.99.19.2", "--http-addr", "10.99.19.1:0"}
	}
	first := startZtpd(t, l.pair.A, args("one")...)
	rc := newRelayClient(t, l.pair.B, "10.99.19.2", "10.99.19.1")
	waitServing(t, rc, first, mac(1))

	second := startZtpd(t, l.pair.A, args("two")...)
	select {
	case err := <-second.done:
		second.done <- err
		if err == nil {
			t.Fatalf("second ztpd exited 0:\n%s", second.out)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("second ztpd on the same interface is still running:\n%s", second.out)
	}
	if msg := second.out.String(); !strings.Contains(msg, "another ztpd is already serving DHCP on interface a0") {
		t.Fatalf("unclear refusal:\n%s", msg)
	}
	if _, err := rc.dora(mac(2)); err != nil {
		t.Fatalf("first ztpd stopped serving: %v", err)
	}
	if err := first.stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}

	if _, err := exec.LookPath("dnsmasq"); err != nil {
		t.Skip("dnsmasq not installed: foreign-server check skipped")
	}
	dm := l.pair.A.Command(context.Background(), "dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null",
		"--pid-file=", "--port=0", "--interface=a0", "--bind-interfaces", "--dhcp-range=10.99.19.50,10.99.19.60")
	var dmOut bytes.Buffer
	dm.Stdout, dm.Stderr = &dmOut, &dmOut
	if err := dm.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { dm.Process.Kill(); dm.Wait() }()
	time.Sleep(500 * time.Millisecond)
	third := startZtpd(t, l.pair.A, args("three")...)
	select {
	case err := <-third.done:
		third.done <- err
		if err == nil || !strings.Contains(third.out.String(), "held by another DHCP server") {
			t.Fatalf("ztpd beside dnsmasq: %v\n%s", err, third.out)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("ztpd started beside dnsmasq on the same interface:\n%s\ndnsmasq: %s", third.out, dmOut.String())
	}
}
