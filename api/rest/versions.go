package rest

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// VersionOf is the view of a Kubernetes version the REST API and the admin socket answer.
func VersionOf(v core.Version) client.Version {
	return client.Version{ID: v.ID, Name: v.Name, SemVer: v.SemVer, ImageID: v.ImageID, ISOName: v.ISOName, ISOURL: v.ISOURL,
		Checksum: v.Checksum, ZoneID: v.ZoneID, State: v.State, MinCPU: v.MinCPU, MinMemoryMB: v.MinMemoryMB,
		Created: v.Created, UpdatedAt: v.UpdatedAt}
}

func (s *Door) listVersions(c *gin.Context) {
	vs, err := s.clusters.ListVersions(c.Request.Context(), clusters.VersionFilter{State: c.Query("state"), MinSemVer: c.Query("min_semver")})
	if err != nil {
		s.restFail(c, err)
		return
	}
	out := client.Page[client.Version]{Items: make([]client.Version, 0, len(vs))}
	for i := range vs {
		out.Items = append(out.Items, VersionOf(vs[i]))
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, out)
}

func (s *Door) getVersion(c *gin.Context) {
	v, err := s.clusters.GetVersion(c.Request.Context(), c.Param("id"))
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, VersionOf(v))
}

func (s *Door) addVersion(c *gin.Context) {
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
	httpserve.WriteJSON(c.Writer, http.StatusCreated, VersionOf(v))
}

func (s *Door) updateVersion(c *gin.Context) {
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
	httpserve.WriteJSON(c.Writer, http.StatusOK, VersionOf(v))
}

func (s *Door) deleteVersion(c *gin.Context) {
	j, err := s.clusters.DeleteVersion(c.Request.Context(), callerOf(c), c.Param("id"), c.Query("delete_iso") == "true")
	s.accepted(c, j, err)
}

func (s *Door) listOfferings(c *gin.Context) {
	out := client.Page[client.Offering]{Items: make([]client.Offering, 0, len(clusters.Offerings))}
	for _, o := range clusters.Offerings {
		out.Items = append(out.Items, client.Offering{ID: o.ID, Name: o.Name, DisplayText: o.DisplayText, CPU: o.CPU,
			MemoryMB: o.MemoryMB, CPUSpeedMHz: o.CPUSpeedMHz})
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, out)
}
