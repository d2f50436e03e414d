package app

import (
	"net/netip"

	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
)

// reservationBindings are the configuration's DHCP reservations as identity
// bindings: a device with a reserved address is entitled to it even when it
// addresses itself statically and never asks DHCP (core.HolderOf).
type reservationBindings map[netip.Addr]core.Binding

func (b reservationBindings) BindingFor(ip netip.Addr) (core.Binding, bool) {
	bd, ok := b[ip.Unmap()]
	return bd, ok
}

// bindingsOf resolves every subnet's reservations once; nil when there are
// none. The configuration was validated, so addresses parse.
func bindingsOf(c *config.Config) core.Bindings {
	b := reservationBindings{}
	for _, sn := range c.DHCP.Subnets {
		for _, r := range sn.Reservations {
			ip, err := netip.ParseAddr(r.IP)
			if err != nil {
				continue
			}
			kind := core.DeviceKind(r.Kind)
			if kind == "" {
				kind = core.KindVM // as DHCP classifies a reservation without kind
			}
			b[ip] = core.Binding{IP: ip, MAC: r.MAC, Serial: r.Serial, ClientID: r.ClientID, Hostname: r.Hostname, Kind: kind}
		}
	}
	if len(b) == 0 {
		return nil
	}
	return b
}
