package dhcp6

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
)

// BenchmarkSARR is one Solicit-Advertise-Request-Reply exchange through the
// request path, its lease committed with the others of its group (64 a
// commit, as under load). new: every exchange a new client; perfdhcp: the
// clients drawn at random from a set 5/9 the exchanges' number, as
// `make bench-dhcp6` (perfdhcp -R 50000, 90,000 exchanges at its limit)
// draws them, so about half are a known client exchanging again.
func BenchmarkSARR(b *testing.B) {
	b.Run("new", func(b *testing.B) { benchSARR(b, func(i int) int { return i }) })
	b.Run("perfdhcp", func(b *testing.B) {
		r := rand.New(rand.NewPCG(1, 2))
		n := max(1, b.N*5/9)
		benchSARR(b, func(int) int { return r.IntN(n) })
	})
}

// benchSARR runs b.N exchanges, the i-th by client pick(i). The Requests
// are built by hand from the Solicits (the test codec's cost is not the
// server's); every reply is checked by the server's outcome.
func benchSARR(b *testing.B, pick func(int) int) {
	h := newHarness(b, func(o *Options) {
		o.Subnets[0].Pools = []Range{{addr("fd99:0:0:1::1:0"), addr("fd99:0:0:1::ff:ffff")}}
		o.Subnets[0].RapidCommit = false
	})
	picks := make([]int, b.N)
	sols := map[int][]byte{}
	for i := range b.N {
		k := pick(i)
		picks[i] = k
		if sols[k] == nil {
			c := newClient(fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", byte(k>>32), byte(k>>24), byte(k>>16), byte(k>>8), byte(k)), sonicClass, askZTP)
			sols[k] = c.msg(dhcpv6.MessageTypeSolicit, c.ia()).ToBytes()
		}
	}
	x := newExchange(h.ifc)
	x.src = h.src
	var last time.Time
	snap := &snapshot{}
	req := make([]byte, 0, 512)
	replies, cached := 0, 0
	cpu0 := processCPU()
	b.ResetTimer()
	for i := range b.N {
		sol := sols[picks[i]]
		if out := h.s.handle(x, sol); out == nil || len(x.results) != 1 || !x.results[0].addr.IsValid() {
			b.Fatalf("exchange %d: no address advertised", i)
		}
		req = requestOf(req[:0], sol, h.s.duid, x.results[0].addr)
		if out := h.s.handle(x, req); out != nil {
			replies++ // answered at once (cached), not through the commit
			cached++
		}
		if i%64 == 63 {
			h.s.flush(snap, &last)
			replies += len(h.conn.take())
		}
	}
	h.s.flush(snap, &last)
	replies += len(h.conn.take())
	b.StopTimer()
	// The wall time waits on fsyncs; the CPU the process spent (every
	// goroutine: workers, committer, devices writer) is the figure to compare.
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(cached)/float64(b.N), "cached/op")
	if replies != b.N {
		b.Fatalf("%d Replies to %d Requests", replies, b.N)
	}
}

// requestOf is the Request a client sends after solicit (whose options end
// with an empty IA_NA) got an Advertise of a from the server sid.
func requestOf(dst, solicit, sid []byte, a netip.Addr) []byte {
	const emptyIA = 4 + 12
	dst = append(dst, msgRequest)
	dst = append(dst, solicit[1:len(solicit)-emptyIA]...)
	dst = appendOpt(dst, optServerID, sid)
	dst, at := beginOpt(dst, optIANA)
	dst = append(dst, solicit[len(solicit)-12:len(solicit)-8]...) // the IAID
	dst = binary.BigEndian.AppendUint64(dst, 0)                   // T1, T2
	dst = appendIAAddr(dst, a, 0)
	return endOpt(dst, at)
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
