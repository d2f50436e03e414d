package rest

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/internal/httpserve"
)

// settingsConfig answers the effective configuration, secrets redacted by
// internal/app (openapi.json Settings): read only, for admins.
func (s *Door) settingsConfig(c *gin.Context) {
	var cfg any = map[string]any{}
	if s.console.config != nil {
		cfg = s.console.config()
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, cfg)
}

// listWarnings answers the startup warnings as they stand now (no
// profiles, profiles naming missing clusters or images, device URLs on a
// loopback address): what lets ztpd run while devices cannot onboard.
func (s *Door) listWarnings(c *gin.Context) {
	httpserve.WriteJSON(c.Writer, http.StatusOK, s.currentWarnings())
}
