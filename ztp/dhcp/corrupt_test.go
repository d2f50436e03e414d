package dhcp

import (
	"strings"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/ztpd/ztpd/internal/store/storetest"
)

// TestCorruptLeaseCostsOnlyItself: a lease record that cannot be decoded
// (a disk fault) does not stop DHCP from starting; every other client keeps
// its address and the log names the skipped record.
func TestCorruptLeaseCostsOnlyItself(t *testing.T) {
	h := newHarness(t, nil)
	a := h.dora(mac(1))
	b := h.dora(mac(2))
	h.commit()
	h.st.Close()
	storetest.CorruptRecord(t, h.dir, storetest.LeaseRecords, a.YourIPAddr.String())
	h.open()
	if !strings.Contains(h.logs.String(), "unreadable lease records skipped") {
		t.Fatalf("no log of the skipped record:\n%s", h.logs.String())
	}
	offer, _ := h.exchange(discover(mac(2)))
	if offer == nil || !offer.YourIPAddr.Equal(b.YourIPAddr) {
		t.Fatalf("client 2 offered %v after the restart, had %s", offer, b.YourIPAddr)
	}
	r, _ := dhcpv4.New(dhcpv4.WithHwAddr(mac(1)), dhcpv4.WithMessageType(dhcpv4.MessageTypeDiscover))
	if o, _ := h.exchange(r); o == nil {
		t.Fatal("the client whose lease record was damaged gets no offer")
	}
}
