package api

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/desired"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// AgentPath is where device agents poll their desired state and report
// their steps (day-2 operations), on the API listener so that they talk TLS with
// the certificate they pinned at join:
//
//	GET  /agent/v1/desired   Authorization: Bearer <agent credential>
//	POST /agent/v1/report    the same; one step report as JSON
//
// The credential is checked against the holder of the request's address
// (the connection's, never a forwarded header). 403 for every refusal;
// 409 for a report of an operation that is no longer the device's.
const AgentPath = "/agent/v1/"

const maxAgentReport = 64 << 10

func (s *Server) routeAgent(e *gin.Engine) {
	if s.desired == nil {
		return
	}
	g := e.Group(strings.TrimSuffix(AgentPath, "/"))
	g.GET("/desired", s.agentDesired)
	g.POST("/report", s.agentReport)
}

// agentRemote is the connection's address and the bearer credential.
func agentRemote(c *gin.Context) (netip.Addr, string, bool) {
	ap, err := netip.ParseAddrPort(c.Request.RemoteAddr)
	if err != nil {
		httpserve.WriteErrorCode(c.Writer, http.StatusForbidden, core.KindRefused, desired.ErrAgentRefused.Error())
		return netip.Addr{}, "", false
	}
	cred, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
	if !ok || cred == "" {
		httpserve.WriteErrorCode(c.Writer, http.StatusUnauthorized, core.KindAuth, "agent credential required (Authorization: Bearer)")
		return netip.Addr{}, "", false
	}
	return ap.Addr().Unmap(), strings.TrimSpace(cred), true
}

func (s *Server) agentDesired(c *gin.Context) {
	c.Set("op", "agentDesired")
	remote, cred, ok := agentRemote(c)
	if !ok {
		return
	}
	doc, err := s.desired.AgentDocument(c.Request.Context(), cred, remote)
	if err != nil {
		httpserve.WriteError(c.Writer, c.Request, s.log, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, doc)
}

func (s *Server) agentReport(c *gin.Context) {
	c.Set("op", "agentReport")
	remote, cred, ok := agentRemote(c)
	if !ok {
		return
	}
	var rep desired.Report
	dec := json.NewDecoder(io.LimitReader(c.Request.Body, maxAgentReport+1))
	if err := dec.Decode(&rep); err != nil {
		httpserve.WriteErrorCode(c.Writer, http.StatusBadRequest, core.KindInvalid, "report body: "+err.Error())
		return
	}
	err := s.desired.AgentReport(c.Request.Context(), cred, remote, rep)
	if errors.Is(err, desired.ErrStaleOperation) {
		httpserve.WriteErrorCode(c.Writer, http.StatusConflict, core.KindConflict, err.Error())
		return
	}
	if err != nil {
		httpserve.WriteError(c.Writer, c.Request, s.log, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, map[string]bool{"ok": true})
}
