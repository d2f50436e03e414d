package tftp

import (
	"bytes"
	"strconv"
	"testing"
)

func rrq(parts ...string) []byte {
	b := []byte{0, 1}
	for _, p := range parts {
		b = append(b, p...)
		b = append(b, 0)
	}
	return b
}

func TestCapBlksize(t *testing.T) {
	cases := []struct {
		in, want []byte
		limit    int
	}{
		{rrq("f.bin", "octet", "blksize", "8000", "tsize", "0"), rrq("f.bin", "octet", "blksize", "1468", "tsize", "0"), 1468},
		{rrq("f.bin", "octet", "tsize", "0", "BLKSIZE", "65464"), rrq("f.bin", "octet", "tsize", "0", "BLKSIZE", "1368"), 1368},
		{rrq("f.bin", "octet", "blksize", "1024"), rrq("f.bin", "octet", "blksize", "1024"), 1468},
		{rrq("f.bin", "octet"), rrq("f.bin", "octet"), 1468},
		{rrq("blksize", "octet", "x", "y"), rrq("blksize", "octet", "x", "y"), 512},
		{rrq("f", "octet", "blksize", "nope"), rrq("f", "octet", "blksize", "nope"), 512},
	}
	for _, c := range cases {
		p := make([]byte, 600)
		n := copy(p, c.in)
		n = capBlksize(p, n, c.limit)
		if !bytes.Equal(p[:n], c.want) {
			t.Errorf("capBlksize(%q, %d) = %q, want %q", c.in, c.limit, p[:n], c.want)
		}
	}
}

func FuzzCapBlksize(f *testing.F) {
	f.Add(rrq("f.bin", "octet", "blksize", "8000"), 1468)
	f.Add(rrq("a", "netascii", "tsize", "0", "blksize", "99999999999999999999"), 512)
	f.Add([]byte{0, 1, 0, 0, 0}, 1468)
	f.Fuzz(func(t *testing.T, in []byte, limit int) {
		if len(in) < 2 || len(in) > 516 {
			return
		}
		p := make([]byte, 516)
		n := copy(p, in)
		got := capBlksize(p, n, limit)
		if got > n || got < 0 {
			t.Fatalf("length grew: %d -> %d", n, got)
		}
		if limit <= 0 {
			return
		}
		fields := splitZ(p[2:got])
		for i := 2; i+1 < len(fields); i += 2 {
			if equalFold(fields[i], "blksize") {
				if v, err := strconv.Atoi(string(fields[i+1])); err == nil && v > limit {
					t.Fatalf("blksize %d above limit %d survived", v, limit)
				}
				break
			}
		}
	})
}

func TestPktinfoIgnoresGarbage(t *testing.T) {
	for _, oob := range [][]byte{nil, {1, 2, 3}, make([]byte, 64), bytes.Repeat([]byte{0xff}, 40)} {
		pktinfo(oob) // must not panic
	}
}
