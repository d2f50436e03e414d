package api

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// RefusalLister is what the running server refused to addresses that hold
// no lease (ztp/content keeps them in memory, never in the store).
type RefusalLister interface {
	RecentRefusals() (since time.Time, list []core.AddressRefusal)
}

// restRefusals is the answer of /api/v1/refusals (openapi.json RefusalList).
type restRefusals struct {
	// Since is when the server began recording them (its start); absent
	// when nothing records them (no server runs on this data directory).
	Since time.Time            `json:"since,omitzero"`
	Items []restAddressRefusal `json:"items"`
}

type restAddressRefusal struct {
	Addr      string    `json:"addr"`
	What      string    `json:"what"`
	Kind      string    `json:"kind"`
	Reason    string    `json:"reason"`
	Transport string    `json:"transport"`
	Count     int       `json:"count"`
	First     time.Time `json:"first"`
	Last      time.Time `json:"last"`
}

// listRefusals answers the recent refusals of addresses that hold no
// lease, newest first (admin keys).
func (s *Server) listRefusals(c *gin.Context) {
	out := restRefusals{Items: []restAddressRefusal{}}
	if s.refusals != nil {
		since, list := s.refusals.RecentRefusals()
		out.Since = since
		for _, r := range list {
			out.Items = append(out.Items, restAddressRefusal(r))
		}
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, out)
}
