package dhcp

import "net/netip"

// Ports (RFC 2131 §4.1).
const (
	serverPort = 67
	clientPort = 68
)

// dest is where a reply goes. With l2 set it is sent as an Ethernet frame
// to hw: the client has no address yet and cannot answer ARP.
type dest struct {
	addr netip.AddrPort
	l2   bool
	hw   [6]byte
}

var broadcast = netip.AddrPortFrom(netip.AddrFrom4([4]byte{255, 255, 255, 255}), clientPort)

// replyDest is RFC 2131 §4.1, written once for every reply:
//   - giaddr set: unicast to the relay agent, port 67 (a NAK carries the
//     broadcast flag so the relay broadcasts it on);
//   - NAK: broadcast;
//   - ciaddr set: unicast to ciaddr, port 68;
//   - broadcast flag set: broadcast;
//   - else: unicast to yiaddr at layer 2 (chaddr), Ethernet only;
//     anything else is broadcast.
func replyDest(req *Packet, r *reply) dest {
	switch {
	case req.GIAddr != [4]byte{}:
		return dest{addr: netip.AddrPortFrom(netip.AddrFrom4(req.GIAddr), serverPort)}
	case r.msgType == msgNak:
		return dest{addr: broadcast}
	case req.CIAddr != [4]byte{}:
		return dest{addr: netip.AddrPortFrom(netip.AddrFrom4(req.CIAddr), clientPort)}
	case req.Broadcast():
		return dest{addr: broadcast}
	case r.yiaddr != [4]byte{} && req.HType == 1 && req.HLen == 6:
		d := dest{addr: netip.AddrPortFrom(netip.AddrFrom4(r.yiaddr), clientPort), l2: true}
		copy(d.hw[:], req.CHAddr[:6])
		return d
	}
	return dest{addr: broadcast}
}
