package app

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// IPv6 subnets and relays of the dhcp: section go to the DHCPv6 server's
// settings, IPv4 ones to the DHCPv4 server's, each parsed once.
func TestResolveDHCP6(t *testing.T) {
	c := loadConfig(t, `
advertise_addr: 10.99.0.1
dhcp:
  interfaces: [lo]
  lease_time: 2h
  subnets:
    - name: v4
      subnet: 10.99.0.0/24
      pools: ["10.99.0.100-10.99.0.199"]
    - name: v6
      subnet: fd99:0:0:1::/64
      pools: ["fd99:0:0:1::100-fd99:0:0:1::1ff"]
      dns: ["fd99:0:0:1::53"]
      domain: lab.example
      lease_time: 30m
      rapid_commit: false
      options: {sonic-provisioning-script: "http://[fd99::1]/p.sh"}
      class_options: {onie: {boot-file-url: "http://[fd99::1]/onie"}}
      reservations:
        - {duid: "0003000102000000000a", ip: "fd99:0:0:1::10", kind: sonic}
        - {mac: "1e:00:00:00:00:0b", ip: "fd99:0:0:1::11", hostname: vm-b}
  relays:
    - {address: 10.99.0.3, giaddrs: [10.99.40.1]}
    - {address: "fd99:0:0:9::2", giaddrs: ["fd99:0:0:2::1"]}
`)
	v4, err := resolveDHCP(&c.DHCP)
	if err != nil {
		t.Fatal(err)
	}
	if len(v4.Subnets) != 1 || v4.Subnets[0].Name != "v4" || len(v4.Relays) != 1 {
		t.Fatalf("DHCPv4 settings: subnets %+v, relays %+v", v4.Subnets, v4.Relays)
	}
	v6, err := resolveDHCP6(&c.DHCP)
	if err != nil {
		t.Fatal(err)
	}
	if len(v6.Subnets) != 1 || len(v6.Relays) != 1 || v6.Relays[0].LinkAddrs[1] != netip.MustParseAddr("fd99:0:0:2::1") {
		t.Fatalf("DHCPv6 settings: %+v", v6)
	}
	sn := v6.Subnets[0]
	if sn.Name != "v6" || sn.LeaseTime != 30*time.Minute || sn.RapidCommit || len(sn.Pools) != 1 ||
		sn.DNS[0] != netip.MustParseAddr("fd99:0:0:1::53") || sn.Domains[0] != "lab.example" {
		t.Fatalf("subnet = %+v", sn)
	}
	if string(sn.Options[239]) != "http://[fd99::1]/p.sh" || string(sn.ClassOptions[core.KindONIE][59]) != "http://[fd99::1]/onie" {
		t.Fatalf("options = %v, class options = %v", sn.Options, sn.ClassOptions)
	}
	r := sn.Reservations
	if len(r) != 2 || len(r[0].DUID) != 10 || r[0].Kind != core.KindSONiC || r[1].MAC.String() != "1e:00:00:00:00:0b" {
		t.Fatalf("reservations = %+v", r)
	}
	if v4, v6 := hasSubnets(&c.DHCP); !v4 || !v6 {
		t.Fatal("hasSubnets misses a family")
	}
}
