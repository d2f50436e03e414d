// Package lab builds a small data-centre management network in network
// namespaces and onboards simulated devices through a real ztpd with real
// clients (dhclient, busybox udhcpc, curl).
//
//	<p>-app    appliance: bridge br0 10.99.<a>.1/24 (subnet A), runs ztpd
//	<p>-relay  DHCP relay (dnsmasq --dhcp-relay): uplink 10.99.<a>.254 on br0,
//	           bridge br1 10.99.<a+1>.1/24 (subnet B, reached through the relay)
//	<p>-dN     one namespace per device, eth0 enslaved to br0 or br1
//
// With ports (BuildPorts, IPv4) subnet B is relayed by ISC dhcrelay -a
// instead: besides br1, the relay has one port per planned switch (pN,
// cabled to the switch alone, option 82 circuit-id "pN"), each carrying
// br1's address as a /32 and a host route to the address the cabling plan
// gives that port; proxy ARP joins the ports and br1 into one subnet.
//
// On IPv6 (BuildFamily) subnet A is fd99:0:<a>:1::/64 (the appliance ::1,
// the relay's uplink ::fe) and subnet B fd99:0:<a>:2::/64 (the relay ::1),
// relayed by ISC dhcrelay -6; a v6-only lab has no IPv4 address at all.
//
// Close stops every process the lab started and deletes every namespace
// and link, also after an interrupt.
package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ztpd/ztpd/testenv/netns"
)

// Subnet picks which management network a device sits on.
type Subnet int

const (
	SubnetA Subnet = iota // the appliance's own network
	SubnetB               // behind the DHCP relay
)

// Topology is the namespaces, bridges and relay of one lab.
type Topology struct {
	Prefix  string
	App     *netns.NS
	Relay   *netns.NS
	AppAddr netip.Addr // 10.99.<a>.1
	RelayUp netip.Addr // 10.99.<a>.254
	RelayGW netip.Addr // 10.99.<a+1>.1
	Nets    [2]netip.Prefix
	WorkDir string
	// Family is what the management networks carry: the IPv4 addresses
	// above are configured when it includes IPv4, the IPv6 ones below
	// when it includes IPv6.
	Family   Family
	AppAddr6 netip.Addr // fd99:0:<a>:1::1
	RelayUp6 netip.Addr // fd99:0:<a>:1::fe
	RelayGW6 netip.Addr // fd99:0:<a>:2::1
	Nets6    [2]netip.Prefix

	// Ports is the number of relay ports (BuildPorts), 0 for none.
	Ports int

	mu      sync.Mutex
	devices []*netns.NS
	procs   []*Proc
	closers []func()
	closed  bool
}

// Family is the address families of a lab's management networks.
type Family int

const (
	IPv4      Family = iota
	IPv6             // v6-only: no IPv4 address anywhere in the lab
	DualStack        // both, each relayed by its own relay
)

func (f Family) has4() bool { return f != IPv6 }
func (f Family) has6() bool { return f != IPv4 }

// String is the ztpd-lab flag spelling.
func (f Family) String() string { return [...]string{"ipv4", "ipv6", "dual-stack"}[f] }

// Build creates an IPv4 lab's namespaces. third is the third octet of
// subnet A (subnet B is third+1), so parallel labs can use disjoint
// addresses.
func Build(prefix string, third int, workDir string) (*Topology, error) {
	return BuildFamily(prefix, third, workDir, IPv4)
}

// BuildFamily is Build for the given address families; third also picks
// the IPv6 subnets (fd99:0:<third>:1::/64 and :2::/64).
func BuildFamily(prefix string, third int, workDir string, fam Family) (*Topology, error) {
	return buildLab(prefix, third, workDir, fam, 0)
}

// BuildPorts builds an IPv4 lab whose relay has ports relay ports (p0..):
// a switch plugged into one (AddDeviceAtPort) is told apart by the
// circuit-id ISC dhcrelay -a adds, as a cabling plan's position.
func BuildPorts(prefix string, third int, workDir string, ports int) (*Topology, error) {
	if ports < 1 || ports > maxPorts {
		return nil, fmt.Errorf("relay ports: %d, want 1..%d", ports, maxPorts)
	}
	return buildLab(prefix, third, workDir, IPv4, ports)
}

// maxPorts keeps the ports' addresses (PortAddr) above subnet B's pool.
const maxPorts = 40

func buildLab(prefix string, third int, workDir string, fam Family, ports int) (*Topology, error) {
	if err := netns.Check(); err != nil {
		return nil, err
	}
	if third < 0 || third > 253 {
		return nil, fmt.Errorf("third octet %d out of range", third)
	}
	tools := []string{"dhclient", "busybox", "curl"}
	if fam.has4() {
		tools = append(tools, "dnsmasq")
	}
	if fam.has6() || ports > 0 {
		tools = append(tools, "dhcrelay")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("lab needs %s: %w", tool, err)
		}
	}
	cleanupStale(prefix)
	v6 := func(subnet, host int) netip.Addr {
		return netip.MustParseAddr(fmt.Sprintf("fd99:0:%x:%x::%x", third, subnet, host))
	}
	t := &Topology{Prefix: prefix, WorkDir: workDir, Family: fam, Ports: ports,
		AppAddr6: v6(1, 1), RelayUp6: v6(1, 0xfe), RelayGW6: v6(2, 1),
		Nets6:   [2]netip.Prefix{netip.PrefixFrom(v6(1, 0), 64), netip.PrefixFrom(v6(2, 0), 64)},
		AppAddr: netip.AddrFrom4([4]byte{10, 99, byte(third), 1}),
		RelayUp: netip.AddrFrom4([4]byte{10, 99, byte(third), 254}),
		RelayGW: netip.AddrFrom4([4]byte{10, 99, byte(third + 1), 1}),
		Nets: [2]netip.Prefix{
			netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 99, byte(third), 0}), 24),
			netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 99, byte(third + 1), 0}), 24),
		},
	}
	if err := t.build(); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

func (t *Topology) build() error {
	var err error
	if err = os.MkdirAll(t.WorkDir, 0o755); err != nil {
		return err
	}
	if t.App, err = netns.Add(t.Prefix + "-app"); err != nil {
		return err
	}
	if t.Relay, err = netns.Add(t.Prefix + "-relay"); err != nil {
		return err
	}
	if t.Family.has6() {
		for _, ns := range []*netns.NS{t.App, t.Relay} {
			if err := noDAD(ns); err != nil {
				return err
			}
		}
	}
	// A bridge without an address of its own takes the lowest MAC of its
	// ports, so it changed as devices were plugged in, and the relay's ARP
	// entry for the appliance went stale: relayed requests then arrived
	// addressed to another host and were dropped for up to a minute. Real
	// routers keep one MAC; so do these.
	steps := [][]string{
		{t.App.Name, "link", "add", "br0", "address", bridgeMAC(t.AppAddr), "type", "bridge"},
		{t.Relay.Name, "link", "add", "br1", "address", bridgeMAC(t.RelayGW), "type", "bridge"},
	}
	if t.Family.has4() {
		steps = append(steps, []string{t.App.Name, "addr", "add", t.AppAddr.String() + "/24", "dev", "br0"},
			[]string{t.Relay.Name, "addr", "add", t.RelayGW.String() + "/24", "dev", "br1"})
	}
	if t.Family.has6() {
		steps = append(steps, []string{t.App.Name, "addr", "add", t.AppAddr6.String() + "/64", "dev", "br0", "nodad"},
			[]string{t.Relay.Name, "addr", "add", t.RelayGW6.String() + "/64", "dev", "br1", "nodad"})
	}
	steps = append(steps, []string{t.App.Name, "link", "set", "br0", "up"}, []string{t.Relay.Name, "link", "set", "br1", "up"})
	for _, s := range steps {
		if err := ipIn(s[0], s[1:]...); err != nil {
			return err
		}
	}
	up4 := ""
	if t.Family.has4() {
		up4 = t.RelayUp.String() + "/24"
	}
	if err := t.plug(t.Relay, "up0", up4, t.App, "br0"); err != nil {
		return err
	}
	// Both routers forward: devices on subnet A (default route: the
	// appliance) reach API servers on subnet B through the relay.
	if t.Family.has4() {
		if err := ipIn(t.App.Name, "route", "add", t.Nets[1].String(), "via", t.RelayUp.String()); err != nil {
			return err
		}
		for _, ns := range []*netns.NS{t.Relay, t.App} {
			if err := ns.Command(context.Background(), "sysctl", "-qw", "net.ipv4.ip_forward=1").Run(); err != nil {
				return fmt.Errorf("enable forwarding in %s: %w", ns.Name, err)
			}
		}
	}
	if t.Family.has6() {
		if err := ipIn(t.Relay.Name, "addr", "add", t.RelayUp6.String()+"/64", "dev", "up0", "nodad"); err != nil {
			return err
		}
		if err := ipIn(t.App.Name, "-6", "route", "add", t.Nets6[1].String(), "via", t.RelayUp6.String()); err != nil {
			return err
		}
		for _, ns := range []*netns.NS{t.Relay, t.App} {
			if err := ns.Command(context.Background(), "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1").Run(); err != nil {
				return fmt.Errorf("enable IPv6 forwarding in %s: %w", ns.Name, err)
			}
		}
		// A bridge gets its link-local address once a port carries (br0's
		// first is the relay's uplink; br1 has none until a device plugs
		// in): ztpd's ONIE listener binds br0's.
		for _, l := range []struct {
			ns *netns.NS
			br string
		}{{t.App, "br0"}, {t.Relay, "up0"}} {
			if err := waitLinkLocal(l.ns, l.br); err != nil {
				return err
			}
		}
	}
	if t.Ports > 0 {
		if err := t.startPortRelay4(); err != nil {
			return err
		}
	} else if t.Family.has4() {
		if err := t.startRelay4(); err != nil {
			return err
		}
	}
	if t.Family.has6() {
		return t.startRelay6()
	}
	return nil
}

// startRelay4 runs dnsmasq as a pure DHCP relay: giaddr = br1's address,
// server = the appliance. It stays root so the lab can always stop it.
func (t *Topology) startRelay4() error {
	relay := t.Relay.Command(context.Background(), "dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null",
		"--pid-file=", "--port=0", "--user=root", "--interface=br1", "--bind-interfaces",
		"--dhcp-relay="+t.RelayGW.String()+","+t.AppAddr.String(), "--log-dhcp",
		"--log-facility="+filepath.Join(t.WorkDir, "relay.log"))
	if err := t.Start(relay, "relay"); err != nil {
		return err
	}
	// Devices on subnet B boot only once the relay relays: dnsmasq logs
	// its relay when its sockets are ready.
	deadline := time.Now().Add(15 * time.Second)
	for {
		if b, _ := os.ReadFile(filepath.Join(t.WorkDir, "relay.log")); strings.Contains(string(b), "DHCP relay from") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the DHCP relay (dnsmasq) did not start within 15 s: see %s", filepath.Join(t.WorkDir, "relay.out"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// PortAddr is the address the lab's cabling plan gives relay port i:
// subnet B's .210 + i, above its pool.
func (t *Topology) PortAddr(i int) netip.Addr {
	a := t.RelayGW.As4()
	a[3] = byte(210 + i)
	return netip.AddrFrom4(a)
}

// PortName is relay port i's interface name: the circuit-id dhcrelay -a
// sends for the switch cabled to it.
func PortName(i int) string { return fmt.Sprintf("p%d", i) }

// startPortRelay4 creates the relay's ports and runs ISC dhcrelay -a on
// them and br1: each port is a veth whose other end waits in the relay's
// namespace (c<i>) until a switch is plugged in (AddDeviceAtPort), so
// dhcrelay knows every port from its start.
func (t *Topology) startPortRelay4() error {
	args := []string{"-4", "-d", "-a", "-pf", filepath.Join(t.WorkDir, "relay.pid"), "-iu", "up0", "-id", "br1"}
	for i := 0; i < t.Ports; i++ {
		p := PortName(i)
		for _, s := range [][]string{
			{"link", "add", p, "type", "veth", "peer", "name", fmt.Sprintf("c%d", i)},
			{"addr", "add", t.RelayGW.String() + "/32", "dev", p},
			{"link", "set", p, "up"},
			{"route", "add", t.PortAddr(i).String() + "/32", "dev", p},
		} {
			if err := ipIn(t.Relay.Name, s...); err != nil {
				return err
			}
		}
		args = append(args, "-id", p)
	}
	// One subnet over br1 and the ports: the relay answers ARP for an
	// address it routes through another of its links.
	if out, err := t.Relay.Command(context.Background(), "sysctl", "-qw", "net.ipv4.conf.all.proxy_arp=1").CombinedOutput(); err != nil {
		return fmt.Errorf("proxy ARP in %s: %v: %s", t.Relay.Name, err, out)
	}
	relay := t.Relay.Command(context.Background(), "dhcrelay", append(args, t.AppAddr.String())...)
	if err := t.Start(relay, "relay"); err != nil {
		return err
	}
	return t.waitRelayBound(67, "dhcrelay -a", "relay.out")
}

// startRelay6 runs ISC dhcrelay -6: clients on br1 (its link address is
// br1's global address, RelayGW6), the appliance upstream through up0
// (Relay-Forw from RelayUp6).
func (t *Topology) startRelay6() error {
	relay := t.Relay.Command(context.Background(), "dhcrelay", "-6", "-d", "-q",
		"-pf", filepath.Join(t.WorkDir, "relay6.pid"), "-l", "br1", "-u", t.AppAddr6.String()+"%up0")
	if err := t.Start(relay, "relay6"); err != nil {
		return err
	}
	return t.waitRelayBound(547, "dhcrelay -6", "relay6.out")
}

// waitRelayBound waits up to 15 s for the relay's UDP port: devices on
// subnet B boot only once the relay relays.
func (t *Topology) waitRelayBound(port int, what, log string) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, _ := t.Relay.Command(context.Background(), "ss", "-Hlun", fmt.Sprintf("sport = :%d", port)).Output()
		if strings.TrimSpace(string(out)) != "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the DHCP relay (%s) did not bind port %d within 15 s: see %s", what, port, filepath.Join(t.WorkDir, log))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitLinkLocal waits up to 10 s for ifname's fe80:: address in ns.
func waitLinkLocal(ns *netns.NS, ifname string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := exec.Command("ip", "-n", ns.Name, "-6", "addr", "show", "dev", ifname, "scope", "link").Output()
		if strings.Contains(string(out), "fe80::") && !strings.Contains(string(out), "tentative") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s in %s has no usable link-local address after 10 s: %s", ifname, ns.Name, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// noDAD turns duplicate address detection off in ns before its links
// exist, so every IPv6 address (link-local ones too) is usable at once:
// the lab's addresses are unique by construction.
func noDAD(ns *netns.NS) error {
	for _, k := range []string{"net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0"} {
		if out, err := ns.Command(context.Background(), "sysctl", "-qw", k).CombinedOutput(); err != nil {
			return fmt.Errorf("sysctl %s in %s: %v: %s", k, ns.Name, err, out)
		}
	}
	return nil
}

// link6 is what a v6-only device on d's subnet is given besides DHCPv6.
func (t *Topology) link6(d *Device) *Link6 {
	if d.Subnet == SubnetB {
		return &Link6{OnLink: t.Nets6[1], Router: t.RelayGW6, Metadata: t.AppAddr6}
	}
	return &Link6{OnLink: t.Nets6[0], Router: t.AppAddr6, Metadata: t.AppAddr6}
}

// bridgeMAC is a fixed, locally administered MAC for the bridge that holds
// addr: 02:99 and the address's four bytes.
func bridgeMAC(addr netip.Addr) string {
	a := addr.As4()
	return fmt.Sprintf("02:99:%02x:%02x:%02x:%02x", a[0], a[1], a[2], a[3])
}

// plug creates a veth from ns (named ifn, with addr) whose peer is enslaved
// to bridge br in brNS.
func (t *Topology) plug(ns *netns.NS, ifn, addr string, brNS *netns.NS, br string) error {
	peer := fmt.Sprintf("v%s%d", ifn, time.Now().UnixNano()%1e6)
	if err := run("ip", "link", "add", ifn, "netns", ns.Name, "type", "veth", "peer", "name", peer, "netns", brNS.Name); err != nil {
		return err
	}
	if addr != "" {
		if err := ipIn(ns.Name, "addr", "add", addr, "dev", ifn); err != nil {
			return err
		}
	}
	if err := ipIn(ns.Name, "link", "set", ifn, "up"); err != nil {
		return err
	}
	if err := ipIn(brNS.Name, "link", "set", peer, "master", br); err != nil {
		return err
	}
	return ipIn(brNS.Name, "link", "set", peer, "up")
}

// AddDevice creates a device namespace with eth0 (MAC mac, no address) on
// the given subnet.
func (t *Topology) AddDevice(name string, on Subnet, mac string) (*netns.NS, error) {
	ns, err := netns.Add(t.Prefix + "-" + name)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.devices = append(t.devices, ns)
	t.mu.Unlock()
	if t.Family.has6() {
		if err := noDAD(ns); err != nil {
			return nil, err
		}
	}
	brNS, br := t.App, "br0"
	if on == SubnetB {
		brNS, br = t.Relay, "br1"
	}
	peer := fmt.Sprintf("d%s", name)
	if len(peer) > 15 {
		peer = peer[:15]
	}
	if err := run("ip", "link", "add", "eth0", "netns", ns.Name, "address", mac, "type", "veth",
		"peer", "name", peer, "netns", brNS.Name); err != nil {
		return nil, err
	}
	if err := ipIn(ns.Name, "link", "set", "eth0", "up"); err != nil {
		return nil, err
	}
	if err := ipIn(brNS.Name, "link", "set", peer, "master", br); err != nil {
		return nil, err
	}
	return ns, ipIn(brNS.Name, "link", "set", peer, "up")
}

// AddDeviceAtPort creates a device namespace cabled to relay port i:
// the port's waiting veth end becomes its eth0 (MAC mac, no address).
func (t *Topology) AddDeviceAtPort(name string, port int, mac string) (*netns.NS, error) {
	if port < 0 || port >= t.Ports {
		return nil, fmt.Errorf("relay port %d: the lab has %d", port, t.Ports)
	}
	ns, err := netns.Add(t.Prefix + "-" + name)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.devices = append(t.devices, ns)
	t.mu.Unlock()
	end := fmt.Sprintf("c%d", port)
	if err := ipIn(t.Relay.Name, "link", "set", end, "netns", ns.Name); err != nil {
		return nil, err
	}
	for _, s := range [][]string{{"link", "set", end, "name", "eth0"}, {"link", "set", "eth0", "address", mac}, {"link", "set", "eth0", "up"}} {
		if err := ipIn(ns.Name, s...); err != nil {
			return nil, err
		}
	}
	return ns, nil
}

// deviceNS is the namespace of the device named name, or nil.
func (t *Topology) deviceNS(name string) *netns.NS {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ns := range t.devices {
		if ns.Name == t.Prefix+"-"+name {
			return ns
		}
	}
	return nil
}

// plugDevice creates d's namespace on its subnet, or at its relay port.
func (t *Topology) plugDevice(d *Device) (*netns.NS, error) {
	if d.Cabled {
		return t.AddDeviceAtPort(d.Name, d.Port, d.MAC)
	}
	return t.AddDevice(d.Name, d.Subnet, d.MAC)
}

// Proc is a started process with exactly one waiter.
type Proc struct {
	Cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// StartProc starts cmd in its own process group.
func StartProc(cmd *exec.Cmd) (*Proc, error) {
	setPgid(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proc{Cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// BuildBinaries builds each Go package into its path (keys are output
// paths, values import paths), as the namespace tests and benchmarks run
// the real binaries.
func BuildBinaries(bins map[string]string) error {
	for out, pkg := range bins {
		if msg, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %v\n%s", pkg, err, msg)
		}
	}
	return nil
}

// Pin binds every thread of the process to cpus (a taskset list).
func Pin(p *Proc, cpus string) ([]byte, error) {
	return exec.Command("taskset", "-a", "-p", "-c", cpus, fmt.Sprint(p.Cmd.Process.Pid)).CombinedOutput()
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the exit error, valid after Done.
func (p *Proc) Err() error { return p.err }

// Stop ends the process group: SIGTERM, then SIGKILL after grace.
func (p *Proc) Stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Start runs cmd as a tracked Proc (output to <workdir>/<logName>.out)
// that Close stops.
func (t *Topology) Start(cmd *exec.Cmd, logName string) error {
	_, err := t.StartProc(cmd, logName)
	return err
}

// StartProc is Start returning the Proc.
func (t *Topology) StartProc(cmd *exec.Cmd, logName string) (*Proc, error) {
	if cmd.Stdout == nil && logName != "" {
		f, err := os.Create(filepath.Join(t.WorkDir, logName+".out"))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	}
	p, err := StartProc(cmd)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", logName, err)
	}
	t.mu.Lock()
	t.procs = append(t.procs, p)
	t.mu.Unlock()
	return p, nil
}

// onClose runs f when the topology closes, before its processes stop.
func (t *Topology) onClose(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closers = append(t.closers, f)
}

// Close stops every process and removes every namespace (with its links).
func (t *Topology) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	procs, devices, closers := t.procs, t.devices, t.closers
	t.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Stop(3 * time.Second)
	}
	var errs []error
	for _, ns := range append(devices, t.Relay, t.App) {
		if ns != nil {
			// Processes a client left behind (dhclient daemons) keep a
			// namespace alive; kill what still runs inside first.
			killInside(ns.Name)
			errs = append(errs, ns.Close())
		}
	}
	return errors.Join(errs...)
}

// cleanupStale removes what a lab of the same prefix left behind when it was
// killed: every process runs inside a lab namespace, so killing what runs in
// them and deleting them leaves nothing.
func cleanupStale(prefix string) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
			killInside(f[0])
			_ = exec.Command("ip", "netns", "del", f[0]).Run()
		}
	}
}

func killInside(ns string) {
	out, err := exec.Command("ip", "netns", "pids", ns).Output()
	if err != nil {
		return
	}
	var pid int
	for _, f := range strings.Fields(string(out)) {
		if _, err := fmt.Sscanf(f, "%d", &pid); err == nil && pid > 1 && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func ipIn(ns string, args ...string) error { return run("ip", append([]string{"-n", ns}, args...)...) }

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %v: %v: %s", name, args, err, out)
	}
	return nil
}

// setPgid puts cmd in its own process group so Stop ends all of it. No
// parent-death signal: Linux ties it to the forking thread, and Go retires
// threads (netns.Do locks and discards one), which would kill the child.
func setPgid(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}
