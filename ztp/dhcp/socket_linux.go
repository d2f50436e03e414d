package dhcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"golang.org/x/sys/unix"
)

const rcvBuf = 4 << 20

// iface is one interface the server answers on.
type iface struct {
	name   string
	index  int
	addr   [4]byte // server identifier: the advertise address if it is on this interface
	direct *subnet // subnet served to clients on this link (nil: relayed only)
	conn   *net.UDPConn
	raw    int // AF_PACKET socket for layer-2 replies, -1 when unavailable
	lock   *net.UnixListener
}

// LockName is the abstract unix socket a server holds for each interface
// it serves. Abstract sockets live in the network namespace, like the
// interface, and vanish with the process, so a kill -9 leaves no stale lock.
func LockName(ifname string) string { return "@ztpd-dhcp-" + ifname }

// ErrInterfaceInUse reports that another DHCP server already serves an
// interface.
var ErrInterfaceInUse = errors.New("interface already served")

// openIface takes the interface's lock, checks that no other DHCP server
// holds port 67 there, and opens the sockets.
func openIface(name string, advertise netip.Addr) (*iface, error) {
	nif, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("dhcp interface %s: %w", name, err)
	}
	addr, err := serverAddr(nif, advertise)
	if err != nil {
		return nil, err
	}
	ifc := &iface{name: name, index: nif.Index, addr: addr, raw: -1}
	if ifc.lock, err = lockIface(name); err != nil {
		return nil, err
	}
	if err := probePort(name); err != nil {
		ifc.close()
		return nil, err
	}
	ifc.conn, err = server4.NewIPv4UDPConn(name, &net.UDPAddr{Port: serverPort})
	if err != nil {
		ifc.close()
		return nil, fmt.Errorf("dhcp interface %s: %w", name, err)
	}
	// Room for a burst or a scheduling stall (the kernel doubles it: ~7,000
	// requests, a few hundred ms at full load), not for a backlog: requests
	// queued for seconds would be answered after their clients gave up, so
	// excess is better dropped here (clients retransmit).
	if rc, err := ifc.conn.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvBuf) != nil {
				_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, rcvBuf)
			}
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20)
		})
	}
	// Protocol 0: the socket only sends, it receives nothing.
	if fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err == nil {
		ifc.raw = fd
	}
	return ifc, nil
}

// lockIface takes the interface's lock. server4 sets SO_REUSEPORT, so a
// second server would bind silently and steal half the packets: the lock is
// what refuses it.
func lockIface(name string) (*net.UnixListener, error) {
	lock, err := net.ListenUnix("unix", &net.UnixAddr{Name: LockName(name), Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("%w: another ztpd is already serving DHCP on interface %s "+
			"(it holds %s); stop it or choose another interface", ErrInterfaceInUse, name, LockName(name))
	}
	return lock, nil
}

// CheckInterface reports whether Listen could serve DHCP on the interface
// now: it exists, no other ztpd serves it, no other DHCP server holds port
// 67 there. serve asks before it creates anything; Listen checks again when
// it opens the sockets.
func CheckInterface(name string) error {
	if _, err := net.InterfaceByName(name); err != nil {
		return fmt.Errorf("dhcp interface %s: %w", name, err)
	}
	lock, err := lockIface(name)
	if err != nil {
		return err
	}
	defer lock.Close()
	return probePort(name)
}

// probePort binds port 67 on the interface without SO_REUSEADDR/PORT: it
// fails when any other DHCP server (dnsmasq, Kea, dhcpd) already listens
// there, which server4's own socket would not notice.
func probePort(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.BindToDevice(fd, name); err != nil {
		return fmt.Errorf("dhcp interface %s: bind to device: %w", name, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: serverPort}); err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("%w: UDP port 67 on interface %s is held by another DHCP server "+
				"(dnsmasq, kea-dhcp4, dhcpd?); stop it first", ErrInterfaceInUse, name)
		}
		return fmt.Errorf("dhcp interface %s: bind port 67: %w", name, err)
	}
	return nil
}

// serverAddr picks the interface's server identifier: the advertise address
// when the interface has it (so cloud-init's metadata server, which is the
// DHCP server identifier, is where ztpd serves), else its first IPv4.
func serverAddr(nif *net.Interface, advertise netip.Addr) ([4]byte, error) {
	addrs, err := nif.Addrs()
	if err != nil {
		return [4]byte{}, fmt.Errorf("dhcp interface %s: %w", nif.Name, err)
	}
	var first [4]byte
	found := false
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.To4() == nil {
			continue
		}
		v := [4]byte(ipn.IP.To4())
		if advertise.Is4() && v == advertise.As4() {
			return v, nil
		}
		if !found {
			first, found = v, true
		}
	}
	if !found {
		return [4]byte{}, fmt.Errorf("dhcp interface %s has no IPv4 address", nif.Name)
	}
	return first, nil
}

func (ifc *iface) close() {
	if ifc.conn != nil {
		ifc.conn.Close()
	}
	if ifc.raw >= 0 {
		unix.Close(ifc.raw)
		ifc.raw = -1
	}
	if ifc.lock != nil {
		ifc.lock.Close()
		ifc.lock = nil
	}
}

// sender sends replies; each goroutine that sends owns one for its frame
// buffer.
type sender struct {
	frame [20 + 8 + 1500]byte
}

// send delivers one encoded reply to d and counts it.
func (w *sender) send(s *Server, ifc *iface, d dest, pkt []byte, mt uint8) {
	if d.l2 {
		if ifc.raw >= 0 && len(pkt) <= 1500-28 {
			if err := w.sendL2(ifc, d, pkt); err == nil {
				s.metrics.repliesByType[mt].Inc()
				return
			}
		}
		d = dest{addr: broadcast} // RFC 2131 §4.1: broadcast when unicast is impossible
	}
	if _, err := ifc.conn.WriteToUDPAddrPort(pkt, d.addr); err != nil {
		s.metrics.dropSendFailed.Inc()
		// A reply that cannot leave (no route to a relay, ARP failure, full
		// socket buffer) is an operator's problem: warn, at most every 10 s.
		s.sendWarn.Do(func() {
			s.log.Warn("reply not sent; more are counted in ztpd_dhcp_dropped_total{reason=\"send_failed\"}", "interface", ifc.name, "to", d.addr, "err", err)
		})
		return
	}
	s.metrics.repliesByType[mt].Inc()
}

// sendL2 wraps pkt in IPv4 and UDP headers and sends it to the client's
// hardware address; the kernel adds the Ethernet header.
func (w *sender) sendL2(ifc *iface, d dest, pkt []byte) error {
	n := 28 + len(pkt)
	f := w.frame[:n]
	ip := f[:20]
	ip[0], ip[1] = 0x45, 0
	binary.BigEndian.PutUint16(ip[2:], uint16(n))
	binary.BigEndian.PutUint32(ip[4:], 0x4000) // id 0, don't fragment
	ip[8], ip[9] = 64, unix.IPPROTO_UDP
	ip[10], ip[11] = 0, 0
	copy(ip[12:16], ifc.addr[:])
	dst := d.addr.Addr().As4()
	copy(ip[16:20], dst[:])
	binary.BigEndian.PutUint16(ip[10:], ^fold(sum(0, ip)))
	udp := f[20:28]
	binary.BigEndian.PutUint16(udp[0:], serverPort)
	binary.BigEndian.PutUint16(udp[2:], d.addr.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(pkt)))
	udp[6], udp[7] = 0, 0
	copy(f[28:], pkt)
	// UDP checksum over the pseudo header, header and payload.
	c := sum(0, ip[12:20]) + uint32(unix.IPPROTO_UDP) + uint32(8+len(pkt))
	c = sum(c, f[20:])
	ck := ^fold(c)
	if ck == 0 {
		ck = 0xffff
	}
	binary.BigEndian.PutUint16(udp[6:], ck)
	sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: ifc.index, Halen: 6}
	copy(sa.Addr[:], d.hw[:])
	return unix.Sendto(ifc.raw, f, 0, sa)
}

func sum(c uint32, b []byte) uint32 {
	for len(b) >= 2 {
		c += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		c += uint32(b[0]) << 8
	}
	return c
}

func fold(c uint32) uint16 {
	for c > 0xffff {
		c = c>>16 + c&0xffff
	}
	return uint16(c)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
