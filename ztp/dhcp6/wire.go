package dhcp6

import (
	"encoding/binary"
	"errors"
)

// Message types (RFC 8415 §7.3).
const (
	msgSolicit     = 1
	msgAdvertise   = 2
	msgRequest     = 3
	msgConfirm     = 4
	msgRenew       = 5
	msgRebind      = 6
	msgReply       = 7
	msgRelease     = 8
	msgDecline     = 9
	msgInfoRequest = 11
	msgRelayForw   = 12
	msgRelayRepl   = 13
)

// Option codes (RFC 8415 §21, RFC 5970, RFC 6939).
const (
	optClientID      = 1
	optServerID      = 2
	optIANA          = 3
	optIAAddr        = 5
	optORO           = 6
	optPreference    = 7
	optElapsedTime   = 8
	optRelayMsg      = 9
	optStatusCode    = 13
	optRapidCommit   = 14
	optUserClass     = 15
	optVendorClass   = 16
	optInterfaceID   = 18
	optDNSServers    = 23
	optDomainList    = 24
	optRemoteID      = 37
	optBootFileURL   = 59
	optClientLinkLay = 79
	// optProvisionScript is SONiC's private provisioning-script URL.
	optProvisionScript = 239
)

// Status codes (RFC 8415 §21.13).
const (
	statusSuccess      = 0
	statusUnspecFail   = 1
	statusNoAddrsAvail = 2
	statusNoBinding    = 3
	statusNotOnLink    = 4
)

// maxRelayDepth is how many Relay-Forw wrappers a message may carry (the
// hop limit relays themselves enforce is 32 hops at most in practice; RFC
// 8415 §7.6 says 8 by default, configurable).
const maxRelayDepth = 32

// maxDUID is the longest DUID RFC 8415 §11.1 allows (2 bytes of type and
// at most 128 of data).
const maxDUID = 130

// maxIAs bounds the IA_NA options one message may carry that we answer.
const maxIAs = 8

var (
	errShort     = errors.New("dhcp6: truncated")
	errOptions   = errors.New("dhcp6: malformed options")
	errNoRelay   = errors.New("dhcp6: relay message without a relayed message")
	errTooDeep   = errors.New("dhcp6: relays nested past the hop limit")
	errNotClient = errors.New("dhcp6: not a client message")
)

// relayHop is one Relay-Forw wrapper, outermost first in Packet.relays.
type relayHop struct {
	hops        uint8
	link, peer  [16]byte
	interfaceID []byte // option 18, echoed in the Relay-Repl
	remoteID    []byte // option 37 (enterprise number and id)
	linkLayer   []byte // option 79 (link-layer type and address)
}

// Packet is a parsed DHCPv6 client message, with the relays it came
// through. The slices point into the buffer it was parsed from.
type Packet struct {
	relays []relayHop
	Type   uint8
	XID    [3]byte
	opts   []byte // the client message's options, well formed
	raw    []byte // the client message
}

// walkOptions calls fn for each option in b; it fails on a truncated or
// overlong option.
func walkOptions(b []byte, fn func(code uint16, v []byte) error) error {
	for len(b) > 0 {
		if len(b) < 4 {
			return errOptions
		}
		code, n := binary.BigEndian.Uint16(b), int(binary.BigEndian.Uint16(b[2:]))
		if 4+n > len(b) {
			return errOptions
		}
		if fn != nil {
			if err := fn(code, b[4:4+n]); err != nil {
				return err
			}
		}
		b = b[4+n:]
	}
	return nil
}

// Parse reads b: a client message, or Relay-Forw wrappers around one
// (nested at most maxRelayDepth deep). Every option list on the way must be
// well formed; the client message's options are checked again where they
// are read.
func (p *Packet) Parse(b []byte) error {
	p.relays = p.relays[:0]
	for {
		if len(b) < 4 {
			return errShort
		}
		switch b[0] {
		case msgRelayForw:
			if len(p.relays) == maxRelayDepth {
				return errTooDeep
			}
			if len(b) < 34 {
				return errShort
			}
			h := relayHop{hops: b[1], link: [16]byte(b[2:18]), peer: [16]byte(b[18:34])}
			var inner []byte
			found := false
			err := walkOptions(b[34:], func(code uint16, v []byte) error {
				switch code {
				case optRelayMsg:
					if found {
						return errOptions
					}
					inner, found = v, true
				case optInterfaceID:
					h.interfaceID = v
				case optRemoteID:
					h.remoteID = v
				case optClientLinkLay:
					h.linkLayer = v
				}
				return nil
			})
			if err != nil {
				return err
			}
			if !found {
				return errNoRelay
			}
			p.relays = append(p.relays, h)
			b = inner
		case msgRelayRepl, msgAdvertise, msgReply, 10:
			return errNotClient
		default:
			if err := walkOptions(b[4:], nil); err != nil {
				return err
			}
			p.Type, p.XID, p.opts, p.raw = b[0], [3]byte(b[1:4]), b[4:], b
			return nil
		}
	}
}

// Opt returns the first option code of the client message.
func (p *Packet) Opt(code uint16) ([]byte, bool) { return findOpt(p.opts, code) }

// Has reports whether the client message carries option code.
func (p *Packet) Has(code uint16) bool {
	_, ok := p.Opt(code)
	return ok
}

func findOpt(b []byte, code uint16) ([]byte, bool) {
	for len(b) >= 4 {
		c, n := binary.BigEndian.Uint16(b), int(binary.BigEndian.Uint16(b[2:]))
		if 4+n > len(b) {
			return nil, false
		}
		if c == code {
			return b[4 : 4+n], true
		}
		b = b[4+n:]
	}
	return nil, false
}

// iaNA is one IA_NA of a client message: its IAID, and the addresses it
// names (hints, or the addresses it holds).
type iaNA struct {
	id    [4]byte
	addrs [][16]byte
}

// IANAs returns the message's IA_NA options (at most maxIAs), each with the
// addresses its IA Address options name; a malformed IA_NA fails.
func (p *Packet) IANAs(buf []iaNA) ([]iaNA, error) {
	out := buf[:0]
	err := walkOptions(p.opts, func(code uint16, v []byte) error {
		if code != optIANA {
			return nil
		}
		if len(v) < 12 {
			return errOptions
		}
		if len(out) == maxIAs {
			return nil
		}
		ia := iaNA{id: [4]byte(v[:4])}
		err := walkOptions(v[12:], func(code uint16, a []byte) error {
			if code != optIAAddr {
				return nil
			}
			if len(a) < 24 {
				return errOptions
			}
			if len(ia.addrs) < 4 {
				ia.addrs = append(ia.addrs, [16]byte(a[:16]))
			}
			return walkOptions(a[24:], nil)
		})
		if err != nil {
			return err
		}
		out = append(out, ia)
		return nil
	})
	return out, err
}

// ORO returns the option codes the client asked for (option 6).
func (p *Packet) ORO() []byte {
	v, _ := p.Opt(optORO)
	if len(v)%2 != 0 {
		return v[:len(v)-1]
	}
	return v
}

// appendOpt appends one option.
func appendOpt(b []byte, code uint16, v []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, code)
	b = binary.BigEndian.AppendUint16(b, uint16(len(v)))
	return append(b, v...)
}

// beginOpt appends an option header whose length endOpt fills in.
func beginOpt(b []byte, code uint16) ([]byte, int) {
	b = binary.BigEndian.AppendUint16(b, code)
	return append(b, 0, 0), len(b) + 2
}

func endOpt(b []byte, at int) []byte {
	binary.BigEndian.PutUint16(b[at-2:], uint16(len(b)-at))
	return b
}

// appendStatus appends a Status Code option.
func appendStatus(b []byte, code uint16, msg string) []byte {
	b, at := beginOpt(b, optStatusCode)
	b = binary.BigEndian.AppendUint16(b, code)
	b = append(b, msg...)
	return endOpt(b, at)
}

// wrapRelays wraps a reply in one Relay-Repl per relay the request came
// through, innermost first, echoing each relay's hop count, addresses and
// interface-id (RFC 8415 §19.3).
func wrapRelays(dst []byte, relays []relayHop, msg []byte) []byte {
	if len(relays) == 0 {
		return append(dst, msg...)
	}
	h := &relays[0]
	dst = append(dst, msgRelayRepl, h.hops)
	dst = append(dst, h.link[:]...)
	dst = append(dst, h.peer[:]...)
	if h.interfaceID != nil {
		dst = appendOpt(dst, optInterfaceID, h.interfaceID)
	}
	dst, at := beginOpt(dst, optRelayMsg)
	dst = wrapRelays(dst, relays[1:], msg)
	return endOpt(dst, at)
}
