// Command dhcp6floor is the socket floor of bench/dhcp6-rate.sh: the least a
// DHCPv6 server can do per Solicit-Advertise-Request-Reply exchange, so the
// benchmark can say how much of a real server's CPU the kernel's packet path
// alone takes on this machine. It is a measuring stick, not a server: it
// keeps no state, stores nothing, checks nothing but the message type, and
// gives every client the address its DUID hashes to, answering Solicit with
// Advertise and Request with Reply straight from the socket, one packet per
// read and per write as ztpd and Kea do, through Go's network poller as
// ztpd reads (-blocking: from a thread blocked in recvfrom).
// bench/floor/dhcp6floor.c is the same in C, the kernel's own floor.
//
//	dhcp6floor -i veth-srv
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ztpd/ztpd/testenv/floorwire"
)

func main() {
	ifname := flag.String("i", "", "interface to answer on (required)")
	prefix := flag.String("prefix", "fd99:0:0:1::", "the /64 the addresses are drawn from")
	blocking := flag.Bool("blocking", false, "read from a thread blocked in recvfrom instead of through Go's network poller")
	flag.Parse()
	if *ifname == "" {
		fmt.Fprintln(os.Stderr, "dhcp6floor: -i is required")
		os.Exit(2)
	}
	p, err := netip.ParseAddr(*prefix)
	if err != nil || !p.Is6() {
		fmt.Fprintln(os.Stderr, "dhcp6floor: -prefix must be an IPv6 address")
		os.Exit(2)
	}
	conn, err := listen(*ifname)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dhcp6floor:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		if *blocking {
			os.Exit(0) // closing the socket does not wake a thread blocked in recvfrom
		}
		conn.Close()
	}()
	if *blocking {
		serveBlocking(conn, p.As16())
		return
	}
	serve(conn, p.As16())
}

// serveBlocking answers from one OS thread blocked in recvfrom, as a C
// server would, to show what Go's poller costs.
func serveBlocking(conn *net.UDPConn, prefix [16]byte) {
	rc, err := conn.SyscallConn()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dhcp6floor:", err)
		os.Exit(1)
	}
	fd := -1
	_ = rc.Control(func(f uintptr) { fd = int(f) })
	if err := unix.SetNonblock(fd, false); err != nil {
		fmt.Fprintln(os.Stderr, "dhcp6floor:", err)
		os.Exit(1)
	}
	runtime.LockOSThread()
	in := make([]byte, 1500)
	out := make([]byte, 0, 512)
	for {
		n, from, err := unix.Recvfrom(fd, in, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "dhcp6floor: recvfrom:", err)
			os.Exit(1)
		}
		if reply := answer(out[:0], in[:n], prefix); reply != nil {
			_ = unix.Sendto(fd, reply, 0, from)
		}
	}
}

func listen(name string) (*net.UDPConn, error) {
	nif, err := net.InterfaceByName(name)
	if err != nil {
		return nil, err
	}
	var sockErr error
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		err := c.Control(func(fd uintptr) {
			f := int(fd)
			if sockErr = unix.BindToDevice(f, name); sockErr != nil {
				return
			}
			_ = unix.SetsockoptInt(f, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20)
			mreq := &unix.IPv6Mreq{Multiaddr: netip.MustParseAddr("ff02::1:2").As16(), Interface: uint32(nif.Index)}
			sockErr = unix.SetsockoptIPv6Mreq(f, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP, mreq)
		})
		if err != nil {
			return err
		}
		return sockErr
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp6", "[::]:547")
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}

func serve(conn *net.UDPConn, prefix [16]byte) {
	in := make([]byte, 1500)
	out := make([]byte, 0, 512)
	for {
		n, from, err := conn.ReadFromUDPAddrPort(in)
		if err != nil {
			return
		}
		if reply := answer(out[:0], in[:n], prefix); reply != nil {
			_, _ = conn.WriteToUDPAddrPort(reply, from)
		}
	}
}

// answer builds the Advertise or Reply to a Solicit or Request: the client
// id echoed, the server id, and an IA_NA (the client's IAID) holding the
// address its DUID hashes to.
func answer(out, pkt []byte, prefix [16]byte) []byte {
	r, ok := floorwire.ParseRequest(pkt)
	if !ok {
		return nil
	}
	h := fnv.New64a()
	h.Write(r.ClientID)
	addr := prefix
	binary.BigEndian.PutUint64(addr[8:], h.Sum64()|1<<16)
	return floorwire.AppendAnswer(out, r, addr)
}
