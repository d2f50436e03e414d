package main

import (
	"net"
	"net/netip"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv6"
)

var prefix = netip.MustParseAddr("fd99:0:0:1::").As16()

// The floor's answers are what perfdhcp takes for a server's: a real parser
// reads an Advertise for the Solicit and a Reply for the Request, each with
// the client's id and IAID and one address in the prefix.
func TestAnswersParse(t *testing.T) {
	mac, _ := net.ParseMAC("02:99:00:00:00:07")
	sol, err := dhcpv6.NewSolicit(mac)
	if err != nil {
		t.Fatal(err)
	}
	adv := parse(t, answer(nil, sol.ToBytes(), prefix), dhcpv6.MessageTypeAdvertise, sol, sol)
	req, err := dhcpv6.NewRequestFromAdvertise(adv)
	if err != nil {
		t.Fatal(err)
	}
	rep := parse(t, answer(nil, req.ToBytes(), prefix), dhcpv6.MessageTypeReply, req, sol)
	if a, b := adv.Options.OneIANA().Options.OneAddress().IPv6Addr, rep.Options.OneIANA().Options.OneAddress().IPv6Addr; !a.Equal(b) {
		t.Fatalf("Advertise offered %s, Reply gave %s", a, b)
	}
	for _, typ := range []dhcpv6.MessageType{dhcpv6.MessageTypeRenew, dhcpv6.MessageTypeRelayForward} {
		m := *sol
		m.MessageType = typ
		if out := answer(nil, m.ToBytes(), prefix); out != nil {
			t.Fatalf("%s answered", typ)
		}
	}
	b := sol.ToBytes()
	if out := answer(nil, b[:len(b)-3], prefix); out != nil {
		t.Fatal("a truncated Solicit answered")
	}
}

// parse checks b is a want answering asked, from the client that sent sol.
func parse(t *testing.T, b []byte, want dhcpv6.MessageType, asked, sol *dhcpv6.Message) *dhcpv6.Message {
	t.Helper()
	if b == nil {
		t.Fatalf("no %s", want)
	}
	d, err := dhcpv6.FromBytes(b)
	if err != nil {
		t.Fatalf("%s does not parse: %v", want, err)
	}
	m := d.(*dhcpv6.Message)
	if m.MessageType != want || m.TransactionID != asked.TransactionID {
		t.Fatalf("got %s xid %s, want %s xid %s", m.MessageType, m.TransactionID, want, asked.TransactionID)
	}
	if !m.Options.ClientID().Equal(sol.Options.ClientID()) || m.Options.ServerID() == nil {
		t.Fatalf("ids: client %v server %v", m.Options.ClientID(), m.Options.ServerID())
	}
	ia := m.Options.OneIANA()
	if ia == nil || ia.IaId != sol.Options.OneIANA().IaId || ia.Options.OneAddress() == nil {
		t.Fatalf("IA_NA %v", ia)
	}
	if a, _ := netip.AddrFromSlice(ia.Options.OneAddress().IPv6Addr); a.As16()[0] != 0xfd || !netip.PrefixFrom(netip.AddrFrom16(prefix), 64).Contains(a) {
		t.Fatalf("address %s outside the prefix", a)
	}
	return m
}

func FuzzAnswer(f *testing.F) {
	mac, _ := net.ParseMAC("02:99:00:00:00:07")
	sol, _ := dhcpv6.NewSolicit(mac)
	f.Add(sol.ToBytes())
	f.Add([]byte{3, 0, 0, 1, 0, 1, 0, 200})
	// The floor echoes the client's id unchecked (it is the least a
	// server does), so only a request the reference parser takes must get
	// an answer it takes; any other input must only not crash it.
	f.Fuzz(func(t *testing.T, b []byte) {
		out := answer(nil, b, prefix)
		if _, err := dhcpv6.FromBytes(b); err == nil && out != nil {
			if _, err := dhcpv6.FromBytes(out); err != nil {
				t.Fatalf("answer does not parse: %v", err)
			}
		}
	})
}
