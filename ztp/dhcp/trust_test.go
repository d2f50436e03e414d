package dhcp

import (
	"net"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/ztpd/ztpd/internal/core"
)

func (h *harness) devices() int {
	h.t.Helper()
	var n int
	if err := h.st.View(func(tx core.Tx) error { var err error; n, err = tx.Devices().Count(); return err }); err != nil {
		h.t.Fatal(err)
	}
	return n
}

// TestOnlyLeaseHoldersAreStored: DISCOVERs from made-up hardware addresses
// are answered (that is DHCP) but leave no device record; the client that
// takes its lease gets one.
func TestOnlyLeaseHoldersAreStored(t *testing.T) {
	h := newHarness(t, nil)
	for i := 0; i < 50; i++ {
		if offer, _ := h.exchange(discover(mac(1000 + i))); offer == nil {
			t.Fatalf("no offer for %d", i)
		}
	}
	h.commit()
	if n := h.devices(); n != 0 {
		t.Fatalf("%d device records after 50 DISCOVERs, want 0", n)
	}
	h.dora(mac(7))
	h.commit()
	if n := h.devices(); n != 1 {
		t.Fatalf("%d device records after one lease, want 1", n)
	}
	if d := h.device(mac(7).String()); d.State != core.StateLeased || d.IP == "" {
		t.Fatalf("lease holder's record %+v", d)
	}
}

// TestHostileFactsAreNotStored: option 61 and 12 values outside the
// character sets of device facts are dropped (the client still gets its
// lease), and a serial already on record is not replaced by a new claim.
func TestHostileFactsAreNotStored(t *testing.T) {
	h := newHarness(t, nil)
	sonic := func(id string) []dhcpv4.Modifier {
		return []dhcpv4.Modifier{generic(optClientID, []byte(id)), generic(77, append([]byte{9}, "SONiC-ZTP"...))}
	}
	hw := mac(20)
	h.dora(hw, append(sonic(`SONiC##Evil"}}##X"}}, "TACPLUS_SERVER": {`), dhcpv4.WithOption(dhcpv4.OptHostName("a b;rm")))...)
	h.commit()
	d := h.device(hw.String())
	if d.Serial != "" || d.Product != "" || d.Hostname != "" {
		t.Fatalf("hostile facts stored: serial %q product %q hostname %q", d.Serial, d.Product, d.Hostname)
	}
	if d.Kind != core.KindSONiC {
		t.Fatalf("kind %s", d.Kind)
	}
	hw2 := mac(21)
	h.dora(hw2, sonic("SONiC##Accton-AS7712-32X##SN0021")...)
	h.commit()
	h.dora(hw2, sonic("SONiC##Accton-AS7712-32X##VICTIM1")...)
	h.commit()
	if d := h.device(hw2.String()); d.Serial != "SN0021" {
		t.Fatalf("serial replaced by a later claim: %q", d.Serial)
	}
}

// TestRelayAgentInformationIsRecorded: option 82's circuit and remote ids,
// which the relay (not the device) adds, land on the device record, where
// auto-approval rules can match them.
func TestRelayAgentInformationIsRecorded(t *testing.T) {
	h := newHarness(t, nil)
	hw := net.HardwareAddr{0x52, 0x54, 0x00, 0x99, 0x00, 0x01}
	rai := []byte{1, 11}
	rai = append(rai, "rack7/port3"...)
	rai = append(rai, 2, 4, 0xde, 0xad, 0xbe, 0xef)
	mods := []dhcpv4.Modifier{dhcpv4.WithGatewayIP(net.IPv4(10, 99, 5, 1)), generic(82, rai)}
	h.dora(hw, mods...)
	h.commit()
	d := h.device(hw.String())
	if d.CircuitID != "rack7/port3" || d.RemoteID != "de:ad:be:ef" || d.RelayAddr != "10.99.5.1" {
		t.Fatalf("relay information: circuit %q remote %q relay %q", d.CircuitID, d.RemoteID, d.RelayAddr)
	}
}
