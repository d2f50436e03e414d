package dhcp

import (
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// The DHCPv6 server keeps its leases in the same table: the DHCPv4 server
// loads past them, counting them neither as its own nor as unreadable.
func TestIPv6LeasesInTheStoreAreNotOurs(t *testing.T) {
	h := newHarness(t, nil)
	err := h.st.Update(func(tx core.Tx) error {
		return tx.Leases().Put(core.Lease{IP: "fd99:0:0:1::100", MAC: "02:00:00:00:00:06", ClientID: "00:03:00:01:02:00:00:00:00:06",
			Subnet: "lab6", State: core.LeaseActive, Start: h.now, Expiry: h.now.Add(time.Hour)})
	})
	if err != nil {
		t.Fatal(err)
	}
	h.restart()
	if !strings.Contains(h.logs.String(), "leases=0 outside_subnets=0 unreadable=0") {
		t.Fatalf("load counted the IPv6 lease:\n%s", h.logs)
	}
}
