package dhcp6

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// serverPort is where servers and relays listen (RFC 8415 §7.2).
const serverPort = 547

// allServers is All_DHCP_Relay_Agents_and_Servers (RFC 8415 §7.1).
var allServers = netip.MustParseAddr("ff02::1:2")

// iface is one interface the server answers on.
type iface struct {
	name   string
	index  int
	mac    []byte
	addrs  []netip.Addr // its IPv6 addresses, to find the directly attached subnet
	direct *subnet      // subnet served to clients on this link (nil: relayed only)
	conn   packetConn
	lock   *net.UnixListener
}

// packetConn is what the server reads and writes an interface's packets
// through (a *net.UDPConn; tests hand their own).
type packetConn interface {
	ReadFromUDPAddrPort(b []byte) (int, netip.AddrPort, error)
	WriteToUDPAddrPort(b []byte, addr netip.AddrPort) (int, error)
	Close() error
}

// LockName is the abstract unix socket a server holds for each interface
// it serves: it lives in the network namespace, like the interface, and
// vanishes with the process, so a kill -9 leaves no stale lock.
func LockName(ifname string) string { return "@ztpd-dhcp6-" + ifname }

// ErrInterfaceInUse reports that another DHCPv6 server already serves an
// interface.
var ErrInterfaceInUse = errors.New("interface already served")

// openIface takes the interface's lock and opens a UDP socket on [::]:547
// bound to it, joined to ff02::1:2 there.
func openIface(name string) (*iface, error) {
	nif, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("dhcp6 interface %s: %w", name, err)
	}
	ifc := &iface{name: name, index: nif.Index, mac: nif.HardwareAddr}
	if as, err := nif.Addrs(); err == nil {
		for _, a := range as {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Is6() && !ip.Is4In6() {
					ifc.addrs = append(ifc.addrs, ip)
				}
			}
		}
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: LockName(name), Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("dhcp6 interface %s: %w (another ztpd serves it)", name, ErrInterfaceInUse)
	}
	ifc.lock = l
	var sockErr error
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		err := c.Control(func(fd uintptr) {
			f := int(fd)
			if sockErr = unix.SetsockoptInt(f, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); sockErr != nil {
				return
			}
			if sockErr = unix.BindToDevice(f, name); sockErr != nil {
				return
			}
			_ = unix.SetsockoptInt(f, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20)
			_ = unix.SetsockoptInt(f, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 4<<20)
			mreq := &unix.IPv6Mreq{Multiaddr: allServers.As16(), Interface: uint32(nif.Index)}
			sockErr = unix.SetsockoptIPv6Mreq(f, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP, mreq)
		})
		if err != nil {
			return err
		}
		return sockErr
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp6", fmt.Sprintf("[::]:%d", serverPort))
	if err != nil {
		ifc.close()
		return nil, fmt.Errorf("dhcp6 interface %s: %w", name, err)
	}
	ifc.conn = pc.(*net.UDPConn)
	return ifc, nil
}

func (ifc *iface) close() {
	if ifc.conn != nil {
		ifc.conn.Close()
	}
	if ifc.lock != nil {
		ifc.lock.Close()
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}
