package dhcp6

import (
	"fmt"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"
)

// BenchmarkSARR is one Solicit-Advertise-Request-Reply exchange of a new
// client through the request path, its lease committed with the others of
// its group (64 a commit, as under load).
func BenchmarkSARR(b *testing.B) {
	h := newHarness(b, func(o *Options) {
		o.Subnets[0].Pools = []Range{{addr("fd99:0:0:1::1:0"), addr("fd99:0:0:1::ff:ffff")}}
		o.Subnets[0].RapidCommit = false
	})
	sols := make([][]byte, b.N)
	clients := make([]*client, b.N)
	for i := range b.N {
		c := newClient(fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", byte(i>>32), byte(i>>24), byte(i>>16), byte(i>>8), byte(i)), sonicClass, askZTP)
		clients[i], sols[i] = c, c.msg(dhcpv6.MessageTypeSolicit, c.ia()).ToBytes()
	}
	x := newExchange(h.ifc)
	x.src = h.src
	var last time.Time
	snap := &snapshot{}
	sid := &dhcpv6.DUIDLL{}
	if err := sid.FromBytes(h.s.duid[2:]); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		out := h.s.handle(x, sols[i])
		adv, err := dhcpv6.MessageFromBytes(out)
		if err != nil {
			b.Fatal(err)
		}
		c := clients[i]
		req := c.msg(dhcpv6.MessageTypeRequest, c.ia(addrOf(adv)), dhcpv6.WithServerID(adv.Options.ServerID())).ToBytes()
		h.s.handle(x, req)
		if i%64 == 63 {
			h.s.flush(snap, &last)
			h.conn.take()
		}
	}
	h.s.flush(snap, &last)
}
