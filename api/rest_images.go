package api

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/internal/httpserve"
)

// restImage is an artifact of the image store as the REST API shows it
// (openapi.json Image).
type restImage struct {
	SHA256   string    `json:"sha256"`
	Name     string    `json:"name"`
	Kind     string    `json:"kind"`
	Platform string    `json:"platform,omitempty"`
	Version  string    `json:"version,omitempty"`
	Size     int64     `json:"size"`
	Created  time.Time `json:"created"`
}

func (s *Server) listImages(c *gin.Context) {
	out := page[restImage]{Items: []restImage{}}
	if s.images != nil {
		list, err := s.images.List(c.Query("kind"))
		if err != nil {
			s.restFail(c, err)
			return
		}
		for _, im := range list {
			out.Items = append(out.Items, restImage{SHA256: im.SHA256, Name: im.Name, Kind: im.Kind, Platform: im.Platform,
				Version: im.Version, Size: im.Size, Created: im.Created})
		}
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, out)
}
