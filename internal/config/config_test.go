package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDefaultIsValid(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.HTTP.Addr != "127.0.0.1:8080" || c.DataDir != "ztpd-data" || c.DHCP.Enabled() {
		t.Fatalf("unexpected default: %+v", c)
	}
}

func TestErrorsNameFieldAndProblem(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte(`
advertise_addr: 10.99.0.1
dhcp:
  interfaces: [lo]
  subnets:
    - name: a
      subnet: 10.99.1.0/24
      pools: ["10.99.1.50-10.99.1.10", "10.99.2.1-10.99.2.9"]
      router: 10.98.0.1
      reservations:
        - {mac: "02:00:00:00:00:01", ip: 10.99.1.5}
        - {mac: "02-00-00-00-00-01", ip: 10.99.1.5}
      options: {"300": x}
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
		"dhcp.subnets[0].pools[0]: start 10.99.1.50 is after end 10.99.1.10",
		"dhcp.subnets[0].pools[1]: 10.99.2.1-10.99.2.9 is outside subnet 10.99.1.0/24",
		"dhcp.subnets[0].router: 10.98.0.1 is outside subnet",
		"dhcp.subnets[0].reservations[1]: mac=02:00:00:00:00:01 is also reserved by reservation 0",
		"dhcp.subnets[0].reservations[1].ip: 10.99.1.5 is also reserved",
		`dhcp.subnets[0].options.300: "300" is not an option code`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}

func TestUnknownFieldIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte("http:\n  adr: 1.2.3.4:80\n"), 0o644)
	_, err := Load(path)
	if err == nil || !strings.Contains(err.Error(), "adr") {
		t.Fatalf("want unknown-field error naming adr, got %v", err)
	}
}

func TestRangesFromFlagsUseInterfaceSubnet(t *testing.T) {
	c := Default()
	c.DHCP.Interfaces = []string{"lo"}
	c.DHCP.Ranges = []string{"127.0.0.10-127.0.0.20"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(c.DHCP.Subnets) != 1 || c.DHCP.Subnets[0].CIDR != "127.0.0.0/8" || len(c.DHCP.Subnets[0].PoolRanges) != 1 {
		t.Fatalf("subnet not derived: %+v", c.DHCP.Subnets)
	}
	if c.AdvertiseAddr != "127.0.0.1" {
		t.Fatalf("advertise addr should default to the interface address, got %q", c.AdvertiseAddr)
	}
	c = Default()
	c.DHCP.Interfaces = []string{"lo"}
	c.DHCP.Ranges = []string{"10.99.1.10-10.99.1.20"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "dhcp.ranges[0]") {
		t.Fatalf("want range placement error, got %v", err)
	}
}

func TestAPISignatureAndKubeconfigKeys(t *testing.T) {
	d := Default()
	if !d.API.RequireExpiryREST || d.API.RequireExpiryCloudStack || d.API.MaxSignatureLifetime.D() != 20*time.Minute ||
		d.API.KubeconfigTTL.D() != 24*time.Hour || d.API.AdminKeyFile != "" {
		t.Fatalf("API defaults %+v", d.API)
	}
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte("api:\n  require_expiry_rest: false\n  require_expiry_cloudstack: true\n  max_signature_lifetime: 48h\n  kubeconfig_ttl: 1m\n  admin_key_file: /etc/ztpd/\n"), 0o644)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.API.RequireExpiryREST || !c.API.RequireExpiryCloudStack {
		t.Fatalf("booleans not read: %+v", c.API)
	}
	err = c.Validate()
	for _, want := range []string{"api.max_signature_lifetime: 48h0m0s is outside 1m..24h",
		"api.kubeconfig_ttl: 1m0s is outside 5m..8760h", `api.admin_key_file: "/etc/ztpd/" names a directory`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
}

func TestTFTPDefaultsAndValidation(t *testing.T) {
	d := Default().TFTP
	if d.Window != 8 || d.RetransmitTimeout.D() != time.Second || d.MaxRetransmits != 5 || d.MaxTransfers != 256 || d.MaxTransfersPerSource != 4 {
		t.Fatalf("tftp defaults: %+v", d)
	}
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte(`
tftp:
  window: 65
  retransmit_timeout: 50ms
  max_retransmits: 0
  max_transfers: 0
  max_transfers_per_source: 0
`), 0o644)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	for _, want := range []string{
		"tftp.window: 65 is outside 0..64",
		"tftp.retransmit_timeout: 50ms is outside 100ms..30s",
		"tftp.max_retransmits: 0 is outside 1..20",
		"tftp.max_transfers: 0 is outside 1..10000",
		"tftp.max_transfers_per_source: 0 is outside 1..1",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	os.WriteFile(path, []byte("tftp:\n  max_transfers: 10\n  max_transfers_per_source: 11\n"), 0o644)
	c, _ = Load(path)
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "tftp.max_transfers_per_source: 11 is outside 1..10 (tftp.max_transfers)") {
		t.Fatalf("per-source above global: %v", err)
	}
	os.WriteFile(path, []byte("tftp:\n  window: 1\n  retransmit_timeout: 2s\n  max_retransmits: 3\n  max_transfers: 10\n  max_transfers_per_source: 10\n"), 0o644)
	c, _ = Load(path)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestAutoApproveAssertedFactsAreExplicit: serials and products are what a
// device says about itself, so a rule names them under asserted:, and a
// rule written the old way is refused with the way to fix it.
func TestAutoApproveAssertedFactsAreExplicit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte(`joiner:
  reissue_window: -1m
  auto_approve:
    - {serials: [SN1], products: [P1], cluster: prod}
    - {subnets: [10.99.1.0/24], roles: [control-plane, boss]}
`), 0o644)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	for _, want := range []string{
		"joiner.auto_approve[0].serials: a serial number is what a device says about itself; to approve on it, write it under asserted.serials",
		"joiner.auto_approve[0].products: a product name is what a device says about itself; to approve on it, write it under asserted.products",
		`joiner.auto_approve[1].roles[1]: "boss" is not a role (worker or control-plane)`,
		"joiner.reissue_window: must not be negative",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	os.WriteFile(path, []byte(`joiner:
  auto_approve:
    - {asserted: {serials: [SN1], products: [P1]}, circuit_ids: [rack7/port3], remote_ids: [r1], reserved: true, roles: [worker], cluster: prod}
`), 0o644)
	if c, err = Load(path); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	r := c.Joiner.AutoApprove[0]
	if r.Asserted.Serials[0] != "SN1" || r.CircuitIDs[0] != "rack7/port3" || !r.Reserved || r.Roles[0] != "worker" {
		t.Fatalf("rule read as %+v", r)
	}
}

// One parser decides what a VM MAC prefix is, for Validate and for the app
// that hands the parsed bytes to DHCP.
func TestMACPrefixes(t *testing.T) {
	for s, want := range map[string]string{"1e:00": "1e:00", "1E": "1e", "02:00:00:00:00:01": "02:00:00:00:00:01"} {
		hw, err := ParseMACPrefix(s)
		if err != nil || hw.String() != want {
			t.Errorf("ParseMACPrefix(%q) = %v, %v; want %s", s, hw, err, want)
		}
	}
	for _, s := range []string{"", "1e:", "1e:0", "1e-00", "zz", "+1", "02:00:00:00:00:00:01"} {
		if hw, err := ParseMACPrefix(s); err == nil {
			t.Errorf("ParseMACPrefix(%q) = %v, want an error", s, hw)
		}
	}
	c := Default()
	c.DHCP.VM.MACPrefixes = []string{"1e:00", "1e:0"}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), `dhcp.vm.mac_prefixes[1]: "1e:0" is not a MAC prefix like 1e:00`) ||
		strings.Contains(err.Error(), "mac_prefixes[0]") {
		t.Fatalf("err = %v", err)
	}
}

// CloudStack guest NICs are VMs out of the box (1e:<mac.identifier 0>);
// a file's mac_prefixes replaces the default, and [] turns it off.
func TestVMMACPrefixDefault(t *testing.T) {
	if got := Default().DHCP.VM.MACPrefixes; !slices.Equal(got, []string{"1e:00"}) {
		t.Fatalf("default dhcp.vm.mac_prefixes = %q, want [1e:00]", got)
	}
	dir := t.TempDir()
	for body, want := range map[string][]string{
		"dhcp:\n  lease_time: 2h\n":                     {"1e:00"},
		"dhcp:\n  vm:\n    mac_prefixes: []\n":          {},
		"dhcp:\n  vm:\n    mac_prefixes: [\"02:01\"]\n": {"02:01"},
	} {
		path := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.DHCP.VM.MACPrefixes; !slices.Equal(got, want) {
			t.Errorf("%q: mac_prefixes = %q, want %q", body, got, want)
		}
	}
}

// TestDevicesRetentionDefaultsAndValidation: unleased records expire after
// a day and are capped at 10,000 by default; a negative bound or an expiry
// shorter than a device's way from its lease to its first fetch is refused.
func TestDevicesRetentionDefaultsAndValidation(t *testing.T) {
	if d := Default().Devices; d.UnleasedExpiry.D() != 24*time.Hour || d.MaxUnleased != 10000 {
		t.Fatalf("devices defaults: %+v", d)
	}
	path := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(path, []byte("devices:\n  unleased_expiry: 1m\n  max_unleased: -1\n"), 0o644)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Validate()
	for _, want := range []string{"devices.unleased_expiry: 1m0s is shorter than 10m", "devices.max_unleased: must not be negative"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	os.WriteFile(path, []byte("devices:\n  unleased_expiry: 0s\n  max_unleased: 0\n"), 0o644)
	if c, _ = Load(path); c.Validate() != nil {
		t.Fatalf("both bounds off: %v", c.Validate())
	}
}

// TestIPv6Addresses: addresses as an operator writes them, bracketed or
// not where either is unambiguous, and zones refused where an address is
// handed to devices or to the other appliances.
func TestIPv6Addresses(t *testing.T) {
	for _, c := range []struct {
		yaml string
		want string // "" = valid
	}{
		{"advertise_addr: fd99::1\n", ""},
		{"advertise_addr: '[fd99::1]'\n", ""},
		{"advertise_addr: 10.99.0.1\nadvertise_addr6: fd99::1\n", ""},
		{"advertise_addr: fe80::1%eth0\n", "advertise_addr: \"fe80::1%eth0\": a zone means nothing"},
		{"advertise_addr: fe80::1\n", "advertise_addr: \"fe80::1\" is link-local"},
		{"advertise_addr6: 10.99.0.1\n", "advertise_addr6: \"10.99.0.1\" is not an IPv6 address"},
		{"advertise_addr: fd99::1\nadvertise_addr6: fd99::2\n", "advertise_addr6: fd99::2 and advertise_addr fd99::1 are both IPv6"},
		{"http:\n  addr: '[fd99::1]:8080'\n", ""},
		{"http:\n  addr: '[::]:8080'\n", ""},
		{"http:\n  addr: 'fd99::1:8080'\n", "http.addr: \"fd99::1:8080\": an IPv6 host is written in brackets, as [fd99::1]:8080"},
		{"http:\n  addr: '[fe80::1%eth0]:80'\n", ""},
		{"http:\n  addr: '[fd99::1%eth0]:80'\n", "a zone names the interface of a link-local address"},
	} {
		path := filepath.Join(t.TempDir(), "c.yaml")
		os.WriteFile(path, []byte(c.yaml), 0o644)
		cfg, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		err = cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v", c.yaml, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: want %q, got %v", c.yaml, c.want, err)
		}
		if c.yaml == "advertise_addr: '[fd99::1]'\n" && cfg.AdvertiseAddr != "fd99::1" {
			t.Errorf("bracketed advertise_addr kept as %q", cfg.AdvertiseAddr)
		}
	}
}

func TestStorePeerZoneRefused(t *testing.T) {
	c := Default()
	c.Store = Store{Backend: "etcd-embedded", Name: "a", TLS: StoreTLS{CertFile: "c", KeyFile: "k", CAFile: "ca"},
		Peers: []StorePeer{{Name: "a", URL: "https://[fe80::1%25eth0]:2380"}, {Name: "b", URL: "https://[fd99::2]:2380"}}}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "store.peers[0].url") || strings.Contains(err.Error(), "store.peers[1].url") {
		t.Fatalf("peers: %v", err)
	}
}
