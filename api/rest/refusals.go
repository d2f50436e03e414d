package rest

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// RefusalLister is what the running server refused to addresses that hold
// no lease (ztp/content keeps them in memory, never in the store).
type RefusalLister interface {
	RecentRefusals() (since time.Time, list []core.AddressRefusal)
}

// listRefusals answers the recent refusals of addresses that hold no
// lease, newest first (admin keys).
func (s *Door) listRefusals(c *gin.Context) {
	out := client.Refusals{Items: []client.AddressRefusal{}}
	if s.refusals != nil {
		since, list := s.refusals.RecentRefusals()
		out.Since = since
		for _, r := range list {
			out.Items = append(out.Items, client.AddressRefusal(r))
		}
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, out)
}
