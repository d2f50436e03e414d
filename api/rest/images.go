package rest

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/httpserve"
)

func (s *Door) listImages(c *gin.Context) {
	out := client.Page[client.Image]{Items: []client.Image{}}
	if s.images != nil {
		list, err := s.images.List(c.Query("kind"))
		if err != nil {
			s.restFail(c, err)
			return
		}
		for _, im := range list {
			out.Items = append(out.Items, client.Image{SHA256: im.SHA256, Name: im.Name, Kind: im.Kind, Platform: im.Platform,
				Version: im.Version, Size: im.Size, Created: im.Created})
		}
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, out)
}
