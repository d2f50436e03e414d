package rest

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/bodycache"
	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
)

func restClusterOf(v clusters.ClusterView) client.Cluster {
	c := v.Cluster
	ep, _ := v.Endpoint()
	out := client.Cluster{ID: c.ID, Name: c.Name, Description: c.Description, Account: core.ClusterAccount(c), State: c.State,
		Version: client.VersionRef{ID: c.VersionID, Name: v.Version.Name, SemVer: v.Version.SemVer},
		Size:    c.Size, ControlNodes: c.ControlNodes, OfferingID: c.ServiceOfferingID, OfferingName: v.Offering.Name,
		CPU: v.Cores(), MemoryMB: v.MemoryMB(), Endpoint: ep, JoinMethod: c.JoinMethod, Type: c.TypeName(), Keypair: c.Keypair,
		NetworkID: c.NetworkID, ExternalLBIP: c.ExternalLBIP, Members: []client.Member{}, Created: c.Created, UpdatedAt: c.UpdatedAt,
		Observed: c.Observed, NodeOfferings: c.NodeOfferings, NodeTemplates: c.NodeTemplates,
		EtcdNodes: c.EtcdNodes, EtcdIPs: v.EtcdIPs()}
	if c.CNI != nil {
		out.CNIConfiguration = c.CNI.Name
	}
	if c.State == core.ClusterStarting {
		out.Waiting = clusters.StartingReason(c)
	}
	for _, m := range v.Members {
		rm := client.Member{Device: m.DeviceID, Role: m.Role, State: m.State, Version: m.Version,
			NodeName: m.NodeName, Node: m.Node, Reported: m.Reported, IP: m.IP, Hostname: m.Hostname}
		out.Members = append(out.Members, rm)
	}
	return out
}

func (s *Door) restJobOf(c *gin.Context, j core.Job) (client.Job, error) {
	out := client.Job{ID: j.ID, Command: j.Command, InstanceType: j.InstanceType, InstanceID: j.InstanceID, Created: j.Created}
	for _, a := range j.Abandoned {
		out.Abandoned = append(out.Abandoned, client.AbandonedNode{Device: a.Device, Node: a.Node, Reason: a.Reason})
	}
	switch j.Status {
	case core.JobPending:
		out.Status = "pending"
	case core.JobSucceeded:
		out.Status = "succeeded"
	default:
		out.Status = "failed"
		out.Error = &client.ErrorDetail{Code: j.ErrorKind.String(), Message: j.Error}
	}
	if !j.Completed.IsZero() {
		t := j.Completed
		out.Completed = &t
	}
	if j.Cluster != nil && j.Status == core.JobSucceeded {
		v, err := s.clusters.View(c.Request.Context(), *j.Cluster)
		if err != nil {
			return out, err
		}
		rc := restClusterOf(v)
		out.Cluster = &rc
	}
	return out, nil
}

// accepted answers 202 with the job and its URL.
func (s *Door) accepted(c *gin.Context, j core.Job, err error) {
	if err != nil {
		s.restFail(c, err)
		return
	}
	rj, err := s.restJobOf(c, j)
	if err != nil {
		s.restFail(c, err)
		return
	}
	c.Header("Location", Path+"jobs/"+j.ID)
	httpserve.WriteJSON(c.Writer, http.StatusAccepted, client.JobAccepted{Job: rj})
}

func (s *Door) listClusters(c *gin.Context) {
	limit, after, ok := listParams(c)
	if !ok {
		return
	}
	f := clusters.ClusterFilter{State: c.Query("state"), Keyword: c.Query("keyword"), ListAll: c.Query("listall") == "true", Type: c.Query("type")}
	switch f.Type {
	case "", core.ClusterCloudManaged, core.ClusterExternalManaged:
	default:
		Refuse(c, core.KindInvalid, "type must be CloudManaged or ExternalManaged, not "+strconv.Quote(f.Type))
		return
	}
	ctx := context.WithoutCancel(c.Request.Context()) // others may wait for this rendering
	caller := callerOf(c)
	render := func() ([]byte, error) {
		views, _, err := s.clusters.ListClusters(ctx, caller, f, 0, 0)
		if err != nil {
			return nil, err
		}
		out := client.Page[client.Cluster]{Items: []client.Cluster{}}
		start := 0
		if after != "" {
			start = len(views)
			for i, v := range views {
				if v.Cluster.ID == after {
					start = i + 1
					break
				}
			}
		}
		for i := start; i < len(views); i++ {
			if len(out.Items) == limit {
				out.NextCursor = cursorOf(views[i-1].Cluster.ID)
				break
			}
			out.Items = append(out.Items, restClusterOf(views[i]))
		}
		return encodeJSON(out)
	}
	var body bodycache.Body
	var err error
	if gen, ok := s.clusters.ViewsGeneration(); ok {
		cred := credOf(c)
		key := bodycache.Key(c.Request.Method, c.Request.URL.Path, c.Request.URL.RawQuery, cred.APIKey, string(cred.Role))
		body, err = s.bodies.GetBody(key, gen, render)
	} else {
		body.Raw, err = render()
	}
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteCachedJSON(c.Writer, c.Request, http.StatusOK, body.Raw, body.Gzipped)
}

func (s *Door) getCluster(c *gin.Context) {
	v, err := s.clusters.GetCluster(c.Request.Context(), callerOf(c), c.Param("id"))
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, restClusterOf(v))
}

func (s *Door) createCluster(c *gin.Context) {
	var req struct {
		Name         string `json:"name"`
		Description  string `json:"description"`
		Version      string `json:"version"`
		Offering     string `json:"offering"`
		Size         int    `json:"size"`
		ControlNodes int    `json:"control_nodes"`
		JoinMethod   string `json:"join_method"`
		Keypair      string `json:"keypair"`
		NetworkID    string `json:"network_id"`
		ExternalLBIP string `json:"external_lb_ip"`
		// Type ExternalManaged registers an existing cluster from
		// Kubeconfig (stored sealed, never shown again).
		Type       string `json:"type"`
		Kubeconfig string `json:"kubeconfig"`
		// Per-role shapes: node type (worker, control) to an offering
		// and to the profile its members get.
		NodeOfferings map[string]string `json:"node_offerings"`
		NodeTemplates map[string]string `json:"node_templates"`
		// A registered CNI configuration and its parameters' values.
		CNIConfiguration string            `json:"cni_configuration"`
		CNIDetails       map[string]string `json:"cni_details"`
		// Dedicated etcd nodes: 0, or an odd 1 to 7 (external etcd).
		EtcdNodes int `json:"etcd_nodes"`
	}
	if !bindBody(c, &req) {
		return
	}
	switch req.Type {
	case "", core.ClusterCloudManaged:
		if req.Kubeconfig != "" {
			Refuse(c, core.KindInvalid, "kubeconfig is for type ExternalManaged only")
			return
		}
	case core.ClusterExternalManaged:
		_, j, err := s.clusters.RegisterExternal(c.Request.Context(), callerOf(c), clusters.ExternalSpec{Name: req.Name, Description: req.Description,
			ZoneID: s.clusters.Zone().ID, Kubeconfig: []byte(req.Kubeconfig), VersionID: req.Version, Size: req.Size})
		s.accepted(c, j, err)
		return
	default:
		Refuse(c, core.KindInvalid, "type must be CloudManaged or ExternalManaged, not "+strconv.Quote(req.Type))
		return
	}
	if req.Offering == "" && req.NodeOfferings[clusters.NodeWorker] == "" {
		req.Offering = clusters.Offerings[0].ID
	}
	spec := clusters.ClusterSpec{Name: req.Name, Description: req.Description, ZoneID: s.clusters.Zone().ID,
		VersionID: req.Version, ServiceOfferingID: req.Offering, Size: req.Size, ControlNodes: req.ControlNodes,
		JoinMethod: req.JoinMethod, Keypair: req.Keypair, NetworkID: req.NetworkID, ExternalLBIP: req.ExternalLBIP,
		NodeOfferings: req.NodeOfferings, NodeTemplates: req.NodeTemplates, CNIConfigID: req.CNIConfiguration, CNIDetails: req.CNIDetails,
		EtcdNodes: req.EtcdNodes}
	_, j, err := s.clusters.CreateCluster(c.Request.Context(), callerOf(c), spec)
	s.accepted(c, j, err)
}

// clusterOp serves DELETE /clusters/{id} and POST /clusters/{id}/{scale,upgrade,start,stop}.
func (s *Door) clusterOp(c *gin.Context) {
	ctx, caller, id := c.Request.Context(), callerOf(c), c.Param("id")
	if c.Request.Method == http.MethodDelete {
		var opts clusters.DeleteOptions
		if f := c.Query("force"); f != "" {
			var err error
			if opts.Force, err = strconv.ParseBool(f); err != nil {
				Refuse(c, core.KindInvalid, "force must be true or false, not "+strconv.Quote(f))
				return
			}
		}
		j, err := s.clusters.DeleteCluster(ctx, caller, id, opts)
		s.accepted(c, j, err)
		return
	}
	var j core.Job
	var err error
	switch op := c.FullPath()[strings.LastIndexByte(c.FullPath(), '/')+1:]; op {
	case "scale":
		var req struct {
			Size          int               `json:"size"`
			Offering      string            `json:"offering"`
			NodeOfferings map[string]string `json:"node_offerings"`
			Remove        []string          `json:"remove"` // worker members to take out (device IDs)
		}
		if !bindBody(c, &req) {
			return
		}
		if req.Size < 0 {
			Refuse(c, core.KindInvalid, "size must be at least 1")
			return
		}
		j, err = s.clusters.ScaleClusterShapes(ctx, caller, id, req.Size, req.Offering, req.NodeOfferings, req.Remove...)
	case "upgrade":
		var req struct {
			Version string `json:"version"`
		}
		if !bindBody(c, &req) {
			return
		}
		if req.Version == "" {
			Refuse(c, core.KindInvalid, "version is required")
			return
		}
		j, err = s.clusters.UpgradeCluster(ctx, caller, id, req.Version)
	case "start":
		j, err = s.clusters.StartCluster(ctx, caller, id)
	case "stop":
		j, err = s.clusters.StopCluster(ctx, caller, id)
	}
	s.accepted(c, j, err)
}

// addNodes serves POST /clusters/{id}/nodes: CloudStack's
// addNodesToKubernetesCluster (or addVirtualMachinesToKubernetesCluster
// with control), devices named by their IDs.
func (s *Door) addNodes(c *gin.Context) {
	var req struct {
		Devices       []string `json:"devices"`
		Control       bool     `json:"control"`
		ManualUpgrade bool     `json:"manual_upgrade"`
	}
	if !bindBody(c, &req) {
		return
	}
	j, err := s.clusters.AddNodes(c.Request.Context(), callerOf(c), c.Param("id"), req.Devices,
		clusters.AddNodesOptions{Control: req.Control, ManualUpgrade: req.ManualUpgrade})
	s.accepted(c, j, err)
}

// removeNodes serves POST /clusters/{id}/nodes/remove: CloudStack's
// removeNodesFromKubernetesCluster (drained and taken out, as a scale-down).
func (s *Door) removeNodes(c *gin.Context) {
	var req struct {
		Devices []string `json:"devices"`
	}
	if !bindBody(c, &req) {
		return
	}
	j, err := s.clusters.RemoveNodes(c.Request.Context(), callerOf(c), c.Param("id"), req.Devices, clusters.CmdRemoveNodes)
	s.accepted(c, j, err)
}

func (s *Door) kubeconfig(c *gin.Context) {
	cl, cfg, err := s.clusters.Kubeconfig(c.Request.Context(), callerOf(c), c.Param("id"))
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, struct {
		ID         string `json:"id"`
		Kubeconfig string `json:"kubeconfig"`
		Name       string `json:"name"`
	}{cl.ID, string(cfg), cl.Name})
}

func (s *Door) getJob(c *gin.Context) {
	j, err := s.clusters.GetJob(c.Request.Context(), callerOf(c), c.Param("id"))
	if err != nil {
		s.restFail(c, err)
		return
	}
	rj, err := s.restJobOf(c, j)
	if err != nil {
		s.restFail(c, err)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, rj)
}
