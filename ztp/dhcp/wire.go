package dhcp

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// The wire layer parses requests into a reusable Packet and encodes replies
// into a caller's buffer. It allocates nothing on the common path: a server
// at tens of thousands of packets per second on one core cannot afford the
// map-of-slices decoding of a general-purpose library. Fuzzing checks it
// against github.com/insomniacslk/dhcp/dhcpv4 (see wire_fuzz_test.go).

// BOOTP/DHCP constants (RFC 2131, RFC 2132).
const (
	opRequest = 1
	opReply   = 2

	headerLen    = 236
	magicLen     = 4
	minPacketLen = headerLen + magicLen
	// minReplyLen pads replies to the historical BOOTP size; some relays and
	// embedded clients drop anything shorter.
	minReplyLen = 300
	// defaultMaxMessage is what every client must accept (RFC 2131 §2: a
	// 576-byte IP datagram), less the IP and UDP headers.
	defaultMaxMessage = 576 - 28

	flagBroadcast = 0x8000
)

var magicCookie = [4]byte{99, 130, 83, 99}

// Message types (option 53).
const (
	msgDiscover = 1
	msgOffer    = 2
	msgRequest  = 3
	msgDecline  = 4
	msgAck      = 5
	msgNak      = 6
	msgRelease  = 7
	msgInform   = 8
)

var msgNames = [...]string{"none", "discover", "offer", "request", "decline", "ack", "nak", "release", "inform"}

func msgName(t uint8) string {
	if int(t) < len(msgNames) {
		return msgNames[t]
	}
	return "other"
}

// Option codes used by the server itself.
const (
	optPad              = 0
	optSubnetMask       = 1
	optRouter           = 3
	optDNS              = 6
	optLogServer        = 7
	optHostname         = 12
	optDomainName       = 15
	optNTP              = 42
	optVendorSpecific   = 43
	optRequestedIP      = 50
	optLeaseTime        = 51
	optOverload         = 52
	optMessageType      = 53
	optServerID         = 54
	optParamRequest     = 55
	optMessage          = 56
	optMaxMessageSize   = 57
	optRenewalTime      = 58
	optRebindingTime    = 59
	optVendorClass      = 60
	optClientID         = 61
	optTFTPServer       = 66
	optBootfile         = 67
	optUserClass        = 77
	optRelayAgent       = 82
	optDefaultURL       = 114
	optSubnetSelection  = 118
	optClasslessRoutes  = 121
	optProvisionScript  = 239
	optEnd              = 255
	relayCircuitID      = 1 // RFC 3046 sub-options of option 82
	relayRemoteID       = 2
	relayLinkSelection  = 5 // RFC 3527 sub-option of option 82
	maxOptionDataLength = 255
)

var (
	errShort    = errors.New("shorter than a BOOTP header")
	errNotReq   = errors.New("not a BOOTREQUEST")
	errCookie   = errors.New("no DHCP magic cookie")
	errHLen     = errors.New("hardware address length over 16")
	errTrunc    = errors.New("option runs past the end of the packet")
	errOverload = errors.New("invalid option overload")
)

// optRef locates one option's value: its first instance in the packet
// buffer, or (for an option split over several instances, RFC 3396) the
// concatenation in Packet.joined.
type optRef struct {
	off, n uint32
}

// optInst is a second or later instance of an option, in the packet buffer.
type optInst struct {
	code   uint8
	off, n uint32
}

// Packet is a parsed DHCPv4 request. Its byte slices point into the buffer
// given to Parse, so a Packet is valid only until that buffer is reused.
type Packet struct {
	Op, HType, HLen, Hops uint8
	XID                   [4]byte
	Secs, Flags           uint16
	CIAddr, YIAddr        [4]byte
	SIAddr, GIAddr        [4]byte
	CHAddr                [16]byte

	buf     []byte
	present [4]uint64
	multi   [4]uint64   // codes with more than one instance
	refs    [256]optRef // first instances, in buf
	jrefs   [256]optRef // concatenated values of multi codes, in joined
	extra   []optInst   // later instances, in packet order
	joined  []byte
	order   [256]uint8 // codes in the order first seen, for tests and logs
	nOrder  int
}

// Parse decodes b into p, reusing p's storage. Options repeated in the
// packet are concatenated (RFC 3396); options overloaded into the file and
// sname fields (option 52) are read after the options field (RFC 2131 §4.1).
func (p *Packet) Parse(b []byte) error {
	if len(b) < minPacketLen {
		return errShort
	}
	if b[0] != opRequest {
		return errNotReq
	}
	if [4]byte(b[236:240]) != magicCookie {
		return errCookie
	}
	p.Op, p.HType, p.HLen, p.Hops = b[0], b[1], b[2], b[3]
	if p.HLen > 16 {
		return errHLen
	}
	p.XID = [4]byte(b[4:8])
	p.Secs = binary.BigEndian.Uint16(b[8:10])
	p.Flags = binary.BigEndian.Uint16(b[10:12])
	p.CIAddr = [4]byte(b[12:16])
	p.YIAddr = [4]byte(b[16:20])
	p.SIAddr = [4]byte(b[20:24])
	p.GIAddr = [4]byte(b[24:28])
	p.CHAddr = [16]byte(b[28:44])
	p.buf = b
	p.present, p.multi = [4]uint64{}, [4]uint64{}
	p.extra, p.joined = p.extra[:0], p.joined[:0]
	p.nOrder = 0
	if err := p.parseOptions(240, len(b)); err != nil {
		return err
	}
	p.join()
	if ov, ok := p.Opt(optOverload); ok {
		if len(ov) != 1 || ov[0] < 1 || ov[0] > 3 {
			return errOverload
		}
		v := ov[0]
		if v&1 != 0 {
			if err := p.parseOptions(108, 236); err != nil {
				return err
			}
		}
		if v&2 != 0 {
			if err := p.parseOptions(44, 108); err != nil {
				return err
			}
		}
		p.join()
	}
	return nil
}

func (p *Packet) parseOptions(i, end int) error {
	b := p.buf
	for i < end {
		code := b[i]
		if code == optPad {
			i++
			continue
		}
		if code == optEnd {
			return nil
		}
		if i+1 >= end {
			return errTrunc
		}
		n := int(b[i+1])
		if i+2+n > end {
			return errTrunc
		}
		p.add(code, i+2, n)
		i += 2 + n
	}
	// A missing End option is tolerated, as most servers do.
	return nil
}

func (p *Packet) add(code uint8, off, n int) {
	w, bit := code>>6, uint64(1)<<(code&63)
	if p.present[w]&bit == 0 {
		p.present[w] |= bit
		p.refs[code] = optRef{off: uint32(off), n: uint32(n)}
		p.order[p.nOrder] = code
		p.nOrder++
		return
	}
	// A later instance: concatenated by join (rare).
	p.multi[w] |= bit
	p.extra = append(p.extra, optInst{code: code, off: uint32(off), n: uint32(n)})
}

// join concatenates every repeated option's instances, in packet order, into
// joined: one pass over the instances, so the work and memory stay linear in
// the packet size however the instances interleave.
func (p *Packet) join() {
	if len(p.extra) == 0 {
		return
	}
	var fill [256]uint32
	for _, e := range p.extra {
		fill[e.code] += e.n
	}
	total := uint32(0)
	for _, code := range p.order[:p.nOrder] {
		if p.multi[code>>6]&(1<<(code&63)) != 0 {
			n := p.refs[code].n + fill[code]
			p.jrefs[code] = optRef{off: total, n: n}
			total += n
		}
	}
	p.joined = append(p.joined[:0], make([]byte, total)...)
	for _, code := range p.order[:p.nOrder] {
		if p.multi[code>>6]&(1<<(code&63)) != 0 {
			r, j := p.refs[code], p.jrefs[code]
			copy(p.joined[j.off:], p.buf[r.off:r.off+r.n])
			fill[code] = j.off + r.n
		}
	}
	for _, e := range p.extra {
		fill[e.code] += uint32(copy(p.joined[fill[e.code]:], p.buf[e.off:e.off+e.n]))
	}
}

// Opt returns the value of option code and whether the packet carries it.
func (p *Packet) Opt(code uint8) ([]byte, bool) {
	w, bit := code>>6, uint64(1)<<(code&63)
	if p.present[w]&bit == 0 {
		return nil, false
	}
	if p.multi[w]&bit != 0 {
		r := p.jrefs[code]
		return p.joined[r.off : r.off+r.n : r.off+r.n], true
	}
	r := p.refs[code]
	return p.buf[r.off : r.off+r.n : r.off+r.n], true
}

// Has reports whether the packet carries option code.
func (p *Packet) Has(code uint8) bool { return p.present[code>>6]&(1<<(code&63)) != 0 }

// Codes lists the options present, in the order they first appeared.
func (p *Packet) Codes() []uint8 { return p.order[:p.nOrder] }

// MessageType returns option 53, or 0 for a BOOTP request without one.
func (p *Packet) MessageType() uint8 {
	if v, ok := p.Opt(optMessageType); ok && len(v) == 1 {
		return v[0]
	}
	return 0
}

// optIP returns a 4-byte address option.
func (p *Packet) optIP(code uint8) ([4]byte, bool) {
	v, ok := p.Opt(code)
	if !ok || len(v) != 4 {
		return [4]byte{}, false
	}
	return [4]byte(v), true
}

// MaxMessage is the largest DHCP message (UDP payload) the client accepts.
func (p *Packet) MaxMessage() int {
	if v, ok := p.Opt(optMaxMessageSize); ok && len(v) == 2 {
		// RFC 2132 §9.10 counts the whole IP datagram; 576 is the floor.
		if n := int(binary.BigEndian.Uint16(v)); n > 576 {
			return n - 28
		}
	}
	return defaultMaxMessage
}

// Broadcast reports the client's broadcast flag.
func (p *Packet) Broadcast() bool { return p.Flags&flagBroadcast != 0 }

// HWAddr returns chaddr cut to hlen.
func (p *Packet) HWAddr() []byte { return p.CHAddr[:p.HLen] }

// relaySubOpt returns one sub-option of option 82.
func (p *Packet) relaySubOpt(sub uint8) ([]byte, bool) {
	v, ok := p.Opt(optRelayAgent)
	if !ok {
		return nil, false
	}
	for i := 0; i+1 < len(v); {
		c, n := v[i], int(v[i+1])
		if i+2+n > len(v) {
			return nil, false
		}
		if c == sub {
			return v[i+2 : i+2+n], true
		}
		i += 2 + n
	}
	return nil, false
}

// option is one option of a reply being built. val may point at shared,
// precomputed bytes: it is never written to.
type option struct {
	code uint8
	val  []byte
}

// reply is the fixed part of a reply; options are added by encode.
type reply struct {
	msgType        uint8
	ciaddr, yiaddr [4]byte
	siaddr         [4]byte
	flags          uint16
}

// encodeReply writes a BOOTREPLY answering req into dst (which must hold at
// least 576 bytes) and returns the used part. Options are written in the
// order given; option 82 from the request is echoed last (RFC 3046 §2.2).
// Long options are split into several instances (RFC 3396).
func encodeReply(dst []byte, req *Packet, r *reply, opts []option) []byte {
	b := dst[:minPacketLen]
	clear(b)
	b[0] = opReply
	b[1], b[2] = req.HType, req.HLen
	copy(b[4:8], req.XID[:])
	binary.BigEndian.PutUint16(b[10:12], r.flags)
	copy(b[12:16], r.ciaddr[:])
	copy(b[16:20], r.yiaddr[:])
	copy(b[20:24], r.siaddr[:])
	copy(b[24:28], req.GIAddr[:])
	copy(b[28:44], req.CHAddr[:])
	copy(b[236:240], magicCookie[:])
	for _, o := range opts {
		b = appendOption(b, o.code, o.val)
	}
	if v, ok := req.Opt(optRelayAgent); ok {
		b = appendOption(b, optRelayAgent, v)
	}
	b = append(b, optEnd)
	for len(b) < minReplyLen {
		b = append(b, optPad)
	}
	return b
}

func appendOption(b []byte, code uint8, v []byte) []byte {
	if len(v) == 0 {
		return append(b, code, 0)
	}
	for len(v) > 0 {
		n := min(len(v), maxOptionDataLength)
		b = append(b, code, uint8(n))
		b = append(b, v[:n]...)
		v = v[n:]
	}
	return b
}

// optionWireLen is the encoded size of an option, split per RFC 3396.
func optionWireLen(v []byte) int {
	if len(v) == 0 {
		return 2
	}
	return len(v) + 2*((len(v)+maxOptionDataLength-1)/maxOptionDataLength)
}

func ip4String(a [4]byte) string { return netip.AddrFrom4(a).String() }
