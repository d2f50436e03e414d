// Package endpoints is the one place that says where devices fetch things:
// the device-facing URL paths the ZTP HTTP listener serves, and Endpoints,
// the absolute URLs built from them that DHCP, content serving, the joiner
// and the API hand out. The app resolves it once from the configuration
// (advertise_addr, advertise_addr6, http.addr); nothing else formats a
// device-facing URL.
package endpoints

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/ztpd/ztpd/internal/hosturl"
)

// Device-facing paths of the ZTP HTTP listener.
const (
	ZTPJSONPath       = "/ztp/ztp.json"   // SONiC option 67
	ZTPConfigPath     = "/ztp/config/"    // + <device-id>/config_db.json
	ONIEInstallerPath = "/onie/installer" // ONIE option 114
	MetadataPath      = "/latest/meta-data/"
	UserDataPath      = "/latest/user-data"
	// JoinDataPath is a VM's join data (its secrets), served on the device
	// HTTPS listener only; its public user-data names the URL.
	JoinDataPath       = "/latest/join-data"
	ImagesPath         = "/images/"   // + <sha256|name>
	ISOsPath           = "/isos/"     // + <name>.iso
	BinariesPath       = "/binaries/" // + <version tag>/<kubeadm|kubelet|kubectl|SHA256SUMS>
	JoinPath           = "/join/"
	FilesPath          = "/files/"
	ProvisionShellPath = "/ztp/provision.sh" // SONiC option 239 fallback script
)

// Endpoints builds the absolute URLs handed to devices. A device gets
// URLs in the family it asked over: the advertised address of that family
// (advertise_addr, advertise_addr6), else, for a request over IPv6, the
// address it arrived on; without either the host is the address the
// request came in on. Port 80 is left out of URLs, as browsers and curl
// write them; an IPv6 host is bracketed and has no zone.
type Endpoints struct {
	advertise  netip.Addr // advertise_addr, either family: requests of unknown family
	advertise4 netip.Addr
	advertise6 netip.Addr
	port       string
	listen     string // http.addr's host when it names one, for requests without a local address
	// tls is the device HTTPS listener's port, nil without one; shared by
	// every copy, so a port bound after the copies were handed out
	// (http.tls.addr with port 0) reaches them all.
	tls *tlsPort
}

// tlsPort is the device HTTPS listener's port: configured, then the one
// actually bound.
type tlsPort struct{ port atomic.Pointer[string] }

func (p *tlsPort) get() string {
	if p == nil {
		return ""
	}
	return *p.port.Load()
}

// New resolves the endpoints of an appliance that advertises advertise
// (may be empty, either family) and serves devices on httpAddr (host:port).
func New(advertise, httpAddr string) (Endpoints, error) {
	host, port, err := net.SplitHostPort(httpAddr)
	if err != nil || port == "" {
		return Endpoints{}, fmt.Errorf("http.addr: %q is not host:port", httpAddr)
	}
	e := Endpoints{port: port}
	if a, err := netip.ParseAddr(host); err == nil && !a.IsUnspecified() {
		e.listen = a.Unmap().String()
	} else if err != nil && host != "" {
		e.listen = host
	}
	if advertise != "" {
		a, err := netip.ParseAddr(strings.Trim(advertise, "[]"))
		if err != nil {
			return Endpoints{}, fmt.Errorf("advertise_addr: %q is not an IP address", advertise)
		}
		e.advertise = a.Unmap().WithZone("")
		if e.advertise.Is6() {
			e.advertise6 = e.advertise
		} else {
			e.advertise4 = e.advertise
		}
	}
	return e, nil
}

// WithAdvertise6 is e with addr (IPv6) advertised to devices that ask over
// IPv6, beside an IPv4 advertise_addr; "" changes nothing.
func (e Endpoints) WithAdvertise6(addr string) (Endpoints, error) {
	if addr == "" {
		return e, nil
	}
	a, err := netip.ParseAddr(strings.Trim(addr, "[]"))
	if err != nil || !a.Is6() || a.Is4In6() {
		return Endpoints{}, fmt.Errorf("advertise_addr6: %q is not an IPv6 address", addr)
	}
	if e.advertise6.IsValid() && e.advertise6 != a.WithZone("") {
		return Endpoints{}, fmt.Errorf("advertise_addr6: %s and the IPv6 advertise_addr %s both name the IPv6 address", addr, e.advertise6)
	}
	e.advertise6 = a.WithZone("")
	if !e.advertise.IsValid() {
		e.advertise = e.advertise6
	}
	return e, nil
}

// WithTLS is e with the device HTTPS listener at tlsAddr (host:port; its
// host is the same appliance's, so URLs use the host Base would).
func (e Endpoints) WithTLS(tlsAddr string) (Endpoints, error) {
	_, port, err := net.SplitHostPort(tlsAddr)
	if err != nil || port == "" {
		return Endpoints{}, fmt.Errorf("http.tls.addr: %q is not host:port", tlsAddr)
	}
	e.tls = &tlsPort{}
	e.tls.port.Store(&port)
	return e, nil
}

// TLSBound records the address the device HTTPS listener actually bound:
// with port 0 in http.tls.addr, URLs name the port the system chose.
func (e Endpoints) TLSBound(addr net.Addr) {
	if e.tls == nil || addr == nil {
		return
	}
	if _, port, err := net.SplitHostPort(addr.String()); err == nil && port != "" {
		e.tls.port.Store(&port)
	}
}

// SecureBase is the https://host[:port] prefix of the device HTTPS
// listener for a device whose request arrived on local, chosen as Base
// chooses its host; "" when there is no such listener.
func (e Endpoints) SecureBase(local netip.Addr) string {
	port := e.tls.get()
	if port == "" {
		return ""
	}
	return hosturl.Base("https", e.host(local), port)
}

// SecureJoin is the joiner's device-facing base over TLS, "" without the
// device HTTPS listener.
func (e Endpoints) SecureJoin() string { return e.SecureBase(netip.Addr{}) }

// JoinData is the https URL of a VM's join data for a VM whose request
// arrived on local, "" without the device HTTPS listener.
func (e Endpoints) JoinData(local netip.Addr) string {
	if b := e.SecureBase(local); b != "" {
		return b + JoinDataPath
	}
	return ""
}

// Advertise is the advertised address (invalid when none is configured):
// advertise_addr, else advertise_addr6.
func (e Endpoints) Advertise() netip.Addr { return e.advertise }

// Advertise6 is the address advertised to devices asking over IPv6
// (invalid when none is configured).
func (e Endpoints) Advertise6() netip.Addr { return e.advertise6 }

// Port is the device-facing HTTP port.
func (e Endpoints) Port() string { return e.port }

// ListensOnLoopback reports whether the device-facing listener is bound to
// a loopback address, where no switch can reach the URLs handed out.
func (e Endpoints) ListensOnLoopback() bool {
	a, err := netip.ParseAddr(e.listen)
	return err == nil && a.IsLoopback()
}

// host is the host of URLs for a device whose request arrived on local.
// An IPv4 request without an IPv4 advertised address keeps getting the
// one advertised (an appliance advertising only IPv6 points every device
// there, as it always did); an IPv6 request is never handed an IPv4
// literal, which an IPv6-only device has no route to.
func (e Endpoints) host(local netip.Addr) string {
	if local.IsValid() && !local.IsUnspecified() {
		local = local.Unmap()
		switch {
		case local.Is6() && e.advertise6.IsValid():
			return e.advertise6.String()
		case local.Is6():
			return local.WithZone("").String()
		case e.advertise4.IsValid():
			return e.advertise4.String()
		case e.advertise.IsValid():
			return e.advertise.String()
		}
		return local.String()
	}
	switch {
	case e.advertise.IsValid():
		return e.advertise.String()
	case e.listen != "":
		return e.listen
	}
	return "127.0.0.1"
}

// Base is the http://host[:port] prefix of URLs handed to a device whose
// request arrived on local (invalid when unknown): the advertised address
// of local's family when set, else (see host) local, else the listener's
// own host, else 127.0.0.1.
func (e Endpoints) Base(local netip.Addr) string {
	return hosturl.Base("http", e.host(local), e.port)
}

type localKey struct{}

// WithLocal is ctx carrying local, the appliance's address a device's
// request arrived on, for what builds that device's URLs deeper down (the
// joiner's sections and bundles).
func WithLocal(ctx context.Context, local netip.Addr) context.Context {
	return context.WithValue(ctx, localKey{}, local)
}

// Local is the address WithLocal put in ctx, else the local address of
// the HTTP connection ctx serves (invalid when neither is known).
func Local(ctx context.Context) netip.Addr {
	if a, ok := ctx.Value(localKey{}).(netip.Addr); ok && a.IsValid() {
		return a
	}
	if a, ok := ctx.Value(http.LocalAddrContextKey).(net.Addr); ok {
		if ap, err := netip.ParseAddrPort(a.String()); err == nil {
			return ap.Addr()
		}
	}
	return netip.Addr{}
}

// ZTPJSON is the URL of ztp.json (DHCP option 67 for SONiC).
func (e Endpoints) ZTPJSON(local netip.Addr) string { return e.Base(local) + ZTPJSONPath }

// ONIEInstaller is the URL of the ONIE installer (DHCP option 114).
func (e Endpoints) ONIEInstaller(local netip.Addr) string { return e.Base(local) + ONIEInstallerPath }

// Image is the URL of a stored image by sha256 or name.
func (e Endpoints) Image(local netip.Addr, ref string) string {
	return e.Base(local) + ImagesPath + ref
}

// ISOs is the URL prefix of binaries ISOs (+ <name>.iso), for CloudStack
// and devices.
func (e Endpoints) ISOs() string { return e.Base(netip.Addr{}) + ISOsPath }

// Binaries is the URL of a Kubernetes version's binaries (version tag,
// e.g. v1.37.2), read from its ISO: + /kubeadm, /kubelet, /kubectl or
// /SHA256SUMS. The agents' kubeadm-upgrade steps fetch from it.
func (e Endpoints) Binaries(tag string) string {
	return e.Base(netip.Addr{}) + BinariesPath + url.PathEscape(tag)
}

// Join is the joiner's device-facing base (the join paths hang off it).
func (e Endpoints) Join() string { return e.Base(netip.Addr{}) }

// Config is the URL of a device's config_db.json.
func (e Endpoints) Config(local netip.Addr, deviceID string) string {
	return e.Base(local) + ZTPConfigPath + deviceID + "/config_db.json"
}
