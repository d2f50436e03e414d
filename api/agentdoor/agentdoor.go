// Package agentdoor is the device agents' door: the day-2 agents on
// joined devices poll their desired state and report their steps here,
// authenticated by the agent credential they got at join and the address
// they hold (package desired checks both), not by API keys. It has its own
// package because its callers are devices rather than API users: none of
// the REST API's signatures, roles, sessions or paging applies to it. The
// API's engine mounts it (package api).
package agentdoor

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/desired"
	"github.com/ztpd/ztpd/internal/httpserve"
	"github.com/ztpd/ztpd/internal/positions"
)

// Path is where device agents poll their desired state and report
// their steps (day-2 operations), on the API listener so that they talk TLS with
// the certificate they pinned at join:
//
//	GET  /agent/v1/desired   Authorization: Bearer <agent credential>
//	POST /agent/v1/report    the same; one step report as JSON
//	POST /agent/v1/neighbors the same; {"lldp_neighbors": [...]}, the
//	                         device's LLDP neighbours
//
// The credential is checked against the holder of the request's address
// (the connection's, never a forwarded header). 403 for every refusal;
// 409 for a report of an operation that is no longer the device's.
const Path = "/agent/v1/"

const maxAgentReport = 64 << 10

// Door answers device agents over the desired-state owner.
type Door struct {
	log     *slog.Logger
	desired *desired.Service
}

// New is the agents' door over des; log records internal errors.
func New(des *desired.Service, log *slog.Logger) *Door {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Door{log: log, desired: des}
}

// Route registers the agent routes on e; a door without a desired-state
// owner serves none.
func (s *Door) Route(e *gin.Engine) {
	if s.desired == nil {
		return
	}
	g := e.Group(strings.TrimSuffix(Path, "/"))
	g.GET("/desired", s.agentDesired)
	g.POST("/report", s.agentReport)
	g.POST("/neighbors", s.agentNeighbors)
}

func (s *Door) agentNeighbors(c *gin.Context) {
	c.Set("op", "agentNeighbors")
	remote, cred, ok := agentRemote(c)
	if !ok {
		return
	}
	var body struct {
		Neighbors []positions.Neighbor `json:"lldp_neighbors"`
	}
	dec := json.NewDecoder(io.LimitReader(c.Request.Body, maxAgentReport+1))
	if err := dec.Decode(&body); err != nil {
		httpserve.WriteErrorCode(c.Writer, http.StatusBadRequest, core.KindInvalid, "neighbours body: "+err.Error())
		return
	}
	if err := s.desired.AgentNeighbors(c.Request.Context(), cred, remote, body.Neighbors); err != nil {
		httpserve.WriteError(c.Writer, c.Request, s.log, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, map[string]bool{"ok": true})
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

func (s *Door) agentDesired(c *gin.Context) {
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

func (s *Door) agentReport(c *gin.Context) {
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
