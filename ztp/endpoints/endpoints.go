// Package endpoints is the one place that says where devices fetch things:
// the device-facing URL paths the ZTP HTTP listener serves, and Endpoints,
// the absolute URLs built from them that DHCP, content serving, the joiner
// and the API hand out. The app resolves it once from the configuration
// (advertise_addr, http.addr); nothing else formats a device-facing URL.
package endpoints

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
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

// Endpoints builds the absolute URLs handed to devices. With an advertised
// address every URL is fixed; without one (content served on whatever
// address a request arrives) the host is the address the request came in
// on. Port 80 is left out of URLs, as browsers and curl write them.
type Endpoints struct {
	advertise netip.Addr
	port      string
	listen    string // http.addr's host when it names one, for requests without a local address
	base      string // fixed base when advertise is set
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
// (may be empty) and serves devices on httpAddr (host:port).
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
		a, err := netip.ParseAddr(advertise)
		if err != nil {
			return Endpoints{}, fmt.Errorf("advertise_addr: %q is not an IP address", advertise)
		}
		e.advertise = a.Unmap()
		e.base = e.baseFor(e.advertise.String())
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
	host := strings.TrimPrefix(e.Base(local), "http://")
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else {
		host = strings.Trim(host, "[]")
	}
	if port == "443" {
		return "https://" + bracket(host)
	}
	return "https://" + net.JoinHostPort(host, port)
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

// Advertise is the advertised address (invalid when none is configured).
func (e Endpoints) Advertise() netip.Addr { return e.advertise }

// Port is the device-facing HTTP port.
func (e Endpoints) Port() string { return e.port }

// ListensOnLoopback reports whether the device-facing listener is bound to
// a loopback address, where no switch can reach the URLs handed out.
func (e Endpoints) ListensOnLoopback() bool {
	a, err := netip.ParseAddr(e.listen)
	return err == nil && a.IsLoopback()
}

func (e Endpoints) baseFor(host string) string {
	if e.port == "80" {
		return "http://" + bracket(host)
	}
	return "http://" + net.JoinHostPort(host, e.port)
}

func bracket(host string) string {
	if a, err := netip.ParseAddr(host); err == nil && a.Is6() {
		return "[" + host + "]"
	}
	return host
}

// Base is the http://host[:port] prefix of URLs handed to a device whose
// request arrived on local (invalid when unknown): the advertised address
// when set, else local, else the listener's own host, else 127.0.0.1.
func (e Endpoints) Base(local netip.Addr) string {
	if e.base != "" {
		return e.base
	}
	switch {
	case local.IsValid() && !local.IsUnspecified():
		return e.baseFor(local.Unmap().String())
	case e.listen != "":
		return e.baseFor(e.listen)
	}
	return e.baseFor("127.0.0.1")
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
