package dhcp6

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/internal/store/storetest"
	"github.com/ztpd/ztpd/testenv/busybox"
	"github.com/ztpd/ztpd/testenv/hermetic"
	"github.com/ztpd/ztpd/testenv/netns"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		os.Exit(crashChild())
	}
	hermetic.Isolate()
	os.Exit(m.Run())
}

// lab is namespaces for a server (a0, fd99:0:<n>:1::1/64) and a client
// (b0, link-local only) joined by a veth, with DAD off so addresses are
// usable at once, and an in-process Server on a0.
type lab struct {
	t      *testing.T
	a, b   *netns.NS
	n      int
	opt    Options
	srv    *Server
	st     *boltstore.Store
	reg    *prometheus.Registry
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

// addNS creates a namespace with DAD off (set before any link exists, so
// every address it gets is usable at once) and removes it after the test.
func addNS(t *testing.T, name string) *netns.NS {
	t.Helper()
	ns, err := netns.Add(fmt.Sprintf("%s-%x", name, os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	for _, k := range []string{"net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0",
		"net.ipv6.conf.all.forwarding=0"} {
		if out, err := ns.Command(context.Background(), "sysctl", "-qw", k).CombinedOutput(); err != nil {
			t.Fatalf("sysctl %s: %v: %s", k, err, out)
		}
	}
	return ns
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func (l *lab) prefix(sub int) string { return fmt.Sprintf("fd99:0:%x:%x::", l.n, sub) }

func newLabNS(t *testing.T, name string, n int) *lab {
	t.Helper()
	needTools(t, "sysctl")
	l := &lab{t: t, n: n}
	l.a, l.b = addNS(t, "z6"+name+"-a"), addNS(t, "z6"+name+"-b")
	if err := netns.Veth(l.a, "a0", l.prefix(1)+"1/64", l.b, "b0", ""); err != nil {
		t.Fatal(err)
	}
	waitLinkLocal(t, l.a, "a0")
	waitLinkLocal(t, l.b, "b0")
	return l
}

// waitLinkLocal waits for the interface's link-local address, which DHCPv6
// clients send from and the kernel adds once the link is up.
func waitLinkLocal(t *testing.T, ns *netns.NS, ifname string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := exec.Command("ip", "-n", ns.Name, "-6", "addr", "show", "dev", ifname, "scope", "link").Output()
		if strings.Contains(string(out), "fe80::") && !strings.Contains(string(out), "tentative") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has no usable link-local address: %s", ifname, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// labOptions serve fd99:0:<n>:1::/64 on a0 (pool ::100-::1ff).
func (l *lab) labOptions() Options {
	p := l.prefix(1)
	host := "[" + p + "1]"
	return Options{Interfaces: []string{"a0"}, OfferHold: 30 * time.Second, DeclineQuarantine: 10 * time.Minute,
		Subnets: []Subnet{{Name: "lab6", Prefix: mustPrefix(p + "/64"), Interface: "a0",
			Pools: []Range{{addr(p + "100"), addr(p + "1ff")}}, DNS: []netip.Addr{addr(p + "53")}, Domains: []string{"lab.example"},
			LeaseTime: time.Hour, RapidCommit: true}},
		ZTPJSONURL: "http://" + host + ":8080/ztp/ztp.json", ONIEInstallerURL: "http://" + host + ":8080/onie/installer"}
}

func (l *lab) start(mutate func(*Options)) {
	t := l.t
	t.Helper()
	l.logs = &syncBuffer{}
	l.opt = l.labOptions()
	if mutate != nil {
		mutate(&l.opt)
	}
	l.st = storetest.Store(t)
	log := slog.New(slog.NewTextHandler(l.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	devs := devices.New(devices.Options{Store: l.st, Log: log})
	t.Cleanup(func() { devs.Close() })
	opt := l.opt
	l.reg = prometheus.NewRegistry()
	opt.Store, opt.Devices, opt.Log, opt.Registerer = l.st, devs, log, l.reg
	var err error
	if l.srv, err = New(opt); err != nil {
		t.Fatal(err)
	}
	if err := l.a.Do(l.srv.Listen); err != nil {
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
	if l.t.Failed() {
		l.t.Logf("server log:\n%s", l.logs)
	}
}

// packets is ztpd_dhcp6_packets_total for one message type.
func (l *lab) packets(typ string) float64 {
	mfs, _ := l.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "ztpd_dhcp6_packets_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "type" && lp.GetValue() == typ {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func (l *lab) lease(ip string) core.Lease {
	l.t.Helper()
	var le core.Lease
	if err := l.st.View(func(tx core.Tx) error {
		var err error
		le, err = tx.Leases().Get(ip)
		return err
	}); err != nil {
		l.t.Fatalf("lease %s: %v", ip, err)
	}
	return le
}

func (l *lab) device(id string) core.Device {
	l.t.Helper()
	var d core.Device
	var err error
	for range 50 {
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

func writeFile(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
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

// sonicDhclientConf declares the options as SONiC's dhclient.conf does for
// DHCPv6 ZTP: option 59 (RFC 5970) and SONiC's option 239, user class
// "SONiC-ZTP".
const sonicDhclientConf = `
option dhcp6.boot-file-url code 59 = string;
option dhcp6.provisioning-script-url code 239 = string;
option dhcp6.user-class code 15 = string;
send dhcp6.user-class "SONiC-ZTP";
request dhcp6.boot-file-url, dhcp6.provisioning-script-url, dhcp6.name-servers, dhcp6.domain-search;
`

var iaaddrRE = regexp.MustCompile(`iaaddr (\S+) \{`)

// dhclient -6 configured as SONiC gets an address and option 59, renews,
// then releases.
func TestRealDhclient6SONiC(t *testing.T) {
	needTools(t, "dhclient")
	l := newLabNS(t, "sonic", 0x21)
	l.start(func(o *Options) {
		o.Subnets[0].LeaseTime = 4 * time.Second // T1 2 s: a renewal within the test
		o.Subnets[0].Options = OptionValues{optProvisionScript: []byte("http://[" + l.prefix(1) + "1]:8080/ztp/provision.sh")}
	})
	dir := t.TempDir()
	conf := writeFile(t, filepath.Join(dir, "dhclient6.conf"), sonicDhclientConf)
	leases := filepath.Join(dir, "leases")
	// One dhclient run: the lease, then renewals past T1.
	runUntil(t, l.b, 30*time.Second, func() bool { return fileContains(leases, "iaaddr") && l.packets("renew") >= 2 },
		"dhclient", "-6", "-d", "-v", "-cf", conf, "-lf", leases, "-pf", filepath.Join(dir, "pid"),
		"-sf", "/bin/true", "b0")
	b, _ := os.ReadFile(leases)
	lease := string(b)
	want := fmt.Sprintf(`option dhcp6.boot-file-url "%s";`, l.opt.ZTPJSONURL)
	if !strings.Contains(lease, want) {
		t.Fatalf("lease lacks %s:\n%s", want, lease)
	}
	if !strings.Contains(lease, "option dhcp6.provisioning-script-url") || !strings.Contains(lease, "option dhcp6.name-servers "+l.prefix(1)+"53") {
		t.Fatalf("lease lacks option 239 or 23:\n%s", lease)
	}
	ip := iaaddrRE.FindStringSubmatch(lease)[1]
	if !strings.HasPrefix(ip, l.prefix(1)) {
		t.Fatalf("address %s is not from the pool", ip)
	}
	mac, _ := l.b.MAC("b0")
	if d := l.device(mac); d.Kind != core.KindSONiC || d.IP != ip {
		t.Fatalf("device record = %+v", d)
	}
	// Renewals extend the stored lease; its start stays the grant's.
	if got := l.lease(ip); got.MAC != mac || got.State != core.LeaseActive || got.Expiry.Sub(got.Start) <= 4*time.Second {
		t.Fatalf("stored lease after renewals = %+v", got)
	}

	// Release.
	out, err := l.b.Command(context.Background(), "dhclient", "-6", "-r", "-v", "-cf", conf, "-lf", leases,
		"-pf", filepath.Join(dir, "pid"), "-sf", "/bin/true", "b0").CombinedOutput()
	if err != nil {
		t.Fatalf("dhclient -r: %v\n%s", err, out)
	}
	deadline := time.Now().Add(5 * time.Second)
	for l.lease(ip).State != core.LeaseReleased {
		if time.Now().After(deadline) {
			t.Fatalf("lease after dhclient -6 -r: %+v\n%s", l.lease(ip), out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dhclient -6 asking for Rapid Commit gets its lease in two messages.
func TestRealDhclient6RapidCommit(t *testing.T) {
	needTools(t, "dhclient")
	l := newLabNS(t, "rapid", 0x22)
	l.start(nil)
	dir := t.TempDir()
	conf := writeFile(t, filepath.Join(dir, "dhclient6.conf"), sonicDhclientConf+"send dhcp6.rapid-commit;\n")
	leases := filepath.Join(dir, "leases")
	runUntil(t, l.b, 30*time.Second, func() bool { return fileContains(leases, "iaaddr") },
		"dhclient", "-6", "-d", "-1", "-v", "-cf", conf, "-lf", leases, "-pf", filepath.Join(dir, "pid"),
		"-sf", "/bin/true", "b0")
	if l.packets("solicit") < 1 || l.packets("request") != 0 {
		t.Fatalf("solicits %v, requests %v: want a Rapid Commit exchange", l.packets("solicit"), l.packets("request"))
	}
}

// busybox udhcpc6 gets an address and the DNS server, and ztpd stores
// its lease.
func TestRealUdhcpc6(t *testing.T) {
	l := newLabNS(t, "udhcpc6", 0x23)
	l.start(nil)
	env := runUdhcpc6(t, l)
	got := envAddr(t, env, "ipv6")
	if want := addr(l.prefix(1) + "100"); got != want {
		t.Errorf("udhcpc6 bound %s, want the pool's first address %s", got, want)
	}
	if dns, want := envAddr(t, env, "dns"), addr(l.prefix(1)+"53"); dns != want {
		t.Errorf("udhcpc6 got DNS server %s, want %s (option 23)", dns, want)
	}
	var lease core.Lease
	if err := l.st.View(func(tx core.Tx) error {
		var err error
		lease, err = tx.Leases().Get(got.String())
		return err
	}); err != nil {
		t.Fatalf("no lease stored for %s: %v", got, err)
	}
	if lease.State != core.LeaseActive {
		t.Errorf("lease of %s is %s, want active", got, lease.State)
	}
}

// ONIE's DHCPv6 discovery (opencomputeproject/onie#1136) as busybox
// udhcpc6 does it: the vendor class "onie_vendor:<platform>" and a request
// for the boot file URL, which is the ONIE installer's.
func TestRealUdhcpc6ONIE(t *testing.T) {
	l := newLabNS(t, "udhcpc6-onie", 0x25)
	l.start(nil)
	// Vendor class (16): enterprise number, then length-prefixed data.
	data := "onie_vendor:x86_64-accton_as7326_56x-r0"
	vc := fmt.Sprintf("%08x%04x%x", 42623, len(data), data)
	env := runUdhcpc6(t, l, "-x", "16:"+vc, "-O", "bootfile_url")
	if got, want := env["bootfile_url"], l.opt.ONIEInstallerURL; got != want {
		t.Errorf("udhcpc6 got boot file URL %q, want the ONIE installer's %q (option 59)", got, want)
	}
	got := envAddr(t, env, "ipv6")
	if d := l.device(l.lease(got.String()).MAC); d.Kind != core.KindONIE {
		t.Errorf("device %s recorded as %q, want %q (by its vendor class)", d.ID, d.Kind, core.KindONIE)
	}
}

// runUdhcpc6 runs busybox udhcpc6 on l's client link until it is bound,
// and returns the environment its script was called with.
func runUdhcpc6(t *testing.T, l *lab, args ...string) map[string]string {
	t.Helper()
	needTools(t)
	bb, err := busybox.Udhcpc6()
	if err != nil {
		t.Skip("skipping:", err)
	}
	dir := t.TempDir()
	envFile := filepath.Join(dir, "env")
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n[ \"$1\" = bound ] && env > \""+envFile+".tmp\" && mv \""+envFile+".tmp\" \""+envFile+"\"\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	runUntil(t, l.b, 30*time.Second, func() bool {
		b, err := os.ReadFile(envFile)
		if err != nil {
			return false
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				env[k] = v
			}
		}
		return env["ipv6"] != ""
	}, bb, append([]string{"udhcpc6", "-f", "-q", "-i", "b0", "-s", script}, args...)...)
	return env
}

// envAddr is the address udhcpc6 put in env[key] (written in full,
// fd99:0000:...; the first of a list).
func envAddr(t *testing.T, env map[string]string, key string) netip.Addr {
	t.Helper()
	f := strings.Fields(env[key])
	if len(f) == 0 {
		t.Errorf("udhcpc6 gave no %s", key)
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(f[0])
	if err != nil {
		t.Errorf("udhcpc6's %s=%q: %v", key, env[key], err)
	}
	return a
}

// ISC dhcrelay -6 relays a client of another link; the server records the
// interface-id on the device and answers through the relay.
func TestRealDhcrelay6(t *testing.T) {
	needTools(t, "dhclient", "dhcrelay")
	l := newLabNS(t, "relay", 0x24)
	// a (server, a0 ::1 on link 1) -- r (relay: r0 ::2 on link 1, r1 ::1 on link 2) -- c (client on link 2)
	r, c := addNS(t, "z6relay-r"), addNS(t, "z6relay-c")
	if err := netns.Veth(r, "r1", l.prefix(2)+"1/64", c, "c0", ""); err != nil {
		t.Fatal(err)
	}
	waitLinkLocal(t, r, "r1")
	waitLinkLocal(t, c, "c0")
	// The server's link to the relay: a second veth a1/r0 on link 1's
	// sibling, so b0 stays the direct client link.
	if err := netns.Veth(l.a, "a1", l.prefix(3)+"1/64", r, "r0", l.prefix(3)+"2/64"); err != nil {
		t.Fatal(err)
	}
	waitLinkLocal(t, r, "r0")
	relaySrc, link := addr(l.prefix(3)+"2"), addr(l.prefix(2)+"1")
	l.start(func(o *Options) {
		o.Interfaces = []string{"a0", "a1"}
		o.Subnets = append(o.Subnets, Subnet{Name: "relayed6", Prefix: mustPrefix(l.prefix(2) + "/64"),
			Pools: []Range{{addr(l.prefix(2) + "100"), addr(l.prefix(2) + "1ff")}}, LeaseTime: time.Hour})
		o.Relays = []Relay{{Sources: []netip.Addr{relaySrc}, LinkAddrs: []netip.Addr{link}}}
	})
	ctx, cancel := context.WithCancel(context.Background())
	relay := r.Command(ctx, "dhcrelay", "-6", "-d", "-I", "--no-pid", "-l", "r1", "-u", l.prefix(3)+"1%r0")
	var rout syncBuffer
	relay.Stdout, relay.Stderr = &rout, &rout
	if err := relay.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); relay.Wait() })
	time.Sleep(500 * time.Millisecond) // the relay binds its sockets
	dir := t.TempDir()
	conf := writeFile(t, filepath.Join(dir, "dhclient6.conf"), sonicDhclientConf)
	leases := filepath.Join(dir, "leases")
	out := runUntil(t, c, 30*time.Second, func() bool { return fileContains(leases, "iaaddr") },
		"dhclient", "-6", "-d", "-1", "-v", "-cf", conf, "-lf", leases, "-pf", filepath.Join(dir, "pid"),
		"-sf", "/bin/true", "c0")
	b, _ := os.ReadFile(leases)
	ip := iaaddrRE.FindStringSubmatch(string(b))[1]
	if !strings.HasPrefix(ip, l.prefix(2)) {
		t.Fatalf("relayed client got %s, not from the relayed subnet:\n%s\nrelay:\n%s", ip, out, rout.String())
	}
	mac, _ := c.MAC("c0")
	d := l.device(mac)
	// ISC dhcrelay's interface-id is its own index of the downstream
	// interface (4 bytes); it routes the Relay-Repl down by it, so the
	// client's lease shows the echo came back.
	if d.CircuitID == "" || d.RelayAddr != link.String() || d.IP != ip {
		t.Fatalf("device record = %+v (relay log:\n%s)", d, rout.String())
	}
}
