package dhcp

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	l := newLabNS(t, "rly", 40)
	// The relay's namespace is b0 (10.99.40.2, its uplink); its client
	// side is r1 (10.99.41.1) towards a client namespace.
	cli, err := netns.Add(l.pair.B.Name + "c")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	if err := netns.Veth(l.pair.B, "r1", "10.99.41.1/24", cli, "c0", ""); err != nil {
		t.Fatal(err)
	}
	if err := l.pair.A.IP("route", "add", "10.99.41.0/24", "via", "10.99.40.2"); err != nil {
		t.Fatal(err)
	}
	// The attacker shares the appliance's link with the relay.
	if err := l.pair.B.IP("addr", "add", "10.99.40.66/24", "dev", "b0"); err != nil {
		t.Fatal(err)
	}
	l.start(func(o *Options) {
		o.Subnets = append(o.Subnets, Subnet{Name: "rack", Prefix: prefix("10.99.41.0/24"),
			Pools: pools("10.99.41.10-10.99.41.20"), Router: addr("10.99.41.1"), LeaseTime: time.Hour})
		// dhcrelay sends from its uplink address with its client-side
		// address as giaddr.
		o.Relays = []Relay{{Sources: addrs("10.99.40.2"), GIAddrs: addrs("10.99.41.1"), Interface: "a0"}}
	})

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

	dir := t.TempDir()
	env := filepath.Join(dir, "env")
	script := writeFile(t, filepath.Join(dir, "script"), "#!/bin/sh\n"+
		`[ "$1" = bound ] && env > "`+env+`.tmp" && mv "`+env+`.tmp" "`+env+`"`+"\nexit 0\n", 0o755)
	runUntil(t, cli, 40*time.Second, func() bool { return fileContains(env, "ip=") },
		"busybox", "udhcpc", "-f", "-q", "-n", "-t", "10", "-T", "2", "-A", "1", "-i", "c0", "-s", script)
	got := readEnv(t, env)["ip"]
	if !strings.HasPrefix(got, "10.99.41.") {
		t.Fatalf("client behind dhcrelay got %q, want an address of the relayed subnet", got)
	}
	mac, _ := cli.MAC("c0")
	if d := l.device(mac); d.CircuitID != "r1" || d.RelayAddr != "10.99.41.1" {
		t.Fatalf("declared relay's information not recorded: circuit %q relay %q", d.CircuitID, d.RelayAddr)
	}

	// The attacker: giaddr of the relay's subnet, option 82 with the
	// circuit id an approval rule names, from its own address.
	before := counterValue(dropUntrustedRelay)
	forged := "02:00:00:00:40:66"
	rawDHCP(t, l.pair.B, "--iface", "b0", "--src", "10.99.40.66", "--dst", "10.99.40.1", "--chaddr", forged,
		"--giaddr", "10.99.41.1", "--opt", relayInfo("rack7/port3"), "--wait", "1")
	rawDHCP(t, l.pair.B, "--iface", "b0", "--src", "10.99.40.66", "--dst", "10.99.40.1", "--chaddr", forged,
		"--giaddr", "10.99.41.1", "--type", "request", "--requested", "10.99.41.11", "--opt", relayInfo("rack7/port3"), "--wait", "1")
	if got := counterValue(dropUntrustedRelay) - before; got < 2 {
		t.Fatalf("forged relayed packets: untrusted_relay drops %v, want 2", got)
	}
	// Option 82 and link selection without giaddr, from a client on the link.
	before = counterValue(dropClientRelayInfo)
	for _, opt := range []string{relayInfo("rack7/port3"), "82:0504" + "0a632900", "118:0a632900"} {
		if rs := rawDHCP(t, l.pair.B, "--iface", "b0", "--chaddr", forged, "--opt", opt, "--wait", "1"); len(rs) > 0 {
			t.Fatalf("client on the link with %s answered: %+v", opt, rs)
		}
	}
	if got := counterValue(dropClientRelayInfo) - before; got < 3 {
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
