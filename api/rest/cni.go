package rest

import (
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// CNI configurations: the REST form of CloudStack 4.21's
// registerCniConfiguration, listCniConfiguration and
// deleteCniConfiguration, over the same service.

func cniOf(c clusters.CNIConfig) client.CNIConfiguration {
	params := c.Params
	if params == nil {
		params = []string{}
	}
	return client.CNIConfiguration{ID: c.ID, Name: c.Name, Manifest: c.Manifest, Params: params, Account: c.Account, Created: c.Created}
}

func (s *Door) listCNI(c *gin.Context) {
	cs, err := s.clusters.ListCNI(c.Request.Context(), callerOf(c), clusters.CNIFilter{Name: c.Query("name"), Keyword: c.Query("keyword")})
	if err != nil {
		s.restFail(c, err)
		return
	}
	out := client.Page[client.CNIConfiguration]{Items: make([]client.CNIConfiguration, 0, len(cs))}
	for _, cfg := range cs {
		out.Items = append(out.Items, cniOf(cfg))
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, out)
}

func (s *Door) getCNI(c *gin.Context) {
	ref := c.Param("id")
	cs, err := s.clusters.ListCNI(c.Request.Context(), callerOf(c), clusters.CNIFilter{})
	if err != nil {
		s.restFail(c, err)
		return
	}
	for _, cfg := range cs {
		if cfg.ID == ref || cfg.Name == ref {
			httpserve.WriteJSON(c.Writer, http.StatusOK, cniOf(cfg))
			return
		}
	}
	Refuse(c, core.KindNotFound, "no CNI configuration "+ref)
}

func (s *Door) registerCNI(c *gin.Context) {
	var req client.CNIConfigurationCreate
	if !bindBody(c, &req) {
		return
	}
	// The service takes the manifest as CloudStack sends it (base64).
	cfg, err := s.clusters.RegisterCNI(c.Request.Context(), callerOf(c), clusters.CNISpec{Name: req.Name,
		Content: base64.StdEncoding.EncodeToString([]byte(req.Manifest)), Params: strings.Join(req.Params, ",")})
	if err != nil {
		s.restFail(c, err)
		return
	}
	c.Header("Location", Path+"cni-configurations/"+cfg.ID)
	httpserve.WriteJSON(c.Writer, http.StatusCreated, cniOf(cfg))
}

func (s *Door) deleteCNI(c *gin.Context) {
	if _, err := s.clusters.DeleteCNI(c.Request.Context(), callerOf(c), c.Param("id")); err != nil {
		s.restFail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}
