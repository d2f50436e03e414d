package dhcp

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"
)

// optType says how an option's text value from the configuration is turned
// into bytes on the wire.
type optType uint8

const (
	typeString  optType = iota // raw text
	typeIP                     // one IPv4 address
	typeIPs                    // IPv4 addresses, comma or space separated
	typeU8                     // 0..255
	typeU16                    // 0..65535
	typeU32                    // seconds: "3600" or a Go duration "1h"
	typeI32                    // signed seconds (time offset)
	typeBool                   // true/false, yes/no, on/off, 1/0
	typeRoutes                 // RFC 3442: "10.0.0.0/8 via 10.99.0.254, 0.0.0.0/0 via 10.99.0.1"
	typeDomains                // RFC 3397 domain search list: "a.example, b.example"
)

// optTypes lists the options whose values are not plain text (RFC 2132 and
// later). Any code not listed is text; "hex:..." gives raw bytes for any code.
var optTypes = map[uint8]optType{
	1: typeIP, 2: typeI32, 3: typeIPs, 4: typeIPs, 5: typeIPs, 6: typeIPs, 7: typeIPs,
	8: typeIPs, 9: typeIPs, 10: typeIPs, 11: typeIPs, 13: typeU16, 16: typeIP,
	19: typeBool, 20: typeBool, 21: typeIPs, 22: typeU16, 23: typeU8, 24: typeU32,
	26: typeU16, 27: typeBool, 28: typeIP, 29: typeBool, 30: typeBool, 31: typeBool,
	32: typeIP, 33: typeIPs, 34: typeBool, 35: typeU32, 36: typeBool, 37: typeU8,
	38: typeU32, 39: typeBool, 41: typeIPs, 42: typeIPs, 44: typeIPs, 45: typeIPs,
	46: typeU8, 48: typeIPs, 49: typeIPs, 58: typeU32, 59: typeU32, 65: typeIPs,
	68: typeIPs, 69: typeIPs, 70: typeIPs, 71: typeIPs, 72: typeIPs, 73: typeIPs,
	74: typeIPs, 75: typeIPs, 76: typeIPs, 119: typeDomains, 121: typeRoutes, 150: typeIPs,
}

// managedOptions are set by the protocol logic; configuring them would make a
// reply lie about the lease or the server.
var managedOptions = map[uint8]string{
	0: "pad", 50: "requested address", 51: "set lease_time instead", 52: "option overload",
	53: "message type", 54: "the server identifier is the receiving interface's address",
	55: "parameter request list", 57: "maximum message size", 61: "client identifier (echoed)",
	82: "relay agent information (echoed)", 255: "end",
}

// EncodeOption turns the text value of option code into its wire bytes. An
// empty result with a nil error means "omit the option". Exported for the
// API, which validates overrides before storing them.
func EncodeOption(code uint8, text string) ([]byte, error) {
	if why, ok := managedOptions[code]; ok {
		return nil, fmt.Errorf("option %d cannot be configured (%s)", code, why)
	}
	if text == "" {
		return nil, nil
	}
	if h, ok := strings.CutPrefix(text, "hex:"); ok {
		b, err := hex.DecodeString(strings.NewReplacer(":", "", " ", "").Replace(h))
		if err != nil {
			return nil, fmt.Errorf("%q is not hex bytes", text)
		}
		return b, nil
	}
	switch optTypes[code] {
	case typeIP:
		a, err := parseIPv4(text)
		if err != nil {
			return nil, err
		}
		return a[:], nil
	case typeIPs:
		var out []byte
		for _, f := range splitList(text) {
			a, err := parseIPv4(f)
			if err != nil {
				return nil, err
			}
			out = append(out, a[:]...)
		}
		return out, nil
	case typeU8, typeU16:
		bits := 8
		if optTypes[code] == typeU16 {
			bits = 16
		}
		n, err := strconv.ParseUint(strings.TrimSpace(text), 10, bits)
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer 0..%d", text, 1<<bits-1)
		}
		if bits == 8 {
			return []byte{byte(n)}, nil
		}
		return binary.BigEndian.AppendUint16(nil, uint16(n)), nil
	case typeU32, typeI32:
		n, err := parseSeconds(text, optTypes[code] == typeI32)
		if err != nil {
			return nil, err
		}
		return binary.BigEndian.AppendUint32(nil, uint32(n)), nil
	case typeBool:
		switch strings.ToLower(strings.TrimSpace(text)) {
		case "1", "true", "yes", "on":
			return []byte{1}, nil
		case "0", "false", "no", "off":
			return []byte{0}, nil
		}
		return nil, fmt.Errorf("%q is not a boolean (true/false)", text)
	case typeRoutes:
		return encodeRoutes(text)
	case typeDomains:
		return encodeDomains(text)
	}
	return []byte(text), nil
}

func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
}

func parseIPv4(s string) ([4]byte, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil || !a.Is4() {
		return [4]byte{}, fmt.Errorf("%q is not an IPv4 address", s)
	}
	return a.As4(), nil
}

func parseSeconds(s string, signed bool) (int64, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if (signed && (n < -1<<31 || n >= 1<<31)) || (!signed && (n < 0 || n >= 1<<32)) {
			return 0, fmt.Errorf("%d is out of range", n)
		}
		return n, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || (!signed && d < 0) || d/time.Second >= 1<<31 {
		return 0, fmt.Errorf("%q is not seconds or a duration like 1h", s)
	}
	return int64(d / time.Second), nil
}

// encodeRoutes encodes RFC 3442 classless static routes from
// "dest via router" entries separated by commas ("via" is optional).
func encodeRoutes(text string) ([]byte, error) {
	var out []byte
	for _, ent := range strings.Split(text, ",") {
		f := strings.Fields(ent)
		if len(f) == 3 && f[1] == "via" {
			f = []string{f[0], f[2]}
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("route %q is not \"<cidr> via <router>\"", strings.TrimSpace(ent))
		}
		p, err := netip.ParsePrefix(f[0])
		if err != nil || !p.Addr().Is4() {
			return nil, fmt.Errorf("route destination %q is not an IPv4 CIDR", f[0])
		}
		gw, err := parseIPv4(f[1])
		if err != nil {
			return nil, err
		}
		out = appendRoute(out, p, gw)
	}
	return out, nil
}

func appendRoute(out []byte, p netip.Prefix, gw [4]byte) []byte {
	p = p.Masked()
	bits := p.Bits()
	a := p.Addr().As4()
	out = append(out, byte(bits))
	out = append(out, a[:(bits+7)/8]...)
	return append(out, gw[:]...)
}

// encodeDomains writes an RFC 1035 name list without compression, which
// every decoder accepts.
func encodeDomains(text string) ([]byte, error) {
	var out []byte
	for _, d := range splitList(text) {
		d = strings.TrimSuffix(d, ".")
		for _, l := range strings.Split(d, ".") {
			if l == "" || len(l) > 63 {
				return nil, fmt.Errorf("domain %q has an empty or over-long label", d)
			}
			out = append(out, byte(len(l)))
			out = append(out, l...)
		}
		out = append(out, 0)
	}
	return out, nil
}

// optionSet is an immutable, encoded set of options sorted by code, with an
// index for the parameter-request-list ordering done per reply.
type optionSet struct {
	list []option
	idx  [256]int16 // position in list + 1; 0 = absent
}

func newOptionSet(m map[uint8][]byte) *optionSet {
	s := &optionSet{}
	for c, v := range m {
		if v != nil {
			s.list = append(s.list, option{code: c, val: v})
		}
	}
	sort.Slice(s.list, func(i, j int) bool { return s.list[i].code < s.list[j].code })
	for i, o := range s.list {
		s.idx[o.code] = int16(i + 1)
	}
	return s
}

func (s *optionSet) get(code uint8) ([]byte, bool) {
	if i := s.idx[code]; i > 0 {
		return s.list[i-1].val, true
	}
	return nil, false
}

// optionLayer applies one layer of configured options over m. A nil value
// removes the option set by a lower layer. Options the protocol logic sets
// are refused here too, whoever encoded the layer.
func optionLayer(m map[uint8][]byte, field string, o OptionValues) error {
	for code, v := range o {
		if why, ok := managedOptions[code]; ok {
			return fmt.Errorf("%s: option %d cannot be configured (%s)", field, code, why)
		}
		m[code] = v
	}
	return nil
}

// appendIPv4s appends the addresses as an option's list of IPv4 addresses.
func appendIPv4s(out []byte, addrs []netip.Addr) ([]byte, error) {
	for _, a := range addrs {
		if !a.Is4() {
			return nil, fmt.Errorf("%s is not an IPv4 address", a)
		}
		b := a.As4()
		out = append(out, b[:]...)
	}
	return out, nil
}

// orderOptions appends to dst, after the leading protocol options already
// in it, the options of set: requested ones first in the client's parameter
// request list order, then the rest by code. It then drops options from the
// end until the reply fits the client's maximum message size, never the
// first keep options. It reports how many options were dropped.
func orderOptions(dst []option, keep int, set *optionSet, prl []byte, extra, limit int) ([]option, int) {
	var done [4]uint64
	for _, o := range dst {
		done[o.code>>6] |= 1 << (o.code & 63)
	}
	if set != nil {
		for _, c := range prl {
			if done[c>>6]&(1<<(c&63)) != 0 {
				continue
			}
			if v, ok := set.get(c); ok {
				dst = append(dst, option{c, v})
				done[c>>6] |= 1 << (c & 63)
			}
		}
		for _, o := range set.list {
			if done[o.code>>6]&(1<<(o.code&63)) == 0 {
				dst = append(dst, o)
			}
		}
	}
	size := minPacketLen + extra + 1 // header, cookie, echoed options, End
	for _, o := range dst {
		size += optionWireLen(o.val)
	}
	dropped := 0
	for size > limit && len(dst) > keep {
		size -= optionWireLen(dst[len(dst)-1].val)
		dst = dst[:len(dst)-1]
		dropped++
	}
	return dst, dropped
}
