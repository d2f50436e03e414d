package fleet

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv6"

	"github.com/ztpd/ztpd/ztp/dhcp6"
)

// TestRelayForwardParsesAsZTPDReads checks what the fleet's relay sends
// against ztpd's own parser: a Relay-Forw around a Solicit carrying the
// switch's DUID-LLT, its IA_NA, user class SONiC-ZTP and the Option
// Request for 59.
func TestRelayForwardParsesAsZTPDReads(t *testing.T) {
	sw := Switch{N: 7, MAC: MAC(7).String(), Serial: "S7", Product: "P"}
	id, err := sw.Identity6()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := id.LinkLocal(), netip.MustParseAddr("fe80::5a:ff:fe00:7"); got != want {
		t.Errorf("link-local of %s: %s, want %s (modified EUI-64)", id.MAC, got, want)
	}
	duid := id.DUID().ToBytes()
	if want := append([]byte{0, 1, 0, 1, 0x30, 0, 0, 0}, id.MAC...); !bytes.Equal(duid, want) {
		t.Errorf("DUID % x, want DUID-LLT % x", duid, want)
	}
	sol, err := id.message(dhcpv6.MessageTypeSolicit)
	if err != nil {
		t.Fatal(err)
	}
	sol.AddOption(&dhcpv6.OptIANA{IaId: id.iaid()})
	r := &Relay6{link: netip.MustParseAddr("fd99:0:0:100::1").AsSlice()}
	raw, err := r.forward(id.LinkLocal(), sol)
	if err != nil {
		t.Fatal(err)
	}
	if raw[0] != byte(dhcpv6.MessageTypeRelayForward) || !bytes.Equal(raw[2:18], r.link) {
		t.Fatalf("not a Relay-Forw stating link fd99:0:0:100::1: % x", raw[:34])
	}
	var p dhcp6.Packet
	if err := p.Parse(raw); err != nil {
		t.Fatalf("ztpd's parser refuses the fleet's Relay-Forw: %v", err)
	}
	if p.Type != byte(dhcpv6.MessageTypeSolicit) {
		t.Errorf("relayed message type %d, want Solicit", p.Type)
	}
	if cid, _ := p.Opt(1); !bytes.Equal(cid, duid) {
		t.Errorf("client id % x, want % x", cid, duid)
	}
	if uc, _ := p.Opt(15); !bytes.Equal(uc, []byte("\x00\x09SONiC-ZTP")) {
		t.Errorf("user class % x, want one instance SONiC-ZTP", uc)
	}
	if oro, _ := p.Opt(6); !bytes.Contains(oro, []byte{0, 59}) {
		t.Errorf("option request % x lacks 59", oro)
	}
	if !p.Has(3) {
		t.Error("no IA_NA")
	}
}
