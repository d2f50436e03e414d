package api

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// restVersion is a Kubernetes version as the REST API shows it
// (openapi.json Version).
type restVersion struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	SemVer      string    `json:"semver"`
	ImageID     string    `json:"image_id,omitempty"`
	ISOName     string    `json:"iso_name,omitempty"`
	ISOURL      string    `json:"iso_url,omitempty"`
	Checksum    string    `json:"checksum,omitempty"`
	ZoneID      string    `json:"zone_id,omitempty"`
	State       string    `json:"state"`
	MinCPU      int       `json:"min_cpu"`
	MinMemoryMB int       `json:"min_memory_mb"`
	Created     time.Time `json:"created"`
	UpdatedAt   time.Time `json:"updated_at"`
}

func restVersionOf(v core.Version) restVersion {
	return restVersion{ID: v.ID, Name: v.Name, SemVer: v.SemVer, ImageID: v.ImageID, ISOName: v.ISOName, ISOURL: v.ISOURL,
		Checksum: v.Checksum, ZoneID: v.ZoneID, State: v.State, MinCPU: v.MinCPU, MinMemoryMB: v.MinMemoryMB,
		Created: v.Created, UpdatedAt: v.UpdatedAt}
}

// restOffering is a service offering (openapi.json Offering); its field
// names are CloudStack's.
type restOffering struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	DisplayText string `json:"displaytext"`
	CPU         int    `json:"cpunumber"`
	MemoryMB    int    `json:"memory"`
	CPUSpeedMHz int    `json:"cpuspeed"`
}

func (s *Server) listVersions(c *gin.Context) {
	vs, err := s.clusters.ListVersions(c.Request.Context(), clusters.VersionFilter{State: c.Query("state"), MinSemVer: c.Query("min_semver")})
	if err != nil {
		s.restFail(c, err)
		return
	}
	out := page[restVersion]{Items: make([]restVersion, 0, len(vs))}
	for i := range vs {
		out.Items = append(out.Items, restVersionOf(vs[i]))
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, out)
}

func (s *Server) getVersion(c *gin.Context) {
	v, err := s.clusters.GetVersion(c.Request.Context(), c.Param("id"))
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, restVersionOf(v))
}

func (s *Server) addVersion(c *gin.Context) {
	var req struct {
		Name        string `json:"name"`
		SemVer      string `json:"semver"`
		URL         string `json:"url"`
		Checksum    string `json:"checksum"`
		MinCPU      int    `json:"min_cpu"`
		MinMemoryMB int    `json:"min_memory_mb"`
		// Image is a stored binaries ISO (name or sha256) instead of
		// url and checksum.
		Image string `json:"image"`
	}
	if !bindBody(c, &req) {
		return
	}
	spec := clusters.VersionSpec{Name: req.Name, SemVer: req.SemVer, URL: req.URL, Checksum: req.Checksum,
		MinCPU: req.MinCPU, MinMemoryMB: req.MinMemoryMB}
	if req.Image != "" {
		s.addVersionFromImage(c, req.Image, spec)
		return
	}
	v, err := s.clusters.AddVersion(c.Request.Context(), callerOf(c), spec)
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusCreated, restVersionOf(v))
}

func (s *Server) updateVersion(c *gin.Context) {
	var req struct {
		State string `json:"state"`
	}
	if !bindBody(c, &req) {
		return
	}
	v, err := s.clusters.SetVersionState(c.Request.Context(), callerOf(c), c.Param("id"), req.State)
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, restVersionOf(v))
}

func (s *Server) deleteVersion(c *gin.Context) {
	j, err := s.clusters.DeleteVersion(c.Request.Context(), callerOf(c), c.Param("id"), c.Query("delete_iso") == "true")
	s.accepted(c, j, err)
}

func (s *Server) listOfferings(c *gin.Context) {
	out := page[restOffering]{Items: make([]restOffering, 0, len(clusters.Offerings))}
	for _, o := range clusters.Offerings {
		out.Items = append(out.Items, restOffering{ID: o.ID, Name: o.Name, DisplayText: o.DisplayText, CPU: o.CPU,
			MemoryMB: o.MemoryMB, CPUSpeedMHz: o.CPUSpeedMHz})
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, out)
}
