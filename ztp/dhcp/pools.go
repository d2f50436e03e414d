package dhcp

import (
	"time"
)

// PoolUse is one subnet's dynamic pool use: Size addresses the pools can
// hand out (network, broadcast and router excluded), Reserved of them
// pinned by reservations, Used held by a lease, an offer or a decline
// quarantine, Free the rest (Size = Reserved + Used + Free).
type PoolUse struct {
	Name       string
	Prefix     string
	RangeStart string // the first pool's start; "" when the subnet has no pool
	RangeEnd   string // the last pool's end
	Size       int
	Used       int
	Reserved   int
	Free       int
}

// Pools reports every configured subnet's pool use, in configuration
// order, as the bindings stand now (the web console's pool view; the
// ztpd_dhcp_pool_* metrics are the same numbers as of the last sweep).
func (s *Server) Pools() []PoolUse {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	used := make(map[*subnet]int, len(s.subnets))
	for _, b := range s.byIP {
		if b.busy(now) && b.sn.poolOf(b.ip) != nil && !b.sn.fixed(b.ip) {
			used[b.sn]++
		}
	}
	out := make([]PoolUse, 0, len(s.subnets))
	for _, sn := range s.subnets {
		u := PoolUse{Name: sn.name, Prefix: sn.prefix.String(), Used: used[sn]}
		for i, p := range sn.pools {
			if i == 0 {
				u.RangeStart = addrOf(p.start).String()
			}
			u.RangeEnd = addrOf(p.end).String()
			u.Size += int(p.size())
		}
		for ip := range sn.excluded {
			if sn.poolOf(ip) != nil {
				u.Size--
			}
		}
		for _, m := range []map[uint32]*reservation{sn.resByIP, sn.posByIP} {
			for ip := range m {
				if sn.poolOf(ip) != nil && !sn.excluded[ip] {
					u.Reserved++
				}
			}
		}
		u.Free = max(0, u.Size-u.Reserved-u.Used)
		out = append(out, u)
	}
	return out
}
