package halab

import (
	"fmt"
	"math"
	"net/netip"
	"sort"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/ztpd/ztpd/internal/ha"
	"github.com/ztpd/ztpd/ztp/dhcp"
)

// bucketOf is the client's RFC 3074 bucket, as the servers hash it.
func bucketOf(r Reply) int { return int(dhcp.LBHash(r.Key())) }

// misrouted lists replies before until that came from another appliance
// than the primary of the client's bucket (every appliance alive: only
// the primary may answer).
func misrouted(rs []Reply, members []string, ips map[string]netip.Addr, until time.Time) []string {
	var bad []string
	for _, r := range rs {
		if !r.Time.Before(until) {
			break
		}
		p := ha.Primary(members, bucketOf(r))
		if r.Server != ips[p] {
			bad = append(bad, fmt.Sprintf("%s for %s (bucket %d, primary %s) came from %s at %s",
				r.Type, r.ChAddr, bucketOf(r), p, r.Server, clock(r.Time)))
		}
	}
	return bad
}

// firstAfter is the first reply of type mt after t that match selects, or
// false.
func firstAfter(rs []Reply, t time.Time, mt dhcpv4.MessageType, match func(Reply) bool) (Reply, bool) {
	for _, r := range rs {
		if r.Time.After(t) && r.Type == mt && match(r) {
			return r, true
		}
	}
	return Reply{}, false
}

// lastFrom is the last reply of server (of any type when mt is 0) before
// t, or false.
func lastFrom(rs []Reply, server netip.Addr, before time.Time, mt dhcpv4.MessageType) (Reply, bool) {
	var last Reply
	ok := false
	for _, r := range rs {
		if r.Time.Before(before) && r.Server == server && (mt == 0 || r.Type == mt) {
			last, ok = r, true
		}
	}
	return last, ok
}

// perSecond sums replies into one-second bins from t0: per server, per type.
func perSecond(rs []Reply, t0 time.Time, from, to int) map[int]map[string]int {
	out := map[int]map[string]int{}
	for _, r := range rs {
		s := int(math.Floor(r.Time.Sub(t0).Seconds()))
		if s < from || s > to {
			continue
		}
		if out[s] == nil {
			out[s] = map[string]int{}
		}
		out[s][r.Server.String()+" "+r.Type.String()]++
	}
	return out
}

// timeline is perSecond as lines for the log.
func timeline(rs []Reply, t0 time.Time, from, to int, servers []string) []string {
	bins := perSecond(rs, t0, from, to)
	var lines []string
	for s := from; s <= to; s++ {
		line := fmt.Sprintf("  %+3ds", s)
		for _, sv := range servers {
			line += fmt.Sprintf("  %s offer %4d ack %4d", sv, bins[s][sv+" OFFER"], bins[s][sv+" ACK"])
		}
		lines = append(lines, line)
	}
	return lines
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
