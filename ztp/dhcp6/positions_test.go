package dhcp6

import (
	"net/netip"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/positions"
)

func planOf(t *testing.T, yaml string) *positions.Plan {
	t.Helper()
	ps, errs := positions.Parse("plan.yaml", []byte(yaml))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	pl, errs := positions.Build(ps)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return pl
}

// A switch relayed by a planned position's IPv6 relay with the position's
// interface-id and remote-id gets the position's address and name, and
// its record names the position; the address goes to nobody else, and a
// request from another port of the same relay gets a pool address.
func TestPlannedPositionBehindIPv6Relay(t *testing.T) {
	h := newHarness(t, nil)
	if err := h.s.SetPlan(planOf(t, `positions:
  - name: leaf-07a
    relay: fd99:0:0:5::1
    interface_id: Ethernet12
    remote_id: rack7-tor
    address: fd99:0:0:5::12
  - name: leaf-v4
    relay: 10.0.7.1
    circuit_id: Ethernet12
`)); err != nil {
		t.Fatal(err)
	}
	h.src = netip.AddrPortFrom(addr("fd99:0:0:5::1"), 547)
	hop := func(port string) relayHopSpec {
		return relayHopSpec{link: "fd99:0:0:5::1", peer: "fe80::15:1", opts: []dhcpv6.Option{
			dhcpv6.OptInterfaceID([]byte(port)),
			&dhcpv6.OptRemoteID{EnterpriseNumber: 9, RemoteID: []byte("rack7-tor")},
		}}
	}
	grant := func(c *client, port string) string {
		t.Helper()
		_, adv := h.relayExchange(t, relayed(t, c.msg(dhcpv6.MessageTypeSolicit, c.ia()), hop(port)))
		ip := addrOf(adv)
		_, rep := h.relayExchange(t, relayed(t, c.msg(dhcpv6.MessageTypeRequest, c.ia(ip), serverID(adv.Options.ServerID())), hop(port)))
		if addrOf(rep) != ip {
			t.Fatalf("Request through %s: %v", port, rep)
		}
		return ip
	}
	// Another port first: it must not get the position's address.
	other := newClient("02:00:00:00:16:01", sonicClass)
	if ip := grant(other, "Ethernet13"); ip == "fd99:0:0:5::12" {
		t.Fatal("a client on another port got the position's address")
	}
	c := newClient("02:00:00:00:15:01", sonicClass)
	if ip := grant(c, "Ethernet12"); ip != "fd99:0:0:5::12" {
		t.Fatalf("planned switch got %s, want the position's fd99:0:0:5::12", ip)
	}
	h.devs.Flush()
	var d core.Device
	_ = h.st.View(func(tx core.Tx) error {
		var err error
		d, err = tx.Devices().Get("02:00:00:00:15:01")
		return err
	})
	if d.Position != "leaf-07a" || d.CircuitID != "Ethernet12" || d.RemoteID != "rack7-tor" {
		t.Fatalf("device record = %+v", d)
	}
	if l, _ := h.storedLease("fd99:0:0:5::12"); l.Hostname != "leaf-07a" {
		t.Fatalf("lease host name = %q, want the position's name", l.Hostname)
	}

	// A plan whose IPv6 address is in no subnet is refused whole; the plan
	// in use stays.
	err := h.s.SetPlan(planOf(t, "positions:\n  - {name: x, relay: fd99:0:0:5::1, interface_id: e9, address: fd99:0:0:9::1}\n"))
	if err == nil || h.s.plan == nil || h.s.plan.Get("leaf-07a") == nil {
		t.Fatalf("SetPlan = %v, plan in use %v", err, h.s.plan.List())
	}
}

// TestReplacementAtIPv6Position: a box unplugged without a release still
// holds its position's address. The same box under another DUID (ONIE,
// then the SONiC it installed) keeps it under any policy; another box on
// the slot takes it over under `replace: auto` (the store then holds it
// for the new box) and gets a pool address under `approve`.
func TestReplacementAtIPv6Position(t *testing.T) {
	for _, policy := range []string{"auto", "approve"} {
		t.Run(policy, func(t *testing.T) {
			h := newHarness(t, nil)
			if err := h.s.SetPlan(planOf(t, "positions:\n  - {name: leaf-07a, relay: \"fd99:0:0:5::1\", interface_id: Ethernet12, address: \"fd99:0:0:5::12\", replace: "+policy+"}\n")); err != nil {
				t.Fatal(err)
			}
			h.src = netip.AddrPortFrom(addr("fd99:0:0:5::1"), 547)
			hop := relayHopSpec{link: "fd99:0:0:5::1", peer: "fe80::15:1", opts: []dhcpv6.Option{dhcpv6.OptInterfaceID([]byte("Ethernet12"))}}
			grant := func(c *client) string {
				t.Helper()
				_, adv := h.relayExchange(t, relayed(t, c.msg(dhcpv6.MessageTypeSolicit, c.ia()), hop))
				ip := addrOf(adv)
				if ip == "" {
					t.Fatalf("no address advertised: %v", adv)
				}
				_, rep := h.relayExchange(t, relayed(t, c.msg(dhcpv6.MessageTypeRequest, c.ia(ip), serverID(adv.Options.ServerID())), hop))
				if addrOf(rep) != ip {
					t.Fatalf("Request: %v", rep)
				}
				return ip
			}
			const posAddr = "fd99:0:0:5::12"
			onie := newClient("02:00:00:00:15:01")
			if ip := grant(onie); ip != posAddr {
				t.Fatalf("the first box got %s", ip)
			}
			sonic := newClient("02:00:00:00:15:01", sonicClass)
			sonic.duid = &dhcpv6.DUIDLLT{HWType: iana.HWTypeEthernet, Time: 1, LinkLayerAddr: sonic.mac}
			if ip := grant(sonic); ip != posAddr {
				t.Fatalf("the same box under another DUID got %s, want the position's", ip)
			}
			repl := newClient("02:00:00:00:15:99", sonicClass)
			ip := grant(repl)
			l, _ := h.storedLease(posAddr)
			if policy == "approve" {
				if ip == posAddr || l.MAC != "02:00:00:00:15:01" {
					t.Fatalf("approve: the new box got %s; the position's lease is %s's", ip, l.MAC)
				}
				return
			}
			if ip != posAddr || l.MAC != "02:00:00:00:15:99" || l.Hostname != "leaf-07a" {
				t.Fatalf("auto: the new box got %s; the position's lease is %+v", ip, l)
			}
		})
	}
}
