package dhcp

import (
	"net"
	"net/netip"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// The types below are the DHCP server's configuration in resolved form:
// addresses, prefixes and MACs parsed, option values encoded, defaults
// applied. The app builds them once from the validated configuration; this
// package never reads the configuration file's types.

// Subnet is one IPv4 network served, directly on an interface or through
// relays whose giaddr lies inside it.
type Subnet struct {
	Name      string       // "" = the prefix
	Prefix    netip.Prefix // masked
	Interface string       // "" = reached through relays only
	Pools     []Range      // dynamic ranges inside Prefix
	Router    netip.Addr   // option 3 (and excluded from the pools); zero = none
	DNS       []netip.Addr // option 6
	NTP       []netip.Addr // option 42
	Syslog    []netip.Addr // option 7, for SONiC only
	Domain    string       // option 15
	LeaseTime time.Duration
	Routes    []Route // option 121 (RFC 3442)
	// Options and ClassOptions (by device kind) override the server-wide
	// ones and the fields above.
	Options      OptionValues
	ClassOptions map[core.DeviceKind]OptionValues
	Reservations []Reservation
}

// Range is an inclusive IPv4 address range.
type Range struct{ Start, End netip.Addr }

// Route is one classless static route.
type Route struct {
	Dest netip.Prefix
	Via  netip.Addr
}

// Reservation pins an address (and optionally a hostname and options) to
// a client recognised by hardware address, client identifier or serial
// number (at least one is set).
type Reservation struct {
	MAC net.HardwareAddr
	// ClientID is option 61 as configured: text (matched with or without
	// RFC 2132's type byte 0), hex such as "01:52:54:00:12:34:56", or
	// "hex:0152540012...".
	ClientID string
	Serial   string
	IP       netip.Addr
	Hostname string
	// Kind is the device's kind; "" lets the packet decide (VM when it
	// carries no marker).
	Kind    core.DeviceKind
	Options OptionValues
}

// OptionValues are one layer of configured options by code, encoded as on
// the wire (EncodeOption). A nil value removes the option a lower layer
// set.
type OptionValues map[uint8][]byte

// Relay is a relay agent the operator declared: only its packets may set
// giaddr and carry relay agent information (option 82), link selection or
// subnet selection (option 118). Anyone can write those fields; the
// packet's source address and the interface it arrived on are what say a
// relay sent it.
type Relay struct {
	// Sources are the addresses the relay sends from: ISC dhcrelay sends
	// from its server-side interface's address, dnsmasq from the giaddr.
	Sources []netip.Addr
	// GIAddrs are the giaddrs it may set (the addresses of its client-side
	// interfaces).
	GIAddrs []netip.Addr
	// Interface is the interface its packets arrive on; "" = any.
	Interface string
}
