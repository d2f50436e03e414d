package config

import (
	"strings"
	"testing"
)

// Regression: --dhcp-interface nosuch0 said "has no IPv4 address" (and Go's
// "route ip+net: no such network interface"); the error says the interface
// does not exist and lists those that do, and nothing derived from it is
// reported as a second, misleading error.
func TestMissingDHCPInterfaceSaysItDoesNotExist(t *testing.T) {
	for _, ranges := range [][]string{nil, {"10.99.1.10-10.99.1.20"}} {
		c := Default()
		c.DHCP.Interfaces = []string{"nosuch0"}
		c.DHCP.Ranges = ranges
		err := c.Validate()
		if err == nil {
			t.Fatal("nosuch0 accepted")
		}
		msg := err.Error()
		if !strings.Contains(msg, `dhcp.interfaces[0]: interface "nosuch0" does not exist on this host (it has: `) ||
			!strings.Contains(msg, "lo") {
			t.Errorf("ranges %v: %v", ranges, msg)
		}
		for _, noise := range []string{"no IPv4 address", "no such network interface", "dhcp.subnets", "dhcp.ranges"} {
			if strings.Contains(msg, noise) {
				t.Errorf("ranges %v: error still says %q:\n%s", ranges, noise, msg)
			}
		}
	}
}
