package halab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// Reply is one DHCP reply a server sent, as a capture saw it.
type Reply struct {
	Time     time.Time
	Server   netip.Addr // the IPv4 source
	Type     dhcpv4.MessageType
	ChAddr   string // hardware address, 02:5a:...
	YIAddr   netip.Addr
	ClientID string // option 61 echoed back (RFC 6842), "" when none
	Lease    time.Duration
}

// Key is the client as the servers hash it (RFC 3074): its client
// identifier when it sent one, else its hardware address.
func (r Reply) Key() []byte {
	if r.ClientID != "" {
		return []byte(r.ClientID)
	}
	hw, _ := net.ParseMAC(r.ChAddr)
	return hw
}

// pcap link types read here.
const (
	linkEthernet = 1
	linkLinuxSLL = 113
)

// ReadReplies reads every DHCP reply (UDP from port 67, BOOTREPLY) of a
// classic pcap file (tcpdump -w), in capture order. Other packets are
// skipped; a file cut short in its last record (tcpdump killed while
// writing) ends the list without an error.
func ReadReplies(path string) ([]Reply, error) {
	var out []Reply
	err := readPcap(path, func(ts time.Time, pkt []byte, link uint32) {
		if r, err := parseReply(pkt, link); err == nil {
			r.Time = ts
			out = append(out, r)
		}
	})
	return out, err
}

// readPcap calls fn for every frame of a classic pcap file, in capture
// order; a file cut short in its last record ends without an error.
func readPcap(path string, fn func(ts time.Time, pkt []byte, link uint32)) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if len(raw) < 24 {
		return fmt.Errorf("%s: %d bytes is no pcap file", path, len(raw))
	}
	var bo binary.ByteOrder
	nano := false
	switch m := binary.LittleEndian.Uint32(raw); m {
	case 0xa1b2c3d4:
		bo = binary.LittleEndian
	case 0xa1b23c4d:
		bo, nano = binary.LittleEndian, true
	case 0xd4c3b2a1:
		bo = binary.BigEndian
	case 0x4d3cb2a1:
		bo, nano = binary.BigEndian, true
	default:
		return fmt.Errorf("%s: magic %#x is not pcap's (pcapng is not read here)", path, m)
	}
	link := bo.Uint32(raw[20:])
	if link != linkEthernet && link != linkLinuxSLL {
		return fmt.Errorf("%s: link type %d (only Ethernet and Linux cooked)", path, link)
	}
	for off := 24; off+16 <= len(raw); {
		sec, frac := bo.Uint32(raw[off:]), bo.Uint32(raw[off+4:])
		incl := int(bo.Uint32(raw[off+8:]))
		off += 16
		if off+incl > len(raw) {
			break // the last record, cut short
		}
		pkt := raw[off : off+incl]
		off += incl
		ns := int64(frac) * 1000
		if nano {
			ns = int64(frac)
		}
		fn(time.Unix(int64(sec), ns), pkt, link)
	}
	return nil
}

var errSkip = errors.New("not a DHCP reply")

// frame strips a frame's link header: its ether type and payload.
func frame(pkt []byte, link uint32) (etherType uint16, payload []byte, ok bool) {
	switch link {
	case linkEthernet:
		if len(pkt) < 14 {
			return 0, nil, false
		}
		etherType, pkt = binary.BigEndian.Uint16(pkt[12:]), pkt[14:]
		if etherType == 0x8100 && len(pkt) >= 4 { // one VLAN tag
			etherType, pkt = binary.BigEndian.Uint16(pkt[2:]), pkt[4:]
		}
	case linkLinuxSLL:
		if len(pkt) < 16 {
			return 0, nil, false
		}
		etherType, pkt = binary.BigEndian.Uint16(pkt[14:]), pkt[16:]
	default:
		return 0, nil, false
	}
	return etherType, pkt, true
}

// parseReply decodes one frame down to its DHCP reply.
func parseReply(pkt []byte, link uint32) (Reply, error) {
	etherType, pkt, ok := frame(pkt, link)
	if !ok || etherType != 0x0800 || len(pkt) < 20 || pkt[0]>>4 != 4 || pkt[9] != 17 {
		return Reply{}, errSkip
	}
	ihl := int(pkt[0]&0x0f) * 4
	if ihl < 20 || len(pkt) < ihl+8 {
		return Reply{}, errSkip
	}
	src := netip.AddrFrom4([4]byte(pkt[12:16]))
	udp := pkt[ihl:]
	if binary.BigEndian.Uint16(udp) != 67 {
		return Reply{}, errSkip
	}
	p, err := dhcpv4.FromBytes(udp[8:])
	if err != nil || p.OpCode != dhcpv4.OpcodeBootReply {
		return Reply{}, errSkip
	}
	yi, _ := netip.AddrFromSlice(p.YourIPAddr.To4())
	return Reply{Server: src, Type: p.MessageType(), ChAddr: p.ClientHWAddr.String(), YIAddr: yi,
		ClientID: string(p.Options.Get(dhcpv4.OptionClientIdentifier)), Lease: p.IPAddressLeaseTime(0)}, nil
}
