package dhcp

import (
	"strings"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/positions"
)

// circuit is option 82 with a circuit id, as a relay adds it.
func circuit(id string) dhcpv4.Modifier {
	return generic(optRelayAgent, append([]byte{relayCircuitID, byte(len(id))}, id...))
}

func testPlan(t testing.TB, src string) *positions.Plan {
	t.Helper()
	ps, errs := positions.Parse("plan.yaml", []byte(src))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	pl, errs := positions.Build(ps)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return pl
}

const rackPlan = `positions:
  - name: leaf-a
    relay: 10.99.5.1
    circuit_id: Ethernet1
    address: 10.99.5.50
  - name: leaf-b
    relay: 10.99.5.1
    circuit_id: Ethernet2
`

// TestPositionIsIdentity: a request relayed through a planned position
// gets that position's address and name, and its device record names the
// position; relay information matching no position is served by the
// ordinary rules; a device moved to another position takes that one's
// name.
func TestPositionIsIdentity(t *testing.T) {
	h := newHarness(t, nil)
	if err := h.s.SetPlan(testPlan(t, rackPlan)); err != nil {
		t.Fatal(err)
	}
	h.src = addr("10.99.5.1")
	relay := dhcpv4.WithRelay(ip("10.99.5.1"))
	hostname := func(r *dhcpv4.DHCPv4) string { return string(r.Options.Get(dhcpv4.OptionHostName)) }

	ack := h.dora(mac(1), relay, circuit("Ethernet1"))
	if ack.YourIPAddr.String() != "10.99.5.50" || hostname(ack) != "leaf-a" {
		t.Fatalf("leaf-a got %s named %q", ack.YourIPAddr, hostname(ack))
	}
	ack = h.dora(mac(2), relay, circuit("Ethernet2"))
	if !strings.HasPrefix(ack.YourIPAddr.String(), "10.99.5.") || hostname(ack) != "leaf-b" {
		t.Fatalf("leaf-b got %s named %q", ack.YourIPAddr, hostname(ack))
	}
	// No position: the ordinary rules, no name.
	ack = h.dora(mac(3), relay, circuit("Ethernet9"))
	if hostname(ack) != "" || ack.YourIPAddr.String() == "10.99.5.50" {
		t.Fatalf("unplanned port got %s named %q", ack.YourIPAddr, hostname(ack))
	}
	// The position's address is not a pool address for anyone else.
	for i := 10; i < 15; i++ {
		if r, _ := h.exchange(discover(mac(100+i), relay)); r != nil && r.YourIPAddr.String() == "10.99.5.50" {
			t.Fatal("the position's address offered from the pool")
		}
	}
	h.commit()
	if d := h.device(mac(1).String()); d.Position != "leaf-a" || d.CircuitID != "Ethernet1" {
		t.Fatalf("leaf-a record: position %q circuit %q", d.Position, d.CircuitID)
	}
	if d := h.device(mac(3).String()); d.Position != "" {
		t.Fatalf("unplanned record names position %q", d.Position)
	}

	// Moved to leaf-b's port: the name follows the port.
	offer, _ := h.exchange(discover(mac(1), relay, circuit("Ethernet2")))
	if offer == nil || hostname(offer) != "leaf-b" {
		t.Fatalf("moved device offered %v", offer)
	}
}

// TestHostileRelayInformation: circuit ids with bytes that are not text,
// or that mean something in JSON, YAML or a template, match no position
// and are recorded only in their checked form.
func TestHostileRelayInformation(t *testing.T) {
	h := newHarness(t, nil)
	if err := h.s.SetPlan(testPlan(t, rackPlan)); err != nil {
		t.Fatal(err)
	}
	h.src = addr("10.99.5.1")
	relay := dhcpv4.WithRelay(ip("10.99.5.1"))
	for i, id := range []string{"Ethernet1\x00", "\xff\xfe{{.}}", `"},{"x":"`, "a: [b]\n- c", strings.Repeat("E", 250)} {
		ack := h.dora(mac(50+i), relay, circuit(id))
		if ack.YourIPAddr.String() == "10.99.5.50" || len(ack.Options.Get(dhcpv4.OptionHostName)) > 0 {
			t.Fatalf("%q took leaf-a's slot", id)
		}
	}
	h.commit()
	if d := h.device(mac(51).String()); d.CircuitID != "ff:fe:7b:7b:2e:7d:7d" || d.Position != "" {
		t.Fatalf("hostile circuit id stored as %q (position %q)", d.CircuitID, d.Position)
	}
}

func TestPlanRefused(t *testing.T) {
	h := newHarness(t, func(o *Options) {
		o.Subnets[1].Reservations = []Reservation{{IP: addr("10.99.5.60"), Serial: "S1"}}
	})
	for _, c := range []struct{ addr, want string }{
		{"192.0.2.7", "in no subnet"},
		{"10.99.5.60", "also reserved"},
		{"10.99.5.1", "router address"},
	} {
		pl := testPlan(t, "positions:\n  - name: x\n    relay: 10.99.5.1\n    circuit_id: E1\n    address: "+c.addr+"\n")
		if err := h.s.SetPlan(pl); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "plan.yaml:2") {
			t.Errorf("%s: %v", c.addr, err)
		}
	}
	if err := h.s.SetPlan(nil); err != nil {
		t.Fatal(err)
	}
}

// FuzzRelayAgentInfo: any option 82 value a relay may send is parsed into
// sub-options that lie within it, and a request carrying it is matched to
// at most the position whose ids it carries byte for byte.
func FuzzRelayAgentInfo(f *testing.F) {
	f.Add([]byte{relayCircuitID, 9, 'E', 't', 'h', 'e', 'r', 'n', 'e', 't', '1'})
	f.Add([]byte{relayCircuitID, 9, 'E', 't', 'h', 'e', 'r', 'n', 'e', 't', '2', relayRemoteID, 2, 'r', '1'})
	f.Add([]byte{relayCircuitID, 200, 'x'})
	f.Add([]byte{relayRemoteID, 0, relayCircuitID, 1})
	h := newHarness(f, nil)
	pl := testPlan(f, rackPlan+"  - name: leaf-c\n    relay: 10.99.5.1\n    circuit_id: E3\n    remote_id: \"00:ff:7b\"\n")
	if err := h.s.SetPlan(pl); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, rai []byte) {
		if len(rai) > 255 {
			return
		}
		m := discover(mac(7), dhcpv4.WithRelay(ip("10.99.5.1")), generic(optRelayAgent, rai))
		var p Packet
		if err := p.Parse(m.ToBytes()); err != nil {
			return
		}
		for _, sub := range []uint8{relayCircuitID, relayRemoteID, relayLinkSelection} {
			v, ok := p.relaySubOpt(sub)
			if !ok {
				continue
			}
			if len(v) > len(rai)-2 {
				t.Fatalf("sub-option %d longer than the option", sub)
			}
		}
		c, _ := p.relaySubOpt(relayCircuitID)
		r, _ := p.relaySubOpt(relayRemoteID)
		if pos := pl.Match4(p.GIAddr, c, r); pos != nil {
			if string(pos.CircuitBytes()) != string(c) || (len(pos.RemoteBytes()) > 0 && string(pos.RemoteBytes()) != string(r)) {
				t.Fatalf("circuit %q remote %q matched %s", c, r, pos.Name)
			}
		}
	})
}

// TestReplacementTakesPositionAddress: a box that was unplugged without a
// release still holds its position's address; a new box cabled to the
// same slot takes the address over when the plan says `replace: auto`
// (the old box's renewal is then refused, and the store holds the address
// for the new box only), and gets a pool address under the default
// `approve`, its join waiting for an operator.
func TestReplacementTakesPositionAddress(t *testing.T) {
	for _, policy := range []string{"auto", "approve"} {
		t.Run(policy, func(t *testing.T) {
			h := newHarness(t, nil)
			plan := "positions:\n  - {name: leaf-a, relay: 10.99.5.1, circuit_id: Ethernet1, address: 10.99.5.50, replace: " + policy + "}\n"
			if err := h.s.SetPlan(testPlan(t, plan)); err != nil {
				t.Fatal(err)
			}
			h.src = addr("10.99.5.1")
			relay := dhcpv4.WithRelay(ip("10.99.5.1"))
			if ack := h.dora(mac(1), relay, circuit("Ethernet1")); ack.YourIPAddr.String() != "10.99.5.50" {
				t.Fatalf("the first box got %s", ack.YourIPAddr)
			}
			h.commit()
			ack := h.dora(mac(2), relay, circuit("Ethernet1"))
			h.commit()
			l, _ := h.lease("10.99.5.50")
			if policy == "approve" {
				if ack.YourIPAddr.String() == "10.99.5.50" || l.MAC != mac(1).String() {
					t.Fatalf("approve: the new box got %s, the position's lease is %s's", ack.YourIPAddr, l.MAC)
				}
				return
			}
			if ack.YourIPAddr.String() != "10.99.5.50" || string(ack.Options.Get(dhcpv4.OptionHostName)) != "leaf-a" {
				t.Fatalf("auto: the new box got %s named %q, want the position's", ack.YourIPAddr, ack.Options.Get(dhcpv4.OptionHostName))
			}
			if l.MAC != mac(2).String() || l.State != core.LeaseActive {
				t.Fatalf("auto: the position's lease is %+v, want the new box's", l)
			}
			if d := h.device(mac(2).String()); d.Position != "leaf-a" {
				t.Fatalf("auto: the new box's record names position %q", d.Position)
			}
			// The old box, plugged in elsewhere, renews by unicast: refused.
			r, _ := dhcpv4.New(dhcpv4.WithHwAddr(mac(1)), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
				dhcpv4.WithClientIP(ip("10.99.5.50")))
			h.src = addr("10.99.5.50")
			if rep, _ := h.exchange(r); rep != nil && rep.MessageType() == dhcpv4.MessageTypeAck {
				t.Fatalf("the replaced box's renewal was acknowledged: %v", rep.Summary())
			}
		})
	}
}

// TestPositionSameBoxNewClientID: ONIE asks without a client identifier,
// the SONiC it installs asks with one: the same box at the same slot keeps
// the position's address under the default policy (approve).
func TestPositionSameBoxNewClientID(t *testing.T) {
	h := newHarness(t, nil)
	if err := h.s.SetPlan(testPlan(t, rackPlan)); err != nil {
		t.Fatal(err)
	}
	h.src = addr("10.99.5.1")
	relay := dhcpv4.WithRelay(ip("10.99.5.1"))
	if ack := h.dora(mac(1), relay, circuit("Ethernet1")); ack.YourIPAddr.String() != "10.99.5.50" {
		t.Fatalf("ONIE got %s", ack.YourIPAddr)
	}
	h.commit()
	sonic := dhcpv4.WithOption(dhcpv4.OptClientIdentifier([]byte("SONiC##Accton-AS7712-32X##SN1")))
	if ack := h.dora(mac(1), relay, circuit("Ethernet1"), sonic); ack.YourIPAddr.String() != "10.99.5.50" {
		t.Fatalf("the SONiC it installed got %s, want the position's 10.99.5.50", ack.YourIPAddr)
	}
	if ack := h.dora(mac(2), relay, circuit("Ethernet1")); ack.YourIPAddr.String() == "10.99.5.50" {
		t.Fatal("another box took the position's address under replace: approve")
	}
}
