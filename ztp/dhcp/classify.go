package dhcp

import (
	"bytes"
	"encoding/hex"
	"strings"

	"github.com/ztpd/ztpd/internal/core"
)

// What real clients send (see the SONiC and ONIE reference notes).
const (
	sonicUserClass  = "SONiC-ZTP"
	sonicIDPrefix   = "SONiC##"
	onieVendorClass = "onie_vendor:"
)

// classOf indexes per-class tables.
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

// isSONiCUserClass accepts option 77 both as SONiC sends it (raw text) and
// in the RFC 3004 form (length-prefixed instances).
func isSONiCUserClass(v []byte) bool {
	if string(v) == sonicUserClass {
		return true
	}
	for len(v) > 0 {
		n := int(v[0])
		if n == 0 || 1+n > len(v) {
			return false
		}
		if string(v[1:1+n]) == sonicUserClass {
			return true
		}
		v = v[1+n:]
	}
	return false
}

// sonicClientID parses option 61 "SONiC##<product>##<serial>", sent without
// the RFC 2132 type byte; a leading type byte 0 is tolerated.
func sonicClientID(v []byte) (product, serial string, ok bool) {
	if len(v) > 0 && v[0] == 0 {
		v = v[1:]
	}
	rest, found := bytes.CutPrefix(v, []byte(sonicIDPrefix))
	if !found {
		return "", "", false
	}
	p, s, found := bytes.Cut(rest, []byte("##"))
	if !found {
		return printable(p), "", true
	}
	return printable(p), printable(s), true
}

// onieVendor returns the platform from option 60 "onie_vendor:<platform>".
func onieVendor(v []byte) (string, bool) {
	p, ok := bytes.CutPrefix(v, []byte(onieVendorClass))
	if !ok {
		return "", false
	}
	return printable(p), true
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

// clientIDText is the stored form of a client identifier: the text itself
// when every byte is printable, else colon-separated hex. parseClientIDText
// reverses it exactly: a decoded hex form always holds a non-printable byte,
// and a printable identifier is never stored as hex.
func clientIDText(b []byte) string {
	if isPrintable(string(b)) {
		return string(b)
	}
	return hexColon(b)
}

func parseClientIDText(s string) []byte {
	if b, ok := parseHexColon(s); ok {
		for _, c := range b {
			if c < 0x20 || c > 0x7e {
				return b
			}
		}
	}
	return []byte(s)
}

func hexColon(b []byte) string { return string(appendHexColon(nil, string(b))) }

func parseHexColon(s string) ([]byte, bool) {
	if s == "" || (len(s)+1)%3 != 0 {
		return nil, false
	}
	out := make([]byte, 0, (len(s)+1)/3)
	for i := 0; i < len(s); i += 3 {
		if i+2 < len(s) && s[i+2] != ':' {
			return nil, false
		}
		v, err := hex.DecodeString(s[i : i+2])
		if err != nil {
			return nil, false
		}
		out = append(out, v[0])
	}
	return out, true
}

// macText formats a hardware address; Ethernet addresses in the canonical
// form core.NormalizeMAC produces.
func macText(hw []byte) string { return hexColon(hw) }
