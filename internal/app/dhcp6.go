package app

import (
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/ztp/dhcp6"
	"github.com/ztpd/ztpd/ztp/endpoints"
)

// isIPv6Subnet reports whether a configured subnet is a DHCPv6 one.
func isIPv6Subnet(c *config.Subnet) bool {
	if c.Prefix.IsValid() {
		return c.Prefix.Addr().Is6()
	}
	p, err := netip.ParsePrefix(c.CIDR)
	return err == nil && p.Addr().Is6() && !p.Addr().Is4In6()
}

func isIPv6Relay(r *config.Relay) bool {
	a, err := netip.ParseAddr(r.Address)
	return err == nil && a.Is6() && !a.Is4In6()
}

// dhcpServers says which DHCP servers the configuration runs: DHCPv4 for
// IPv4 subnets, and also when DHCP is enabled without any subnet (its
// server refuses that, naming what is missing); DHCPv6 for IPv6 subnets.
func dhcpServers(c *config.Config) (v4, v6 bool) {
	if !c.DHCP.Enabled() {
		return false, false
	}
	has4, has6 := hasSubnets(&c.DHCP)
	return has4 || !has6, has6
}

// hasSubnets reports whether the dhcp: section has IPv4 and IPv6 subnets.
func hasSubnets(d *config.DHCP) (v4, v6 bool) {
	for i := range d.Subnets {
		if isIPv6Subnet(&d.Subnets[i]) {
			v6 = true
		} else {
			v4 = true
		}
	}
	return v4, v6
}

// dhcp6Options resolves the DHCPv6 server's settings once: the IPv6
// subnets and relays of the dhcp: section, the device-facing URLs with the
// appliance's IPv6 address as their host, and the services it reports to.
func (a *App) dhcp6Options() (dhcp6.Options, error) {
	opt, err := resolveDHCP6(&a.Cfg.DHCP)
	if err != nil {
		return dhcp6.Options{}, err
	}
	opt.Store, opt.Devices, opt.Log = a.Store, a.Devices, a.Log
	if a.Group != nil {
		opt.Partition, opt.Feed = a.Group, a.leaseFeed6
	}
	host, err := a.advertise6()
	if err != nil {
		return dhcp6.Options{}, err
	}
	ep, err := endpoints.New(host.String(), a.Cfg.HTTP.Addr)
	if err != nil {
		return dhcp6.Options{}, err
	}
	opt.ZTPJSONURL = ep.ZTPJSON(netip.Addr{})
	opt.ONIEInstallerURL = ep.ONIEInstaller(netip.Addr{})
	return opt, nil
}

// advertise6 is the IPv6 address DHCPv6 puts in the URLs it hands out:
// advertise_addr when it is IPv6, else the first global IPv6 address of
// the DHCP interfaces (link-local ones carry a zone, which a URL a device
// fetches cannot).
func (a *App) advertise6() (netip.Addr, error) {
	if ad := a.Endpoints.Advertise(); ad.Is6() && !ad.Is4In6() {
		return ad, nil
	}
	for _, name := range a.Cfg.DHCP.Interfaces {
		nif, err := net.InterfaceByName(name)
		if err != nil {
			continue
		}
		addrs, _ := nif.Addrs()
		for _, ad := range addrs {
			if n, ok := ad.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Is6() && !ip.Is4In6() && ip.IsGlobalUnicast() {
					return ip, nil
				}
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("dhcp.subnets: an IPv6 subnet needs an IPv6 address for the URLs it hands out: set advertise_addr to one, or give a DHCP interface (%v) a global IPv6 address",
		a.Cfg.DHCP.Interfaces)
}

// resolveDHCP6 turns the IPv6 part of a validated dhcp: section into the
// DHCPv6 server's settings.
func resolveDHCP6(d *config.DHCP) (dhcp6.Options, error) {
	opt := dhcp6.Options{Interfaces: slices.Clone(d.Interfaces), OfferHold: d.OfferHold.D(), DeclineQuarantine: d.DeclineQuarantine.D(),
		VMVendorClasses: slices.Clone(d.VM.VendorClasses)}
	for i := range d.Relays {
		r := &d.Relays[i]
		if isIPv6Relay(r) {
			opt.Relays = append(opt.Relays, dhcp6.Relay{Sources: slices.Clone(r.Source), LinkAddrs: slices.Clone(r.GIAddr), Interface: r.Interface})
		}
	}
	for i, p := range d.VM.MACPrefixes {
		hw, err := config.ParseMACPrefix(p)
		if err != nil {
			return dhcp6.Options{}, fmt.Errorf("dhcp.vm.mac_prefixes[%d]: %w", i, err)
		}
		opt.VMMACPrefixes = append(opt.VMMACPrefixes, hw)
	}
	for i := range d.Subnets {
		if !isIPv6Subnet(&d.Subnets[i]) {
			continue
		}
		sn, err := resolveSubnet6(d, i)
		if err != nil {
			return dhcp6.Options{}, err
		}
		opt.Subnets = append(opt.Subnets, sn)
	}
	return opt, nil
}

func resolveSubnet6(d *config.DHCP, i int) (dhcp6.Subnet, error) {
	c := &d.Subnets[i]
	field := fmt.Sprintf("dhcp.subnets[%d]", i)
	sn := dhcp6.Subnet{Name: c.Name, Prefix: c.Prefix, Interface: c.Interface, LeaseTime: d.LeaseTime.D(), RapidCommit: true}
	if !sn.Prefix.IsValid() {
		p, err := netip.ParsePrefix(c.CIDR)
		if err != nil || !p.Addr().Is6() {
			return sn, fmt.Errorf("%s.subnet: %q is not an IPv6 CIDR", field, c.CIDR)
		}
		sn.Prefix = p.Masked()
	}
	if c.LeaseTime > 0 {
		sn.LeaseTime = c.LeaseTime.D()
	}
	if c.RapidCommit != nil {
		sn.RapidCommit = *c.RapidCommit
	}
	if c.Domain != "" {
		sn.Domains = []string{c.Domain}
	}
	ranges := c.PoolRanges
	if len(ranges) == 0 {
		for j, ps := range c.Pools {
			r, err := config.ParseRange6(ps)
			if err != nil {
				return sn, fmt.Errorf("%s.pools[%d]: %w", field, j, err)
			}
			ranges = append(ranges, r)
		}
	}
	for _, r := range ranges {
		sn.Pools = append(sn.Pools, dhcp6.Range{Start: r.Start, End: r.End})
	}
	for j, s := range c.DNS {
		ad, err := netip.ParseAddr(s)
		if err != nil || !ad.Is6() {
			return sn, fmt.Errorf("%s.dns[%d]: %q is not an IPv6 address", field, j, s)
		}
		sn.DNS = append(sn.DNS, ad)
	}
	var err error
	if sn.Options, err = encodeOptions6(field+".options", c.Options); err != nil {
		return sn, err
	}
	for class, o := range c.ClassOptions {
		v, err := encodeOptions6(field+".class_options."+class, o)
		if err != nil {
			return sn, err
		}
		if sn.ClassOptions == nil {
			sn.ClassOptions = map[core.DeviceKind]dhcp6.OptionValues{}
		}
		sn.ClassOptions[core.DeviceKind(class)] = v
	}
	for j, rc := range c.Reservations {
		rf := fmt.Sprintf("%s.reservations[%d]", field, j)
		r := dhcp6.Reservation{Hostname: rc.Hostname, Kind: core.DeviceKind(rc.Kind)}
		if r.IP, err = netip.ParseAddr(rc.IP); err != nil || !r.IP.Is6() {
			return sn, fmt.Errorf("%s.ip: %q is not an IPv6 address", rf, rc.IP)
		}
		if rc.MAC != "" {
			if r.MAC, err = net.ParseMAC(rc.MAC); err != nil {
				return sn, fmt.Errorf("%s.mac: %q is not a MAC address", rf, rc.MAC)
			}
		}
		if rc.DUID != "" {
			if r.DUID, err = config.ParseDUID(rc.DUID); err != nil {
				return sn, fmt.Errorf("%s.duid: %w", rf, err)
			}
		}
		sn.Reservations = append(sn.Reservations, r)
	}
	return sn, nil
}

func encodeOptions6(field string, o config.Options) (dhcp6.OptionValues, error) {
	return encodeLayer[dhcp6.OptionValues](field, o, config.Option6Code, dhcp6.EncodeOption)
}

// dhcpFinder answers core.DeviceFinder from the DHCP server of the
// address's family.
type dhcpFinder struct {
	v4 core.DeviceFinder
	v6 core.DeviceFinder
}

func (f dhcpFinder) DeviceByIP(ip netip.Addr) (core.Device, bool) {
	ip = ip.Unmap()
	if ip.Is4() {
		if f.v4 != nil {
			return f.v4.DeviceByIP(ip)
		}
	} else if f.v6 != nil {
		return f.v6.DeviceByIP(ip)
	}
	return core.Device{}, false
}
