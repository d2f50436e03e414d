package app

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/ztp/dhcp"
)

func loadConfig(t *testing.T, yaml string) config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ztpd.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

// The dhcp: section is resolved once into the DHCP server's settings: every
// address, range, route and MAC parsed, option names resolved and values
// encoded, lease times defaulted.
func TestResolveDHCP(t *testing.T) {
	c := loadConfig(t, `
advertise_addr: 10.99.0.1
dhcp:
  interfaces: [lo]
  lease_time: 2h
  offer_hold: 20s
  decline_quarantine: 5m
  vm: {mac_prefixes: ["1E:00", "02"], vendor_classes: [CloudStack]}
  options: {ntp-server: 10.99.0.1, "252": wpad}
  class_options: {sonic: {domain-name: class.example}}
  subnets:
    - name: lab
      subnet: 10.99.0.7/24
      interface: lo
      pools: ["10.99.0.100-10.99.0.199", "10.99.0.210-10.99.0.220"]
      router: 10.99.0.1
      dns: [10.99.0.53, 10.99.0.54]
      ntp: [10.99.0.123]
      syslog: [10.99.0.9]
      domain: lab.example
      routes: [{dest: 10.0.0.0/8, via: 10.99.0.254}]
      options: {"252": ""}
      class_options: {onie: {"114": "http://elsewhere/onie"}}
      reservations:
        - {mac: "02-00-00-00-00-0A", ip: 10.99.0.150, hostname: vm-a}
        - {client_id: "01:52:54:00:10:00:0b", ip: 10.99.0.20}
        - {serial: SN77, ip: 10.99.0.21, hostname: leaf1, kind: sonic, options: {"224": secret}}
    - subnet: 10.99.5.0/24
      pools: ["10.99.5.10-10.99.5.20"]
      lease_time: 10m
`)
	got, err := resolveDHCP(&c.DHCP)
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr
	want := dhcp.Options{
		Interfaces: []string{"lo"}, OfferHold: 20 * time.Second, DeclineQuarantine: 5 * time.Minute,
		VMMACPrefixes:   []net.HardwareAddr{{0x1e, 0x00}, {0x02}},
		VMVendorClasses: []string{"CloudStack"},
		GlobalOptions:   dhcp.OptionValues{42: {10, 99, 0, 1}, 252: []byte("wpad")},
		ClassOptions:    map[core.DeviceKind]dhcp.OptionValues{core.KindSONiC: {15: []byte("class.example")}},
		Subnets: []dhcp.Subnet{{
			Name: "lab", Prefix: netip.MustParsePrefix("10.99.0.0/24"), Interface: "lo",
			Pools:  []dhcp.Range{{Start: a("10.99.0.100"), End: a("10.99.0.199")}, {Start: a("10.99.0.210"), End: a("10.99.0.220")}},
			Router: a("10.99.0.1"), DNS: []netip.Addr{a("10.99.0.53"), a("10.99.0.54")}, NTP: []netip.Addr{a("10.99.0.123")},
			Syslog: []netip.Addr{a("10.99.0.9")}, Domain: "lab.example", LeaseTime: 2 * time.Hour,
			Routes:       []dhcp.Route{{Dest: netip.MustParsePrefix("10.0.0.0/8"), Via: a("10.99.0.254")}},
			Options:      dhcp.OptionValues{252: nil}, // "" removes the global option
			ClassOptions: map[core.DeviceKind]dhcp.OptionValues{core.KindONIE: {114: []byte("http://elsewhere/onie")}},
			Reservations: []dhcp.Reservation{
				{MAC: net.HardwareAddr{2, 0, 0, 0, 0, 0x0a}, IP: a("10.99.0.150"), Hostname: "vm-a"},
				{ClientID: "01:52:54:00:10:00:0b", IP: a("10.99.0.20")},
				{Serial: "SN77", IP: a("10.99.0.21"), Hostname: "leaf1", Kind: core.KindSONiC,
					Options: dhcp.OptionValues{224: []byte("secret")}},
			},
		}, {
			Name: "10.99.5.0/24", Prefix: netip.MustParsePrefix("10.99.5.0/24"),
			Pools:     []dhcp.Range{{Start: a("10.99.5.10"), End: a("10.99.5.20")}},
			LeaseTime: 10 * time.Minute,
		}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("resolved:\n%+v\nwant:\n%+v", got, want)
	}
	got.Advertise = a("10.99.0.1")
	if _, err := dhcp.New(got); err != nil {
		t.Fatalf("the DHCP server refuses the resolved settings: %v", err)
	}
}

// The flags-only setup (--dhcp-interface lo --dhcp-range A-B) becomes one
// subnet per interface, its address the router, the ranges its pools.
func TestResolveDHCPFromFlags(t *testing.T) {
	c := config.Default()
	c.AdvertiseAddr = "127.0.0.1"
	c.DHCP.Interfaces = []string{"lo"}
	c.DHCP.Ranges = []string{"127.0.0.10-127.0.0.20"}
	if err := c.Validate(); err != nil {
		t.Skipf("skipping: lo has no IPv4 address here: %v", err)
	}
	got, err := resolveDHCP(&c.DHCP)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Subnets) != 1 {
		t.Fatalf("subnets = %+v", got.Subnets)
	}
	sn := got.Subnets[0]
	if sn.Name != "lo" || sn.Interface != "lo" || sn.Prefix != netip.MustParsePrefix("127.0.0.0/8") ||
		sn.Router != netip.MustParseAddr("127.0.0.1") || sn.LeaseTime != time.Hour ||
		!reflect.DeepEqual(sn.Pools, []dhcp.Range{{Start: netip.MustParseAddr("127.0.0.10"), End: netip.MustParseAddr("127.0.0.20")}}) {
		t.Fatalf("subnet = %+v", sn)
	}
}

// What only encoding finds is an error naming the configuration field.
func TestDHCPOptionErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{`  subnets: [{subnet: 10.99.0.0/24, pools: ["10.99.0.10-10.99.0.20"], options: {ntp-server: not-an-ip}}]`,
			`dhcp.subnets[0].options.ntp-server: "not-an-ip" is not an IPv4 address`},
		{`  options: {"51": "60"}
  subnets: [{subnet: 10.99.0.0/24, pools: ["10.99.0.10-10.99.0.20"]}]`,
			"dhcp.options.51: option 51 cannot be configured (set lease_time instead)"},
		{`  class_options: {vm: {"router": "10.99.0.1, x"}}
  subnets: [{subnet: 10.99.0.0/24, pools: ["10.99.0.10-10.99.0.20"]}]`,
			`dhcp.class_options.vm.router: "x" is not an IPv4 address`},
		{`  subnets: [{subnet: 10.99.0.0/24, reservations: [{mac: "02:00:00:00:00:01", ip: 10.99.0.5, options: {"23": "300"}}]}]`,
			`dhcp.subnets[0].reservations[0].options.23: "300" is not an integer 0..255`},
		{`  subnets: [{subnet: 10.99.0.0/24, pools: ["10.99.0.10-10.99.0.20"], routes: [{dest: "::/0", via: 10.99.0.1}]}]`,
			`dhcp.subnets[0].routes[0].dest: "::/0" is not an IPv4 CIDR`},
	} {
		c := loadConfig(t, "advertise_addr: 10.99.0.1\ndhcp:\n  interfaces: [lo]\n"+tc.yaml+"\n")
		if _, err := resolveDHCP(&c.DHCP); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v\nwant %q", err, tc.want)
		}
	}
}

// Declared relays reach the DHCP server as the addresses they send from
// and the giaddrs they set.
func TestResolveDHCPRelays(t *testing.T) {
	c := config.Default()
	c.AdvertiseAddr = "127.0.0.1"
	c.DHCP.Interfaces = []string{"lo"}
	c.DHCP.Ranges = []string{"127.0.0.10-127.0.0.20"}
	c.DHCP.Relays = []config.Relay{{Address: "10.99.0.2", GIAddrs: []string{"10.99.5.1"}, Interface: "lo"}}
	if err := c.Validate(); err != nil {
		t.Skipf("skipping: lo has no IPv4 address here: %v", err)
	}
	got, err := resolveDHCP(&c.DHCP)
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr
	want := []dhcp.Relay{{Sources: []netip.Addr{a("10.99.0.2")}, GIAddrs: []netip.Addr{a("10.99.0.2"), a("10.99.5.1")}, Interface: "lo"}}
	if !reflect.DeepEqual(got.Relays, want) {
		t.Fatalf("relays = %+v, want %+v", got.Relays, want)
	}
}
