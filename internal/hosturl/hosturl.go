// Package hosturl writes the host part of every URL and dial address ztpd
// builds for a device or a peer, so that an IPv6 literal is bracketed and
// loses its zone in one place rather than in each caller's concatenation.
package hosturl

import (
	"net"
	"net/netip"
	"net/url"
)

// Host is host as it goes into a URL or a dial address: an IP address
// unmapped (an IPv4-mapped IPv6 address is the IPv4 one) and without its
// zone, which names an interface of the machine that wrote it and means
// nothing to the reader; a name is left as it is.
func Host(host string) string {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap().WithZone("").String()
	}
	return host
}

// HostPort is host:port with host as Host writes it and bracketed when
// it is IPv6 ([fd99::1]:6443).
func HostPort(host, port string) string { return net.JoinHostPort(Host(host), port) }

// Base is scheme://host[:port], with host as HostPort writes it; the
// scheme's default port (80 for http, 443 for https) or an empty one is
// left out, as browsers and curl write URLs.
func Base(scheme, host, port string) string {
	h := Host(host)
	switch {
	case port == "" || scheme == "http" && port == "80" || scheme == "https" && port == "443":
		// url.URL brackets nothing itself: an IPv6 host needs them
		// without a port too.
		if a, err := netip.ParseAddr(h); err == nil && a.Is6() {
			h = "[" + h + "]"
		}
	default:
		h = net.JoinHostPort(h, port)
	}
	return (&url.URL{Scheme: scheme, Host: h}).String()
}

// Is6 reports whether a is an IPv6 address a device talks IPv6 to (an
// IPv4-mapped address is IPv4).
func Is6(a netip.Addr) bool { return a.IsValid() && a.Unmap().Is6() }
