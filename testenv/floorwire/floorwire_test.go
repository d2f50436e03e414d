package floorwire

import (
	"bytes"
	"net"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv6"
)

func solicit(t testing.TB) *dhcpv6.Message {
	mac, _ := net.ParseMAC("02:99:00:00:00:07")
	m, err := dhcpv6.NewSolicit(mac)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A Solicit's answer is an Advertise the reference parser reads back: the
// transaction, the client id, the server id and the address in the IA_NA.
func TestAnswerParses(t *testing.T) {
	sol := solicit(t)
	r, ok := ParseRequest(sol.ToBytes())
	if !ok || r.Answer != 2 || r.IAID != sol.Options.OneIANA().IaId {
		t.Fatalf("ParseRequest = %+v, %v", r, ok)
	}
	addr := [16]byte{0xfd, 0x99, 15: 7}
	d, err := dhcpv6.FromBytes(AppendAnswer(nil, r, addr))
	if err != nil {
		t.Fatal(err)
	}
	m := d.(*dhcpv6.Message)
	ia := m.Options.OneIANA()
	if m.MessageType != dhcpv6.MessageTypeAdvertise || m.TransactionID != sol.TransactionID ||
		!bytes.Equal(m.Options.ClientID().ToBytes(), sol.Options.ClientID().ToBytes()) || m.Options.ServerID() == nil ||
		ia == nil || !ia.Options.OneAddress().IPv6Addr.Equal(net.IP(addr[:])) {
		t.Fatalf("answer: %s", m.Summary())
	}
}

func TestParseRequestRefuses(t *testing.T) {
	raw := solicit(t).ToBytes()
	long := append([]byte{3, 1, 2, 3, 0, 1, 0, 131}, make([]byte, 131)...)
	for name, b := range map[string][]byte{
		"empty":              nil,
		"advertise":          append([]byte{2}, raw[1:]...),
		"truncated option":   raw[:len(raw)-1],
		"no client id":       {1, 1, 2, 3},
		"one-byte client id": {1, 1, 2, 3, 0, 1, 0, 1, 9},
		"131-byte client id": long,
	} {
		if r, ok := ParseRequest(b); ok {
			t.Errorf("%s: accepted as %+v", name, r)
		}
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add(solicit(f).ToBytes())
	f.Add([]byte{3, 0, 0, 1, 0, 1, 0, 2, 0, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, ok := ParseRequest(b)
		if !ok {
			return
		}
		if len(r.ClientID) < 2 || len(r.ClientID) > 130 {
			t.Fatalf("client id of %d bytes accepted", len(r.ClientID))
		}
		if _, err := dhcpv6.FromBytes(b); err == nil {
			if _, err := dhcpv6.FromBytes(AppendAnswer(nil, r, [16]byte{0xfd})); err != nil {
				t.Fatalf("answer does not parse: %v", err)
			}
		}
	})
}
