package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoadValidate feeds arbitrary YAML through Load and Validate: bad
// input must give an error, never a panic.
func FuzzLoadValidate(f *testing.F) {
	f.Add([]byte("http:\n  addr: 127.0.0.1:8080\n"))
	f.Add([]byte("dhcp:\n  interfaces: [lo]\n  subnets:\n    - {name: a, subnet: 10.99.1.0/24, pools: [\"10.99.1.10-10.99.1.20\"], reservations: [{mac: \"02:00:00:00:00:01\", ip: 10.99.1.5}]}\n"))
	f.Add([]byte("dhcp:\n  lease_time: 5s\n  ranges: [\"1-2\"]\n  options: {\"300\": x}\n"))
	f.Add([]byte("joiner:\n  auto_approve: [{subnets: [bad], macs: [zz]}]\n"))
	f.Add([]byte("tftp:\n  window: 70\n  retransmit_timeout: 1ms\n  max_transfers: 3\n  max_transfers_per_source: 4\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, raw []byte) {
		path := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load(path)
		if err != nil {
			return
		}
		_ = c.Validate()
	})
}

// FuzzParseMACPrefix: whatever is accepted is 1..6 bytes that print back as
// the (lower-cased) input.
func FuzzParseMACPrefix(f *testing.F) {
	for _, s := range []string{"1e:00", "1E", "02:00:00:00:00:01", "02:00:00:00:00:00:01", "", ":", "1e:0", "zz", "+1:00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hw, err := ParseMACPrefix(s)
		if err != nil {
			return
		}
		if len(hw) < 1 || len(hw) > 6 || hw.String() != strings.ToLower(s) {
			t.Fatalf("%q parsed as %v", s, hw)
		}
	})
}
