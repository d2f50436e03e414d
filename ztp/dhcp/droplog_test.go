package dhcp

import (
	"strings"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// Regression: a request ztpd leaves unanswered for a reason the operator can
// fix was only counted (ztpd_dhcp_dropped_total). A relay from a subnet
// nobody declared and a client asking to keep an address ztpd never leased
// are said at info, once per relay or client every dropLogEvery.
func TestUnansweredRequestsAreLoggedOncePerKey(t *testing.T) {
	h := newHarness(t, nil)
	relayed := func(hw int) *dhcpv4.DHCPv4 {
		return discover(mac(hw), func(m *dhcpv4.DHCPv4) { m.GatewayIPAddr = ip("10.99.77.1") })
	}
	for i := 0; i < 3; i++ {
		if rep, _ := h.exchange(relayed(i)); rep != nil {
			t.Fatalf("a relay from an undeclared subnet got %v", rep.MessageType())
		}
	}
	initReboot := func(hw int) *dhcpv4.DHCPv4 {
		m, err := dhcpv4.NewDiscovery(mac(hw), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(ip("10.99.0.150"))))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for i := 0; i < 2; i++ {
		if rep, _ := h.exchange(initReboot(7)); rep != nil {
			t.Fatalf("INIT-REBOOT for an address ztpd never leased got %v", rep.MessageType())
		}
	}
	logs := h.logs.String()
	if n := strings.Count(logs, "relayed DHCP request left unanswered"); n != 1 {
		t.Errorf("relay lines: %d, want 1 (one relay, rate-limited):\n%s", n, logs)
	}
	if !strings.Contains(logs, "level=INFO") || !strings.Contains(logs, "giaddr=10.99.77.1") || !strings.Contains(logs, "dhcp.subnets") {
		t.Errorf("the relay line does not name the relay and the setting:\n%s", logs)
	}
	if n := strings.Count(logs, "ztpd has no lease of"); n != 1 || !strings.Contains(logs, "requested=10.99.0.150") {
		t.Errorf("INIT-REBOOT lines: %d, want 1 naming the address:\n%s", n, logs)
	}
}
