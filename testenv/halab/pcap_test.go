package halab

import (
	"encoding/binary"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// TestReadReplies writes a pcap file as tcpdump -w does (Ethernet, one
// DHCP ACK from a server, one DISCOVER from a relay, a record cut short)
// and reads the ACK back.
func TestReadReplies(t *testing.T) {
	hw := net.HardwareAddr{0x02, 0x5a, 0, 0, 1, 2}
	disc, err := dhcpv4.NewDiscovery(hw)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := dhcpv4.NewReplyFromRequest(disc, dhcpv4.WithMessageType(dhcpv4.MessageTypeAck),
		dhcpv4.WithYourIP(net.IPv4(10, 99, 1, 7)), dhcpv4.WithLeaseTime(3600),
		dhcpv4.WithGeneric(dhcpv4.OptionClientIdentifier, []byte("SONiC##x##y")))
	if err != nil {
		t.Fatal(err)
	}
	frame := func(src net.IP, sport uint16, payload []byte) []byte {
		udp := make([]byte, 8, 8+len(payload))
		binary.BigEndian.PutUint16(udp, sport)
		binary.BigEndian.PutUint16(udp[2:], 67)
		binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
		udp = append(udp, payload...)
		ip := make([]byte, 20, 20+len(udp))
		ip[0], ip[9] = 0x45, 17
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
		copy(ip[12:], src.To4())
		copy(ip[16:], net.IPv4(10, 99, 0, 2).To4())
		ip = append(ip, udp...)
		eth := make([]byte, 14, 14+len(ip))
		binary.BigEndian.PutUint16(eth[12:], 0x0800)
		return append(eth, ip...)
	}
	file := make([]byte, 24)
	binary.LittleEndian.PutUint32(file, 0xa1b2c3d4)
	binary.LittleEndian.PutUint16(file[4:], 2)
	binary.LittleEndian.PutUint16(file[6:], 4)
	binary.LittleEndian.PutUint32(file[16:], 65535)
	binary.LittleEndian.PutUint32(file[20:], linkEthernet)
	record := func(sec, usec uint32, pkt []byte) {
		h := make([]byte, 16)
		binary.LittleEndian.PutUint32(h, sec)
		binary.LittleEndian.PutUint32(h[4:], usec)
		binary.LittleEndian.PutUint32(h[8:], uint32(len(pkt)))
		binary.LittleEndian.PutUint32(h[12:], uint32(len(pkt)))
		file = append(append(file, h...), pkt...)
	}
	record(1000, 250000, frame(net.IPv4(10, 99, 0, 2), 67, disc.ToBytes()))
	record(1001, 500000, frame(net.IPv4(10, 99, 0, 11), 67, ack.ToBytes()))
	record(1002, 0, frame(net.IPv4(10, 99, 0, 12), 67, ack.ToBytes()))
	file = file[:len(file)-10] // tcpdump killed mid-record
	path := filepath.Join(t.TempDir(), "r.pcap")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	rs, err := ReadReplies(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 {
		t.Fatalf("read %d replies, want the one complete ACK: %+v", len(rs), rs)
	}
	r := rs[0]
	if r.Type != dhcpv4.MessageTypeAck || r.Server.String() != "10.99.0.11" || r.ChAddr != hw.String() ||
		r.YIAddr.String() != "10.99.1.7" || r.Lease != time.Hour || r.ClientID != "SONiC##x##y" ||
		!r.Time.Equal(time.Unix(1001, 500000000)) || string(r.Key()) != "SONiC##x##y" {
		t.Fatalf("read %+v", r)
	}
	if _, err := ReadReplies(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Fatal("a missing file read without an error")
	}
}
