package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestIPv6SubnetValidates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte(`
advertise_addr: 10.99.0.1
dhcp:
  interfaces: [lo]
  subnets:
    - name: v4
      subnet: 10.99.1.0/24
      pools: ["10.99.1.10-10.99.1.50"]
    - name: v6
      subnet: fd99:0:0:1::/64
      pools: ["fd99:0:0:1::100-fd99:0:0:1::1ff"]
      dns: ["fd99:0:0:1::53"]
      domain: lab.example
      rapid_commit: false
      options: {boot-file-url: "http://[fd99::1]/x", "239": "http://[fd99::1]/p.sh"}
      reservations:
        - {duid: "00:03:00:01:02:00:00:00:00:01", ip: "fd99:0:0:1::10"}
        - {mac: "02:00:00:00:00:02", ip: "fd99:0:0:1::11", kind: sonic}
  relays:
    - {address: "fd99:0:0:5::1", giaddrs: ["fd99:0:0:6::1"]}
`), 0o644)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	sn := c.DHCP.Subnets[1]
	if !sn.IsIPv6() || len(sn.PoolRanges) != 1 || sn.Reservations[0].DUID != "00030001020000000001" || *sn.RapidCommit {
		t.Fatalf("v6 subnet = %+v", sn)
	}
	if r := c.DHCP.Relays[0]; len(r.Source) != 1 || len(r.GIAddr) != 2 || !r.Source[0].Is6() {
		t.Fatalf("v6 relay = %+v", r)
	}
}

func TestIPv6SubnetErrorsNameTheirField(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte(`
advertise_addr: 10.99.0.1
dhcp:
  interfaces: [lo]
  subnets:
    - name: v6
      subnet: fd99:0:0:1::/64
      pools: ["10.99.1.10-10.99.1.50", "fd99:0:0:2::1-fd99:0:0:2::9"]
      router: fd99:0:0:1::1
      dns: ["10.0.0.53"]
      options: {"3": x, "bootfile-name": y}
      reservations:
        - {client_id: abc, ip: "fd99:0:0:1::10"}
        - {duid: "zz", ip: "fd99:0:0:1::11"}
        - {mac: "02:00:00:00:00:02", ip: "10.99.1.5"}
    - name: v4
      subnet: 10.99.1.0/24
      pools: ["10.99.1.10-10.99.1.50"]
      rapid_commit: true
      reservations:
        - {duid: "00:03:00:01:02:00:00:00:00:01", ip: 10.99.1.9}
  relays:
    - {address: "fd99:0:0:5::1", giaddrs: ["10.99.6.1"]}
`), 0o644)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	if err == nil {
		t.Fatal("want errors")
	}
	for _, want := range []string{
		`dhcp.subnets[0].pools[0]: range start "10.99.1.10" is not an IPv6 address`,
		"dhcp.subnets[0].pools[1]: fd99:0:0:2::1-fd99:0:0:2::9 is outside subnet fd99:0:0:1::/64",
		"dhcp.subnets[0].router: is not served over DHCPv6",
		`dhcp.subnets[0].dns[0]: "10.0.0.53" is not an IPv6 address`,
		"dhcp.subnets[0].options.3: DHCPv6 option 3 is the server's own",
		`dhcp.subnets[0].options.bootfile-name: "bootfile-name" is not a DHCPv6 option code`,
		"dhcp.subnets[0].reservations[0]: an IPv6 client is reserved by duid or mac",
		`dhcp.subnets[0].reservations[1].duid: "zz" is not a DUID`,
		`dhcp.subnets[0].reservations[2].ip: "10.99.1.5" is not an IPv6 address`,
		"dhcp.subnets[1].rapid_commit: is for IPv6 subnets",
		"dhcp.subnets[1].reservations[0].duid: is for IPv6 subnets",
		`dhcp.relays[0].giaddrs[0]: "10.99.6.1" is not an IPv6 address`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}
