package tftp

import (
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// sock is a UDP socket driven with blocking system calls, with kernel
// receive timestamps (SO_TIMESTAMPNS): whether an ACK came a round trip
// after a block was sent is judged by when it arrived, not by when a
// busy server got round to reading it.
//
// A A lock-step
// transfer is one ACK in, one DATA out, so its speed is the round trip,
// wake-ups included. Go's netpoller costs a failed read, a park, an epoll
// wake-up and the read again per block; a blocking receive costs one
// system call but keeps Go's sysmon thread waking to retake the processor.
// Measured (64 MiB, curl, server and client pinned to one CPU each): both
// a little slower than tftpd-hpa. What beats it is busy-polling for the
// ACK for about a round trip before blocking (poll): a fast client's ACK
// arrives while the receiving thread is still running. A blocked receive
// holds its OS thread, one per running transfer (bounded by
// tftp.max_transfers).
//
// The receive timeout is SO_RCVTIMEO, set only when the wait asked for is
// shorter than the one set or much longer (a somewhat longer one just wakes
// early), so a steady transfer does not pay a setsockopt per block. Only the goroutine that
// receives closes the descriptor; others call shutdown, which wakes it.
type sock struct {
	fd       int
	v6       bool
	rcvtimeo time.Duration // as set on the socket; 0 before the first
	down     atomic.Bool
	oob      []byte // control messages of read (one reader)
}

var (
	errTimeout = errors.New("receive timeout")
	errDown    = errors.New("socket shut down")
)

// maxWait bounds one blocking receive, so a socket notices shutdown even
// if a wake-up were missed.
const maxWait = 250 * time.Millisecond

// sockFromConn takes over c's socket (c is closed; the socket lives on in
// a duplicate descriptor set to blocking mode).
func sockFromConn(c *net.UDPConn) (*sock, error) {
	la, _ := c.LocalAddr().(*net.UDPAddr)
	if la == nil {
		return nil, errors.New("not a UDP socket")
	}
	f, err := c.File()
	c.Close()
	if err != nil {
		return nil, err
	}
	fd, err := unix.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		return nil, err
	}
	unix.CloseOnExec(fd)
	err = unix.SetNonblock(fd, false)
	if err == nil {
		err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &sock{fd: fd, v6: la.IP.To4() == nil}, nil
}

// dialSock opens a socket bound to local (any port; unspecified: any
// address) and connected to peer: the kernel then delivers only the peer's
// datagrams, and an ICMP port unreachable from it fails the next call with
// ECONNREFUSED.
func dialSock(local netip.Addr, peer netip.AddrPort) (*sock, error) {
	family, v6 := unix.AF_INET, false
	if !peer.Addr().Unmap().Is4() {
		family, v6 = unix.AF_INET6, true
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, err
	}
	s := &sock{fd: fd, v6: v6, oob: make([]byte, 64)}
	err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	if err == nil && local.IsValid() && !local.IsUnspecified() {
		err = unix.Bind(fd, sockaddr(netip.AddrPortFrom(local, 0), v6))
	}
	if err == nil {
		err = unix.Connect(fd, sockaddr(peer, v6))
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return s, nil
}

func sockaddr(ap netip.AddrPort, v6 bool) unix.Sockaddr {
	if v6 {
		return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	}
	return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().Unmap().As4()}
}

// setWait makes the next receive give up after about d (at least 1 ms; the
// kernel rounds to its tick).
func (s *sock) setWait(d time.Duration) error {
	d = min(max(d, time.Millisecond), maxWait)
	if s.rcvtimeo != 0 && d >= s.rcvtimeo && d <= 4*s.rcvtimeo {
		return nil // waking early is harmless: the caller checks its timers
	}
	tv := unix.NsecToTimeval(d.Nanoseconds())
	if err := unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return err
	}
	s.rcvtimeo = d
	return nil
}

// spinners counts receives busy-polling right now. One at a time: a
// single fast transfer gets its ACKs without a wake-up (the lock-step
// figure), while a crowd of transfers can never eat more than one CPU
// between them.
var spinners atomic.Int32

// poll busy-polls for a datagram for up to spin, if no other receive is
// polling. ok reports whether it got one (or an error).
func (s *sock) poll(spin time.Duration, recv func() (bool, error)) (ok bool, err error) {
	if spin <= 0 {
		return false, nil
	}
	if spinners.Add(1) != 1 {
		spinners.Add(-1)
		return false, nil
	}
	defer spinners.Add(-1)
	until := time.Now().Add(spin)
	for {
		if ok, err := recv(); ok || err != nil {
			return true, err
		}
		if !time.Now().Before(until) {
			return false, nil
		}
	}
}

// read receives one datagram on a connected socket, waiting up to wait,
// the first spin of it busy-polling. at is when it arrived.
func (s *sock) read(p []byte, wait, spin time.Duration) (n int, at time.Time, err error) {
	oobn := 0
	if ok, err := s.poll(min(spin, wait), func() (bool, error) {
		var err error
		n, oobn, _, _, err = unix.Recvmsg(s.fd, p, s.oob, unix.MSG_DONTWAIT)
		if err == unix.EAGAIN || err == unix.EINTR {
			return false, nil
		}
		return true, err
	}); ok {
		return n, arrival(s.oob[:oobn]), err
	}
	if err := s.setWait(wait); err != nil {
		return 0, at, err
	}
	for {
		n, oobn, _, _, err = unix.Recvmsg(s.fd, p, s.oob, 0)
		switch {
		case s.down.Load():
			return 0, at, errDown
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return 0, at, errTimeout
		case err != nil:
			return 0, at, err
		}
		return n, arrival(s.oob[:oobn]), nil
	}
}

// recvmsg receives one datagram with its control messages, waiting up to
// wait, the first spin of it busy-polling. truncated reports a datagram
// larger than p.
func (s *sock) recvmsg(p, oob []byte, wait, spin time.Duration) (n, oobn int, truncated bool, from netip.AddrPort, err error) {
	flags := 0
	var sa unix.Sockaddr
	polled, err := s.poll(min(spin, wait), func() (bool, error) {
		var err error
		n, oobn, flags, sa, err = unix.Recvmsg(s.fd, p, oob, unix.MSG_DONTWAIT)
		if err == unix.EAGAIN || err == unix.EINTR {
			return false, nil
		}
		return true, err
	})
	if err := s.setWait(wait); err != nil {
		return 0, 0, false, from, err
	}
	for {
		if !polled {
			n, oobn, flags, sa, err = unix.Recvmsg(s.fd, p, oob, 0)
		}
		polled = false
		switch {
		case s.down.Load():
			return 0, 0, false, from, errDown
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return 0, 0, false, from, errTimeout
		case err != nil:
			return
		}
		switch a := sa.(type) {
		case *unix.SockaddrInet4:
			from = netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
		case *unix.SockaddrInet6:
			from = netip.AddrPortFrom(netip.AddrFrom16(a.Addr).Unmap(), uint16(a.Port))
		default:
			continue
		}
		return n, oobn, flags&unix.MSG_TRUNC != 0, from, nil
	}
}

// write sends on a connected socket.
func (s *sock) write(p []byte) error {
	for {
		_, err := unix.Write(s.fd, p)
		if err == unix.EINTR {
			continue
		}
		return err
	}
}

// sendTo sends p to peer, from the source address in oob when set.
func (s *sock) sendTo(p, oob []byte, peer netip.AddrPort) error {
	for {
		_, err := unix.SendmsgN(s.fd, p, oob, sockaddr(peer, s.v6), 0)
		if err == unix.EINTR {
			continue
		}
		return err
	}
}

// shutdown wakes a receive blocked on s (from any goroutine); the
// receiving goroutine then closes it.
func (s *sock) shutdown() {
	if s.down.CompareAndSwap(false, true) {
		unix.Shutdown(s.fd, unix.SHUT_RDWR)
	}
}

func (s *sock) close() { unix.Close(s.fd) }
