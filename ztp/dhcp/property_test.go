package dhcp

import (
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// TestNoAddressToTwoClients drives random clients through every message
// type, with retransmissions, clock jumps, sweeps, commits at random points
// and restarts that drop memory (kill -9), and checks after every reply
// that no address is ACKed to a client while another holds an unexpired,
// unreleased ACK for it, and that every ACKed lease survives restarts.
func TestNoAddressToTwoClients(t *testing.T) {
	for seed := uint64(1); seed <= seeds(); seed++ {
		h := newHarness(t, func(c *Options) {
			c.Subnets[0].Pools = pools("10.99.0.100-10.99.0.139") // 40 addresses for 60 clients
			c.DeclineQuarantine = 5 * time.Minute
			c.Subnets[0].Reservations = []Reservation{{MAC: mac(3), IP: addr("10.99.0.120")}}
		})
		rng := rand.New(rand.NewPCG(seed, 7))
		type held struct {
			hw     string
			expiry time.Time
		}
		holds := map[string]held{}  // ip -> client holding an ACK
		mine := map[string]string{} // client -> ip it holds
		offers := map[string]*dhcpv4.DHCPv4{}
		pending := map[string][]byte{} // a REQUEST whose reply was "lost", resent later
		check := func(rep *dhcpv4.DHCPv4, hw net.HardwareAddr, op string) {
			if rep == nil || rep.MessageType() != dhcpv4.MessageTypeAck || rep.YourIPAddr.IsUnspecified() {
				return
			}
			ip := rep.YourIPAddr.String()
			if o, ok := holds[ip]; ok && o.hw != hw.String() && o.expiry.After(h.now) {
				t.Fatalf("seed %d: %s ACKed %s to %s while %s holds it until %s", seed, op, ip, hw, o.hw, o.expiry)
			}
			if old, ok := mine[hw.String()]; ok && old != ip {
				delete(holds, old)
			}
			holds[ip] = held{hw.String(), h.now.Add(rep.IPAddressLeaseTime(0))}
			mine[hw.String()] = ip
		}
		for step := 0; step < 3000; step++ {
			hw := mac(rng.IntN(60))
			switch r := rng.IntN(100); {
			case r < 30:
				offer, _ := h.exchange(discover(hw))
				if offer != nil {
					offers[hw.String()] = offer
				}
			case r < 55:
				if o := offers[hw.String()]; o != nil {
					req := requestFor(o)
					if rng.IntN(4) == 0 { // reply lost: the client sends it again later
						pending[hw.String()] = req.ToBytes()
						continue
					}
					rep, _ := h.exchange(req)
					check(rep, hw, "SELECTING")
				}
			case r < 62:
				if b := pending[hw.String()]; b != nil {
					delete(pending, hw.String())
					out, _ := h.raw(b)
					if out != nil {
						rep, _ := dhcpv4.FromBytes(out)
						check(rep, hw, "retransmitted REQUEST")
					}
				}
			case r < 72:
				if ip, ok := mine[hw.String()]; ok { // INIT-REBOOT
					req, _ := dhcpv4.New(dhcpv4.WithHwAddr(hw), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
						dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP(ip))))
					rep, _ := h.exchange(req)
					check(rep, hw, "INIT-REBOOT")
				}
			case r < 80:
				if ip, ok := mine[hw.String()]; ok { // RENEWING
					req, _ := dhcpv4.New(dhcpv4.WithHwAddr(hw), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
						dhcpv4.WithClientIP(net.ParseIP(ip)))
					rep, _ := h.exchange(req)
					check(rep, hw, "RENEWING")
				}
			case r < 84:
				if ip, ok := mine[hw.String()]; ok {
					rel, _ := dhcpv4.New(dhcpv4.WithHwAddr(hw), dhcpv4.WithMessageType(dhcpv4.MessageTypeRelease),
						dhcpv4.WithClientIP(net.ParseIP(ip)), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(serverIP)))
					h.exchange(rel)
					delete(holds, ip)
					delete(mine, hw.String())
				}
			case r < 86:
				if ip, ok := mine[hw.String()]; ok {
					dec, _ := dhcpv4.New(dhcpv4.WithHwAddr(hw), dhcpv4.WithMessageType(dhcpv4.MessageTypeDecline),
						dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP(ip))),
						dhcpv4.WithOption(dhcpv4.OptServerIdentifier(serverIP)))
					h.exchange(dec)
					delete(holds, ip)
					delete(mine, hw.String())
				}
			case r < 92:
				h.now = h.now.Add(time.Duration(rng.IntN(20)) * time.Minute)
				for ip, o := range holds {
					if !o.expiry.After(h.now) {
						delete(holds, ip)
						delete(mine, o.hw)
					}
				}
			case r < 95:
				h.sweep()
			case r < 98:
				h.commit()
			default:
				h.restart() // kill -9: whatever is not committed is gone
				offers = map[string]*dhcpv4.DHCPv4{}
			}
		}
		h.st.Close()
	}
}

func seeds() uint64 {
	if testing.Short() {
		return 1
	}
	return 4
}
