package dhcp

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/netip"
	"strings"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/positions"
)

// subnet is the runtime form of a Subnet: pools as bitmaps, the
// reservations indexed every way a client can be recognised, the option
// sets per class precomputed, and the index of its clients' bindings.
type subnet struct {
	name      string
	prefix    netip.Prefix
	iface     string
	leaseTime time.Duration
	pools     []*pool
	opts      [4]*optionSet // by classOf

	resByHW     map[string]*reservation // raw hardware address
	resByID     map[string]*reservation // raw client identifier, in each accepted spelling
	resBySerial map[string]*reservation
	resByIP     map[uint32]*reservation
	posByIP     map[uint32]*reservation // the cabling plan's addresses in this subnet (SetPlan)
	excluded    map[uint32]bool         // network, broadcast and router addresses inside a pool

	clients map[string]*binding // client key -> its binding in this subnet
	byHW    map[string]*binding // raw hardware address -> binding (takeover, see lookupClient)

	lastWarn    time.Time // exhausted warning, rate limited
	lastReclaim time.Time
}

// reservation pins an address to one client.
type reservation struct {
	ip       uint32
	hostname string
	kind     core.DeviceKind // "" = decided by the packet; VM when it carries no marker
	opts     [4]*optionSet
	// position is the planned position the address is reserved for (its
	// opts are the subnet's: its name is added per reply); nil for a
	// configured reservation.
	position *positions.Position
}

func u32(a [4]byte) uint32        { return binary.BigEndian.Uint32(a[:]) }
func u32Addr(a netip.Addr) uint32 { return u32(a.As4()) }
func addrOf(v uint32) netip.Addr  { return netip.AddrFrom4(b4(v)) }
func b4(v uint32) (b [4]byte)     { binary.BigEndian.PutUint32(b[:], v); return }
func prefixMask(bits int) [4]byte { return b4(^uint32(0) << (32 - bits)) }

// urls are the absolute URLs handed to switches.
type urls struct {
	ztpJSON   string // option 67 for SONiC
	onie      string // option 114 for ONIE
	advertise string // option 66 for SONiC
}

func buildSubnet(opt *Options, i int, u urls) (*subnet, error) {
	c := &opt.Subnets[i]
	p := c.Prefix
	if !p.IsValid() || !p.Addr().Is4() {
		return nil, fmt.Errorf("dhcp: subnet %d (%q): %s is not an IPv4 prefix", i, c.Name, p)
	}
	p = p.Masked()
	sn := &subnet{
		name: c.Name, prefix: p, iface: c.Interface, leaseTime: c.LeaseTime,
		resByHW: map[string]*reservation{}, resByID: map[string]*reservation{},
		resBySerial: map[string]*reservation{}, resByIP: map[uint32]*reservation{},
		excluded: map[uint32]bool{}, clients: map[string]*binding{}, byHW: map[string]*binding{},
	}
	if sn.name == "" {
		sn.name = p.String()
	}
	field := fmt.Sprintf("dhcp: subnet %q", sn.name)
	if sn.leaseTime <= 0 {
		return nil, fmt.Errorf("%s: lease time %s is not positive", field, sn.leaseTime)
	}
	for j, r := range c.Pools {
		if !r.Start.Is4() || !r.End.Is4() || r.Start.Compare(r.End) > 0 || !p.Contains(r.Start) || !p.Contains(r.End) {
			return nil, fmt.Errorf("%s: pool %d (%s-%s) is not an IPv4 range inside %s", field, j, r.Start, r.End, p)
		}
	}
	network := u32Addr(p.Addr())
	bcast := network | ^(^uint32(0) << (32 - p.Bits()))
	if p.Bits() < 31 {
		sn.excluded[network], sn.excluded[bcast] = true, true
	}
	hasRouter := c.Router.IsValid()
	if hasRouter && !c.Router.Is4() {
		return nil, fmt.Errorf("%s: router %s is not an IPv4 address", field, c.Router)
	}
	if hasRouter {
		sn.excluded[u32Addr(c.Router)] = true
	}
	for _, r := range c.Pools {
		sn.pools = append(sn.pools, newPool(u32Addr(r.Start), u32Addr(r.End)))
	}
	// Sized for a full pool up front: growing maps rehash on the hot path.
	hint := min(sn.poolSize()+len(c.Reservations), maxMapHint)
	sn.clients, sn.byHW = make(map[string]*binding, hint), make(map[string]*binding, hint)

	// Option layers, lowest precedence first: built-ins (mask, broadcast,
	// the class URLs), the global options, the global class options, the
	// subnet's fields (router, dns, domain, ntp, routes, syslog for SONiC),
	// the subnet's options and class options, then the reservation's
	// hostname and options.
	builtin := map[uint8][]byte{}
	mask := prefixMask(p.Bits())
	builtin[optSubnetMask] = mask[:]
	bc := b4(bcast)
	builtin[28] = bc[:]
	fields := map[uint8][]byte{}
	var router [4]byte
	if hasRouter {
		router = c.Router.As4()
		fields[optRouter] = router[:]
	}
	for _, l := range []struct {
		code  uint8
		addrs []netip.Addr
		name  string
	}{{optDNS, c.DNS, "dns"}, {optNTP, c.NTP, "ntp"}} {
		if len(l.addrs) > 0 {
			v, err := appendIPv4s(nil, l.addrs)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", field, l.name, err)
			}
			fields[l.code] = v
		}
	}
	if c.Domain != "" {
		fields[optDomainName] = []byte(c.Domain)
	}
	if len(c.Routes) > 0 {
		var v []byte
		hasDefault := false
		for j, r := range c.Routes {
			if !r.Dest.IsValid() || !r.Dest.Addr().Is4() {
				return nil, fmt.Errorf("%s: route %d: destination %s is not an IPv4 prefix", field, j, r.Dest)
			}
			if !r.Via.Is4() {
				return nil, fmt.Errorf("%s: route %d: gateway %s is not an IPv4 address", field, j, r.Via)
			}
			hasDefault = hasDefault || r.Dest.Bits() == 0
			v = appendRoute(v, r.Dest, r.Via.As4())
		}
		// RFC 3442 clients ignore option 3 when 121 is present, so the
		// router becomes the default route unless one is listed.
		if !hasDefault && hasRouter {
			v = appendRoute(v, netip.MustParsePrefix("0.0.0.0/0"), router)
		}
		fields[optClasslessRoutes] = v
	}
	var syslog []byte
	if len(c.Syslog) > 0 {
		v, err := appendIPv4s(nil, c.Syslog)
		if err != nil {
			return nil, fmt.Errorf("%s: syslog: %w", field, err)
		}
		syslog = v
	}
	classLayers := func(class int) (map[uint8][]byte, error) {
		m := make(map[uint8][]byte, len(builtin)+len(fields)+8)
		for k, v := range builtin {
			m[k] = v
		}
		kind := classKinds[class]
		switch kind {
		case core.KindSONiC:
			m[optBootfile] = []byte(u.ztpJSON)
			m[optTFTPServer] = []byte(u.advertise)
		case core.KindONIE:
			m[optDefaultURL] = []byte(u.onie)
		}
		if err := optionLayer(m, "dhcp: options", opt.GlobalOptions); err != nil {
			return nil, err
		}
		if err := optionLayer(m, "dhcp: class options "+string(kind), opt.ClassOptions[kind]); err != nil {
			return nil, err
		}
		for k, v := range fields {
			m[k] = v
		}
		if kind == core.KindSONiC && syslog != nil {
			m[optLogServer] = syslog
		}
		if err := optionLayer(m, field+": options", c.Options); err != nil {
			return nil, err
		}
		if err := optionLayer(m, field+": class options "+string(kind), c.ClassOptions[kind]); err != nil {
			return nil, err
		}
		return m, nil
	}
	var classMaps [4]map[uint8][]byte
	for class := range classMaps {
		m, err := classLayers(class)
		if err != nil {
			return nil, err
		}
		classMaps[class] = m
		sn.opts[class] = newOptionSet(m)
	}

	for j, rc := range c.Reservations {
		rf := fmt.Sprintf("%s: reservation %d", field, j)
		if !rc.IP.Is4() || !p.Contains(rc.IP) {
			return nil, fmt.Errorf("%s: %s is not an IPv4 address inside %s", rf, rc.IP, p)
		}
		if len(rc.MAC) == 0 && rc.ClientID == "" && rc.Serial == "" {
			return nil, fmt.Errorf("%s: needs a MAC, a client id or a serial", rf)
		}
		r := &reservation{ip: u32Addr(rc.IP), hostname: rc.Hostname, kind: rc.Kind}
		if _, dup := sn.resByIP[r.ip]; dup {
			return nil, fmt.Errorf("%s: %s is reserved twice", rf, rc.IP)
		}
		sn.resByIP[r.ip] = r
		if len(rc.MAC) > 0 {
			sn.resByHW[string(rc.MAC)] = r
		}
		if rc.ClientID != "" {
			for _, k := range clientIDSpellings(rc.ClientID) {
				sn.resByID[k] = r
			}
		}
		if rc.Serial != "" {
			sn.resBySerial[rc.Serial] = r
		}
		for class := range r.opts {
			m := make(map[uint8][]byte, len(classMaps[class])+1)
			for k, v := range classMaps[class] {
				m[k] = v
			}
			if rc.Hostname != "" {
				m[optHostname] = []byte(rc.Hostname)
			}
			if err := optionLayer(m, rf+": options", rc.Options); err != nil {
				return nil, err
			}
			r.opts[class] = newOptionSet(m)
		}
	}
	for _, pl := range sn.pools {
		for ip := range sn.resByIP {
			if pl.contains(ip) {
				pl.set(ip)
			}
		}
		for ip := range sn.excluded {
			if pl.contains(ip) {
				pl.set(ip)
			}
		}
	}
	return sn, nil
}

// clientIDSpellings lists the raw option-61 values a configured client_id
// matches: the text itself, the text behind a type byte 0 (how RFC 2132
// clients send a text id), and hex such as "01:52:54:00:12:34:56" or
// "hex:0152540012...".
func clientIDSpellings(s string) []string {
	out := []string{s, "\x00" + s}
	if h, ok := strings.CutPrefix(s, "hex:"); ok {
		if b, err := EncodeOption(200, "hex:"+h); err == nil {
			out = append(out, string(b))
		}
	} else if b, ok := parseHexColon(s); ok {
		out = append(out, string(b))
	}
	return out
}

// fixed reports addresses that no dynamic allocation may take.
func (sn *subnet) fixed(ip uint32) bool {
	_, r := sn.resByIP[ip]
	_, p := sn.posByIP[ip]
	return r || p || sn.excluded[ip]
}

func (sn *subnet) poolOf(ip uint32) *pool {
	for _, p := range sn.pools {
		if p.contains(ip) {
			return p
		}
	}
	return nil
}

func (sn *subnet) contains(ip uint32) bool { return sn.prefix.Contains(addrOf(ip)) }

// maxMapHint caps map presizing for huge pools.
const maxMapHint = 1 << 18

func (sn *subnet) poolSize() int {
	n := 0
	for _, p := range sn.pools {
		n += int(p.size())
	}
	return n
}

// pool is one dynamic range. A set bit marks an address that is fixed or
// that had a busy binding when last looked at; clear bits are candidates.
type pool struct {
	start, end uint32
	bits       []uint64
	cursor     uint32 // offset where the next search starts
}

func newPool(start, end uint32) *pool {
	n := uint64(end) - uint64(start) + 1
	return &pool{start: start, end: end, bits: make([]uint64, (n+63)/64)}
}

func (p *pool) size() uint32            { return p.end - p.start + 1 }
func (p *pool) contains(ip uint32) bool { return ip >= p.start && ip <= p.end }
func (p *pool) set(ip uint32)           { o := ip - p.start; p.bits[o>>6] |= 1 << (o & 63) }
func (p *pool) clear(ip uint32)         { o := ip - p.start; p.bits[o>>6] &^= 1 << (o & 63) }

// next returns the first clear address at or after the cursor, wrapping
// once around the pool. It does not set the bit.
func (p *pool) next() (uint32, bool) {
	n := uint64(p.size())
	from := uint64(p.cursor)
	if from >= n {
		from = 0
	}
	off, ok := p.scan(from, n)
	if !ok {
		off, ok = p.scan(0, from)
	}
	if !ok {
		return 0, false
	}
	p.cursor = uint32(off + 1)
	return p.start + uint32(off), true
}

// scan finds the first clear bit in [from, to), a word at a time.
func (p *pool) scan(from, to uint64) (uint64, bool) {
	for o := from; o < to; {
		wi := o >> 6
		free := ^p.bits[wi] & (^uint64(0) << (o & 63))
		if free != 0 {
			off := wi<<6 + uint64(bits.TrailingZeros64(free))
			return off, off < to
		}
		o = (wi + 1) << 6
	}
	return 0, false
}
