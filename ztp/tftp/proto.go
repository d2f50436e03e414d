package tftp

import (
	"encoding/binary"
	"errors"
	"strconv"
)

// Opcodes (RFC 1350, RFC 2347).
const (
	opRRQ   = 1
	opWRQ   = 2
	opDATA  = 3
	opACK   = 4
	opERROR = 5
	opOACK  = 6
)

// Error codes (RFC 1350 section 5, RFC 2347).
const (
	errUndefined  = 0
	errNotFound   = 1
	errAccess     = 2
	errIllegalOp  = 4
	errBadOptions = 8
)

const (
	defaultBlockSize = 512   // RFC 1350, when blksize is not negotiated
	minBlockSize     = 8     // RFC 2348
	maxBlockSize     = 65464 // RFC 2348
	// maxWindowSize bounds tftp.window: more than 64 blocks in flight
	// overruns ordinary socket buffers and gains nothing on a LAN.
	maxWindowSize = 64
)

// option is one RFC 2347 option of a request, name in lower case.
type option struct{ name, value string }

// request is a parsed RRQ or WRQ.
type request struct {
	op       uint16
	filename string
	mode     string   // lower case: "octet", "netascii", ...
	options  []option // first occurrence of each name, in request order
}

// option returns the value of option name (lower case), if the request has it.
func (r *request) option(name string) (string, bool) {
	for _, o := range r.options {
		if o.name == name {
			return o.value, true
		}
	}
	return "", false
}

var errMalformed = errors.New("malformed request")

// parseRequest parses an RRQ or WRQ: opcode, file name, mode, then
// option name/value pairs, each NUL-terminated. It is lenient where real
// clients are sloppy: the last field may lack its NUL, trailing NUL padding
// (some boot ROMs pad requests) ends the options, a name without a value is
// dropped, and repeated names keep their first value.
func parseRequest(p []byte) (request, error) {
	if len(p) < 2 {
		return request{}, errMalformed
	}
	r := request{op: binary.BigEndian.Uint16(p)}
	if r.op != opRRQ && r.op != opWRQ {
		return request{}, errMalformed
	}
	rest := p[2:]
	field := func() (string, bool) {
		if len(rest) == 0 {
			return "", false
		}
		for i, c := range rest {
			if c == 0 {
				s := string(rest[:i])
				rest = rest[i+1:]
				return s, true
			}
		}
		s := string(rest)
		rest = nil
		return s, true
	}
	var ok bool
	if r.filename, ok = field(); !ok || r.filename == "" {
		return request{}, errMalformed
	}
	var mode string
	if mode, ok = field(); !ok || mode == "" {
		return request{}, errMalformed
	}
	r.mode = lower(mode)
	for len(r.options) < 32 {
		name, ok := field()
		if !ok || name == "" {
			break
		}
		value, ok := field()
		if !ok {
			break
		}
		name = lower(name)
		if _, dup := r.option(name); !dup {
			r.options = append(r.options, option{name, value})
		}
	}
	return r, nil
}

// appendRequest encodes r (the inverse of parseRequest, for tests and the
// fuzz target's round trip).
func appendRequest(b []byte, r request) []byte {
	b = binary.BigEndian.AppendUint16(b, r.op)
	b = append(append(b, r.filename...), 0)
	b = append(append(b, r.mode...), 0)
	for _, o := range r.options {
		b = append(append(b, o.name...), 0)
		b = append(append(b, o.value...), 0)
	}
	return b
}

func lower(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// parseDecimal parses an option value: ASCII digits only (no sign, no
// spaces), at most 9 of them so it cannot overflow.
func parseDecimal(s string) (int, bool) {
	if s == "" || len(s) > 9 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, true
}

// params are the negotiated parameters of one read transfer.
type params struct {
	blksize  int
	window   int
	netascii bool
	oack     []option // acknowledged options, in request order; nil: no OACK
}

// negotiate answers the options of RRQ r for a payload of size bytes
// (RFC 2347/2348/2349/7440): blksize is granted up to blkCap, windowsize up
// to windowCap (never when windowCap <= 1), tsize with the size in octet
// mode. Options it does not grant (unknown ones, timeout, bad values) are
// left out of the OACK, which RFC 2347 allows; with none granted there is
// no OACK and the transfer starts with DATA 1.
func negotiate(r *request, size int64, blkCap, windowCap int) params {
	p := params{blksize: defaultBlockSize, window: 1, netascii: r.mode == "netascii"}
	blkCap = max(minBlockSize, min(blkCap, maxBlockSize))
	for _, o := range r.options {
		switch o.name {
		case "blksize":
			n, ok := parseDecimal(o.value)
			if !ok || n < minBlockSize {
				continue
			}
			p.blksize = min(n, blkCap)
			p.oack = append(p.oack, option{o.name, strconv.Itoa(p.blksize)})
		case "tsize":
			// netascii grows in transit by an amount only known at the end.
			if p.netascii || size < 0 {
				continue
			}
			p.oack = append(p.oack, option{o.name, strconv.FormatInt(size, 10)})
		case "windowsize":
			n, ok := parseDecimal(o.value)
			if !ok || n < 1 || n > 65535 || windowCap <= 1 {
				continue
			}
			p.window = min(n, windowCap, maxWindowSize)
			p.oack = append(p.oack, option{o.name, strconv.Itoa(p.window)})
		}
	}
	return p
}

func appendOACK(b []byte, opts []option) []byte {
	b = binary.BigEndian.AppendUint16(b, opOACK)
	for _, o := range opts {
		b = append(append(b, o.name...), 0)
		b = append(append(b, o.value...), 0)
	}
	return b
}

func appendError(b []byte, code uint16, msg string) []byte {
	b = binary.BigEndian.AppendUint16(b, opERROR)
	b = binary.BigEndian.AppendUint16(b, code)
	if len(msg) > 400 {
		msg = msg[:400]
	}
	for i := 0; i < len(msg); i++ {
		if msg[i] == 0 {
			msg = msg[:i]
			break
		}
	}
	return append(append(b, msg...), 0)
}

// errorMessage returns the code and text of an ERROR packet p.
func errorMessage(p []byte) (uint16, string) {
	if len(p) < 4 {
		return 0, ""
	}
	msg := p[4:]
	for i, c := range msg {
		if c == 0 {
			msg = msg[:i]
			break
		}
	}
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return binary.BigEndian.Uint16(p[2:]), strconv.QuoteToASCII(string(msg))
}
