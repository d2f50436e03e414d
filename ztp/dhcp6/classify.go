package dhcp6

import (
	"bytes"
	"encoding/binary"
	"strings"

	"github.com/ztpd/ztpd/internal/core"
)

// What real clients send (see the SONiC and ONIE reference notes).
const (
	sonicUserClass  = "SONiC-ZTP"
	sonicIDPrefix   = "SONiC##"
	onieVendorClass = "onie_vendor:"
)

func classOf(k core.DeviceKind) int {
	switch k {
	case core.KindSONiC:
		return 0
	case core.KindONIE:
		return 1
	case core.KindVM:
		return 2
	}
	return 3
}

var classKinds = [4]core.DeviceKind{core.KindSONiC, core.KindONIE, core.KindVM, core.KindUnknown}

// classData calls fn with each opaque field of a user class (option 15) or
// the vendor-class data of option 16 (after skip bytes of enterprise
// number): 2-byte length-prefixed instances (RFC 8415 §21.15, §21.16). A
// value that is not well formed is passed whole, as text some clients send.
func classData(v []byte, skip int, fn func([]byte) bool) bool {
	if len(v) < skip {
		return false
	}
	v = v[skip:]
	rest := v
	for len(rest) >= 2 {
		n := int(binary.BigEndian.Uint16(rest))
		if n == 0 || 2+n > len(rest) {
			return fn(v)
		}
		if fn(rest[2 : 2+n]) {
			return true
		}
		rest = rest[2+n:]
	}
	if len(rest) != 0 {
		return fn(v)
	}
	return false
}

// isSONiCUserClass reports whether option 15 carries "SONiC-ZTP".
func isSONiCUserClass(v []byte) bool {
	return classData(v, 0, func(b []byte) bool { return string(b) == sonicUserClass })
}

// vendorClass reads option 16: SONiC when a field is "SONiC-ZTP" or
// "SONiC##<product>##<serial>"; ONIE when a field is
// "onie_vendor:<platform>" (as ONIE's udhcpc6 -V sends it), whatever the
// enterprise number.
func vendorClass(v []byte) (sonic bool, product, serial string, onie bool, platform string) {
	classData(v, 4, func(b []byte) bool {
		switch {
		case string(b) == sonicUserClass:
			sonic = true
		case bytes.HasPrefix(b, []byte(sonicIDPrefix)):
			sonic = true
			p, s, _ := bytes.Cut(b[len(sonicIDPrefix):], []byte("##"))
			product, serial = printable(p), printable(s)
		case bytes.HasPrefix(b, []byte(onieVendorClass)):
			onie, platform = true, printable(b[len(onieVendorClass):])
		default:
			return false
		}
		return true
	})
	return
}

// vendorText is option 16's data as text for the device record.
func vendorText(v []byte) string {
	var parts []string
	classData(v, 4, func(b []byte) bool {
		parts = append(parts, printable(b))
		return false
	})
	return strings.Join(parts, ",")
}

// printable keeps a client-supplied string safe for logs and records.
func printable(b []byte) string {
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			return strings.Map(func(r rune) rune {
				if r < 0x20 || r > 0x7e {
					return '?'
				}
				return r
			}, string(b))
		}
	}
	return string(b)
}

const hexDigits = "0123456789abcdef"

// hexColon is b as "0a:0b:...".
func hexColon(b []byte) string {
	out := make([]byte, 0, 3*len(b))
	for i, c := range b {
		if i > 0 {
			out = append(out, ':')
		}
		out = append(out, hexDigits[c>>4], hexDigits[c&15])
	}
	return string(out)
}

// parseHexColon reverses hexColon.
func parseHexColon(s string) ([]byte, bool) {
	if s == "" || (len(s)+1)%3 != 0 {
		return nil, false
	}
	out := make([]byte, 0, (len(s)+1)/3)
	for i := 0; i < len(s); i += 3 {
		if i+2 < len(s) && s[i+2] != ':' {
			return nil, false
		}
		hi, lo := unhex(s[i]), unhex(s[i+1])
		if hi < 0 || lo < 0 {
			return nil, false
		}
		out = append(out, byte(hi<<4|lo))
	}
	return out, true
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// macOfDUID is the Ethernet address inside a DUID-LLT (type 1) or DUID-LL
// (type 3), or nil.
func macOfDUID(d []byte) []byte {
	switch {
	case len(d) == 14 && d[0] == 0 && d[1] == 1 && d[2] == 0 && d[3] == 1:
		return d[8:14]
	case len(d) == 10 && d[0] == 0 && d[1] == 3 && d[2] == 0 && d[3] == 1:
		return d[4:10]
	}
	return nil
}

// macOfLinkLayer is the Ethernet address of a client link-layer address
// option (79, RFC 6939), or nil.
func macOfLinkLayer(v []byte) []byte {
	if len(v) == 8 && v[0] == 0 && v[1] == 1 {
		return v[2:8]
	}
	return nil
}

// validDUID reports whether d is a DUID as RFC 8415 §11 shapes it: at most
// 130 bytes, and long enough for its type's fixed fields and some data
// (DUID-UUID exactly 18).
func validDUID(d []byte) bool {
	if len(d) < 3 || len(d) > maxDUID {
		return false
	}
	switch binary.BigEndian.Uint16(d) {
	case 1: // LLT: hardware type, time, link-layer address
		return len(d) >= 9
	case 2: // EN: enterprise number, identifier
		return len(d) >= 7
	case 3: // LL: hardware type, link-layer address
		return len(d) >= 5
	case 4: // UUID
		return len(d) == 18
	}
	return true
}
