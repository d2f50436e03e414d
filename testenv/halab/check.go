package halab

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
)

// Acks are the captured ACKs, in capture order.
func Acks(rs []Reply) []Reply {
	var out []Reply
	for _, r := range rs {
		if r.Type == dhcpv4.MessageTypeAck && r.YIAddr.IsValid() && !r.YIAddr.IsUnspecified() {
			out = append(out, r)
		}
	}
	return out
}

// DoubleGrants lists every ACK that gave an address to a second client
// while the first's lease was unexpired, and every ACK that gave a client
// a second address while its first lease was unexpired.
func DoubleGrants(rs []Reply) []string {
	type grant struct {
		other  string
		at     time.Time
		until  time.Time
		server netip.Addr
	}
	byIP := map[netip.Addr]grant{}
	byHW := map[string]grant{}
	var bad []string
	for _, r := range Acks(rs) {
		until := r.Time.Add(r.Lease)
		if g, ok := byIP[r.YIAddr]; ok && g.other != r.ChAddr && r.Time.Before(g.until) {
			bad = append(bad, fmt.Sprintf("%s ACKed to %s by %s at %s while %s held it (ACKed by %s at %s)",
				r.YIAddr, r.ChAddr, r.Server, clock(r.Time), g.other, g.server, clock(g.at)))
		}
		if g, ok := byHW[r.ChAddr]; ok && g.other != r.YIAddr.String() && r.Time.Before(g.until) {
			bad = append(bad, fmt.Sprintf("%s ACKed %s by %s at %s while holding %s (ACKed by %s at %s)",
				r.ChAddr, r.YIAddr, r.Server, clock(r.Time), g.other, g.server, clock(g.at)))
		}
		byIP[r.YIAddr] = grant{r.ChAddr, r.Time, until, r.Server}
		byHW[r.ChAddr] = grant{r.YIAddr.String(), r.Time, until, r.Server}
	}
	return bad
}

func clock(t time.Time) string { return t.Format("15:04:05.000") }
