package app

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"

	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/ztp/dhcp"
)

// dhcpOptions resolves the DHCP server's settings once: the validated
// dhcp: section in parsed form, the device-facing URLs and the services it
// reports to.
func (a *App) dhcpOptions() (dhcp.Options, error) {
	opt, err := resolveDHCP(&a.Cfg.DHCP)
	if err != nil {
		return dhcp.Options{}, err
	}
	opt.Store, opt.Devices, opt.Log = a.Store, a.Devices, a.Log
	if a.Group != nil {
		opt.Partition, opt.Feed = a.Group, a.leaseFeed
	}
	opt.Advertise = a.Endpoints.Advertise()
	opt.ZTPJSONURL = a.Endpoints.ZTPJSON(netip.Addr{})
	opt.ONIEInstallerURL = a.Endpoints.ONIEInstaller(netip.Addr{})
	if a.Endpoints.ListensOnLoopback() {
		a.Log.Warn("http.addr listens on loopback: switches cannot fetch the URLs DHCP hands out",
			"http_addr", a.Cfg.HTTP.Addr, "ztp_json_url", opt.ZTPJSONURL)
	}
	return opt, nil
}

// resolveDHCP turns a validated dhcp: section into the DHCP server's
// settings: addresses, prefixes, ranges and MACs parsed, option values
// encoded, each subnet's lease time defaulted. Validate has checked the
// fields one by one; what only encoding finds (an option value that does
// not fit its option, such as a name where an address belongs) is an
// error naming the field.
func resolveDHCP(d *config.DHCP) (dhcp.Options, error) {
	opt := dhcp.Options{
		Interfaces: slices.Clone(d.Interfaces),
		OfferHold:  d.OfferHold.D(), DeclineQuarantine: d.DeclineQuarantine.D(),
		VMVendorClasses: slices.Clone(d.VM.VendorClasses),
	}
	for i := range d.Relays {
		r := &d.Relays[i]
		if isIPv6Relay(r) {
			continue // the DHCPv6 server's
		}
		opt.Relays = append(opt.Relays, dhcp.Relay{Sources: slices.Clone(r.Source), GIAddrs: slices.Clone(r.GIAddr), Interface: r.Interface})
	}
	for i, p := range d.VM.MACPrefixes {
		hw, err := config.ParseMACPrefix(p)
		if err != nil {
			return dhcp.Options{}, fmt.Errorf("dhcp.vm.mac_prefixes[%d]: %w", i, err)
		}
		opt.VMMACPrefixes = append(opt.VMMACPrefixes, hw)
	}
	var err error
	if opt.GlobalOptions, err = encodeOptions("dhcp.options", d.Options); err != nil {
		return dhcp.Options{}, err
	}
	if opt.ClassOptions, err = encodeClassOptions("dhcp.class_options", d.ClassOptions); err != nil {
		return dhcp.Options{}, err
	}
	for i := range d.Subnets {
		if isIPv6Subnet(&d.Subnets[i]) {
			continue // the DHCPv6 server's
		}
		sn, err := resolveSubnet(d, i)
		if err != nil {
			return dhcp.Options{}, err
		}
		opt.Subnets = append(opt.Subnets, sn)
	}
	return opt, nil
}

func resolveSubnet(d *config.DHCP, i int) (dhcp.Subnet, error) {
	c := &d.Subnets[i]
	field := fmt.Sprintf("dhcp.subnets[%d]", i)
	sn := dhcp.Subnet{Name: c.Name, Prefix: c.Prefix, Interface: c.Interface, Domain: c.Domain, LeaseTime: d.LeaseTime.D()}
	if !sn.Prefix.IsValid() {
		p, err := netip.ParsePrefix(c.CIDR)
		if err != nil || !p.Addr().Is4() {
			return sn, fmt.Errorf("%s.subnet: %q is not an IPv4 CIDR", field, c.CIDR)
		}
		sn.Prefix = p.Masked()
	}
	if c.LeaseTime > 0 {
		sn.LeaseTime = c.LeaseTime.D()
	}
	ranges := c.PoolRanges // parsed by Validate
	if len(ranges) == 0 {
		for j, ps := range c.Pools {
			r, err := config.ParseRange(ps)
			if err != nil {
				return sn, fmt.Errorf("%s.pools[%d]: %w", field, j, err)
			}
			ranges = append(ranges, r)
		}
	}
	for _, r := range ranges {
		sn.Pools = append(sn.Pools, dhcp.Range{Start: r.Start, End: r.End})
	}
	var err error
	if c.Router != "" {
		if sn.Router, err = parseIPv4(field+".router", c.Router); err != nil {
			return sn, err
		}
	}
	for _, l := range []struct {
		name string
		in   []string
		out  *[]netip.Addr
	}{{"dns", c.DNS, &sn.DNS}, {"ntp", c.NTP, &sn.NTP}, {"syslog", c.Syslog, &sn.Syslog}} {
		for j, s := range l.in {
			a, err := parseIPv4(fmt.Sprintf("%s.%s[%d]", field, l.name, j), s)
			if err != nil {
				return sn, err
			}
			*l.out = append(*l.out, a)
		}
	}
	for j, r := range c.Routes {
		rf := fmt.Sprintf("%s.routes[%d]", field, j)
		dest, err := netip.ParsePrefix(r.Dest)
		if err != nil || !dest.Addr().Is4() {
			return sn, fmt.Errorf("%s.dest: %q is not an IPv4 CIDR", rf, r.Dest)
		}
		via, err := parseIPv4(rf+".via", r.Via)
		if err != nil {
			return sn, err
		}
		sn.Routes = append(sn.Routes, dhcp.Route{Dest: dest, Via: via})
	}
	if sn.Options, err = encodeOptions(field+".options", c.Options); err != nil {
		return sn, err
	}
	if sn.ClassOptions, err = encodeClassOptions(field+".class_options", c.ClassOptions); err != nil {
		return sn, err
	}
	for j, rc := range c.Reservations {
		rf := fmt.Sprintf("%s.reservations[%d]", field, j)
		r := dhcp.Reservation{ClientID: rc.ClientID, Serial: rc.Serial, Hostname: rc.Hostname, Kind: core.DeviceKind(rc.Kind)}
		if r.IP, err = parseIPv4(rf+".ip", rc.IP); err != nil {
			return sn, err
		}
		if rc.MAC != "" {
			if r.MAC, err = net.ParseMAC(rc.MAC); err != nil {
				return sn, fmt.Errorf("%s.mac: %q is not a MAC address", rf, rc.MAC)
			}
		}
		if r.Options, err = encodeOptions(rf+".options", rc.Options); err != nil {
			return sn, err
		}
		sn.Reservations = append(sn.Reservations, r)
	}
	return sn, nil
}

func parseIPv4(field, s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return netip.Addr{}, fmt.Errorf("%s: %q is not an IPv4 address", field, s)
	}
	return a, nil
}

// encodeOptions encodes one layer of options in key order (so a code given
// both by number and by name resolves the same way every time). A value ""
// stays in the layer as nil: it removes the option a lower layer set.
func encodeOptions(field string, o config.Options) (dhcp.OptionValues, error) {
	return encodeLayer[dhcp.OptionValues](field, o, config.OptionCode, dhcp.EncodeOption)
}

// encodeLayer is encodeOptions for either family: code names an option
// key, encode its value.
func encodeLayer[M ~map[C][]byte, C comparable](field string, o config.Options, code func(string) (C, error), encode func(C, string) ([]byte, error)) (M, error) {
	if len(o) == 0 {
		return nil, nil
	}
	out := make(M, len(o))
	for _, k := range slices.Sorted(maps.Keys(o)) {
		c, err := code(k)
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", field, k, err)
		}
		v, err := encode(c, o[k])
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", field, k, err)
		}
		out[c] = v
	}
	return out, nil
}

func encodeClassOptions(field string, classes map[string]config.Options) (map[core.DeviceKind]dhcp.OptionValues, error) {
	if len(classes) == 0 {
		return nil, nil
	}
	out := make(map[core.DeviceKind]dhcp.OptionValues, len(classes))
	for _, class := range slices.Sorted(maps.Keys(classes)) {
		v, err := encodeOptions(field+"."+class, classes[class])
		if err != nil {
			return nil, err
		}
		out[core.DeviceKind(class)] = v
	}
	return out, nil
}
