package dhcp

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// Real clients in network namespaces. Each test uses its own /24.

// dhclient configured as SONiC's dhclient.conf.j2 does when ZTP is on.
func TestRealDhclientSONiC(t *testing.T) {
	needTools(t, "dhclient")
	l := newLab(t, "sonic", 11, nil)
	dir := t.TempDir()
	conf := writeFile(t, filepath.Join(dir, "dhclient.conf"), `
option sonic-ztp-json-url code 67 = text;
option sonic-provisioning-script code 239 = text;
option sonic-tftp-server code 66 = text;
send user-class "SONiC-ZTP";
send dhcp-client-identifier "SONiC##Force10-S6000##CN0123456789";
send host-name "sonic";
request subnet-mask, broadcast-address, routers, domain-name-servers, host-name,
        log-servers, sonic-ztp-json-url, sonic-provisioning-script, sonic-tftp-server;
`, 0o644)
	leases := filepath.Join(dir, "leases")
	runUntil(t, l.pair.B, 30*time.Second, func() bool { return fileContains(leases, "fixed-address") },
		"dhclient", "-4", "-d", "-1", "-v", "-cf", conf, "-lf", leases, "-pf", filepath.Join(dir, "pid"),
		"-sf", "/bin/true", "b0")
	b, _ := os.ReadFile(leases)
	lease := string(b)
	wantURL := fmt.Sprintf(`option sonic-ztp-json-url "http://%s:8080/ztp/ztp.json";`, l.ip(1))
	if !strings.Contains(lease, wantURL) {
		t.Fatalf("lease lacks %s:\n%s", wantURL, lease)
	}
	if !strings.Contains(lease, fmt.Sprintf(`option sonic-tftp-server "%s";`, l.ip(1))) {
		t.Fatalf("lease lacks option 66:\n%s", lease)
	}
	addr := regexp.MustCompile(`fixed-address (\S+);`).FindStringSubmatch(lease)[1]
	if !strings.HasPrefix(addr, fmt.Sprintf("10.99.%d.1", l.n)) || len(addr) != len(l.ip(100)) {
		t.Fatalf("address %s is not from the pool", addr)
	}
	mac, _ := l.pair.B.MAC("b0")
	d := l.device(mac)
	if d.Kind != core.KindSONiC || d.Serial != "CN0123456789" || d.Product != "Force10-S6000" || d.IP != addr {
		t.Fatalf("device record = %+v", d)
	}
}

// busybox udhcpc as a CloudStack VM with a MAC reservation.
func TestRealUdhcpcVMReservation(t *testing.T) {
	needTools(t, "busybox")
	l := newLabNS(t, "vm", 12)
	mac, err := l.pair.B.MAC("b0")
	if err != nil {
		t.Fatal(err)
	}
	hw, err := net.ParseMAC(mac)
	if err != nil {
		t.Fatal(err)
	}
	l.start(func(c *Options) {
		c.Subnets[0].DNS = addrs("10.99.12.53")
		c.Subnets[0].Domain = "cloud.internal"
		c.Subnets[0].Reservations = []Reservation{{MAC: hw, IP: addr("10.99.12.50"), Hostname: "vm-worker-1"}}
	})
	dir := t.TempDir()
	out := filepath.Join(dir, "env")
	script := writeFile(t, filepath.Join(dir, "script"), "#!/bin/sh\n"+
		`[ "$1" = bound ] && env > "`+out+`.tmp" && mv "`+out+`.tmp" "`+out+`"`+"\nexit 0\n", 0o755)
	runUntil(t, l.pair.B, 30*time.Second, func() bool { return fileContains(out, "ip=") },
		"busybox", "udhcpc", "-f", "-q", "-n", "-t", "5", "-T", "1", "-A", "1", "-i", "b0", "-s", script)
	env := readEnv(t, out)
	for k, want := range map[string]string{"ip": "10.99.12.50", "hostname": "vm-worker-1", "serverid": "10.99.12.1",
		"router": "10.99.12.1", "dns": "10.99.12.53", "domain": "cloud.internal", "mask": "24"} {
		if env[k] != want {
			t.Errorf("udhcpc %s = %q, want %q", k, env[k], want)
		}
	}
	if d := l.device(mac); d.Kind != core.KindVM || d.IP != "10.99.12.50" {
		t.Fatalf("device record = %+v", d)
	}
}

func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	return env
}

// dhclient sending ONIE's vendor class gets the installer URL in option 114.
func TestRealDhclientONIE(t *testing.T) {
	needTools(t, "dhclient")
	l := newLab(t, "onie", 13, nil)
	dir := t.TempDir()
	conf := writeFile(t, filepath.Join(dir, "dhclient.conf"), `
option default-url code 114 = text;
send vendor-class-identifier "onie_vendor:x86_64-accton_as7712_32x-r0";
request subnet-mask, routers, default-url;
`, 0o644)
	leases := filepath.Join(dir, "leases")
	runUntil(t, l.pair.B, 30*time.Second, func() bool { return fileContains(leases, "fixed-address") },
		"dhclient", "-4", "-d", "-1", "-v", "-cf", conf, "-lf", leases, "-pf", filepath.Join(dir, "pid"),
		"-sf", "/bin/true", "b0")
	want := fmt.Sprintf(`option default-url "http://%s:8080/onie/installer";`, l.ip(1))
	if !fileContains(leases, want) {
		b, _ := os.ReadFile(leases)
		t.Fatalf("lease lacks %s:\n%s", want, b)
	}
	mac, _ := l.pair.B.MAC("b0")
	if d := l.device(mac); d.Kind != core.KindONIE || d.Platform != "x86_64-accton_as7712_32x-r0" {
		t.Fatalf("device record = %+v", d)
	}
}

// perfdhcp as a relay agent gets its leases from the relay's subnet, not
// from the subnet of the interface the packets arrive on.
func TestRealPerfdhcpRelay(t *testing.T) {
	needTools(t, "perfdhcp")
	l := newLab(t, "relay", 14, func(c *Options) {
		c.Subnets = append(c.Subnets, Subnet{Name: "rack1", Prefix: prefix("10.99.15.0/24"),
			Pools: pools("10.99.15.10-10.99.15.250"), Router: addr("10.99.15.1"), LeaseTime: time.Hour})
		c.Relays = append(c.Relays, Relay{Sources: addrs("10.99.15.1"), GIAddrs: addrs("10.99.15.1")})
	})
	if err := l.pair.B.IP("addr", "add", "10.99.15.1/24", "dev", "b0"); err != nil {
		t.Fatal(err)
	}
	if err := l.pair.A.IP("route", "add", "10.99.15.0/24", "via", "10.99.14.2"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := l.pair.B.Command(ctx, "perfdhcp", "-4", "-l", "10.99.15.1", "-r", "50", "-n", "200", "-p", "15",
		"-R", "150", "-d", "2", "-W", "2000000", "10.99.14.1").CombinedOutput()
	if err != nil && !strings.Contains(string(out), "received packets") {
		t.Fatalf("perfdhcp: %v\n%s", err, out)
	}
	sent, recv := perfCounts(string(out), "REQUEST-ACK")
	if sent < 150 || recv != sent {
		t.Fatalf("perfdhcp: %d REQUESTs sent, %d ACKs received:\n%s", sent, recv, out)
	}
	n := 0
	err = l.st.View(func(tx core.Tx) error {
		return tx.Leases().List("", func(ls core.Lease) (bool, error) {
			if !strings.HasPrefix(ls.IP, "10.99.15.") || ls.Subnet != "rack1" {
				return false, fmt.Errorf("lease %s in subnet %s, want rack1", ls.IP, ls.Subnet)
			}
			n++
			return true, nil
		})
	})
	if err != nil || n == 0 {
		t.Fatalf("leases: %d, %v", n, err)
	}
}

// perfCounts reads "sent packets"/"received packets" of one exchange from
// perfdhcp's statistics.
func perfCounts(out, exchange string) (sent, recv int) {
	i := strings.Index(out, "Statistics for: "+exchange)
	if i < 0 {
		return 0, 0
	}
	sec := out[i:]
	fmt.Sscanf(sec[strings.Index(sec, "sent packets:"):], "sent packets: %d", &sent)
	fmt.Sscanf(sec[strings.Index(sec, "received packets:"):], "received packets: %d", &recv)
	return sent, recv
}

// Garbage on port 67 is counted and dropped; the server keeps serving.
func TestMalformedPacketsDoNotCrash(t *testing.T) {
	l := newLab(t, "junk", 16, nil)
	rc := newRelayClient(t, l.pair.B, "10.99.16.2", "10.99.16.1")
	before := counterValue(l.srv.metrics.dropMalformed)
	rng := rand.New(rand.NewPCG(1, 2))
	valid := discover(mac(1)).ToBytes()
	sentJunk := 0
	for i := 0; i < 300; i++ {
		var b []byte
		switch i % 3 {
		case 0: // random bytes
			b = make([]byte, rng.IntN(600))
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
		case 1: // a valid header with a truncated option
			b = append(append([]byte{}, valid[:240]...), optMessageType, 1, msgDiscover, optHostname, 40, 'x')
		case 2: // a real packet cut short
			b = valid[:rng.IntN(240)]
		}
		if _, err := rc.conn.WriteTo(b, rc.server); err != nil {
			t.Fatal(err)
		}
		sentJunk++
	}
	for i := 0; i < 5; i++ {
		if ip, err := rc.dora(mac(100 + i)); err != nil || !strings.HasPrefix(ip.String(), "10.99.16.") {
			t.Fatalf("DORA after garbage: %v %v", ip, err)
		}
	}
	if got := counterValue(l.srv.metrics.dropMalformed) - before; got < float64(sentJunk)*2/3 {
		t.Fatalf("malformed drops counted %v of %d junk packets", got, sentJunk)
	}
	if strings.Contains(l.logs.String(), "panic") {
		t.Fatalf("a packet caused a panic:\n%s", l.logs)
	}
}
