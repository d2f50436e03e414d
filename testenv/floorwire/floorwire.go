// Package floorwire is the DHCPv6 wire work the benchmarks' floors share
// (testenv/cmd/dhcp6floor, testenv/cmd/stormfloor): a client's Solicit or
// Request read by hand, and the Advertise or Reply a server cannot send
// less than written by hand, so the floors cost what the protocol costs
// and no more.
package floorwire

import "encoding/binary"

// ServerDUID is the floors' server identifier, a DUID-LL.
var ServerDUID = []byte{0, 3, 0, 1, 0x02, 0x99, 0, 0, 0, 1}

// Request is what a floor reads from a client's message.
type Request struct {
	Answer   byte // Advertise (2) to a Solicit, Reply (7) to a Request
	XID      [3]byte
	ClientID []byte
	IAID     [4]byte // the last IA_NA's; 0.0.0.1 without one
}

// EachOption calls fn with every option of b, a message's options; it
// reports false for an option longer than what is left. Fewer than four
// bytes left over, too few for an option's header, are ignored.
func EachOption(b []byte, fn func(code uint16, v []byte)) bool {
	for len(b) >= 4 {
		code, l := binary.BigEndian.Uint16(b), int(binary.BigEndian.Uint16(b[2:]))
		if len(b) < 4+l {
			return false
		}
		fn(code, b[4:4+l])
		b = b[4+l:]
	}
	return true
}

// ParseRequest reads a Solicit or a Request. ok is false for any other
// message, a truncated option, or a client id no DUID can be (RFC 8415
// §11.1: a 2-byte type and at most 128 more).
func ParseRequest(pkt []byte) (r Request, ok bool) {
	if len(pkt) < 4 {
		return r, false
	}
	switch pkt[0] {
	case 1:
		r.Answer = 2
	case 3:
		r.Answer = 7
	default:
		return r, false
	}
	r.XID = [3]byte(pkt[1:4])
	r.IAID = [4]byte{0, 0, 0, 1}
	if !EachOption(pkt[4:], func(code uint16, v []byte) {
		switch code {
		case 1:
			r.ClientID = v
		case 3:
			if len(v) >= 4 {
				r.IAID = [4]byte(v[:4])
			}
		}
	}) {
		return r, false
	}
	return r, len(r.ClientID) >= 2 && len(r.ClientID) <= 130
}

// AppendAnswer appends the answer to r: the client id echoed, the server
// id, and an IA_NA (r's IAID) holding addr for an hour.
func AppendAnswer(out []byte, r Request, addr [16]byte) []byte {
	out = append(out, r.Answer, r.XID[0], r.XID[1], r.XID[2])
	out = AppendOption(out, 1, r.ClientID)
	out = AppendOption(out, 2, ServerDUID)
	out = append(out, 0, 3, 0, 12+4+24)
	out = append(out, r.IAID[:]...)
	out = binary.BigEndian.AppendUint32(out, 1800)
	out = binary.BigEndian.AppendUint32(out, 2880)
	out = append(out, 0, 5, 0, 24)
	out = append(out, addr[:]...)
	out = binary.BigEndian.AppendUint32(out, 3600)
	return binary.BigEndian.AppendUint32(out, 3600)
}

// AppendOption appends option code holding v.
func AppendOption(out []byte, code uint16, v []byte) []byte {
	out = binary.BigEndian.AppendUint16(out, code)
	out = binary.BigEndian.AppendUint16(out, uint16(len(v)))
	return append(out, v...)
}
