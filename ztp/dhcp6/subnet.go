package dhcp6

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// Subnet is one IPv6 link served, directly on an interface or through
// relays whose link address lies inside it.
type Subnet struct {
	Name      string
	Prefix    netip.Prefix
	Interface string // directly attached on this interface; "" = relayed only
	Pools     []Range
	DNS       []netip.Addr // option 23
	Domains   []string     // option 24
	LeaseTime time.Duration
	// RapidCommit lets a Solicit with option 14 get its lease in one
	// exchange (RFC 8415 §18.3.1).
	RapidCommit  bool
	Reservations []Reservation
	// Options are answered when asked for (ORO), over the built-ins;
	// ClassOptions by the client's kind over those.
	Options      OptionValues
	ClassOptions map[core.DeviceKind]OptionValues
}

// OptionValues are DHCPv6 option payloads by code, encoded; a nil value
// removes the option a lower layer set.
type OptionValues map[uint16][]byte

// Range is an inclusive address range.
type Range struct{ Start, End netip.Addr }

// Reservation pins an address to one client, known by its DUID or its MAC
// (from a DUID-LL/LLT or the relay's client link-layer address option).
type Reservation struct {
	DUID     []byte
	MAC      net.HardwareAddr
	IP       netip.Addr
	Hostname string
	Kind     core.DeviceKind // "" = decided by the packet; VM when it carries no marker
}

// Relay is one relay agent whose Relay-Forw messages are served: the
// addresses it sends from and the link addresses it may state.
type Relay struct {
	Sources   []netip.Addr
	LinkAddrs []netip.Addr
	Interface string // the interface its packets arrive on; "" = any
}

// subnet is a Subnet in the form the request path reads.
type subnet struct {
	name        string
	prefix      netip.Prefix
	iface       string
	leaseTime   time.Duration
	rapidCommit bool
	pools       []pool
	opts        [4]map[uint16][]byte // by classOf

	resByDUID map[string]*reservation
	resByMAC  map[string]*reservation // raw 6-byte MAC
	resByIP   map[netip.Addr]*reservation
	posByIP   map[netip.Addr]*reservation // the cabling plan's addresses in this subnet (SetPlan)

	clients map[string]*binding // raw DUID -> its binding in this subnet

	lastWarn time.Time
}

type reservation struct {
	ip       netip.Addr
	hostname string
	kind     core.DeviceKind
}

// pool is an inclusive range; size is capped so offsets fit a uint64.
type pool struct {
	start, end netip.Addr
	size       uint64
	next       uint64 // where the search for a free address starts
	// blocks are the address blocks of the pool this appliance claimed
	// (several appliances): new addresses come only from them.
	blocks []*block
}

func newPool(r Range) pool {
	s, e := r.Start.As16(), r.End.As16()
	hiS, loS := binary.BigEndian.Uint64(s[:8]), binary.BigEndian.Uint64(s[8:])
	hiE, loE := binary.BigEndian.Uint64(e[:8]), binary.BigEndian.Uint64(e[8:])
	size := uint64(1 << 62)
	if hiS == hiE && loE-loS < size {
		size = loE - loS + 1
	}
	return pool{start: r.Start, end: r.End, size: size}
}

func (p *pool) contains(a netip.Addr) bool {
	return p.start.Compare(a) <= 0 && a.Compare(p.end) <= 0
}

// offset is how many places after the pool's start a (in the pool) is.
func (p *pool) offset(a netip.Addr) uint64 {
	s, b := p.start.As16(), a.As16()
	return binary.BigEndian.Uint64(b[8:]) - binary.BigEndian.Uint64(s[8:])
}

// at is the address off places after the pool's start.
func (p *pool) at(off uint64) netip.Addr {
	b := p.start.As16()
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	n := lo + off
	if n < lo {
		hi++
	}
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], n)
	return netip.AddrFrom16(b)
}

// urls are the absolute URLs handed to switches, with bracketed IPv6
// literal hosts.
type urls struct {
	ztpJSON string // option 59 for SONiC
	onie    string // option 59 for ONIE
}

func buildSubnet(opt *Options, i int, u urls) (*subnet, error) {
	c := &opt.Subnets[i]
	p := c.Prefix
	if !p.IsValid() || !p.Addr().Is6() || p.Addr().Is4In6() {
		return nil, fmt.Errorf("dhcp6: subnet %d (%q): %s is not an IPv6 prefix", i, c.Name, p)
	}
	p = p.Masked()
	sn := &subnet{name: c.Name, prefix: p, iface: c.Interface, leaseTime: c.LeaseTime, rapidCommit: c.RapidCommit,
		resByDUID: map[string]*reservation{}, resByMAC: map[string]*reservation{}, resByIP: map[netip.Addr]*reservation{},
		clients: map[string]*binding{}}
	if sn.name == "" {
		sn.name = p.String()
	}
	field := fmt.Sprintf("dhcp6: subnet %q", sn.name)
	if sn.leaseTime <= 0 {
		return nil, fmt.Errorf("%s: lease time %s is not positive", field, sn.leaseTime)
	}
	for j, r := range c.Pools {
		if !r.Start.Is6() || !r.End.Is6() || r.Start.Compare(r.End) > 0 || !p.Contains(r.Start) || !p.Contains(r.End) {
			return nil, fmt.Errorf("%s: pool %d (%s-%s) is not an IPv6 range inside %s", field, j, r.Start, r.End, p)
		}
		sn.pools = append(sn.pools, newPool(r))
	}
	var dns, domains []byte
	for _, a := range c.DNS {
		if !a.Is6() || a.Is4In6() {
			return nil, fmt.Errorf("%s: DNS server %s is not an IPv6 address", field, a)
		}
		b := a.As16()
		dns = append(dns, b[:]...)
	}
	for _, d := range c.Domains {
		v, err := appendDomain(domains, d)
		if err != nil {
			return nil, fmt.Errorf("%s: domain %q: %w", field, d, err)
		}
		domains = v
	}
	for class := range sn.opts {
		m := map[uint16][]byte{}
		kind := classKinds[class]
		switch kind {
		case core.KindSONiC:
			if u.ztpJSON != "" {
				m[optBootFileURL] = []byte(u.ztpJSON)
			}
		case core.KindONIE:
			if u.onie != "" {
				m[optBootFileURL] = []byte(u.onie)
			}
		}
		if dns != nil {
			m[optDNSServers] = dns
		}
		if domains != nil {
			m[optDomainList] = domains
		}
		layer(m, c.Options)
		layer(m, c.ClassOptions[kind])
		sn.opts[class] = m
	}
	for j, rc := range c.Reservations {
		rf := fmt.Sprintf("%s: reservation %d", field, j)
		if !rc.IP.Is6() || !p.Contains(rc.IP) {
			return nil, fmt.Errorf("%s: %s is not an IPv6 address inside %s", rf, rc.IP, p)
		}
		if len(rc.DUID) == 0 && len(rc.MAC) == 0 {
			return nil, fmt.Errorf("%s: needs a DUID or a MAC", rf)
		}
		if len(rc.DUID) > maxDUID {
			return nil, fmt.Errorf("%s: DUID longer than %d bytes", rf, maxDUID)
		}
		r := &reservation{ip: rc.IP, hostname: rc.Hostname, kind: rc.Kind}
		if _, dup := sn.resByIP[r.ip]; dup {
			return nil, fmt.Errorf("%s: %s is reserved twice", rf, rc.IP)
		}
		sn.resByIP[r.ip] = r
		if len(rc.DUID) > 0 {
			sn.resByDUID[string(rc.DUID)] = r
		}
		if len(rc.MAC) > 0 {
			sn.resByMAC[string(rc.MAC)] = r
		}
	}
	return sn, nil
}

func layer(m map[uint16][]byte, o OptionValues) {
	for k, v := range o {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
}

// appendDomain appends d in DNS wire format (RFC 1035 §3.1), as option 24
// carries it.
func appendDomain(b []byte, d string) ([]byte, error) {
	d = strings.TrimSuffix(d, ".")
	if d == "" || len(d) > 253 {
		return nil, fmt.Errorf("not a domain name")
	}
	for _, l := range strings.Split(d, ".") {
		if l == "" || len(l) > 63 {
			return nil, fmt.Errorf("label %q is empty or longer than 63 bytes", l)
		}
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	return append(b, 0), nil
}

// EncodeOption encodes a configured DHCPv6 option value: address lists for
// 23 and 31, domain lists for 24, "hex:..." raw bytes, text otherwise.
func EncodeOption(code uint16, v string) ([]byte, error) {
	if v == "" {
		return nil, nil
	}
	if h, ok := strings.CutPrefix(v, "hex:"); ok {
		var out []byte
		h = strings.ReplaceAll(h, ":", "")
		if len(h)%2 != 0 {
			return nil, fmt.Errorf("%q is not hex", v)
		}
		for i := 0; i < len(h); i += 2 {
			var c byte
			if _, err := fmt.Sscanf(h[i:i+2], "%02x", &c); err != nil {
				return nil, fmt.Errorf("%q is not hex", v)
			}
			out = append(out, c)
		}
		return out, nil
	}
	switch code {
	case optDNSServers, 31:
		var out []byte
		for _, s := range strings.Split(v, ",") {
			a, err := netip.ParseAddr(strings.TrimSpace(s))
			if err != nil || !a.Is6() || a.Is4In6() {
				return nil, fmt.Errorf("%q is not a list of IPv6 addresses", v)
			}
			b := a.As16()
			out = append(out, b[:]...)
		}
		return out, nil
	case optDomainList:
		var out []byte
		for _, s := range strings.Split(v, ",") {
			var err error
			if out, err = appendDomain(out, strings.TrimSpace(s)); err != nil {
				return nil, fmt.Errorf("%q: %w", s, err)
			}
		}
		return out, nil
	}
	return []byte(v), nil
}

// poolFor is the pool of sn holding a, or nil.
func (sn *subnet) poolFor(a netip.Addr) *pool {
	for i := range sn.pools {
		if sn.pools[i].contains(a) {
			return &sn.pools[i]
		}
	}
	return nil
}
