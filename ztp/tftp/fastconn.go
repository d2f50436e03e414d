package tftp

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// portConn is the socket of single-port mode, handed to pin/tftp as a plain
// net.PacketConn. It exists for three reasons pin/tftp cannot serve itself:
//
//   - Speed: a lock-step transfer is one DATA out, one ACK in. Reading with
//     one blocking recvmsg (and yielding first, so the transfer the last
//     packet woke sends its next block before the reader blocks again)
//     avoids the netpoller's EAGAIN/epoll round trip on every block.
//   - blksize: the RRQ's blksize is capped at MTU − 32 of the interface the
//     request arrived on, read from IP_PKTINFO, before pin/tftp sees it.
//   - Source address: on a wildcard socket, replies leave from the address
//     the client sent to (IP_PKTINFO), as pin/tftp's own single-port mode does.
type portConn struct {
	fd       int
	file     *os.File // keeps fd open
	orig     *net.UDPConn
	wildcard bool
	capFor   func(ifindex int) int
	deadline atomic.Int64 // unix nanos; 0 = none
	oob      []byte       // only the reader goroutine uses it

	mu    sync.Mutex
	local map[netip.AddrPort]localAddr
}

type localAddr struct {
	ip   [4]byte
	seen time.Time
}

const idleWake = 250 * time.Millisecond // how often a blocked read checks its deadline

func newPortConn(c *net.UDPConn, capFor func(ifindex int) int) (*portConn, error) {
	la, ok := c.LocalAddr().(*net.UDPAddr)
	if !ok || la.IP.To4() == nil && !la.IP.IsUnspecified() {
		return nil, errors.New("single-port fast path needs an IPv4 socket")
	}
	f, err := c.File() // a blocking duplicate of the socket
	if err != nil {
		return nil, err
	}
	fd := int(f.Fd())
	err = unix.SetNonblock(fd, false)
	if err == nil {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
	}
	if err == nil {
		tv := unix.NsecToTimeval(idleWake.Nanoseconds())
		err = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return &portConn{fd: fd, file: f, orig: c, wildcard: la.IP.IsUnspecified(), capFor: capFor,
		oob: make([]byte, unix.CmsgSpace(unix.SizeofInet4Pktinfo)), local: map[netip.AddrPort]localAddr{}}, nil
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// ReadFrom implements net.PacketConn.
func (c *portConn) ReadFrom(p []byte) (int, net.Addr, error) {
	runtime.Gosched()
	for {
		if d := c.deadline.Load(); d != 0 && time.Now().UnixNano() >= d {
			return 0, nil, timeoutError{}
		}
		n, oobn, _, from, err := unix.Recvmsg(c.fd, p, c.oob, 0)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, nil, err
		}
		sa, ok := from.(*unix.SockaddrInet4)
		if !ok {
			continue
		}
		ifindex, dst := pktinfo(c.oob[:oobn])
		if c.wildcard && ifindex > 0 {
			c.remember(netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port)), dst)
		}
		if n >= 2 && binary.BigEndian.Uint16(p) == 1 { // RRQ
			n = capBlksize(p, n, c.capFor(ifindex))
		}
		return n, &net.UDPAddr{IP: net.IPv4(sa.Addr[0], sa.Addr[1], sa.Addr[2], sa.Addr[3]), Port: sa.Port}, nil
	}
}

// WriteTo implements net.PacketConn.
func (c *portConn) WriteTo(p []byte, a net.Addr) (int, error) {
	ua, ok := a.(*net.UDPAddr)
	if !ok || ua.IP.To4() == nil {
		return 0, errors.New("not an IPv4 UDP address")
	}
	sa := &unix.SockaddrInet4{Port: ua.Port}
	copy(sa.Addr[:], ua.IP.To4())
	var err error
	if src, ok := c.source(netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(ua.Port))); ok {
		oob := make([]byte, unix.CmsgSpace(unix.SizeofInet4Pktinfo))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		h.Level, h.Type = unix.IPPROTO_IP, unix.IP_PKTINFO
		h.SetLen(unix.CmsgLen(unix.SizeofInet4Pktinfo))
		pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&oob[unix.CmsgLen(0)]))
		pi.Spec_dst = src
		err = unix.Sendmsg(c.fd, p, oob, sa, 0)
	} else {
		err = unix.Sendto(c.fd, p, 0, sa)
	}
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *portConn) remember(peer netip.AddrPort, dst [4]byte) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.local[peer]; ok && old.ip == dst && now.Sub(old.seen) < time.Second {
		return
	}
	c.local[peer] = localAddr{ip: dst, seen: now}
	if len(c.local) > 4096 {
		for k, v := range c.local {
			if now.Sub(v.seen) > time.Minute {
				delete(c.local, k)
			}
		}
	}
}

func (c *portConn) source(peer netip.AddrPort) ([4]byte, bool) {
	if !c.wildcard {
		return [4]byte{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.local[peer]
	return l.ip, ok
}

// pktinfo extracts the arrival interface and destination address from an
// IP_PKTINFO control message.
func pktinfo(oob []byte) (int, [4]byte) {
	for len(oob) >= unix.CmsgLen(0) {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.CmsgLen(0) || l > len(oob) {
			break
		}
		if h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO && l >= unix.CmsgLen(unix.SizeofInet4Pktinfo) {
			pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&oob[unix.CmsgLen(0)]))
			return int(pi.Ifindex), pi.Addr
		}
		oob = oob[min(unix.CmsgSpace(l-unix.CmsgLen(0)), len(oob)):]
	}
	return 0, [4]byte{}
}

// capBlksize rewrites the blksize option of the RRQ in p[:n] to at most
// limit and returns the new length. Malformed requests are left to pin/tftp.
func capBlksize(p []byte, n, limit int) int {
	if limit <= 0 {
		return n
	}
	fields := splitZ(p[2:n])
	// filename, mode, then option/value pairs
	for i := 2; i+1 < len(fields); i += 2 {
		if !equalFold(fields[i], "blksize") {
			continue
		}
		v, err := strconv.Atoi(string(fields[i+1]))
		if err != nil || v <= limit {
			return n
		}
		out := make([]byte, 0, n)
		out = append(out, p[:2]...)
		for j, f := range fields {
			if j == i+1 {
				f = []byte(strconv.Itoa(limit))
			}
			out = append(out, f...)
			if j < len(fields)-1 || p[n-1] == 0 {
				out = append(out, 0)
			}
		}
		if len(out) > n {
			return n
		}
		return copy(p, out)
	}
	return n
}

func splitZ(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != 0 {
			i++
		}
		out = append(out, b[:i])
		if i == len(b) {
			break
		}
		b = b[i+1:]
	}
	return out
}

func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// Close implements net.PacketConn.
func (c *portConn) Close() error {
	c.file.Close()
	return c.orig.Close()
}

// LocalAddr implements net.PacketConn.
func (c *portConn) LocalAddr() net.Addr { return c.orig.LocalAddr() }

// SetDeadline implements net.PacketConn (reads only; writes never block long).
func (c *portConn) SetDeadline(t time.Time) error { return c.SetReadDeadline(t) }

// SetWriteDeadline implements net.PacketConn.
func (c *portConn) SetWriteDeadline(time.Time) error { return nil }

// SetReadDeadline implements net.PacketConn; a blocked read notices it
// within idleWake.
func (c *portConn) SetReadDeadline(t time.Time) error {
	if t.IsZero() {
		c.deadline.Store(0)
	} else {
		c.deadline.Store(t.UnixNano())
	}
	return nil
}

// mtuCap returns MTU − 32 of an interface, cached briefly.
type mtuCache struct {
	mu    sync.Mutex
	limit int // global cap (tftp.max_block_size or the serving interfaces')
	fixed bool
	byIdx map[int]mtuEntry
}

type mtuEntry struct {
	cap int
	at  time.Time
}

func (m *mtuCache) capFor(ifindex int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fixed || ifindex <= 0 {
		return m.limit
	}
	if e, ok := m.byIdx[ifindex]; ok && time.Since(e.at) < time.Minute {
		return e.cap
	}
	c := m.limit
	if ifc, err := net.InterfaceByIndex(ifindex); err == nil && ifc.MTU > 0 {
		c = min(c, clampBlk(ifc.MTU-32))
	}
	if m.byIdx == nil {
		m.byIdx = map[int]mtuEntry{}
	}
	m.byIdx[ifindex] = mtuEntry{cap: c, at: time.Now()}
	return c
}
