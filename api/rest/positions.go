package rest

import (
	"fmt"
	"net/http"
	"net/netip"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
	"github.com/ztpd/ztpd/internal/positions"
)

// Positions owns the cabling plan the position routes read and change.
type Positions interface {
	Current() (*positions.Plan, error)
	Get(name string) (*positions.Position, error)
	Put(c core.Caller, p *positions.Position) (created bool, err error)
	PutMany(c core.Caller, ps []*positions.Position) (created int, err error)
	Delete(c core.Caller, name string) error
}

func (s *Door) routePositions(g *gin.RouterGroup) {
	if s.positions == nil {
		return
	}
	g.GET("/positions", s.listPositions)
	g.POST("/positions/import", requireAdmin, s.importPositions)
	g.GET("/positions/:name", s.getPosition)
	g.PUT("/positions/:name", requireAdmin, s.putPosition)
	g.DELETE("/positions/:name", requireAdmin, s.deletePosition)
}

// PositionOf is p as the API shows it.
func PositionOf(p *positions.Position) client.Position {
	v := client.Position{Name: p.Name, Relay: p.Relay.String(), CircuitID: p.CircuitID, RemoteID: p.RemoteID,
		InterfaceID: p.InterfaceID, Role: p.Role, Cluster: p.Cluster, Profile: p.Profile, Serial: p.Serial,
		Rack: p.Rack, Port: p.Port, Labels: p.Labels, Fields: p.Fields, Source: "api"}
	if p.Address.IsValid() {
		v.Address = p.Address.String()
	}
	if p.File != "" {
		v.Source = p.Where()
	}
	return v
}

func (s *Door) listPositions(c *gin.Context) {
	pl, err := s.positions.Current()
	if err != nil {
		s.restFail(c, err)
		return
	}
	list := pl.List()
	out := client.Page[client.Position]{Items: make([]client.Position, 0, len(list))}
	for _, p := range list {
		out.Items = append(out.Items, PositionOf(p))
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, out)
}

func (s *Door) getPosition(c *gin.Context) {
	p, err := s.positions.Get(c.Param("name"))
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, PositionOf(p))
}

// putPosition adds or replaces a position stored through the API; the
// name in the path is the position's.
func (s *Door) putPosition(c *gin.Context) {
	var req client.Position
	if !bindBody(c, &req) {
		return
	}
	name := c.Param("name")
	if req.Name != "" && req.Name != name {
		Refuse(c, core.KindInvalid, "name: the body names "+req.Name+", the path "+name)
		return
	}
	req.Name = name
	p, msg := positionFrom(req)
	if msg != "" {
		Refuse(c, core.KindInvalid, msg)
		return
	}
	created, err := s.positions.Put(callerOf(c), p)
	if err != nil {
		s.restFail(c, err)
		return
	}
	got, err := s.positions.Get(name)
	if err != nil {
		s.restFail(c, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	httpserve.WriteJSON(c.Writer, status, PositionOf(got))
}

func (s *Door) deletePosition(c *gin.Context) {
	if err := s.positions.Delete(callerOf(c), c.Param("name")); err != nil {
		s.restFail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// positionFrom is the position a request body describes, or why it
// describes none (an address that is not one).
func positionFrom(req client.Position) (*positions.Position, string) {
	p := &positions.Position{Name: req.Name, CircuitID: req.CircuitID, RemoteID: req.RemoteID, InterfaceID: req.InterfaceID,
		Role: req.Role, Cluster: req.Cluster, Profile: req.Profile, Serial: req.Serial, Rack: req.Rack, Port: req.Port,
		Labels: req.Labels, Fields: req.Fields}
	var err error
	if req.Relay != "" {
		if p.Relay, err = netip.ParseAddr(req.Relay); err != nil {
			return nil, "relay: " + req.Relay + " is not an IP address"
		}
	}
	if req.Address != "" {
		if p.Address, err = netip.ParseAddr(req.Address); err != nil {
			return nil, "address: " + req.Address + " is not an IP address"
		}
	}
	return p, ""
}

// importPositions adds or replaces the stored positions of the body
// together: every one, or on any problem none.
func (s *Door) importPositions(c *gin.Context) {
	var req client.PositionImport
	if !bindBody(c, &req) {
		return
	}
	ps := make([]*positions.Position, 0, len(req.Items))
	for i, it := range req.Items {
		p, msg := positionFrom(it)
		if msg != "" {
			Refuse(c, core.KindInvalid, fmt.Sprintf("items[%d] (%s): %s", i, it.Name, msg))
			return
		}
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		Refuse(c, core.KindInvalid, "items: no positions to import")
		return
	}
	created, err := s.positions.PutMany(callerOf(c), ps)
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, client.PositionImported{Created: created, Replaced: len(ps) - created})
}
