package dhcp

import (
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// BenchmarkDORA measures the CPU cost of one relayed DISCOVER/OFFER,
// REQUEST/ACK exchange of a new client through every step, encoding, the
// lease commit and the device and event records (commits of 128, as under
// load), without socket I/O.
func BenchmarkDORA(b *testing.B) {
	h := newHarness(b, func(c *Options) {
		c.Subnets[1].Prefix = prefix("10.64.0.0/12")
		c.Subnets[1].Pools = pools("10.64.0.10-10.79.255.250")
		c.Subnets[1].Router = addr("10.64.0.1")
	})
	relay := ip("10.64.0.1")
	disc := make([][]byte, b.N)
	reqs := make([][]byte, b.N)
	for i := range disc {
		hw := mac(i)
		hw[2] = byte(i >> 16)
		disc[i] = discover(hw, dhcpv4.WithRelay(relay)).ToBytes()
		yi := b4(u32([4]byte{10, 64, 0, 10}) + uint32(i))
		r, _ := dhcpv4.New(dhcpv4.WithHwAddr(hw), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest), dhcpv4.WithRelay(relay),
			dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(yi[:])), dhcpv4.WithOption(dhcpv4.OptServerIdentifier(serverIP)),
			dhcpv4.WithRequestedOptions(dhcpv4.OptionSubnetMask, dhcpv4.OptionRouter, dhcpv4.OptionDomainNameServer))
		reqs[i] = r.ToBytes()
	}
	x := &exchange{ifc: h.ifc, src: netip.AddrFrom4([4]byte(relay)), req: &Packet{}, out: make([]byte, 0, 1500), opts: make([]option, 0, 64)}
	run := func(p []byte, want uint8) {
		if err := x.req.Parse(p); err != nil {
			b.Fatal(err)
		}
		x.now = time.Now()
		if !h.s.decide(x) || x.reply.msgType != want {
			b.Fatalf("no %s", msgName(want))
		}
	}
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run(disc[i], msgOffer)
		run(reqs[i], msgAck)
		if i%128 == 127 || i == b.N-1 {
			h.now = x.now
			h.commit()
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// cpuTime is the process's user+system CPU time (the fsync waits of the
// benchmark's wall time are not CPU).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
