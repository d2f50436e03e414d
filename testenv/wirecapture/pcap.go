package wirecapture

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// Traffic is a capture's TCP connections (both directions reassembled)
// and UDP flows.
type Traffic struct {
	Conns []*Conn
	UDP   []*UDPFlow
	// Packets is every record of the file; Skipped the ones that carried
	// neither TCP nor UDP over IP (ARP, ICMP, IP fragments).
	Packets, Skipped int
}

// UDPFlow is one direction's datagrams, in the order captured.
type UDPFlow struct {
	Flow      Flow
	Datagrams [][]byte
}

// Read decodes a pcap file (as tcpdump -w writes it) with gopacket's
// pure-Go reader and layers: no libpcap, no cgo.
func Read(r io.Reader) (*Traffic, error) {
	br := bufio.NewReader(r)
	if err := checkHeader(br); err != nil {
		return nil, err
	}
	pr, err := pcapgo.NewReader(br)
	if err != nil {
		return nil, err
	}
	var (
		eth   layers.Ethernet
		sll   layers.LinuxSLL
		dot1q layers.Dot1Q
		ip4   layers.IPv4
		ip6   layers.IPv6
		tcp   layers.TCP
		udp   layers.UDP
		pl    gopacket.Payload
	)
	parsers := map[gopacket.LayerType]*gopacket.DecodingLayerParser{}
	parserFor := func(first gopacket.LayerType) *gopacket.DecodingLayerParser {
		p := parsers[first]
		if p == nil {
			p = gopacket.NewDecodingLayerParser(first, &eth, &sll, &dot1q, &ip4, &ip6, &tcp, &udp, &pl)
			p.IgnoreUnsupported = true
			parsers[first] = p
		}
		return p
	}
	var first gopacket.LayerType
	switch lt := pr.LinkType(); lt {
	case layers.LinkTypeEthernet:
		first = layers.LayerTypeEthernet
	case layers.LinkTypeLinuxSLL:
		first = layers.LayerTypeLinuxSLL
	case layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6:
		first = layers.LayerTypeIPv4 // or IPv6: by each packet's version
	default:
		return nil, fmt.Errorf("pcap link type %s (%d) is not read here: capture on an Ethernet interface", lt, int(lt))
	}
	raw := first == layers.LayerTypeIPv4
	asm := NewAssembler()
	t := &Traffic{}
	udpFlows := map[Flow]*UDPFlow{}
	var decoded []gopacket.LayerType
	for {
		data, _, err := pr.ReadPacketData()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			// A capture stopped by a signal may end in a partial record.
			break
		}
		if err != nil {
			return nil, err
		}
		t.Packets++
		start := first
		if raw && len(data) > 0 && data[0]>>4 == 6 {
			start = layers.LayerTypeIPv6
		}
		// A truncated or malformed packet's error is dropped: what decoded
		// before it is used.
		_ = parserFor(start).DecodeLayers(data, &decoded)
		var src, dst netip.Addr
		var isTCP, isUDP, fragment bool
		for _, l := range decoded {
			switch l {
			case layers.LayerTypeIPv4:
				src, _ = netip.AddrFromSlice(ip4.SrcIP.To4())
				dst, _ = netip.AddrFromSlice(ip4.DstIP.To4())
				fragment = ip4.Flags&layers.IPv4MoreFragments != 0 || ip4.FragOffset != 0
			case layers.LayerTypeIPv6:
				src, _ = netip.AddrFromSlice(ip6.SrcIP)
				dst, _ = netip.AddrFromSlice(ip6.DstIP)
			case layers.LayerTypeTCP:
				isTCP = true
			case layers.LayerTypeUDP:
				isUDP = true
			}
		}
		if fragment || !src.IsValid() || !dst.IsValid() {
			t.Skipped++
			continue
		}
		switch {
		case isTCP:
			f := Flow{netip.AddrPortFrom(src, uint16(tcp.SrcPort)), netip.AddrPortFrom(dst, uint16(tcp.DstPort))}
			asm.Add(f, tcp.Seq, tcp.SYN, tcp.ACK, tcp.Payload)
		case isUDP:
			f := Flow{netip.AddrPortFrom(src, uint16(udp.SrcPort)), netip.AddrPortFrom(dst, uint16(udp.DstPort))}
			uf := udpFlows[f]
			if uf == nil {
				uf = &UDPFlow{Flow: f}
				udpFlows[f] = uf
				t.UDP = append(t.UDP, uf)
			}
			if len(udp.Payload) > 0 {
				uf.Datagrams = append(uf.Datagrams, udp.Payload)
			}
		default:
			t.Skipped++
		}
	}
	t.Conns = asm.Finish()
	return t, nil
}

// maxSnaplen bounds a file's snapshot length: the reader allocates each
// record's length before reading it, and a corrupt header must not make it
// allocate gigabytes.
const maxSnaplen = 1 << 20

// checkHeader refuses a pcap header whose snapshot length is out of range.
// A gzip-compressed file (pcapgo reads those) is left to the reader.
func checkHeader(br *bufio.Reader) error {
	h, err := br.Peek(24)
	if err != nil {
		return fmt.Errorf("pcap header: %w", err)
	}
	if h[0] == 0x1f && h[1] == 0x8b {
		return errors.New("compressed pcap files are not read here")
	}
	var order binary.ByteOrder = binary.LittleEndian
	switch binary.LittleEndian.Uint32(h) {
	case 0xa1b2c3d4, 0xa1b23c4d:
	case 0xd4c3b2a1, 0x4d3cb2a1:
		order = binary.BigEndian
	default:
		return fmt.Errorf("not a pcap file (magic %x)", h[:4])
	}
	if snap := order.Uint32(h[16:]); snap > maxSnaplen {
		return fmt.Errorf("pcap snapshot length %d above %d", snap, maxSnaplen)
	}
	return nil
}
