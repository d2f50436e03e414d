package dhcp

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"
)

// The pacer delivers every ACK in order, also the first burst after an idle
// spell (which once made it sleep for ages), and stop flushes what is left.
func TestPacerDeliversAll(t *testing.T) {
	out, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	in, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	in.SetReadBuffer(1 << 20)
	ifc := &iface{name: "lo", conn: out, raw: -1}
	dst := dest{addr: netip.MustParseAddrPort(in.LocalAddr().String())}
	s := &Server{metrics: newMetrics(nil)}
	p := newPacer()
	stop, done := make(chan struct{}), make(chan struct{})
	go p.run(s, stop, done)

	batch := func(from, n int) []pendingAck {
		acks := make([]pendingAck, n)
		for i := range acks {
			acks[i] = pendingAck{ifc: ifc, dst: dst, pkt: binary.BigEndian.AppendUint32(nil, uint32(from+i))}
		}
		return acks
	}
	p.last = time.Now().Add(-30 * time.Second) // the previous commit was an idle spell ago
	p.push(batch(0, 300), time.Now())
	in.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 16)
	for want := 0; want < 400; want++ {
		if want == 300 {
			p.push(batch(300, 100), time.Now())
		}
		n, err := in.Read(buf)
		if err != nil {
			t.Fatalf("after %d of 400 ACKs: %v", want, err)
		}
		if got := int(binary.BigEndian.Uint32(buf[:n])); got != want {
			t.Fatalf("ACK %d arrived as number %d", want, got)
		}
	}
	// What is queued when the pacer stops goes out at once.
	p.mu.Lock()
	p.q = append(p.q, batch(400, 50)...)
	p.rate = 1 // would take a minute if paced
	p.mu.Unlock()
	close(stop)
	<-done
	for want := 400; want < 450; want++ {
		n, err := in.Read(buf)
		if err != nil || int(binary.BigEndian.Uint32(buf[:n])) != want {
			t.Fatalf("flush at stop: ACK %d: %v", want, err)
		}
	}
}
