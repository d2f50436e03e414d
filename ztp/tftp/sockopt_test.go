package tftp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestPktinfoIgnoresGarbage checks both results of parsePktinfo, the local
// address replies leave from and the arrival interface (whose MTU caps
// blksize): from the kernel itself, from hand-built messages, and nothing
// from garbage.
func TestPktinfoIgnoresGarbage(t *testing.T) {
	check := func(t *testing.T, what string, oob []byte, wantAddr netip.Addr, wantIf int) {
		t.Helper()
		if a, i := parsePktinfo(oob); a != wantAddr || i != wantIf {
			t.Errorf("%s: got %v on interface %d, want %v on %d", what, a, i, wantAddr, wantIf)
		}
	}
	none := netip.Addr{}
	for _, oob := range [][]byte{nil, {1, 2, 3}, make([]byte, 64), bytes.Repeat([]byte{0xff}, 40)} {
		check(t, fmt.Sprintf("garbage %x", oob), oob, none, 0)
	}
	// What we build for replies parses back (IPv4 and IPv6), naming no
	// interface: the kernel routes the reply.
	for _, a := range []netip.Addr{netip.MustParseAddr("10.99.60.7"), netip.MustParseAddr("fd00::7")} {
		check(t, "round trip "+a.String(), pktinfoOOB(a, a.Is6()), a, 0)
	}
	// An IPv4 pktinfo as the kernel writes it: ipi_spec_dst (the local
	// address, even for a broadcast request), else ipi_addr; and ipi_ifindex.
	v4 := func(spec, addr netip.Addr, ifindex int32) []byte {
		oob := pktinfoOOB(netip.IPv4Unspecified(), false)
		pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&oob[unix.CmsgLen(0)]))
		pi.Ifindex, pi.Spec_dst, pi.Addr = ifindex, spec.As4(), addr.As4()
		return oob
	}
	local, bcast := netip.MustParseAddr("10.99.60.7"), netip.MustParseAddr("10.99.60.255")
	check(t, "spec_dst", v4(local, bcast, 3), local, 3)
	check(t, "no spec_dst", v4(netip.IPv4Unspecified(), bcast, 4), bcast, 4)
	short := v4(local, bcast, 3)
	(*unix.Cmsghdr)(unsafe.Pointer(&short[0])).SetLen(unix.CmsgLen(unix.SizeofInet4Pktinfo - 1))
	check(t, "truncated pktinfo", short, none, 0)
	other := v4(local, bcast, 3)
	(*unix.Cmsghdr)(unsafe.Pointer(&other[0])).Type = unix.IP_TTL
	check(t, "another message type", other, none, 0)
	check(t, "another message type, then a pktinfo", append(other, v4(local, bcast, 5)...), local, 5)

	// From the kernel: a datagram to the loopback address, on a socket
	// with setPktinfo, arrived for that address on the loopback interface.
	var lo int
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagLoopback != 0 {
			lo = ifc.Index
		}
	}
	if lo == 0 {
		t.Fatal("no loopback interface")
	}
	for _, c := range []struct {
		network string
		addr    netip.Addr
	}{{"udp4", netip.MustParseAddr("127.0.0.1")}, {"udp6", netip.IPv6Loopback()}} {
		t.Run("kernel "+c.network, func(t *testing.T) {
			conn, err := net.ListenUDP(c.network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(c.addr, 0)))
			if err != nil {
				if c.network == "udp6" {
					t.Skip("no IPv6 loopback:", err)
				}
				t.Fatal(err)
			}
			defer conn.Close()
			rc, err := conn.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var serr error
			if err := rc.Control(func(fd uintptr) { serr = setPktinfo(int(fd), c.addr.Is6()) }); err != nil || serr != nil {
				t.Fatal(err, serr)
			}
			peer, err := net.DialUDP(c.network, nil, conn.LocalAddr().(*net.UDPAddr))
			if err != nil {
				t.Fatal(err)
			}
			defer peer.Close()
			if _, err := peer.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf, oob := make([]byte, 16), make([]byte, 256)
			_, oobn, _, _, err := conn.ReadMsgUDP(buf, oob)
			if err != nil {
				t.Fatal(err)
			}
			check(t, "kernel "+c.network, oob[:oobn], c.addr, lo)
		})
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
