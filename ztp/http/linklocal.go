package ztphttp

import (
	"encoding/binary"
	"net"
	"net/http"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ztpd/ztpd/ztp/content"
)

// LinkLocalHandler serves ONIE's discovery without DHCP: ONIE pings
// ff02::1 on its management port and asks every neighbour that answered
// for its waterfall names at http://[fe80::…%eth0]/onie-installer-…, with
// neither DHCP nor DNS behind the URL. Only those names are served here:
// an installer is public content, and nothing a device must hold an
// address for (ztp.json's enrollment, join bundles, metadata) is answered
// on a link-local address. The device is the neighbour the request came
// from (its MAC from neighbor, see NeighborMAC), recorded as an ONIE DHCP
// client is, without a lease.
func (s *Server) LinkLocalHandler(neighbor func(netip.Addr) (net.HardwareAddr, bool)) http.Handler {
	mux := http.NewServeMux()
	s.handle(mux, "GET /{name}", "onie-installer-link-local", func(w http.ResponseWriter, r *http.Request) {
		hint, ok := content.ONIEInstallerName(r.PathValue("name"))
		if !ok {
			s.fail(w, r, &content.Error{Status: http.StatusNotFound, Reason: "not found"})
			return
		}
		c := ClientFrom(r)
		c.Transport = "http-link-local"
		if mac, ok := neighbor(c.Addr); ok {
			c.Neighbor = mac.String()
		}
		s.serveONIEFor(w, r, c, hint)
	})
	return mux
}

// NeighborMAC is the hardware address of the link-local neighbour at a
// (with its zone): the kernel's neighbour table entry, which the
// connection a request arrived on has just resolved, else the MAC an
// EUI-64 interface id carries (RFC 4291 appendix A). An address made
// otherwise (RFC 7217 stable privacy) with no table entry names none.
func NeighborMAC(a netip.Addr) (net.HardwareAddr, bool) {
	if !a.Is6() || !a.IsLinkLocalUnicast() {
		return nil, false
	}
	if mac, ok := neighborTable(a); ok {
		return mac, true
	}
	return EUI64MAC(a)
}

// EUI64MAC is the MAC an EUI-64 interface id was made from: ff:fe in its
// middle, the universal/local bit flipped back.
func EUI64MAC(a netip.Addr) (net.HardwareAddr, bool) {
	b := a.As16()
	if b[11] != 0xff || b[12] != 0xfe {
		return nil, false
	}
	mac := net.HardwareAddr{b[8] ^ 0x02, b[9], b[10], b[13], b[14], b[15]}
	return mac, true
}

// neighborTable looks a up in the kernel's IPv6 neighbour table (netlink
// RTM_GETNEIGH), on the interface its zone names when it has one.
func neighborTable(a netip.Addr) (net.HardwareAddr, bool) {
	ifindex := 0
	if z := a.Zone(); z != "" {
		if ifc, err := net.InterfaceByName(z); err == nil {
			ifindex = ifc.Index
		}
	}
	want := a.WithZone("").As16()
	rib, err := syscall.NetlinkRIB(unix.RTM_GETNEIGH, unix.AF_INET6)
	if err != nil {
		return nil, false
	}
	msgs, err := syscall.ParseNetlinkMessage(rib)
	if err != nil {
		return nil, false
	}
	for _, m := range msgs {
		if m.Header.Type != unix.RTM_NEWNEIGH || len(m.Data) < unix.SizeofNdMsg {
			continue
		}
		idx := int(int32(binary.NativeEndian.Uint32(m.Data[4:8])))
		state := binary.NativeEndian.Uint16(m.Data[8:10])
		if ifindex != 0 && idx != ifindex || state&(unix.NUD_INCOMPLETE|unix.NUD_FAILED) != 0 {
			continue
		}
		var dst, lladdr []byte
		for attrs := m.Data[unix.SizeofNdMsg:]; len(attrs) >= unix.SizeofRtAttr; {
			l := int(binary.NativeEndian.Uint16(attrs[0:2]))
			if l < unix.SizeofRtAttr || l > len(attrs) {
				break
			}
			switch binary.NativeEndian.Uint16(attrs[2:4]) {
			case unix.NDA_DST:
				dst = attrs[unix.SizeofRtAttr:l]
			case unix.NDA_LLADDR:
				lladdr = attrs[unix.SizeofRtAttr:l]
			}
			attrs = attrs[min(len(attrs), (l+unix.RTA_ALIGNTO-1) & ^(unix.RTA_ALIGNTO-1)):]
		}
		if len(dst) == 16 && [16]byte(dst) == want && len(lladdr) == 6 {
			return net.HardwareAddr(append([]byte(nil), lladdr...)), true
		}
	}
	return nil, false
}
