package wirecapture

import (
	"bytes"
	"math/rand"
	"net/netip"
	"testing"
)

var (
	testClient = netip.MustParseAddrPort("10.0.0.2:40000")
	testServer = netip.MustParseAddrPort("10.0.0.1:8080")
	c2s        = Flow{testClient, testServer}
	s2c        = c2s.Reverse()
)

func joined(s *Stream) string { return string(bytes.Join(s.Pieces, []byte("|"))) }

func TestAssembler(t *testing.T) {
	var isn uint32 = 0xfffffff0 // the sequence numbers wrap inside the stream
	cases := []struct {
		name    string
		segs    func(a *Assembler)
		want    string // pieces joined by |
		missing int64
	}{
		{"in order", func(a *Assembler) {
			a.Add(c2s, isn, true, false, nil)
			a.Add(c2s, isn+1, false, true, []byte("hello "))
			a.Add(c2s, isn+7, false, true, []byte("world"))
		}, "hello world", 0},
		{"out of order across the wrap", func(a *Assembler) {
			a.Add(c2s, isn, true, false, nil)
			a.Add(c2s, isn+1+16, false, true, []byte("QRST"))
			a.Add(c2s, isn+1, false, true, []byte("ABCDEFGH"))
			a.Add(c2s, isn+1+8, false, true, []byte("IJKLMNOP"))
		}, "ABCDEFGHIJKLMNOPQRST", 0},
		{"retransmitted and duplicated (a bridge sees a forwarded packet twice)", func(a *Assembler) {
			a.Add(c2s, isn, true, false, nil)
			a.Add(c2s, isn+1, false, true, []byte("abcd"))
			a.Add(c2s, isn+1, false, true, []byte("abcd"))
			a.Add(c2s, isn+3, false, true, []byte("cdefgh")) // overlaps, carries on
			a.Add(c2s, isn+5, false, true, []byte("ef"))
		}, "abcdefgh", 0},
		{"a hole splits the stream", func(a *Assembler) {
			a.Add(c2s, isn, true, false, nil)
			a.Add(c2s, isn+1, false, true, []byte("abc"))
			a.Add(c2s, isn+1+10, false, true, []byte("xyz"))
		}, "abc|xyz", 7},
		{"no handshake seen: the earliest segment starts it", func(a *Assembler) {
			a.Add(c2s, 5000, false, true, []byte("world"))
			a.Add(c2s, 4994, false, true, []byte("hello "))
		}, "hello world", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAssembler()
			tc.segs(a)
			conns := a.Finish()
			if len(conns) != 1 {
				t.Fatalf("%d connections, want 1", len(conns))
			}
			c := conns[0]
			if c.Client.Flow != c2s {
				t.Errorf("client flow %s, want %s", c.Client.Flow, c2s)
			}
			if got := joined(c.Client); got != tc.want || c.Client.Missing != tc.missing {
				t.Errorf("got %q (missing %d), want %q (missing %d)", got, c.Client.Missing, tc.want, tc.missing)
			}
		})
	}
}

func TestAssemblerBothDirectionsAndPortReuse(t *testing.T) {
	a := NewAssembler()
	// The server's SYN-ACK seen first still names the client.
	a.Add(s2c, 900, true, true, nil)
	a.Add(c2s, 100, true, false, nil)
	a.Add(c2s, 101, false, true, []byte("GET / HTTP/1.1\r\n\r\n"))
	a.Add(s2c, 901, false, true, []byte("HTTP/1.1 200 OK\r\n"))
	// The same ports again, a new ISN: a second connection.
	a.Add(c2s, 7000, true, false, nil)
	a.Add(c2s, 7001, false, true, []byte("second"))
	conns := a.Finish()
	if len(conns) != 2 {
		t.Fatalf("%d connections, want 2", len(conns))
	}
	if c := conns[0]; c.Client.Flow != c2s || joined(c.Client) != "GET / HTTP/1.1\r\n\r\n" || joined(c.Server) != "HTTP/1.1 200 OK\r\n" {
		t.Errorf("first connection: client %s %q, server %q", c.Client.Flow, joined(c.Client), joined(c.Server))
	}
	if got := joined(conns[1].Client); got != "second" {
		t.Errorf("second connection: %q", got)
	}
}

// FuzzAssembler cuts a payload into segments, shuffles, duplicates and
// overlaps them as the fuzzer's bytes say, and checks the stream comes
// back whole whatever the order.
func FuzzAssembler(f *testing.F) {
	f.Add([]byte("GET /join HTTP/1.1\r\nHost: x\r\n\r\n"), uint32(0xfffffff8), int64(1))
	f.Add([]byte("a"), uint32(0), int64(2))
	f.Add(bytes.Repeat([]byte("0123456789"), 50), uint32(1<<31), int64(3))
	f.Fuzz(func(t *testing.T, payload []byte, isn uint32, seed int64) {
		if len(payload) == 0 || len(payload) > 1<<16 {
			return
		}
		rng := rand.New(rand.NewSource(seed))
		type seg struct {
			off, n int
		}
		var segs []seg
		for off := 0; off < len(payload); {
			n := 1 + rng.Intn(min(64, len(payload)-off))
			segs = append(segs, seg{off, n})
			// Retransmissions, some overlapping the next segment.
			if rng.Intn(4) == 0 {
				segs = append(segs, seg{off, min(len(payload)-off, n+rng.Intn(8))})
			}
			off += n
		}
		rng.Shuffle(len(segs), func(i, j int) { segs[i], segs[j] = segs[j], segs[i] })
		a := NewAssembler()
		a.Add(c2s, isn, true, false, nil)
		for _, s := range segs {
			a.Add(c2s, isn+1+uint32(s.off), false, true, payload[s.off:s.off+s.n])
		}
		conns := a.Finish()
		if len(conns) != 1 {
			t.Fatalf("%d connections", len(conns))
		}
		st := conns[0].Client
		if len(st.Pieces) != 1 || !bytes.Equal(st.Pieces[0], payload) || st.Missing != 0 {
			t.Fatalf("reassembled %d pieces (missing %d), %q; want %q", len(st.Pieces), st.Missing, joined(st), payload)
		}
	})
}
