package rest

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// PoolLister reports the DHCP pools' use (internal/app adapts ztp/dhcp).
type PoolLister interface {
	Pools() []client.PoolUse
}

func (s *Door) poolUse() []client.PoolUse {
	var out []client.PoolUse
	if s.console.pools != nil {
		out = s.console.pools.Pools()
	}
	if out == nil {
		out = []client.PoolUse{}
	}
	return out
}

// listPools answers every subnet's pool use. Users see it too: it names
// no device.
func (s *Door) listPools(c *gin.Context) {
	httpserve.WriteJSON(c.Writer, http.StatusOK, s.poolUse())
}
