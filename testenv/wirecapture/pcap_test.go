package wirecapture

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// pcapWriter writes Ethernet/IPv4 packets as tcpdump -w does.
type pcapWriter struct {
	t   testing.TB
	buf bytes.Buffer
	w   *pcapgo.Writer
}

func newPcap(t testing.TB) *pcapWriter {
	p := &pcapWriter{t: t}
	p.w = pcapgo.NewWriter(&p.buf)
	if err := p.w.WriteFileHeader(262144, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pcapWriter) packet(f Flow, transport gopacket.SerializableLayer, payload []byte) {
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	proto := layers.IPProtocolTCP
	if _, ok := transport.(*layers.UDP); ok {
		proto = layers.IPProtocolUDP
	}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, SrcIP: f.Src.Addr().AsSlice(), DstIP: f.Dst.Addr().AsSlice()}
	switch l := transport.(type) {
	case *layers.TCP:
		l.SrcPort, l.DstPort = layers.TCPPort(f.Src.Port()), layers.TCPPort(f.Dst.Port())
		l.SetNetworkLayerForChecksum(ip)
	case *layers.UDP:
		l.SrcPort, l.DstPort = layers.UDPPort(f.Src.Port()), layers.UDPPort(f.Dst.Port())
		l.SetNetworkLayerForChecksum(ip)
	}
	sb := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(sb, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, transport, gopacket.Payload(payload)); err != nil {
		p.t.Fatal(err)
	}
	b := sb.Bytes()
	if err := p.w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: len(b), Length: len(b)}, b); err != nil {
		p.t.Fatal(err)
	}
}

func (p *pcapWriter) tcp(f Flow, seq uint32, syn, ack bool, payload []byte) {
	p.packet(f, &layers.TCP{Seq: seq, SYN: syn, ACK: ack, PSH: len(payload) > 0, Window: 65535}, payload)
}

func (p *pcapWriter) udp(f Flow, payload []byte) { p.packet(f, &layers.UDP{}, payload) }

func tftpData(block uint16, b []byte) []byte {
	return append(binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, 3), block), b...)
}

// samplePcap: an HTTP exchange whose response carries an agent
// credential split across two segments sent out of order (and the first
// retransmitted), and a TFTP transfer of a file whose bootstrap token
// straddles two blocks (a block retransmitted).
func samplePcap(t testing.TB) []byte {
	p := newPcap(t)
	p.tcp(c2s, 100, true, false, nil)
	p.tcp(s2c, 500, true, true, nil)
	req := []byte("GET /ztp.json HTTP/1.1\r\nHost: 10.0.0.1\r\n\r\n")
	p.tcp(c2s, 101, false, true, req)
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Length: 60\r\n\r\n{\"a\":\"ztpa1.abcdefghijkl.0123456789abcdefghijklmnopqrstuv\"}\n")
	cut := 60
	p.tcp(s2c, 501+uint32(cut), false, true, resp[cut:])
	p.tcp(s2c, 501, false, true, resp[:cut])
	p.tcp(s2c, 501, false, true, resp[:cut])
	// TFTP: RRQ to 69, DATA from another server port.
	cl := Flow{netip.MustParseAddrPort("10.0.0.2:2000"), netip.MustParseAddrPort("10.0.0.1:69")}
	p.udp(cl, append([]byte{0, 1}, "config/sw1.json\x00octet\x00"...))
	data := Flow{netip.MustParseAddrPort("10.0.0.1:33000"), netip.MustParseAddrPort("10.0.0.2:2000")}
	file := bytes.Repeat([]byte("x"), 500)
	file = append(file, "\"token\": \"abcdef.0123456789abcdef\"\n"...)
	p.udp(data, tftpData(1, file[:512]))
	p.udp(data, tftpData(1, file[:512]))
	p.udp(data, tftpData(2, file[512:]))
	return p.buf.Bytes()
}

func TestReadAndScanPcap(t *testing.T) {
	tr, err := Read(bytes.NewReader(samplePcap(t)))
	if err != nil {
		t.Fatal(err)
	}
	if tr.Packets != 10 || len(tr.Conns) != 1 || len(tr.UDP) != 2 {
		t.Fatalf("%d packets, %d connections, %d UDP flows", tr.Packets, len(tr.Conns), len(tr.UDP))
	}
	r := Scan(tr, NewScanner(nil))
	var got []string
	for _, f := range r.Findings {
		got = append(got, string(f.Kind)+" "+Place(f))
	}
	want := []string{
		"agent-credential 8080→* HTTP response to GET /ztp.json body",
		"bootstrap-token *→2000 TFTP file config/sw1.json",
	}
	if !slices.Equal(got, want) {
		t.Errorf("findings:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	t.Logf("\n%s", r.Table())
}

func TestScanFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.pcap")
	if err := os.WriteFile(path, samplePcap(t), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := ScanFile(path, NewScanner(nil))
	if err != nil || len(r.Findings) != 2 {
		t.Fatalf("%v: %v", err, r.Findings)
	}
	if _, err := ScanFile(filepath.Join(t.TempDir(), "none.pcap"), NewScanner(nil)); err == nil {
		t.Error("a missing file scanned")
	}
}

// FuzzRead: any file reads without a panic or a runaway allocation, and
// a sample cut anywhere still reads.
func FuzzRead(f *testing.F) {
	sample := samplePcap(f)
	f.Add(sample)
	f.Add(sample[:len(sample)/2])
	f.Add(sample[:24])
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := Read(bytes.NewReader(data))
		if err != nil {
			return
		}
		Scan(tr, NewScanner([]Secret{{Label: "x", Value: "0123456789abcdef"}}))
	})
}
