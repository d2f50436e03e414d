package tftp

import (
	"net"
	"net/netip"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// arrival is when a datagram arrived, from its SCM_TIMESTAMPNS control
// message, on the monotonic clock of time.Now; now if there is none or the
// wall clock stepped in between.
func arrival(oob []byte) time.Time {
	now := time.Now()
	for len(oob) >= unix.CmsgLen(0) {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.CmsgLen(0) || l > len(oob) {
			break
		}
		data := oob[unix.CmsgLen(0):l]
		if h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS && len(data) >= int(unsafe.Sizeof(unix.Timespec{})) {
			ts := (*unix.Timespec)(unsafe.Pointer(&data[0]))
			if age := now.Sub(time.Unix(ts.Unix())); age >= 0 && age < 10*time.Second {
				return now.Add(-age)
			}
			break
		}
		oob = oob[min(unix.CmsgSpace(l-unix.CmsgLen(0)), len(oob)):]
	}
	return now
}

// setPktinfo asks the kernel to tell, for every datagram received on fd,
// the local address it was sent to and the interface it arrived on.
func setPktinfo(fd int, v6 bool) error {
	if v6 {
		return unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
	}
	return unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
}

// parsePktinfo extracts the local address and the arrival interface from
// an IP_PKTINFO or IPV6_PKTINFO control message; garbage yields nothing.
// For IPv4 it is ipi_spec_dst: the local address even for a broadcast
// request, so replies leave from an address the client can reach.
func parsePktinfo(oob []byte) (netip.Addr, int) {
	for len(oob) >= unix.CmsgLen(0) {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.CmsgLen(0) || l > len(oob) {
			break
		}
		data := oob[unix.CmsgLen(0):l]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&data[0]))
			a := netip.AddrFrom4(pi.Spec_dst)
			if a.IsUnspecified() {
				a = netip.AddrFrom4(pi.Addr)
			}
			return a, int(pi.Ifindex)
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			pi := (*unix.Inet6Pktinfo)(unsafe.Pointer(&data[0]))
			return netip.AddrFrom16(pi.Addr).Unmap(), int(pi.Ifindex)
		}
		oob = oob[min(unix.CmsgSpace(l-unix.CmsgLen(0)), len(oob)):]
	}
	return netip.Addr{}, 0
}

// pktinfoOOB is the control message that makes a datagram sent on a
// wildcard socket leave from src. On a dual-stack socket an IPv4 source is
// left to the kernel.
func pktinfoOOB(src netip.Addr, v6 bool) []byte {
	if v6 {
		if src.Is4() || src.Is4In6() {
			return nil
		}
		oob := make([]byte, unix.CmsgSpace(unix.SizeofInet6Pktinfo))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		h.Level, h.Type = unix.IPPROTO_IPV6, unix.IPV6_PKTINFO
		h.SetLen(unix.CmsgLen(unix.SizeofInet6Pktinfo))
		pi := (*unix.Inet6Pktinfo)(unsafe.Pointer(&oob[unix.CmsgLen(0)]))
		pi.Addr = src.As16()
		return oob
	}
	if !src.Is4() {
		return nil
	}
	oob := make([]byte, unix.CmsgSpace(unix.SizeofInet4Pktinfo))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.IPPROTO_IP, unix.IP_PKTINFO
	h.SetLen(unix.CmsgLen(unix.SizeofInet4Pktinfo))
	pi := (*unix.Inet4Pktinfo)(unsafe.Pointer(&oob[unix.CmsgLen(0)]))
	pi.Spec_dst = src.As4()
	return oob
}

// mtuCache gives the blksize cap per arrival interface: its MTU minus the
// IP, UDP and TFTP headers (32 bytes over IPv4, 52 over IPv6), so a DATA
// packet never fragments; tftp.max_block_size, when set, instead.
type mtuCache struct {
	mu    sync.Mutex
	limit int // tftp.max_block_size, or the largest cap of the served interfaces
	fixed bool
	byIdx map[int]mtuEntry
}

type mtuEntry struct {
	mtu int
	at  time.Time
}

func (m *mtuCache) capFor(ifindex int, v6 bool) int {
	if m.fixed {
		return m.limit
	}
	hdr := 0
	if v6 {
		hdr = 20
	}
	if ifindex <= 0 {
		return clampBlk(m.limit - hdr)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.byIdx[ifindex]
	if !ok || time.Since(e.at) > time.Minute {
		e = mtuEntry{at: time.Now()}
		if ifc, err := net.InterfaceByIndex(ifindex); err == nil && ifc.MTU > 0 {
			e.mtu = ifc.MTU
		}
		if m.byIdx == nil {
			m.byIdx = map[int]mtuEntry{}
		}
		m.byIdx[ifindex] = e
	}
	if e.mtu <= 0 {
		return clampBlk(m.limit - hdr)
	}
	return clampBlk(min(m.limit, e.mtu-32) - hdr)
}
