package fleet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
	"github.com/insomniacslk/dhcp/iana"
)

// Relay6 is a DHCPv6 relay agent endpoint (RFC 8415 §19): it owns UDP port
// 547 on its address and wraps each simulated client's message in a
// Relay-Forw stating its link address and the client's link-local address
// as the peer; the server's Relay-Repl comes back to it and is routed to
// the waiting client by that peer address, unique per switch. So a fleet of
// thousands needs no interface per switch, as with the DHCPv4 Relay.
type Relay6 struct {
	sock *relaySocket[netip.Addr, *dhcpv6.Message]
	link net.IP
}

// NewRelay6 binds [addr]:547 and forwards to [server]:547, stating link as
// the link address of every Relay-Forw (the address the server's
// dhcp.relays giaddrs must list, and its subnet the one leased from).
func NewRelay6(addr, link, server netip.Addr) (*Relay6, error) {
	sock, err := listenRelay("udp6", &net.UDPAddr{IP: addr.AsSlice(), Port: dhcpv6.DefaultServerPort},
		&net.UDPAddr{IP: server.AsSlice(), Port: dhcpv6.DefaultServerPort},
		func(b []byte) (netip.Addr, *dhcpv6.Message, bool) {
			p, err := dhcpv6.FromBytes(b)
			if err != nil || p.Type() != dhcpv6.MessageTypeRelayReply {
				return netip.Addr{}, nil, false
			}
			rr := p.(*dhcpv6.RelayMessage)
			inner, ok := rr.Options.RelayMessage().(*dhcpv6.Message)
			peer, okPeer := netip.AddrFromSlice(rr.PeerAddr)
			return peer, inner, ok && okPeer
		})
	if err != nil {
		return nil, fmt.Errorf("relay bind [%s]:547: %w", addr, err)
	}
	return &Relay6{sock: sock, link: link.AsSlice()}, nil
}

// Close stops the relay.
func (r *Relay6) Close() error { return r.sock.close() }

// exchange relays msg for the client at peer and waits for a reply of type
// want with msg's transaction id, retransmitting with backoff as a client
// does.
func (r *Relay6) exchange(ctx context.Context, peer netip.Addr, msg *dhcpv6.Message, tries int, wait time.Duration, want dhcpv6.MessageType) (*dhcpv6.Message, error) {
	raw, err := r.forward(peer, msg)
	if err != nil {
		return nil, err
	}
	p, err := r.sock.exchange(ctx, peer, raw, tries, wait, func(p *dhcpv6.Message) (bool, error) {
		return p.TransactionID == msg.TransactionID && p.MessageType == want, nil
	})
	if errors.Is(err, errTriesOut) {
		return nil, fmt.Errorf("no %s after %d tries: %w", want, tries, ErrNoAnswer)
	}
	return p, err
}

// forward is msg wrapped in the relay's Relay-Forw for the client at peer.
func (r *Relay6) forward(peer netip.Addr, msg *dhcpv6.Message) ([]byte, error) {
	fw, err := dhcpv6.EncapsulateRelay(msg, dhcpv6.MessageTypeRelayForward, r.link, peer.AsSlice())
	if err != nil {
		return nil, err
	}
	return fw.ToBytes(), nil
}

// Identity6 is what a simulated SONiC switch says on DHCPv6, as its
// dhclient -6 does: a DUID-LLT of its MAC, one IA_NA whose IAID is the
// MAC's last four bytes, user class "SONiC-ZTP", and an Option Request for
// the boot file URL (59), SONiC's provisioning script (239), DNS servers
// (23) and the domain list (24).
type Identity6 struct {
	MAC       net.HardwareAddr
	UserClass string
}

// Identity6 is sw's DHCPv6 identity.
func (sw Switch) Identity6() (Identity6, error) {
	hw, err := parseMAC(sw.MAC)
	if err != nil {
		return Identity6{}, err
	}
	return Identity6{MAC: hw, UserClass: "SONiC-ZTP"}, nil
}

// duidTime is the DUID-LLT time of every simulated switch: a DUID must not
// change across a client's exchanges, and a fixed one keeps renewals'
// DUIDs the storm's without storing them.
const duidTime = 0x30000000

// DUID is the client identifier the identity sends.
func (id Identity6) DUID() dhcpv6.DUID {
	return &dhcpv6.DUIDLLT{HWType: iana.HWTypeEthernet, Time: duidTime, LinkLayerAddr: id.MAC}
}

// LinkLocal is the client's link-local address (modified EUI-64 of its
// MAC), the peer address its relay states.
func (id Identity6) LinkLocal() netip.Addr {
	m := id.MAC
	return netip.AddrFrom16([16]byte{0xfe, 0x80, 8: m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]})
}

func (id Identity6) iaid() [4]byte {
	m := id.MAC
	return [4]byte(m[len(m)-4:])
}

// message is a new client message of type t with the options every
// message of the identity carries.
func (id Identity6) message(t dhcpv6.MessageType) (*dhcpv6.Message, error) {
	m, err := dhcpv6.NewMessage()
	if err != nil {
		return nil, err
	}
	m.MessageType = t
	m.AddOption(dhcpv6.OptClientID(id.DUID()))
	m.AddOption(dhcpv6.OptElapsedTime(0))
	m.AddOption(dhcpv6.OptRequestedOption(dhcpv6.OptionBootfileURL, dhcpv6.OptionCode(239),
		dhcpv6.OptionDNSRecursiveNameServer, dhcpv6.OptionDomainSearchList))
	if id.UserClass != "" {
		m.AddOption(&dhcpv6.OptUserClass{UserClasses: [][]byte{[]byte(id.UserClass)}})
	}
	return m, nil
}

// Lease6 is the outcome of one Solicit-Advertise-Request-Reply.
type Lease6 struct {
	IP          netip.Addr
	ServerID    dhcpv6.DUID
	Lifetime    time.Duration // the address's valid lifetime
	BootFileURL string        // option 59
	Total       time.Duration
}

// SARR runs Solicit/Advertise/Request/Reply for one identity through the
// relay: the four-message exchange, as dhclient -6 does by default (no
// Rapid Commit).
func (r *Relay6) SARR(ctx context.Context, id Identity6) (Lease6, error) {
	start := time.Now()
	peer := id.LinkLocal()
	sol, err := id.message(dhcpv6.MessageTypeSolicit)
	if err != nil {
		return Lease6{}, err
	}
	sol.AddOption(&dhcpv6.OptIANA{IaId: id.iaid()})
	adv, err := r.exchange(ctx, peer, sol, 4, 2*time.Second, dhcpv6.MessageTypeAdvertise)
	if err != nil {
		return Lease6{}, fmt.Errorf("%s: solicit: %w", id.MAC, err)
	}
	ia := adv.Options.OneIANA()
	sid := adv.Options.ServerID()
	if ia == nil || sid == nil || ia.Options.OneAddress() == nil {
		return Lease6{}, fmt.Errorf("%s: advertise without an address or server id: %s", id.MAC, adv.Options.Status())
	}
	req, err := id.message(dhcpv6.MessageTypeRequest)
	if err != nil {
		return Lease6{}, err
	}
	req.AddOption(dhcpv6.OptServerID(sid))
	req.AddOption(&dhcpv6.OptIANA{IaId: id.iaid(), Options: dhcpv6.IdentityOptions{Options: dhcpv6.Options{
		&dhcpv6.OptIAAddress{IPv6Addr: ia.Options.OneAddress().IPv6Addr}}}})
	rep, err := r.exchange(ctx, peer, req, 4, 2*time.Second, dhcpv6.MessageTypeReply)
	if err != nil {
		return Lease6{}, fmt.Errorf("%s: request %s: %w", id.MAC, ia.Options.OneAddress().IPv6Addr, err)
	}
	l, err := granted(id, rep)
	if err != nil {
		return l, err
	}
	l.ServerID, l.Total = sid, time.Since(start)
	return l, nil
}

// granted reads the address and lifetime a Reply's IA_NA grants.
func granted(id Identity6, rep *dhcpv6.Message) (Lease6, error) {
	ia := rep.Options.OneIANA()
	if ia == nil {
		return Lease6{}, fmt.Errorf("%s: reply without IA_NA: %s", id.MAC, rep.Options.Status())
	}
	if st := ia.Options.Status(); st != nil && st.StatusCode != iana.StatusSuccess {
		return Lease6{}, fmt.Errorf("%s: reply: %s", id.MAC, st)
	}
	a := ia.Options.OneAddress()
	if a == nil || a.ValidLifetime == 0 {
		return Lease6{}, fmt.Errorf("%s: reply grants no address", id.MAC)
	}
	ip, _ := netip.AddrFromSlice(a.IPv6Addr)
	return Lease6{IP: ip, Lifetime: a.ValidLifetime, BootFileURL: rep.Options.BootFileURL()}, nil
}

// Renew6 renews the lease of ip (RFC 8415 §18.2.4): a Renew naming the
// server and the address the client holds, through the relay as the
// client's link relays it. The Reply must extend that very address.
func (r *Relay6) Renew6(ctx context.Context, id Identity6, server dhcpv6.DUID, ip netip.Addr, tries int, wait time.Duration) (RenewAck, error) {
	m, err := id.message(dhcpv6.MessageTypeRenew)
	if err != nil {
		return RenewAck{}, err
	}
	m.AddOption(dhcpv6.OptServerID(server))
	m.AddOption(&dhcpv6.OptIANA{IaId: id.iaid(), Options: dhcpv6.IdentityOptions{Options: dhcpv6.Options{
		&dhcpv6.OptIAAddress{IPv6Addr: ip.AsSlice()}}}})
	start := time.Now()
	rep, err := r.exchange(ctx, id.LinkLocal(), m, tries, wait, dhcpv6.MessageTypeReply)
	if err != nil {
		return RenewAck{}, fmt.Errorf("%s: renewing %s: %w", id.MAC, ip, err)
	}
	res := RenewAck{Latency: time.Since(start)}
	l, err := granted(id, rep)
	if err != nil {
		return res, fmt.Errorf("%w: %v", ErrNAK, err)
	}
	res.Lease = l.Lifetime
	if l.IP != ip {
		return res, fmt.Errorf("%s: renewing %s, reply for %s", id.MAC, ip, l.IP)
	}
	return res, nil
}
