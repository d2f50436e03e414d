package dhcp

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/positions"
	"github.com/ztpd/ztpd/testenv/netns"
)

// TestRealDhcrelayPositions: ISC dhcrelay -a relays for three downstream
// ports (option 82 circuit-id = the port's interface name); a switch
// (dhclient as SONiC configures it) behind each of the two planned ports
// gets its position's address and name, and its record names the
// position; the third port is in no position and its switch is served by
// the ordinary rules (a pool address, no name). Then the two switches are
// swapped between the planned ports: their names follow the ports.
func TestRealDhcrelayPositions(t *testing.T) {
	p := newRelayPorts(t, "pos", 60, `positions:
  - {name: leaf-61a, relay: 10.99.61.1, circuit_id: p0, address: 10.99.61.31, rack: "61", port: p0}
  - {name: leaf-62a, relay: 10.99.62.1, circuit_id: p1, address: 10.99.62.32, rack: "62", port: p1}
`)
	l, relay, clients, macs, lease := p.l, p.relay, p.clients, p.macs, func(i int, serial string) (string, string) { return p.lease(t, i, serial) }
	want := []struct{ ip, host string }{{"10.99.61.31", "leaf-61a"}, {"10.99.62.32", "leaf-62a"}}
	for i, w := range want {
		ip, host := lease(i, fmt.Sprintf("SN%d", i))
		if ip != w.ip || host != w.host {
			t.Fatalf("switch behind p%d: %s %q, want its position's %s %q", i, ip, host, w.ip, w.host)
		}
		if d := l.device(macs[i]); d.Position != w.host || d.CircuitID != fmt.Sprintf("p%d", i) || d.RelayAddr != fmt.Sprintf("10.99.%d.1", 61+i) {
			t.Fatalf("switch behind p%d: record %+v", i, d)
		}
	}
	// The third port is in no position: the ordinary rules serve it.
	if ip, host := lease(2, "SN2"); !regexp.MustCompile(`^10\.99\.63\.1[0-2][0-9]$`).MatchString(ip) || host != "" {
		t.Fatalf("switch behind the unplanned p2: %s %q, want a pool address and no name", ip, host)
	}
	if d := l.device(macs[2]); d.Position != "" || d.CircuitID != "p2" {
		t.Fatalf("switch behind the unplanned p2: record %+v", d)
	}

	// Swap the two planned switches: each box (its MAC, its serial) now
	// sits behind the other port. Their leases end as they are shut down
	// (dhclient -r from the leased address, through the relay as a
	// router); a box unplugged without a release keeps its lease, and what
	// a new box at its slot gets then is the replacement policy's.
	if out, err := relay.Command(context.Background(), "sysctl", "-w", "net.ipv4.ip_forward=1").CombinedOutput(); err != nil {
		t.Fatalf("sysctl: %v %s", err, out)
	}
	for i := range 2 {
		dir := t.TempDir()
		leases := filepath.Join(dir, "leases")
		writeFile(t, leases, fmt.Sprintf("lease {\n  interface \"c0\";\n  fixed-address %s;\n  option subnet-mask 255.255.255.0;\n  option dhcp-server-identifier %s;\n  renew 4 2100/01/01 00:00:00;\n  rebind 4 2100/01/01 00:00:00;\n  expire 4 2100/01/01 00:00:00;\n}\n",
			want[i].ip, l.ip(1)), 0o644)
		for _, args := range [][]string{{"addr", "add", want[i].ip + "/24", "dev", "c0"}, {"route", "add", "default", "via", fmt.Sprintf("10.99.%d.1", 61+i)}} {
			if err := clients[i].IP(args...); err != nil {
				t.Fatal(err)
			}
		}
		// The same client identifier as its lease's: the release is its own.
		conf := writeFile(t, filepath.Join(dir, "dhclient.conf"), fmt.Sprintf("send dhcp-client-identifier \"SONiC##Accton-AS7712-32X##SN%d\";\n", i), 0o644)
		out, err := clients[i].Command(context.Background(), "dhclient", "-4", "-v", "-r", "-cf", conf, "-lf", leases, "-pf", filepath.Join(dir, "pid"),
			"-sf", "/bin/true", "c0").CombinedOutput()
		if err != nil {
			t.Fatalf("dhclient -r behind p%d: %v\n%s", i, err, out)
		}
		if err := clients[i].IP("addr", "flush", "dev", "c0"); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, held0 := l.srv.LeaseByIP(addr(want[0].ip))
		_, held1 := l.srv.LeaseByIP(addr(want[1].ip))
		if !held0 && !held1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the released leases are still held (%v %v):\n%s", held0, held1, l.logs)
		}
	}
	for i := range 2 {
		for _, args := range [][]string{{"link", "set", "c0", "down"}, {"link", "set", "c0", "address", macs[1-i]}, {"link", "set", "c0", "up"}} {
			if err := clients[i].IP(args...); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, w := range want {
		ip, host := lease(i, fmt.Sprintf("SN%d", 1-i))
		if ip != w.ip || host != w.host {
			t.Fatalf("after the swap, the switch behind p%d: %s %q, want the port's %s %q", i, ip, host, w.ip, w.host)
		}
		if d := l.device(macs[1-i]); d.Position != w.host {
			t.Fatalf("after the swap, switch %s behind p%d: record names position %q, want %q", macs[1-i], i, d.Position, w.host)
		}
	}
}

// relayPorts is ztpd behind ISC dhcrelay -a with three downstream ports
// p0..p2 (option 82 circuit-id = the port's name, giaddr 10.99.6x.1), a
// client namespace cabled to each, and the cabling plan given.
type relayPorts struct {
	l       *lab
	relay   *netns.NS
	clients [3]*netns.NS
	macs    [3]string
}

func newRelayPorts(t *testing.T, name string, n int, plan string) *relayPorts {
	needTools(t, "dhcrelay", "dhclient")
	l := newLabNS(t, name, n)
	relay := l.pair.B
	var clients [3]*netns.NS
	for i := range clients {
		ns, err := netns.Add(fmt.Sprintf("%sc%d", relay.Name, i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ns.Close() })
		clients[i] = ns
		port := fmt.Sprintf("p%d", i)
		if err := netns.Veth(relay, port, fmt.Sprintf("10.99.%d.1/24", n+1+i), ns, "c0", ""); err != nil {
			t.Fatal(err)
		}
		if err := l.pair.A.IP("route", "add", fmt.Sprintf("10.99.%d.0/24", n+1+i), "via", l.ip(2)); err != nil {
			t.Fatal(err)
		}
	}
	l.start(func(o *Options) {
		var giaddrs []string
		for i := range 3 {
			net := fmt.Sprintf("10.99.%d", n+1+i)
			o.Subnets = append(o.Subnets, Subnet{Name: fmt.Sprintf("port%d", i), Prefix: prefix(net + ".0/24"),
				Pools: pools(net + ".100-" + net + ".120"), Router: addr(net + ".1"), LeaseTime: time.Hour})
			giaddrs = append(giaddrs, net+".1")
		}
		o.Relays = []Relay{{Sources: addrs(l.ip(2)), GIAddrs: addrs(giaddrs...), Interface: "a0"}}
	})
	ps, errs := positions.Parse("plan.yaml", []byte(plan))
	pl, berrs := positions.Build(ps)
	if len(errs)+len(berrs) > 0 {
		t.Fatal(errs, berrs)
	}
	if err := l.srv.SetPlan(pl); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	rl := relay.Command(ctx, "dhcrelay", "-4", "-d", "-a", "-iu", "b0", "-id", "p0", "-id", "p1", "-id", "p2", l.ip(1))
	var relayOut syncBuffer
	rl.Stdout, rl.Stderr = &relayOut, &relayOut
	if err := rl.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		rl.Wait()
		if t.Failed() {
			t.Logf("dhcrelay:\n%s", relayOut.String())
		}
	})

	p := &relayPorts{l: l, relay: relay, clients: clients}
	for i := range clients {
		p.macs[i], _ = clients[i].MAC("c0")
	}
	return p
}

// lease runs dhclient as SONiC's ZTP configures it in client i's
// namespace and returns its lease's address and host name.
func (p *relayPorts) lease(t *testing.T, i int, serial string) (ip, host string) {
	t.Helper()
	dir := t.TempDir()
	conf := writeFile(t, filepath.Join(dir, "dhclient.conf"), `
option sonic-ztp-json-url code 67 = text;
send user-class "SONiC-ZTP";
send dhcp-client-identifier "SONiC##Accton-AS7712-32X##`+serial+`";
send host-name "sonic";
request subnet-mask, routers, host-name, sonic-ztp-json-url;
`, 0o644)
	leases := filepath.Join(dir, "leases")
	runUntil(t, p.clients[i], 40*time.Second, func() bool { return fileContains(leases, "fixed-address") },
		"dhclient", "-4", "-d", "-1", "-v", "-cf", conf, "-lf", leases, "-pf", filepath.Join(dir, "pid"), "-sf", "/bin/true", "c0")
	b, _ := os.ReadFile(leases)
	defer func() {
		t.Logf("dhclient (serial %s) behind p%d via dhcrelay -a: %s host-name %q", serial, i, ip, host)
	}()
	ip = regexp.MustCompile(`fixed-address (\S+);`).FindStringSubmatch(string(b))[1]
	if m := regexp.MustCompile(`option host-name "([^"]*)";`).FindStringSubmatch(string(b)); m != nil {
		host = m[1]
	}
	return ip, host
}

// TestRealDhcrelayReplacement: a switch behind dhcrelay -a fails and is
// unplugged without a release (its lease still held); another box (another
// MAC and serial) is cabled to the same port. Under `replace: auto` it
// takes the position's address and name at once and the store holds the
// address for it only; under `approve` it gets the position's name and a
// pool address, the failed box's lease untouched, until an operator
// approves its join.
func TestRealDhcrelayReplacement(t *testing.T) {
	p := newRelayPorts(t, "rma", 64, `positions:
  - {name: leaf-65a, relay: 10.99.65.1, circuit_id: p0, address: 10.99.65.31, replace: auto}
  - {name: leaf-66a, relay: 10.99.66.1, circuit_id: p1, address: 10.99.66.32, replace: approve}
`)
	want := []string{"10.99.65.31", "10.99.66.32"}
	for i, w := range want {
		if ip, _ := p.lease(t, i, fmt.Sprintf("OLD%d", i)); ip != w {
			t.Fatalf("the first box behind p%d got %s, want %s", i, ip, w)
		}
	}
	// The failed boxes are unplugged: no release. New boxes, other MACs.
	newMACs := []string{"02:99:65:00:00:01", "02:99:66:00:00:01"}
	for i := range want {
		for _, args := range [][]string{{"addr", "flush", "dev", "c0"}, {"link", "set", "c0", "down"},
			{"link", "set", "c0", "address", newMACs[i]}, {"link", "set", "c0", "up"}} {
			if err := p.clients[i].IP(args...); err != nil {
				t.Fatal(err)
			}
		}
	}
	ip, host := p.lease(t, 0, "NEW0")
	if ip != want[0] || host != "leaf-65a" {
		t.Fatalf("replace: auto: the new box got %s %q, want %s leaf-65a", ip, host, want[0])
	}
	if l, ok := p.l.srv.LeaseByIP(addr(want[0])); !ok || l.MAC != newMACs[0] {
		t.Fatalf("replace: auto: the position's lease is %+v, want the new box's", l)
	}
	if d := p.l.device(newMACs[0]); d.Position != "leaf-65a" {
		t.Fatalf("replace: auto: the new box's record names position %q", d.Position)
	}
	ip, host = p.lease(t, 1, "NEW1")
	if ip == want[1] || host != "leaf-66a" || !regexp.MustCompile(`^10\.99\.66\.`).MatchString(ip) {
		t.Fatalf("replace: approve: the new box got %s %q, want a pool address named leaf-66a", ip, host)
	}
	if l, ok := p.l.srv.LeaseByIP(addr(want[1])); !ok || l.MAC != p.macs[1] {
		t.Fatalf("replace: approve: the position's lease is %+v, want the failed box's still", l)
	}
	if d := p.l.device(newMACs[1]); d.Position != "leaf-66a" {
		t.Fatalf("replace: approve: the new box's record names position %q", d.Position)
	}
}
