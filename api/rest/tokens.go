package rest

import (
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
)

func restTokenOf(t core.Token) client.Token {
	return client.Token{ID: t.ID, Kind: t.Kind, Cluster: t.Cluster, Device: t.Device, Usages: t.Usages,
		Description: t.Description, Expires: t.Expires, UsedAt: t.UsedAt, Revoked: t.Revoked, Created: t.Created}
}

func tokenPos(t core.Token) string { return core.TokenCursor(t) }

func (s *Door) listTokens(c *gin.Context) {
	limit, after, ok := listParams(c)
	if !ok {
		return
	}
	cluster, kind, revoked := c.Query("cluster"), c.Query("kind"), c.Query("revoked")
	keep := func(t core.Token) bool {
		return (cluster == "" || t.Cluster == cluster) && (kind == "" || t.Kind == kind) &&
			(revoked == "" || strconv.FormatBool(t.Revoked) == revoked)
	}
	var p client.Page[client.Token]
	list := func(after string, fn core.Visit[core.Token]) error {
		return s.clusters.ListTokens(c.Request.Context(), callerOf(c), after, fn)
	}
	p, err := collect(list, after, limit, tokenPos, keep, restTokenOf)
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, p)
}

func (s *Door) revokeToken(c *gin.Context) {
	ref := c.Param("id")
	if k := c.Query("kind"); k != "" {
		ref = k + "/" + ref
	}
	t, err := s.clusters.RevokeToken(c.Request.Context(), callerOf(c), ref)
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, restTokenOf(t))
}
