package config

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestRelays(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte(`
advertise_addr: 127.0.0.1
dhcp:
  interfaces: [lo]
  relays:
    - {address: 10.99.0.2, giaddrs: [10.99.5.1, 10.99.6.1], interface: lo}
    - {address: 10.99.0.3, sources: [10.99.0.4]}
  subnets:
    - {name: a, subnet: 10.99.5.0/24, pools: ["10.99.5.10-10.99.5.20"]}
`), 0o644)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr
	r := c.DHCP.Relays
	if !slices.Equal(r[0].Source, []netip.Addr{a("10.99.0.2")}) || !slices.Equal(r[0].GIAddr, []netip.Addr{a("10.99.0.2"), a("10.99.5.1"), a("10.99.6.1")}) {
		t.Fatalf("relay 0 resolved to sources %v giaddrs %v", r[0].Source, r[0].GIAddr)
	}
	if !slices.Equal(r[1].Source, []netip.Addr{a("10.99.0.3"), a("10.99.0.4")}) || !slices.Equal(r[1].GIAddr, []netip.Addr{a("10.99.0.3")}) {
		t.Fatalf("relay 1 resolved to sources %v giaddrs %v", r[1].Source, r[1].GIAddr)
	}

	c = Default()
	c.DHCP.Interfaces = []string{"lo"}
	c.DHCP.Ranges = []string{"127.0.0.10-127.0.0.20"}
	c.DHCP.Relays = []Relay{{}, {Address: "10.99.0.300", GIAddrs: []string{"::1"}, Sources: []string{"0.0.0.0"}, Interface: "eth9"}}
	err = c.Validate()
	for _, want := range []string{
		"dhcp.relays[0].address: required",
		`dhcp.relays[1].address: "10.99.0.300" is not an IPv4 address`,
		`dhcp.relays[1].giaddrs[0]: "::1" is not an IPv4 address`,
		`dhcp.relays[1].sources[0]: "0.0.0.0" is not an IPv4 address`,
		`dhcp.relays[1].interface: "eth9" is not one of dhcp.interfaces`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}

// A rule on circuit or remote ids with no relay declared admits nobody:
// serve warns about it.
func TestRelayInfoRulesNeedRelays(t *testing.T) {
	c := Default()
	c.Joiner.AutoApprove = []Rule{{Subnets: []string{"10.99.0.0/24"}}, {CircuitIDs: []string{"rack7/port3"}}, {RemoteIDs: []string{"r1"}}}
	if got := c.RelayInfoNeedsRelays(); !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("rules needing relays: %v, want [1 2]", got)
	}
	c.DHCP.Relays = []Relay{{Address: "10.99.0.2"}}
	if got := c.RelayInfoNeedsRelays(); len(got) != 0 {
		t.Fatalf("with a relay declared: %v", got)
	}
}
