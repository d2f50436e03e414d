// Package fleet simulates many devices onboarding through ztpd from one
// process. DHCP runs in relay mode: every packet carries giaddr = the fleet's
// own address and the server answers to giaddr:67, so thousands of MACs need
// no interfaces. HTTP steps then identify each device by its SONiC headers.
// Renewals at T1 (renew.go) go as a real client's do: unicast from each
// leased address, no relay.
package fleet

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// Relay is a DHCP relay endpoint: it owns UDP port 67 on its address, sends
// clients' requests to the server and routes replies back by transaction id.
type Relay struct {
	sock *relaySocket[uint32, *dhcpv4.DHCPv4]
	addr netip.Addr
}

// NewRelay binds addr:67 and forwards to server:67.
func NewRelay(addr, server netip.Addr) (*Relay, error) {
	sock, err := listenRelay("udp4", &net.UDPAddr{IP: addr.AsSlice(), Port: 67}, &net.UDPAddr{IP: server.AsSlice(), Port: 67},
		func(b []byte) (uint32, *dhcpv4.DHCPv4, bool) {
			p, err := dhcpv4.FromBytes(b)
			if err != nil || p.OpCode != dhcpv4.OpcodeBootReply {
				return 0, nil, false
			}
			return binary.BigEndian.Uint32(p.TransactionID[:]), p, true
		})
	if err != nil {
		return nil, fmt.Errorf("relay bind %s:67: %w", addr, err)
	}
	return &Relay{sock: sock, addr: addr}, nil
}

// Close stops the relay.
func (r *Relay) Close() error { return r.sock.close() }

// exchange sends req and waits for a reply of one of the wanted types,
// retransmitting with backoff like a real client.
func (r *Relay) exchange(ctx context.Context, req *dhcpv4.DHCPv4, tries int, wait time.Duration, want ...dhcpv4.MessageType) (*dhcpv4.DHCPv4, error) {
	xid := binary.BigEndian.Uint32(req.TransactionID[:])
	p, err := r.sock.exchange(ctx, xid, req.ToBytes(), tries, wait, func(p *dhcpv4.DHCPv4) (bool, error) {
		for _, w := range want {
			if p.MessageType() == w {
				return true, nil
			}
		}
		if p.MessageType() == dhcpv4.MessageTypeNak {
			return true, ErrNAK
		}
		return false, nil
	})
	if errors.Is(err, errTriesOut) {
		return nil, fmt.Errorf("no %v after %d tries", want, tries)
	}
	return p, err
}

// ErrNAK is returned when the server NAKs a request.
var ErrNAK = errors.New("server sent DHCPNAK")

// Identity is what a simulated device says about itself on DHCP.
type Identity struct {
	MAC         net.HardwareAddr
	Hostname    string
	UserClass   string // "SONiC-ZTP" for SONiC switches (raw text, as SONiC sends it)
	ClientID    string // "SONiC##<product>##<serial>" for SONiC switches
	VendorClass string // "onie_vendor:<platform>" for ONIE
}

// Lease is the outcome of one DORA.
type Lease struct {
	IP       netip.Addr
	ServerID netip.Addr
	Options  dhcpv4.Options
	Offer    time.Duration // DISCOVER -> OFFER
	Total    time.Duration // DISCOVER -> ACK
}

var requested = func() []dhcpv4.OptionCode {
	var out []dhcpv4.OptionCode
	for _, c := range []uint8{1, 3, 6, 7, 12, 15, 42, 66, 67, 114, 119, 121, 239} {
		out = append(out, dhcpv4.GenericOptionCode(c))
	}
	return out
}()

// modifiers are the options the identity sends in every request (the
// same at DORA and at each renewal, as dhclient's "send" lines are).
func (id Identity) modifiers() []dhcpv4.Modifier {
	mods := []dhcpv4.Modifier{dhcpv4.WithRequestedOptions(requested...)}
	if id.Hostname != "" {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptHostName(id.Hostname)))
	}
	if id.UserClass != "" {
		mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionUserClassInformation, []byte(id.UserClass)))
	}
	if id.ClientID != "" {
		mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionClientIdentifier, []byte(id.ClientID)))
	}
	if id.VendorClass != "" {
		mods = append(mods, dhcpv4.WithOption(dhcpv4.OptClassIdentifier(id.VendorClass)))
	}
	return mods
}

// DORA runs DISCOVER/OFFER/REQUEST/ACK for one identity through the relay.
func (r *Relay) DORA(ctx context.Context, id Identity) (Lease, error) {
	mods := append(id.modifiers(), dhcpv4.WithGatewayIP(r.addr.AsSlice()))
	start := time.Now()
	disc, err := dhcpv4.NewDiscovery(id.MAC, mods...)
	if err != nil {
		return Lease{}, err
	}
	disc.HopCount = 1
	offer, err := r.exchange(ctx, disc, 4, 2*time.Second, dhcpv4.MessageTypeOffer)
	if err != nil {
		return Lease{}, fmt.Errorf("%s: discover: %w", id.MAC, err)
	}
	offered := time.Since(start)
	req, err := dhcpv4.NewRequestFromOffer(offer, mods...)
	if err != nil {
		return Lease{}, err
	}
	req.HopCount = 1
	ack, err := r.exchange(ctx, req, 4, 2*time.Second, dhcpv4.MessageTypeAck)
	if err != nil {
		return Lease{}, fmt.Errorf("%s: request %s: %w", id.MAC, offer.YourIPAddr, err)
	}
	ip, _ := netip.AddrFromSlice(ack.YourIPAddr.To4())
	sid, _ := netip.AddrFromSlice(ack.ServerIdentifier().To4())
	return Lease{IP: ip, ServerID: sid, Options: ack.Options, Offer: offered, Total: time.Since(start)}, nil
}

// MAC returns a locally administered MAC address numbered n.
func MAC(n int) net.HardwareAddr {
	return net.HardwareAddr{0x02, 0x5a, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
}

func parseMAC(s string) (net.HardwareAddr, error) { return net.ParseMAC(s) }
