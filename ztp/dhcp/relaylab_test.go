package dhcp

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/testenv/netns"
)

// rawReply is one reply rawdhcp.py printed.
type rawReply struct {
	Type   int    `json:"type"`
	YIAddr string `json:"yiaddr"`
}

// rawDHCP runs testdata/rawdhcp.py in ns (a host writing whatever DHCP
// fields it likes) and returns the replies it saw.
func rawDHCP(t *testing.T, ns *netns.NS, args ...string) []rawReply {
	t.Helper()
	script, err := filepath.Abs("testdata/rawdhcp.py")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := ns.Command(ctx, "python3", append([]string{script}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("rawdhcp.py %v: %v\n%s", args, err, out)
	}
	var rs []rawReply
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		var r rawReply
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("rawdhcp.py printed %q", line)
		}
		rs = append(rs, r)
	}
	return rs
}

// relayInfo is option 82 with one circuit id, as --opt text.
func relayInfo(circuit string) string {
	return "82:" + hex.EncodeToString(append([]byte{relayCircuitID, byte(len(circuit))}, circuit...))
}

// A real relay (ISC dhcrelay -a, circuit id = its client-side interface)
// declared under Relays is served and its circuit id recorded; a host on
// the appliance's link forging giaddr and option 82, or sending option 82
// or link selection without giaddr, gets nothing in the relayed subnet and
// is counted.
func TestRealDhcrelayTrustedForgedRelayDropped(t *testing.T) {
	needTools(t, "dhcrelay", "busybox", "python3")
	l, cli := relayLab(t, "rly", 40, false)
	ctx, cancel := context.WithCancel(context.Background())
	relay := l.pair.B.Command(ctx, "dhcrelay", "-4", "-d", "-a", "-iu", "b0", "-id", "r1", "10.99.40.1")
	var relayOut syncBuffer
	relay.Stdout, relay.Stderr = &relayOut, &relayOut
	if err := relay.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		relay.Wait()
		if t.Failed() {
			t.Logf("dhcrelay:\n%s", relayOut.String())
		}
	})

	d := leaseBehindRelay(t, l, cli, 41)
	if d.CircuitID != "r1" || d.RelayAddr != "10.99.41.1" {
		t.Fatalf("declared relay's information not recorded: circuit %q relay %q", d.CircuitID, d.RelayAddr)
	}

	// The attacker: giaddr of the relay's subnet, option 82 with the
	// circuit id an approval rule names, from its own address.
	before := counterValue(l.srv.metrics.dropUntrustedRelay)
	forged := "02:00:00:00:40:66"
	rawDHCP(t, l.pair.B, "--iface", "b0", "--src", "10.99.40.66", "--dst", "10.99.40.1", "--chaddr", forged,
		"--giaddr", "10.99.41.1", "--opt", relayInfo("rack7/port3"), "--wait", "1")
	rawDHCP(t, l.pair.B, "--iface", "b0", "--src", "10.99.40.66", "--dst", "10.99.40.1", "--chaddr", forged,
		"--giaddr", "10.99.41.1", "--type", "request", "--requested", "10.99.41.11", "--opt", relayInfo("rack7/port3"), "--wait", "1")
	if got := counterValue(l.srv.metrics.dropUntrustedRelay) - before; got < 2 {
		t.Fatalf("forged relayed packets: untrusted_relay drops %v, want 2", got)
	}
	// Option 82 and link selection without giaddr, from a client on the link.
	before = counterValue(l.srv.metrics.dropClientRelayInfo)
	for _, opt := range []string{relayInfo("rack7/port3"), "82:0504" + "0a632900", "118:0a632900"} {
		if rs := rawDHCP(t, l.pair.B, "--iface", "b0", "--chaddr", forged, "--opt", opt, "--wait", "1"); len(rs) > 0 {
			t.Fatalf("client on the link with %s answered: %+v", opt, rs)
		}
	}
	if got := counterValue(l.srv.metrics.dropClientRelayInfo) - before; got < 3 {
		t.Fatalf("relay information from a client: drops %v, want 3", got)
	}
	hw, _ := net.ParseMAC(forged)
	l.srv.mu.Lock()
	for ip, b := range l.srv.byIP {
		if b.hw == string(hw) {
			l.srv.mu.Unlock()
			t.Fatalf("the attacker holds %s", addrOf(ip))
		}
	}
	l.srv.mu.Unlock()
	if !strings.Contains(l.logs.String(), "dhcp.relays") {
		t.Fatalf("the undeclared relay is not logged with the setting to use:\n%s", l.logs)
	}
}

// busybox udhcpc sends client id 01:<its MAC>. A host with another MAC
// repeating that client id while udhcpc's lease is live does not get
// udhcpc's address, by DISCOVER, by REQUEST (SELECTING) or INIT-REBOOT.
func TestRealUdhcpcClientIDNotTakenOver(t *testing.T) {
	needTools(t, "busybox", "python3")
	l := newLab(t, "cid", 42, nil)
	dir := t.TempDir()
	env := filepath.Join(dir, "env")
	script := writeFile(t, filepath.Join(dir, "script"), "#!/bin/sh\n"+
		`[ "$1" = bound ] && env > "`+env+`.tmp" && mv "`+env+`.tmp" "`+env+`"`+"\nexit 0\n", 0o755)
	runUntil(t, l.pair.B, 30*time.Second, func() bool { return fileContains(env, "ip=") },
		"busybox", "udhcpc", "-f", "-q", "-n", "-t", "5", "-T", "1", "-A", "1", "-i", "b0", "-s", script)
	victimIP := readEnv(t, env)["ip"]
	victim, _ := l.pair.B.MAC("b0")
	hw, _ := net.ParseMAC(victim)
	cid := "61:01" + hex.EncodeToString(hw)
	attacker := "02:00:00:00:42:66"

	for _, args := range [][]string{
		{"--type", "discover"},
		{"--type", "request", "--requested", victimIP, "--server-id", "10.99.42.1"},
		{"--type", "request", "--requested", victimIP},
	} {
		rs := rawDHCP(t, l.pair.B, append([]string{"--iface", "b0", "--chaddr", attacker, "--opt", cid, "--wait", "1.5"}, args...)...)
		for _, r := range rs {
			if r.YIAddr == victimIP {
				t.Fatalf("%v: another MAC with udhcpc's client id got its address %s (type %d)", args, victimIP, r.Type)
			}
		}
	}
	lease, ok := l.srv.LeaseByIP(netip.MustParseAddr(victimIP))
	if !ok || lease.MAC != victim {
		t.Fatalf("udhcpc's lease of %s now %+v", victimIP, lease)
	}
}

// relayLab is a lab whose b0 namespace is also a relay: its uplink is b0
// (10.99.<n>.2), its client side r1 (10.99.<n+1>.1/24) towards a client
// namespace returned with it (interface c0). The server serves the
// relayed subnet (pool .10-.20) and trusts the relay with giaddr = its
// client-side address, sending from the uplink (as ISC dhcrelay does) or,
// with fromGIAddr, from the giaddr itself (as dnsmasq does). 10.99.<n>.66
// on b0 is free for an attacker on the appliance's link.
func relayLab(t *testing.T, name string, n int, fromGIAddr bool) (*lab, *netns.NS) {
	t.Helper()
	l := newLabNS(t, name, n)
	cli, err := netns.Add(l.pair.B.Name + "c")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	relayed := fmt.Sprintf("10.99.%d", n+1)
	if err := netns.Veth(l.pair.B, "r1", relayed+".1/24", cli, "c0", ""); err != nil {
		t.Fatal(err)
	}
	if err := l.pair.A.IP("route", "add", relayed+".0/24", "via", l.ip(2)); err != nil {
		t.Fatal(err)
	}
	if err := l.pair.B.IP("addr", "add", l.ip(66)+"/24", "dev", "b0"); err != nil {
		t.Fatal(err)
	}
	l.start(func(o *Options) {
		o.Subnets = append(o.Subnets, Subnet{Name: "rack", Prefix: prefix(relayed + ".0/24"),
			Pools: pools(relayed + ".10-" + relayed + ".20"), Router: addr(relayed + ".1"), LeaseTime: time.Hour})
		src := l.ip(2)
		if fromGIAddr {
			src = relayed + ".1"
		}
		o.Relays = []Relay{{Sources: addrs(src), GIAddrs: addrs(relayed + ".1"), Interface: "a0"}}
	})
	return l, cli
}

// leaseBehindRelay runs busybox udhcpc in cli until it holds an address of
// the relayed subnet 10.99.<third>.0/24 and returns its device record.
func leaseBehindRelay(t *testing.T, l *lab, cli *netns.NS, third int) core.Device {
	t.Helper()
	dir := t.TempDir()
	env := filepath.Join(dir, "env")
	script := writeFile(t, filepath.Join(dir, "script"), "#!/bin/sh\n"+
		`[ "$1" = bound ] && env > "`+env+`.tmp" && mv "`+env+`.tmp" "`+env+`"`+"\nexit 0\n", 0o755)
	runUntil(t, cli, 40*time.Second, func() bool { return fileContains(env, "ip=") },
		"busybox", "udhcpc", "-f", "-q", "-n", "-t", "10", "-T", "2", "-A", "1", "-i", "c0", "-s", script)
	if got := readEnv(t, env)["ip"]; !strings.HasPrefix(got, fmt.Sprintf("10.99.%d.", third)) {
		t.Fatalf("client behind the relay got %q, want an address of 10.99.%d.0/24", got, third)
	}
	mac, _ := cli.MAC("c0")
	return l.device(mac)
}

// dnsmasq --dhcp-relay (no option 82) sends from the giaddr itself, not
// from its uplink: declared so, it is served.
func TestRealDnsmasqRelayTrusted(t *testing.T) {
	needTools(t, "dnsmasq", "busybox")
	l, cli := relayLab(t, "dnr", 43, true)
	ctx, cancel := context.WithCancel(context.Background())
	relay := l.pair.B.Command(ctx, "dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null", "--pid-file=",
		"--port=0", "--interface=r1", "--dhcp-relay=10.99.44.1,10.99.43.1", "--log-dhcp", "--log-facility=-")
	var relayOut syncBuffer
	relay.Stdout, relay.Stderr = &relayOut, &relayOut
	if err := relay.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		relay.Wait()
		if t.Failed() {
			t.Logf("dnsmasq:\n%s", relayOut.String())
		}
	})
	if d := leaseBehindRelay(t, l, cli, 44); d.RelayAddr != "10.99.44.1" {
		t.Fatalf("relay address recorded %q", d.RelayAddr)
	}
}
