package stormlab

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/testenv/netns"
)

// The storm's config is what bootstorm wrote before the set-up was shared.
func TestConfigIsTheStorms(t *testing.T) {
	want := `data_dir: /w/data
advertise_addr: 10.99.0.1
log: {level: warn, format: json}
debug: {pprof_addr: "10.99.0.1:6060"}
http: {addr: "10.99.0.1:8080"}
dhcp:
  interfaces: [s0]
  relays: [{address: 10.99.0.2}] # the fleet relays from its own address
  lease_time: 1h
  subnets:
    - {name: storm, subnet: 10.99.0.0/16, interface: s0, pools: ["10.99.1.0-10.99.200.254"], router: 10.99.0.1}
profiles: [/w/profiles]
joiner:
  auto_approve: [{subnets: [10.99.0.0/16], roles: [control-plane, worker]}]
`
	if got := Config(ConfigOptions{Work: "/w", PoolFirst: 1, PoolLast: 200, Pprof: true}); got != want {
		t.Fatalf("config:\n%s\nwant:\n%s", got, want)
	}
	got := Config(ConfigOptions{Work: "/w", ServerAddr: "10.99.0.9", PoolFirst: 1, PoolLast: 255, LeaseTime: 6 * time.Minute, EventsKeep: 5})
	for _, line := range []string{"advertise_addr: 10.99.0.9\n", "lease_time: 6m0s\n", "events: {keep: 5}\njoiner:", "router: 10.99.0.9}"} {
		if !strings.Contains(got, line) {
			t.Errorf("config lacks %q:\n%s", line, got)
		}
	}
	if strings.Contains(got, "pprof") {
		t.Errorf("pprof listener without Pprof:\n%s", got)
	}
}

// ztpd loads the storm's config and its profiles.
func TestConfigLoads(t *testing.T) {
	work := t.TempDir()
	if err := WriteProfiles(work, 3); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(work, "ztpd.yaml")
	if err := os.WriteFile(path, []byte(Config(ConfigOptions{Work: work, PoolFirst: 1, PoolLast: 2, Pprof: true, EventsKeep: 1000})), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(path); err != nil {
		t.Fatal(err)
	}
}

func TestNewNetRoutesThePool(t *testing.T) {
	if err := netns.Check(); err != nil {
		t.Skip(err)
	}
	n, err := NewNet(NetOptions{Prefix: "stl", PoolFirst: 3, PoolLast: 4, DefaultRoute: true})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	// A leased address is the fleet's own; anything else goes to ztpd.
	for dst, want := range map[string]string{"10.99.3.5": "local 10.99.3.5 dev lo", "192.0.2.1": "via " + ServerAddr} {
		out, err := n.Cli.Command(t.Context(), "ip", "route", "get", dst).CombinedOutput()
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("route to %s from the fleet's namespace: %s %v (want %q)", dst, out, err, want)
		}
	}
	out, err := n.Srv.Command(t.Context(), "ip", "route", "get", "10.99.4.7").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "via "+RelayAddr) {
		t.Errorf("route to the pool from ztpd's namespace: %s %v", out, err)
	}
}

// The IPv6 storm's config loads: an IPv6 subnet relayed by the fleet's
// relay, the listeners on ztpd's IPv6 address.
func TestConfig6Loads(t *testing.T) {
	work := t.TempDir()
	if err := WriteProfiles(work, 2); err != nil {
		t.Fatal(err)
	}
	text := Config(ConfigOptions{Work: work, IPv6: true, Pprof: true, LeaseTime: 6 * time.Minute})
	for _, line := range []string{`http: {addr: "[fd99:0:0:1::1]:8080"}`, `relays: [{address: "fd99:0:0:1::2", giaddrs: ["fd99:0:0:100::1"]}]`,
		`pools: ["fd99:0:0:100::1:0-fd99:0:0:100::ff:ffff"], rapid_commit: false`, `debug: {pprof_addr: "[fd99:0:0:1::1]:6060"}`} {
		if !strings.Contains(text, line) {
			t.Errorf("config lacks %q:\n%s", line, text)
		}
	}
	path := filepath.Join(work, "ztpd.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(path); err != nil {
		t.Fatal(err)
	}
}

func TestNewNet6RoutesThePrefix(t *testing.T) {
	if err := netns.Check(); err != nil {
		t.Skip(err)
	}
	n, err := NewNet(NetOptions{Prefix: "stl6", IPv6: true})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	leased := netip.MustParseAddr("fd99:0:0:100::12:34").String() // as ip prints it (RFC 5952)
	out, err := n.Cli.Command(t.Context(), "ip", "-6", "route", "get", leased).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "local "+leased+" ") || !strings.Contains(string(out), " dev lo ") {
		t.Errorf("route to a leased address from the fleet's namespace: %s %v", out, err)
	}
	out, err = n.Srv.Command(t.Context(), "ip", "-6", "route", "get", leased).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "via "+RelayAddr6) {
		t.Errorf("route to the prefix from ztpd's namespace: %s %v", out, err)
	}
	// A switch binds its leased address, as its HTTP client does.
	out, err = n.Cli.Command(t.Context(), "python3", "-c",
		"import socket; s=socket.socket(socket.AF_INET6); s.bind(('fd99:0:0:100::12:34', 0)); print('bound')").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "bound") {
		t.Errorf("binding a leased address in the fleet's namespace: %s %v", out, err)
	}
}

// DeviceTLSOff's config loads with the device HTTPS listener off, in both
// families; by default it is on, as ztpd's default.
func TestConfigDeviceTLSOff(t *testing.T) {
	for _, ipv6 := range []bool{false, true} {
		for _, off := range []bool{false, true} {
			work := t.TempDir()
			if err := WriteProfiles(work, 1); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(work, "ztpd.yaml")
			text := Config(ConfigOptions{Work: work, PoolFirst: 1, PoolLast: 2, IPv6: ipv6, DeviceTLSOff: off})
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			c, err := config.Load(path)
			if err != nil {
				t.Fatalf("ipv6=%v off=%v: %v\n%s", ipv6, off, err, text)
			}
			if listening := c.DeviceTLSListener() != ""; listening == off {
				t.Errorf("ipv6=%v DeviceTLSOff=%v: device HTTPS listener %q", ipv6, off, c.DeviceTLSListener())
			}
		}
	}
}
