package config

import (
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// DHCP configures the DHCP servers: DHCPv4 for the IPv4 subnets, DHCPv6 for
// the IPv6 ones, on the same interfaces. They run only when Interfaces is
// not empty.
type DHCP struct {
	Interfaces        []string `yaml:"interfaces"`
	LeaseTime         Duration `yaml:"lease_time"`
	OfferHold         Duration `yaml:"offer_hold"`         // how long an offered address stays held
	DeclineQuarantine Duration `yaml:"decline_quarantine"` // how long a DECLINEd address is not offered
	// Ranges are "A-B" pools given on the command line; Validate places each
	// into the subnet of the DHCP interface that contains it.
	Ranges []string `yaml:"ranges"`
	// VM classifies CloudStack VMs that have no reservation.
	VM VMMatch `yaml:"vm"`
	// Options apply to every reply; per-class, per-subnet and per-reservation
	// options override them in that order.
	Options      Options            `yaml:"options"`
	ClassOptions map[string]Options `yaml:"class_options"` // keyed by sonic|onie|vm|unknown
	Subnets      []Subnet           `yaml:"subnets"`
	// Relays are the relay agents whose packets may set giaddr and carry
	// option 82; relayed packets from anyone else are dropped.
	Relays []Relay `yaml:"relays"`
}

// Relay declares one DHCP relay agent. Address is where it sends from and
// a giaddr it sets (dnsmasq --dhcp-relay sends from its giaddr); a relay
// whose giaddrs (its client-side interfaces) differ from the address it
// sends from (ISC dhcrelay sends from its server-side interface) lists them
// under giaddrs. A DHCPv6 relay is declared the same way with IPv6
// addresses, its giaddrs being the link addresses its Relay-Forw messages
// state; one relay's addresses are all of one family.
type Relay struct {
	Address   string   `yaml:"address"`
	GIAddrs   []string `yaml:"giaddrs"`   // further giaddrs it sets
	Sources   []string `yaml:"sources"`   // further addresses it sends from
	Interface string   `yaml:"interface"` // the DHCP interface its packets arrive on; "" = any

	Source []netip.Addr `yaml:"-"` // Address and Sources, parsed
	GIAddr []netip.Addr `yaml:"-"` // Address and GIAddrs, parsed
}

// RelayInfoNeedsRelays reports the auto_approve rules (by index) that match
// relay agent information (circuit or remote ids) while no relay is
// declared: with none, every relayed packet is dropped, and such a rule
// admits nobody.
func (c *Config) RelayInfoNeedsRelays() []int {
	if len(c.DHCP.Relays) > 0 {
		return nil
	}
	var idx []int
	for i, r := range c.Joiner.AutoApprove {
		if len(r.CircuitIDs) > 0 || len(r.RemoteIDs) > 0 {
			idx = append(idx, i)
		}
	}
	return idx
}

func (r *Relay) validate(errs *Errors, f string, d *DHCP) {
	v6 := false
	if a, err := netip.ParseAddr(strings.TrimSpace(r.Address)); err == nil {
		v6 = a.Is6() && !a.Is4In6()
	}
	parse := func(field, s string) (netip.Addr, bool) {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		switch {
		case v6 && (err != nil || !a.Is6() || a.Is4In6() || a.IsUnspecified() || a.Zone() != ""):
			errs.add(field, "%q is not an IPv6 address (the relay's address is IPv6)", s)
			return netip.Addr{}, false
		case !v6 && (err != nil || !a.Is4() || a.IsUnspecified()):
			errs.add(field, "%q is not an IPv4 address", s)
			return netip.Addr{}, false
		}
		return a, true
	}
	r.Source, r.GIAddr = r.Source[:0], r.GIAddr[:0]
	if r.Address == "" {
		errs.add(f+".address", "required: the address the relay sends from")
	} else if a, ok := parse(f+".address", r.Address); ok {
		r.Source, r.GIAddr = append(r.Source, a), append(r.GIAddr, a)
	}
	for i, s := range r.GIAddrs {
		if a, ok := parse(fmt.Sprintf("%s.giaddrs[%d]", f, i), s); ok {
			r.GIAddr = append(r.GIAddr, a)
		}
	}
	for i, s := range r.Sources {
		if a, ok := parse(fmt.Sprintf("%s.sources[%d]", f, i), s); ok {
			r.Source = append(r.Source, a)
		}
	}
	if r.Interface != "" && !containsStr(d.Interfaces, r.Interface) {
		errs.add(f+".interface", "%q is not one of dhcp.interfaces %v", r.Interface, d.Interfaces)
	}
}

// VMMatch lists what marks a client as a CloudStack VM.
type VMMatch struct {
	MACPrefixes   []string `yaml:"mac_prefixes"`   // default ["1e:00"], CloudStack's guest MAC prefix; [] turns it off
	VendorClasses []string `yaml:"vendor_classes"` // option 60 prefixes
}

// Options maps a DHCP option (decimal code, or a name such as "tftp-server-name")
// to its value in text: IP lists comma separated, durations in seconds, raw
// bytes as "hex:0a0b".
type Options map[string]string

// Subnet is one network ztpd serves, directly on an interface or through
// relays whose giaddr (IPv6: link address) lies inside it. An IPv6 prefix
// makes it a DHCPv6 subnet: router, ntp, syslog and routes are IPv4 only
// (routers advertise IPv6 routes), reservations name a duid or a mac.
type Subnet struct {
	Name         string             `yaml:"name"`
	CIDR         string             `yaml:"subnet"`
	Interface    string             `yaml:"interface"` // for directly attached subnets
	Pools        []string           `yaml:"pools"`     // "A-B"
	Router       string             `yaml:"router"`
	DNS          []string           `yaml:"dns"`
	Domain       string             `yaml:"domain"`
	NTP          []string           `yaml:"ntp"`
	Syslog       []string           `yaml:"syslog"`
	LeaseTime    Duration           `yaml:"lease_time"`
	Routes       []Route            `yaml:"routes"` // option 121
	Options      Options            `yaml:"options"`
	ClassOptions map[string]Options `yaml:"class_options"`
	Reservations []Reservation      `yaml:"reservations"`
	// RapidCommit (IPv6) lets a client asking for it get its lease in two
	// messages; nil means on.
	RapidCommit *bool `yaml:"rapid_commit"`

	Prefix     netip.Prefix `yaml:"-"`
	PoolRanges []Range      `yaml:"-"`
}

// Route is one classless static route (RFC 3442).
type Route struct {
	Dest string `yaml:"dest"` // CIDR
	Via  string `yaml:"via"`
}

// Reservation pins an address (and optionally a hostname and options) to a
// client identified by MAC, client id or serial number; in an IPv6 subnet,
// by MAC or DUID.
type Reservation struct {
	MAC      string  `yaml:"mac"`
	DUID     string  `yaml:"duid"` // IPv6: hex bytes, colon separated or not
	ClientID string  `yaml:"client_id"`
	Serial   string  `yaml:"serial"`
	IP       string  `yaml:"ip"`
	Hostname string  `yaml:"hostname"`
	Kind     string  `yaml:"kind"` // sonic|onie|vm; a reservation without kind makes a VM
	Options  Options `yaml:"options"`
}

// Range is an inclusive IPv4 address range.
type Range struct{ Start, End netip.Addr }

// Contains reports whether a is inside r.
func (r Range) Contains(a netip.Addr) bool { return r.Start.Compare(a) <= 0 && a.Compare(r.End) <= 0 }

// Size is the number of addresses in r.
func (r Range) Size() uint32 { return ipToU32(r.End) - ipToU32(r.Start) + 1 }

func ipToU32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// IsIPv6 reports whether the subnet is an IPv6 one (its prefix parsed by
// Validate).
func (s *Subnet) IsIPv6() bool { return s.Prefix.IsValid() && s.Prefix.Addr().Is6() }

// ParseRange6 parses "A-B" of IPv6 addresses.
func ParseRange6(s string) (Range, error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return Range{}, fmt.Errorf("%q is not a range like fd99:0:0:1::100-fd99:0:0:1::1ff", s)
	}
	start, err := netip.ParseAddr(strings.TrimSpace(a))
	if err != nil || !start.Is6() || start.Is4In6() || start.Zone() != "" {
		return Range{}, fmt.Errorf("range start %q is not an IPv6 address", a)
	}
	end, err := netip.ParseAddr(strings.TrimSpace(b))
	if err != nil || !end.Is6() || end.Is4In6() || end.Zone() != "" {
		return Range{}, fmt.Errorf("range end %q is not an IPv6 address", b)
	}
	if start.Compare(end) > 0 {
		return Range{}, fmt.Errorf("start %s is after end %s", start, end)
	}
	return Range{start, end}, nil
}

// ParseDUID parses a DUID as hex bytes, colon separated or not: 3 to 130
// bytes (RFC 8415 §11.1).
func ParseDUID(s string) ([]byte, error) {
	h := strings.ReplaceAll(strings.TrimSpace(s), ":", "")
	b, err := hex.DecodeString(h)
	if err != nil || len(b) < 3 || len(b) > 130 {
		return nil, fmt.Errorf("%q is not a DUID (3 to 130 bytes in hex)", s)
	}
	return b, nil
}

// ParseRange parses "A-B".
func ParseRange(s string) (Range, error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return Range{}, fmt.Errorf("%q is not a range like 10.99.1.10-10.99.1.250", s)
	}
	start, err := netip.ParseAddr(strings.TrimSpace(a))
	if err != nil || !start.Is4() {
		return Range{}, fmt.Errorf("range start %q is not an IPv4 address", a)
	}
	end, err := netip.ParseAddr(strings.TrimSpace(b))
	if err != nil || !end.Is4() {
		return Range{}, fmt.Errorf("range end %q is not an IPv4 address", b)
	}
	if start.Compare(end) > 0 {
		return Range{}, fmt.Errorf("start %s is after end %s", start, end)
	}
	return Range{start, end}, nil
}

// Enabled reports whether the DHCP server should run.
func (d *DHCP) Enabled() bool { return len(d.Interfaces) > 0 }

// validate checks the DHCP settings; it reports whether every DHCP interface
// exists (when one does not, that is the one error about it: the subnets and
// ranges that would come from it are not checked).
func (d *DHCP) validate(errs *Errors) (ifacesExist bool) {
	ifacesExist = true
	for i, name := range d.Interfaces {
		if err := InterfaceExists(name); err != nil {
			errs.add(fmt.Sprintf("dhcp.interfaces[%d]", i), "%v", err)
			ifacesExist = false
		}
	}
	if d.LeaseTime.D() < 60e9 {
		errs.add("dhcp.lease_time", "%s is shorter than one minute", d.LeaseTime.D())
	}
	if d.OfferHold.D() <= 0 {
		errs.add("dhcp.offer_hold", "must be positive")
	}
	if d.DeclineQuarantine.D() < 0 {
		errs.add("dhcp.decline_quarantine", "must not be negative")
	}
	for i, p := range d.VM.MACPrefixes {
		if _, err := ParseMACPrefix(p); err != nil {
			errs.add(fmt.Sprintf("dhcp.vm.mac_prefixes[%d]", i), "%v", err)
		}
	}
	checkOptions(errs, "dhcp.options", d.Options)
	for class, o := range d.ClassOptions {
		checkClass(errs, "dhcp.class_options."+class, class)
		checkOptions(errs, "dhcp.class_options."+class, o)
	}
	switch {
	case !ifacesExist:
	case len(d.Subnets) == 0 && len(d.Ranges) > 0:
		d.subnetsFromInterfaces(errs)
	case len(d.Ranges) > 0:
		d.placeRanges(errs)
	}
	if d.Enabled() && len(d.Subnets) == 0 && ifacesExist {
		errs.add("dhcp.subnets", "DHCP interfaces are set but no subnet or --dhcp-range is configured")
	}
	for i := range d.Relays {
		d.Relays[i].validate(errs, fmt.Sprintf("dhcp.relays[%d]", i), d)
	}
	names := map[string]bool{}
	for i := range d.Subnets {
		d.Subnets[i].validate(errs, fmt.Sprintf("dhcp.subnets[%d]", i), d)
		if names[d.Subnets[i].Name] {
			errs.add(fmt.Sprintf("dhcp.subnets[%d].name", i), "%q is used by another subnet", d.Subnets[i].Name)
		}
		names[d.Subnets[i].Name] = true
	}
	for i := range d.Subnets {
		for j := i + 1; j < len(d.Subnets); j++ {
			a, b := d.Subnets[i].Prefix, d.Subnets[j].Prefix
			if a.IsValid() && b.IsValid() && a.Overlaps(b) {
				errs.add(fmt.Sprintf("dhcp.subnets[%d].subnet", j), "%s overlaps subnet %q (%s)", b, d.Subnets[i].Name, a)
			}
		}
	}
	return ifacesExist
}

// subnetsFromInterfaces builds one subnet per interface from its address, for
// the flags-only setup (`--dhcp-interface veth0 --dhcp-range A-B`). The
// appliance's own address becomes the router, as dnsmasq does.
func (d *DHCP) subnetsFromInterfaces(errs *Errors) {
	for i, ifn := range d.Interfaces {
		p, err := InterfaceIPv4(ifn)
		if err != nil {
			errs.add(fmt.Sprintf("dhcp.interfaces[%d]", i), "%v", err)
			continue
		}
		d.Subnets = append(d.Subnets, Subnet{
			Name: ifn, CIDR: p.Masked().String(), Interface: ifn, Router: p.Addr().String(),
		})
	}
	d.placeRanges(errs)
}

func (d *DHCP) placeRanges(errs *Errors) {
	for i, rs := range d.Ranges {
		r, err := ParseRange(rs)
		if err != nil {
			errs.add(fmt.Sprintf("dhcp.ranges[%d]", i), "%v", err)
			continue
		}
		placed := false
		for j := range d.Subnets {
			p, err := netip.ParsePrefix(d.Subnets[j].CIDR)
			if err == nil && p.Contains(r.Start) && p.Contains(r.End) {
				d.Subnets[j].Pools = append(d.Subnets[j].Pools, rs)
				placed = true
				break
			}
		}
		if !placed {
			errs.add(fmt.Sprintf("dhcp.ranges[%d]", i), "%s is not inside any DHCP interface's subnet; declare relayed subnets under dhcp.subnets", rs)
		}
	}
	d.Ranges = nil
}

func (s *Subnet) validate(errs *Errors, f string, d *DHCP) {
	p, err := netip.ParsePrefix(s.CIDR)
	if err == nil && p.Addr().Is6() && !p.Addr().Is4In6() && p.Addr().Zone() == "" {
		s.validate6(errs, f, d, p)
		return
	}
	if err != nil || !p.Addr().Is4() {
		errs.add(f+".subnet", "%q is not an IPv4 or IPv6 CIDR", s.CIDR)
		return
	}
	if s.RapidCommit != nil {
		errs.add(f+".rapid_commit", "is for IPv6 subnets (DHCPv4 has no rapid commit here)")
	}
	s.Prefix = p.Masked()
	if s.Name == "" {
		s.Name = s.Prefix.String()
	}
	if s.Interface != "" && !containsStr(d.Interfaces, s.Interface) {
		errs.add(f+".interface", "%q is not one of dhcp.interfaces %v", s.Interface, d.Interfaces)
	}
	if len(s.Pools) == 0 && len(s.Reservations) == 0 {
		errs.add(f+".pools", "subnet has neither pools nor reservations")
	}
	s.PoolRanges = s.PoolRanges[:0]
	for i, ps := range s.Pools {
		r, err := ParseRange(ps)
		if err != nil {
			errs.add(fmt.Sprintf("%s.pools[%d]", f, i), "%v", err)
			continue
		}
		if !s.Prefix.Contains(r.Start) || !s.Prefix.Contains(r.End) {
			errs.add(fmt.Sprintf("%s.pools[%d]", f, i), "%s is outside subnet %s", ps, s.Prefix)
			continue
		}
		for j, o := range s.PoolRanges {
			if o.Contains(r.Start) || o.Contains(r.End) || r.Contains(o.Start) {
				errs.add(fmt.Sprintf("%s.pools[%d]", f, i), "%s overlaps pool %d", ps, j)
			}
		}
		s.PoolRanges = append(s.PoolRanges, r)
	}
	checkIP(errs, f+".router", s.Router, s.Prefix)
	for i, a := range s.DNS {
		checkIP(errs, fmt.Sprintf("%s.dns[%d]", f, i), a, netip.Prefix{})
	}
	for i, a := range s.NTP {
		checkIP(errs, fmt.Sprintf("%s.ntp[%d]", f, i), a, netip.Prefix{})
	}
	for i, a := range s.Syslog {
		checkIP(errs, fmt.Sprintf("%s.syslog[%d]", f, i), a, netip.Prefix{})
	}
	if s.LeaseTime != 0 && s.LeaseTime.D() < 60e9 {
		errs.add(f+".lease_time", "%s is shorter than one minute", s.LeaseTime.D())
	}
	for i, r := range s.Routes {
		if _, err := netip.ParsePrefix(r.Dest); err != nil {
			errs.add(fmt.Sprintf("%s.routes[%d].dest", f, i), "%q is not a CIDR", r.Dest)
		}
		checkIP(errs, fmt.Sprintf("%s.routes[%d].via", f, i), r.Via, netip.Prefix{})
	}
	checkOptions(errs, f+".options", s.Options)
	for class, o := range s.ClassOptions {
		checkClass(errs, f+".class_options."+class, class)
		checkOptions(errs, f+".class_options."+class, o)
	}
	seenIP := map[string]int{}
	seenKey := map[string]int{}
	for i, r := range s.Reservations {
		rf := fmt.Sprintf("%s.reservations[%d]", f, i)
		if r.MAC == "" && r.ClientID == "" && r.Serial == "" {
			errs.add(rf, "needs mac, client_id or serial")
		}
		if r.DUID != "" {
			errs.add(rf+".duid", "is for IPv6 subnets; an IPv4 client is reserved by mac, client_id or serial")
		}
		if r.MAC != "" {
			hw, err := net.ParseMAC(r.MAC)
			if err != nil {
				errs.add(rf+".mac", "%q is not a MAC address", r.MAC)
			} else {
				s.Reservations[i].MAC = hw.String()
			}
		}
		claimReservation(errs, rf, i, seenKey, "mac="+s.Reservations[i].MAC, "client_id="+r.ClientID, "serial="+r.Serial)
		claimReservedIP(errs, rf, i, seenIP, r.IP, func(field string) { checkIP(errs, field, r.IP, s.Prefix) })
		if r.Kind != "" {
			checkClass(errs, rf+".kind", r.Kind)
		}
		checkOptions(errs, rf+".options", r.Options)
	}
}

// claimReservation records reservation i's keys ("name=value"; an empty
// value names nothing) and adds an error for each one an earlier
// reservation of the subnet holds. Both families' reservations use it.
func claimReservation(errs *Errors, rf string, i int, seen map[string]int, keys ...string) {
	for _, k := range keys {
		if strings.HasSuffix(k, "=") {
			continue
		}
		if j, dup := seen[k]; dup {
			errs.add(rf, "%s is also reserved by reservation %d", k, j)
		}
		seen[k] = i
	}
}

// claimReservedIP checks reservation i's address (check, given the field
// name, for the family's rules), records it and adds an error when an
// earlier reservation of the subnet holds it or when it is missing.
func claimReservedIP(errs *Errors, rf string, i int, seen map[string]int, ip string, check func(field string)) {
	if ip == "" {
		errs.add(rf+".ip", "must be set")
		return
	}
	check(rf + ".ip")
	if j, dup := seen[ip]; dup {
		errs.add(rf+".ip", "%s is also reserved by reservation %d", ip, j)
	}
	seen[ip] = i
}

func checkIP(errs *Errors, field, v string, within netip.Prefix) {
	if v == "" {
		return
	}
	a, err := netip.ParseAddr(v)
	if err != nil || !a.Is4() {
		errs.add(field, "%q is not an IPv4 address", v)
		return
	}
	if within.IsValid() && !within.Contains(a) {
		errs.add(field, "%s is outside subnet %s", a, within)
	}
}

func checkClass(errs *Errors, field, class string) {
	switch class {
	case "sonic", "onie", "vm", "unknown":
	default:
		errs.add(field, "%q is not one of sonic, onie, vm, unknown", class)
	}
}

func checkOptions(errs *Errors, field string, o Options) {
	for k := range o {
		if _, err := OptionCode(k); err != nil {
			errs.add(field+"."+k, "%v", err)
		}
	}
}

// optionNames are the option names accepted besides decimal codes.
var optionNames = map[string]uint8{
	"subnet-mask": 1, "router": 3, "dns-server": 6, "log-server": 7, "hostname": 12,
	"domain-name": 15, "broadcast-address": 28, "ntp-server": 42, "lease-time": 51,
	"server-identifier": 54, "renewal-time": 58, "rebinding-time": 59, "tftp-server-name": 66,
	"bootfile-name": 67, "domain-search": 119, "classless-static-route": 121, "default-url": 114,
	"sonic-provisioning-script": 239, "snmp-community": 224,
}

// OptionCode resolves an option key (decimal code or name) to its code.
func OptionCode(k string) (uint8, error) {
	if c, ok := optionNames[k]; ok {
		return c, nil
	}
	n, err := strconv.Atoi(k)
	if err != nil || n < 1 || n > 254 {
		return 0, fmt.Errorf("%q is not an option code 1..254 or a known option name", k)
	}
	return uint8(n), nil
}

// ParseMACPrefix parses a MAC prefix such as "1e:00": one to six bytes,
// each two hex digits, colon separated. Validate and the app both use it,
// so what is accepted is what is matched.
func ParseMACPrefix(p string) (net.HardwareAddr, error) {
	parts := strings.Split(p, ":")
	if len(parts) > 6 {
		return nil, fmt.Errorf("%q is not a MAC prefix like 1e:00", p)
	}
	hw := make(net.HardwareAddr, 0, len(parts))
	for _, x := range parts {
		b, err := strconv.ParseUint(x, 16, 8)
		if len(x) != 2 || err != nil {
			return nil, fmt.Errorf("%q is not a MAC prefix like 1e:00", p)
		}
		hw = append(hw, byte(b))
	}
	return hw, nil
}

func containsStr(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// validate6 checks an IPv6 subnet: pools, DNS servers and reservations in
// IPv6, and none of the IPv4-only fields.
func (s *Subnet) validate6(errs *Errors, f string, d *DHCP, p netip.Prefix) {
	s.Prefix = p.Masked()
	if s.Name == "" {
		s.Name = s.Prefix.String()
	}
	if s.Interface != "" && !containsStr(d.Interfaces, s.Interface) {
		errs.add(f+".interface", "%q is not one of dhcp.interfaces %v", s.Interface, d.Interfaces)
	}
	if len(s.Pools) == 0 && len(s.Reservations) == 0 {
		errs.add(f+".pools", "subnet has neither pools nor reservations")
	}
	for _, x := range []struct {
		name string
		set  bool
	}{{"router", s.Router != ""}, {"ntp", len(s.NTP) > 0}, {"syslog", len(s.Syslog) > 0}, {"routes", len(s.Routes) > 0}} {
		if x.set {
			errs.add(f+"."+x.name, "is not served over DHCPv6: an IPv6 network learns its routers and routes from Router Advertisements")
		}
	}
	s.PoolRanges = s.PoolRanges[:0]
	for i, ps := range s.Pools {
		r, err := ParseRange6(ps)
		if err != nil {
			errs.add(fmt.Sprintf("%s.pools[%d]", f, i), "%v", err)
			continue
		}
		if !s.Prefix.Contains(r.Start) || !s.Prefix.Contains(r.End) {
			errs.add(fmt.Sprintf("%s.pools[%d]", f, i), "%s is outside subnet %s", ps, s.Prefix)
			continue
		}
		for j, o := range s.PoolRanges {
			if o.Contains(r.Start) || o.Contains(r.End) || r.Contains(o.Start) {
				errs.add(fmt.Sprintf("%s.pools[%d]", f, i), "%s overlaps pool %d", ps, j)
			}
		}
		s.PoolRanges = append(s.PoolRanges, r)
	}
	for i, a := range s.DNS {
		checkIP6(errs, fmt.Sprintf("%s.dns[%d]", f, i), a, netip.Prefix{})
	}
	if s.LeaseTime != 0 && s.LeaseTime.D() < 60e9 {
		errs.add(f+".lease_time", "%s is shorter than one minute", s.LeaseTime.D())
	}
	checkOptions6(errs, f+".options", s.Options)
	for class, o := range s.ClassOptions {
		checkClass(errs, f+".class_options."+class, class)
		checkOptions6(errs, f+".class_options."+class, o)
	}
	seenIP := map[string]int{}
	seenKey := map[string]int{}
	for i, r := range s.Reservations {
		rf := fmt.Sprintf("%s.reservations[%d]", f, i)
		if r.ClientID != "" || r.Serial != "" {
			errs.add(rf, "an IPv6 client is reserved by duid or mac, not by client_id or serial")
		}
		if len(r.Options) > 0 {
			errs.add(rf+".options", "per-reservation options are not served over DHCPv6; use the subnet's class_options")
		}
		if r.MAC == "" && r.DUID == "" {
			errs.add(rf, "needs duid or mac")
		}
		if r.MAC != "" {
			hw, err := net.ParseMAC(r.MAC)
			if err != nil || len(hw) != 6 {
				errs.add(rf+".mac", "%q is not a MAC address", r.MAC)
			} else {
				s.Reservations[i].MAC = hw.String()
			}
		}
		if r.DUID != "" {
			if b, err := ParseDUID(r.DUID); err != nil {
				errs.add(rf+".duid", "%v", err)
			} else {
				s.Reservations[i].DUID = hex.EncodeToString(b)
			}
		}
		claimReservation(errs, rf, i, seenKey, "mac="+s.Reservations[i].MAC, "duid="+s.Reservations[i].DUID)
		claimReservedIP(errs, rf, i, seenIP, r.IP, func(field string) { checkIP6(errs, field, r.IP, s.Prefix) })
		if r.Kind != "" {
			checkClass(errs, rf+".kind", r.Kind)
		}
	}
}

func checkIP6(errs *Errors, field, v string, within netip.Prefix) {
	a, err := netip.ParseAddr(v)
	if err != nil || !a.Is6() || a.Is4In6() || a.Zone() != "" {
		errs.add(field, "%q is not an IPv6 address", v)
		return
	}
	if within.IsValid() && !within.Contains(a) {
		errs.add(field, "%s is outside subnet %s", a, within)
	}
}

func checkOptions6(errs *Errors, field string, o Options) {
	for k := range o {
		if _, err := Option6Code(k); err != nil {
			errs.add(field+"."+k, "%v", err)
		}
	}
}

// option6Names are the DHCPv6 option names accepted besides decimal codes.
var option6Names = map[string]uint16{
	"dns-servers": 23, "domain-search": 24, "sntp-servers": 31, "boot-file-url": 59,
	"sonic-provisioning-script": 239,
}

// Option6Code resolves a DHCPv6 option key (decimal code or name) to its
// code. The codes the server writes itself (identifiers, addresses,
// status, relay options) cannot be configured.
func Option6Code(k string) (uint16, error) {
	if c, ok := option6Names[k]; ok {
		return c, nil
	}
	n, err := strconv.Atoi(k)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%q is not a DHCPv6 option code 1..65535 or a known DHCPv6 option name", k)
	}
	switch n {
	case 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 18, 19, 20, 25, 26, 37, 79:
		return 0, fmt.Errorf("DHCPv6 option %d is the server's own, not configurable", n)
	}
	return uint16(n), nil
}
