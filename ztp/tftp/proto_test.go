package tftp

import (
	"bytes"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func rrq(parts ...string) []byte {
	b := []byte{0, opRRQ}
	for _, p := range parts {
		b = append(b, p...)
		b = append(b, 0)
	}
	return b
}

func TestParseRequest(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		want request
		err  bool
	}{
		{"plain", rrq("f.bin", "octet"), request{op: opRRQ, filename: "f.bin", mode: "octet"}, false},
		{"options lower-cased, first kept", rrq("f.bin", "OCTET", "BlkSize", "1468", "tsize", "0", "blksize", "9000"),
			request{op: opRRQ, filename: "f.bin", mode: "octet", options: []option{{"blksize", "1468"}, {"tsize", "0"}}}, false},
		{"boot ROM padding", append(rrq("pxe/boot.cfg", "octet", "tsize", "0"), 0, 0, 0, 0),
			request{op: opRRQ, filename: "pxe/boot.cfg", mode: "octet", options: []option{{"tsize", "0"}}}, false},
		{"last field without NUL", []byte("\x00\x01f\x00netascii\x00windowsize\x008"),
			request{op: opRRQ, filename: "f", mode: "netascii", options: []option{{"windowsize", "8"}}}, false},
		{"mode without NUL", []byte("\x00\x01f\x00octet"), request{op: opRRQ, filename: "f", mode: "octet"}, false},
		{"name without value dropped", rrq("f", "octet", "tsize", "0", "blksize"),
			request{op: opRRQ, filename: "f", mode: "octet", options: []option{{"tsize", "0"}}}, false},
		{"write request", []byte("\x00\x02up\x00octet\x00"), request{op: opWRQ, filename: "up", mode: "octet"}, false},
		{"empty file name", rrq("", "octet"), request{}, true},
		{"no mode", []byte("\x00\x01f\x00"), request{}, true},
		{"empty mode", rrq("f", ""), request{}, true},
		{"not a request", []byte{0, opACK, 0, 1}, request{}, true},
		{"one byte", []byte{0}, request{}, true},
		{"opcode only", []byte{0, 1}, request{}, true},
	}
	for _, c := range cases {
		got, err := parseRequest(c.in)
		if (err != nil) != c.err {
			t.Errorf("%s: err %v, want error %v", c.name, err, c.err)
			continue
		}
		if !c.err && !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestNegotiate(t *testing.T) {
	req := func(mode string, opts ...string) *request {
		r, err := parseRequest(rrq(append([]string{"f", mode}, opts...)...))
		if err != nil {
			t.Fatal(err)
		}
		return &r
	}
	cases := []struct {
		name            string
		r               *request
		size            int64
		blkCap, winCap  int
		blksize, window int
		oack            string // "name=value ..." or "" for no OACK
	}{
		{"no options: RFC 1350 lock-step, no OACK", req("octet"), 100, 1468, 8, 512, 1, ""},
		{"blksize capped at the interface", req("octet", "blksize", "8000", "tsize", "0"), 3000, 1468, 8, 1468, 1, "blksize=1468 tsize=3000"},
		{"smaller blksize kept", req("octet", "blksize", "1024"), 3000, 1468, 8, 1024, 1, "blksize=1024"},
		{"tiny blksize allowed (RFC 2348)", req("octet", "blksize", "8"), 3000, 1468, 8, 8, 1, "blksize=8"},
		{"blksize below 8 ignored", req("octet", "blksize", "7"), 3000, 1468, 8, 512, 1, ""},
		{"signed or spaced values ignored", req("octet", "blksize", "+1024", "windowsize", " 4"), 3000, 1468, 8, 512, 1, ""},
		{"windowsize granted up to the maximum", req("octet", "windowsize", "16"), 3000, 1468, 8, 512, 8, "windowsize=8"},
		{"smaller windowsize kept", req("octet", "windowsize", "4"), 3000, 1468, 8, 512, 4, "windowsize=4"},
		{"windowsize never granted with tftp.window 1", req("octet", "windowsize", "4", "tsize", "0"), 3000, 1468, 1, 512, 1, "tsize=3000"},
		{"windowsize 0 is invalid", req("octet", "windowsize", "0"), 3000, 1468, 8, 512, 1, ""},
		{"windowsize above 65535 is invalid", req("octet", "windowsize", "65536"), 3000, 1468, 8, 512, 1, ""},
		{"no tsize in netascii", req("netascii", "tsize", "0", "blksize", "600"), 3000, 1468, 8, 600, 1, "blksize=600"},
		{"timeout and unknown options left out", req("octet", "timeout", "3", "multicast", "", "tsize", "0"), 0, 1468, 8, 512, 1, "tsize=0"},
		{"blksize cap below 8 is raised to 8", req("octet", "blksize", "100"), 1, 1, 8, 8, 1, "blksize=8"},
	}
	for _, c := range cases {
		p := negotiate(c.r, c.size, c.blkCap, c.winCap)
		var oack []string
		for _, o := range p.oack {
			oack = append(oack, o.name+"="+o.value)
		}
		if p.blksize != c.blksize || p.window != c.window || strings.Join(oack, " ") != c.oack {
			t.Errorf("%s: blksize %d window %d oack %q; want %d %d %q", c.name, p.blksize, p.window, strings.Join(oack, " "), c.blksize, c.window, c.oack)
		}
		if (p.oack == nil) != (c.oack == "") {
			t.Errorf("%s: OACK presence %v", c.name, p.oack != nil)
		}
	}
}

func TestErrorPacket(t *testing.T) {
	p := appendError(nil, errAccess, "no\x00way")
	if !bytes.Equal(p, []byte("\x00\x05\x00\x02no\x00")) {
		t.Fatalf("%q", p)
	}
	if code, msg := errorMessage(p); code != errAccess || msg != `"no"` {
		t.Fatalf("%d %s", code, msg)
	}
	if code, msg := errorMessage([]byte{0, 5, 0}); code != 0 || msg != "" {
		t.Fatalf("short error packet: %d %q", code, msg)
	}
	long := appendError(nil, 0, strings.Repeat("x", 1000))
	if len(long) > 512 {
		t.Fatalf("error packet of %d bytes", len(long))
	}
}

// FuzzParseRequest: any datagram parses or is refused without a panic; a
// parsed request re-encodes to one that parses the same; negotiation stays
// within its bounds. (The corpus entry from the old FuzzCapBlksize target
// has the same shape and is kept.)
func FuzzParseRequest(f *testing.F) {
	f.Add(rrq("f.bin", "octet", "blksize", "8000"), 1468)
	f.Add(rrq("a", "netascii", "tsize", "0", "blksize", "99999999999999999999", "windowsize", "64"), 512)
	f.Add([]byte{0, 1, 0, 0, 0}, 1468)
	f.Add([]byte("\x00\x02up\x00octet"), 0)
	f.Add(append(rrq("f", "octet", "windowsize", "8"), 0, 0, 0), 65464)
	f.Fuzz(func(t *testing.T, in []byte, blkCap int) {
		r, err := parseRequest(in)
		if err != nil {
			return
		}
		if r.filename == "" || r.mode == "" || strings.ContainsRune(r.filename, 0) || strings.ContainsRune(r.mode, 0) {
			t.Fatalf("bad fields %q %q", r.filename, r.mode)
		}
		if r.mode != lower(r.mode) {
			t.Fatalf("mode %q not lower case", r.mode)
		}
		seen := map[string]bool{}
		for _, o := range r.options {
			if o.name == "" || o.name != lower(o.name) || seen[o.name] || strings.ContainsRune(o.name+o.value, 0) {
				t.Fatalf("bad option %q=%q in %+v", o.name, o.value, r.options)
			}
			seen[o.name] = true
		}
		again, err := parseRequest(appendRequest(nil, r))
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("round trip: %+v -> %+v (%v)", r, again, err)
		}
		p := negotiate(&r, int64(len(in)), blkCap, 8)
		limit := max(minBlockSize, min(blkCap, maxBlockSize))
		if p.blksize != defaultBlockSize && (p.blksize < minBlockSize || p.blksize > limit) {
			t.Fatalf("blksize %d outside %d..%d", p.blksize, minBlockSize, limit)
		}
		if p.window < 1 || p.window > 8 {
			t.Fatalf("window %d", p.window)
		}
		for _, o := range p.oack {
			if o.name == "blksize" && o.value != strconv.Itoa(p.blksize) || o.name == "windowsize" && o.value != strconv.Itoa(p.window) {
				t.Fatalf("OACK %v disagrees with %+v", o, p)
			}
		}
	})
}
