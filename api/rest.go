package api

import (
	_ "embed"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
)

// The REST API (/api/v1/) is split by resource: rest_auth.go (signatures,
// roles, request bodies and the one error writer), rest_paging.go (pages,
// cursors, the response cache), and one file per resource with its view
// types: devices and leases, clusters and jobs, versions and offerings,
// images, tokens, events, desired states and rollouts (rest_dayops.go). Answers are mapped from domain values to those
// view types explicitly, so the storage format never leaks into the API:
// openapi.json is the contract.

//go:embed openapi.json
var openAPIDoc []byte

// OpenAPI returns the REST API's OpenAPI 3 document.
func OpenAPI() []byte { return openAPIDoc }

func (s *Server) routeREST(e *gin.Engine) {
	e.GET(OpenAPIPath, func(c *gin.Context) {
		c.Set("op", "openapi")
		c.Data(http.StatusOK, "application/json", openAPIDoc)
	})
	g := e.Group(strings.TrimSuffix(RESTPath, "/"), s.restAuth)
	admin := requireAdmin

	g.GET("/devices", s.listDevices)
	g.GET("/devices/:id", s.getDevice)
	g.POST("/devices/:id/approve", admin, s.approveDevice)
	g.POST("/devices/:id/reset", admin, s.resetDevice)
	g.GET("/leases", s.listLeases)

	g.GET("/clusters", s.listClusters)
	g.POST("/clusters", s.createCluster)
	g.GET("/clusters/:id", s.getCluster)
	g.DELETE("/clusters/:id", s.clusterOp)
	g.POST("/clusters/:id/scale", s.clusterOp)
	g.POST("/clusters/:id/upgrade", s.clusterOp)
	g.POST("/clusters/:id/start", s.clusterOp)
	g.POST("/clusters/:id/stop", s.clusterOp)
	g.GET("/clusters/:id/kubeconfig", s.kubeconfig)
	g.GET("/jobs/:id", s.getJob)

	g.GET("/versions", s.listVersions)
	g.POST("/versions", admin, s.addVersion)
	g.GET("/versions/:id", s.getVersion)
	g.PATCH("/versions/:id", admin, s.updateVersion)
	g.DELETE("/versions/:id", admin, s.deleteVersion)
	g.GET("/offerings", s.listOfferings)

	g.GET("/images", s.listImages)
	g.GET("/tokens", admin, s.listTokens)
	g.POST("/tokens/:id/revoke", admin, s.revokeToken)
	g.GET("/events", s.listEvents)
	g.GET("/refusals", admin, s.listRefusals)
	s.routeDayOps(g)
	s.routeConsoleREST(e, g)
}
