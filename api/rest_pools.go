package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/internal/httpserve"
)

// PoolUse is one DHCP subnet's dynamic pool use (openapi.json PoolUse).
// Size counts the addresses the pools can hand out (network, broadcast
// and router addresses excluded); Reserved the reservations' addresses
// inside the pools; Used the other pool addresses held by a lease, an
// offer or a decline quarantine; Free the rest: Size = Reserved + Used +
// Free.
type PoolUse struct {
	Name       string `json:"name"`
	Subnet     string `json:"subnet"`      // prefix, e.g. 10.99.1.0/24
	RangeStart string `json:"range_start"` // first pool's start ("" without pools)
	RangeEnd   string `json:"range_end"`   // last pool's end
	Size       int    `json:"size"`
	Used       int    `json:"used"`
	Reserved   int    `json:"reserved"`
	Free       int    `json:"free"`
}

// PoolLister reports the DHCP pools' use (internal/app adapts ztp/dhcp).
type PoolLister interface {
	Pools() []PoolUse
}

func (s *Server) poolUse() []PoolUse {
	var out []PoolUse
	if s.console.pools != nil {
		out = s.console.pools.Pools()
	}
	if out == nil {
		out = []PoolUse{}
	}
	return out
}

// listPools answers every subnet's pool use. Users see it too: it names
// no device.
func (s *Server) listPools(c *gin.Context) {
	httpserve.WriteJSON(c.Writer, http.StatusOK, s.poolUse())
}
