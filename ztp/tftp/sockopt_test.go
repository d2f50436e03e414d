package tftp

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"
)

func TestPktinfoIgnoresGarbage(t *testing.T) {
	for _, oob := range [][]byte{nil, {1, 2, 3}, make([]byte, 64), bytes.Repeat([]byte{0xff}, 40)} {
		if a, i := parsePktinfo(oob); a.IsValid() || i != 0 {
			t.Errorf("%x: %v %d", oob, a, i)
		}
	}
	// What we build for replies parses back (IPv4 and IPv6).
	for _, a := range []netip.Addr{netip.MustParseAddr("10.99.60.7"), netip.MustParseAddr("fd00::7")} {
		if got, _ := parsePktinfo(pktinfoOOB(a, a.Is6())); got != a {
			t.Errorf("round trip %v: %v", a, got)
		}
	}
}

// IPv6 works end to end (ZTP is IPv4, but tftp.addr may be an IPv6
// address): the reply source, the 52-byte header allowance, a transfer.
func TestEngineIPv6(t *testing.T) {
	conn, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback})
	if err != nil {
		t.Skip("no IPv6 loopback:", err)
	}
	data := randomBytes(10000)
	for _, single := range []bool{false, true} {
		if single {
			if conn, err = net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback}); err != nil {
				t.Fatal(err)
			}
		}
		mc := &mtuCache{limit: 1468} // as derived from a 1500-byte MTU
		cfg := testCfg()
		cfg.singlePort, cfg.blkCap = single, mc.capFor
		e := newEngine(cfg, func(ctx context.Context, tr *transfer) (*payload, error) {
			return &payload{data: data, size: int64(len(data))}, nil
		}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		addr := conn.LocalAddr().(*net.UDPAddr).AddrPort()
		go func() { done <- e.serve(ctx, conn, time.Second) }()
		c, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback})
		if err != nil {
			t.Fatal(err)
		}
		cl := &client{t: t, conn: c, buf: make([]byte, 70000)}
		got, _ := cl.fetch(addr, "f", "blksize", "65000")
		if !bytes.Equal(got, data) {
			t.Fatal("content differs")
		}
		// 1500 - 52: IPv6's header is 20 bytes longer.
		c.Close()
		if c, err = net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback}); err != nil {
			t.Fatal(err)
		}
		cl = &client{t: t, conn: c, buf: make([]byte, 70000)}
		cl.rrq(addr, "f", "blksize", "65000")
		if o := cl.must(time.Second, opOACK); string(o.data) != "blksize\x001448\x00" {
			t.Errorf("single %v: OACK %q", single, o.data)
		}
		c.Close()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
