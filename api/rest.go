package api

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/signing"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
)

//go:embed openapi.json
var openAPIDoc []byte

// OpenAPI returns the REST API's OpenAPI 3 document.
func OpenAPI() []byte { return openAPIDoc }

const (
	defaultLimit = 100
	maxLimit     = 1000
	maxBody      = 1 << 20
)

func (s *Server) routeREST(e *gin.Engine) {
	e.GET(core.PathOpenAPI, func(c *gin.Context) {
		c.Set("op", "openapi")
		c.Data(http.StatusOK, "application/json", openAPIDoc)
	})
	g := e.Group(strings.TrimSuffix(core.PathAPI, "/"), s.restAuth)
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
}

// restError writes {"error": {"code", "message"}}.
func restError(c *gin.Context, status int, code, msg string) {
	c.AbortWithStatusJSON(status, gin.H{"error": gin.H{"code": code, "message": msg}})
}

// restDomainError maps clusters errors to HTTP.
func restDomainError(c *gin.Context, err error) {
	switch clusters.KindOf(err) {
	case clusters.KindInvalid:
		restError(c, http.StatusBadRequest, "invalid", err.Error())
	case clusters.KindNotFound:
		restError(c, http.StatusNotFound, "not_found", err.Error())
	case clusters.KindState:
		restError(c, http.StatusConflict, "state", err.Error())
	case clusters.KindConflict:
		restError(c, http.StatusConflict, "conflict", err.Error())
	case clusters.KindInUse:
		restError(c, http.StatusConflict, "in_use", err.Error())
	case clusters.KindPermission:
		restError(c, http.StatusForbidden, "forbidden", err.Error())
	case clusters.KindUnavailable:
		restError(c, http.StatusServiceUnavailable, "unavailable", err.Error())
	default:
		restError(c, http.StatusInternalServerError, "internal", err.Error())
	}
}

// restAuth authenticates every /api/v1 request and keeps the body for handlers.
func (s *Server) restAuth(c *gin.Context) {
	r := c.Request
	ip := clientIP(r)
	if blocked, wait := s.limiter.blocked(ip, s.now()); blocked {
		authFailures.WithLabelValues("rest", "rate_limited").Inc()
		c.Header("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
		restError(c, http.StatusTooManyRequests, "rate_limited", "too many failed authentications from "+ip)
		return
	}
	var body []byte
	if r.Body != nil && r.Method != http.MethodGet && r.Method != http.MethodHead {
		var err error
		body, err = io.ReadAll(http.MaxBytesReader(c.Writer, r.Body, maxBody))
		if err != nil {
			restError(c, http.StatusRequestEntityTooLarge, "too_large", "request body over 1 MiB")
			return
		}
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err == nil {
		err = signing.CheckNames(q)
	}
	if err != nil {
		s.limiter.failed(ip, s.now())
		authFailures.WithLabelValues("rest", "bad_parameter_name").Inc()
		s.log.Warn("API request refused: bad query", "api", "rest", "client", ip, "reason", err.Error())
		restError(c, http.StatusBadRequest, "invalid", "malformed query: "+err.Error())
		return
	}
	for name := range q {
		if len(name) >= 5 && strings.EqualFold(name[:5], "ztpd-") {
			restError(c, http.StatusBadRequest, "invalid", "query parameters starting with ztpd- are reserved")
			return
		}
	}
	cred, err := s.verifyREST(r, q, body)
	if errors.Is(err, errReplayFull) {
		s.log.Warn("API write refused: replay memory full", "api", "rest", "client", ip, "op", r.Method+" "+r.URL.Path)
		c.Header("Retry-After", "60")
		restError(c, http.StatusTooManyRequests, "rate_limited", "too many signed writes within the signature lifetime; retry in a minute")
		return
	}
	if err != nil {
		apiKey, _, _, _ := signing.ParseRESTAuthorization(r.Header.Get("Authorization"))
		s.authFailed(c, "rest", ip, apiKey, r.Method+" "+r.URL.Path, err)
		c.Header("WWW-Authenticate", signing.RESTScheme)
		text := authFailedText
		if ae, ok := err.(*authError); ok && ae.hint != "" {
			text += ": " + ae.hint
		}
		restError(c, http.StatusUnauthorized, "unauthorized", text)
		return
	}
	c.Set("cred", cred)
	c.Set("body", body)
	c.Next()
}

func credOf(c *gin.Context) apikeys.Credential {
	v, _ := c.Get("cred")
	cred, _ := v.(apikeys.Credential)
	return cred
}

func callerOf(c *gin.Context) clusters.Caller {
	return callerFromCred(credOf(c))
}

func requireAdmin(c *gin.Context) {
	if !credOf(c).IsAdmin() {
		restError(c, http.StatusForbidden, "forbidden", "this operation needs an admin API key")
		return
	}
	c.Next()
}

// bindBody decodes the JSON body into v; unknown fields are errors, so a
// typo never silently falls back to a default.
func bindBody(c *gin.Context, v any) bool {
	raw, _ := c.Get("body")
	body, _ := raw.([]byte)
	if len(body) == 0 {
		return true
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		restError(c, http.StatusBadRequest, "invalid", "request body: "+err.Error())
		return false
	}
	return true
}

// page is one page of a list answer.
type page[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// listParams reads limit and cursor. Cursors are opaque: the last key seen.
func listParams(c *gin.Context) (limit int, after string, ok bool) {
	limit = defaultLimit
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			restError(c, http.StatusBadRequest, "invalid", "limit must be 1.."+strconv.Itoa(maxLimit))
			return 0, "", false
		}
		limit = n
	}
	if v := c.Query("cursor"); v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil {
			restError(c, http.StatusBadRequest, "invalid", "malformed cursor")
			return 0, "", false
		}
		after = string(b)
	}
	return limit, after, true
}

func cursorOf(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }

// scanPage reads one page of a bucket after the cursor, keeping records for
// which keep returns true.
func scanPage[T any](s *Server, b core.Bucket, limit int, after string, keep func(*T) bool) (page[T], error) {
	out := page[T]{Items: []T{}}
	var last string
	more := false
	err := s.st.View(func(tx core.Tx) error {
		return tx.Scan(b, after, func(k string, raw []byte) (bool, error) {
			if len(out.Items) == limit {
				more = true
				return false, nil
			}
			var v T
			if err := core.Decode(raw, &v); err != nil {
				return false, err
			}
			last = k
			if keep(&v) {
				out.Items = append(out.Items, v)
			}
			return true, nil
		})
	})
	if more {
		out.NextCursor = cursorOf(last)
	}
	return out, err
}

// rawPage writes one page of a bucket whose stored records are already the
// API's JSON (devices, leases, events), copying the bytes instead of decoding
// and re-encoding them. keep (nil: all) filters on the raw record. The page
// depends on nothing but the bucket and the request's path and query, so
// when the store counts writes it is served from the response cache until
// the bucket changes. Pages filtered by the caller's clusters (user keys)
// depend on more than the bucket and are never kept.
func (s *Server) rawPage(c *gin.Context, b core.Bucket, limit int, after string, keep func(raw []byte) (bool, error)) {
	g, ok := s.st.(core.Generations)
	if !ok || b == core.BucketEvents || !credOf(c).IsAdmin() { // events change all the time: not worth keeping
		writePooledPage(c, func(buf []byte) ([]byte, error) { return s.appendPage(buf, b, limit, after, keep) })
		return
	}
	gen := g.Generation(b)
	cred := credOf(c)
	key := cacheKey(c.Request.Method, c.Request.URL.Path, c.Request.URL.RawQuery, cred.APIKey, string(cred.Role))
	body, err := s.bodies.get(key, gen, func() ([]byte, error) {
		bp := pageBufs.Get().(*[]byte)
		buf, err := s.appendPage((*bp)[:0], b, limit, after, keep)
		var out []byte
		if err == nil {
			out = bytes.Clone(buf) // kept: exactly sized, apart from the pool
		}
		if cap(buf) <= maxPooledPage {
			*bp = buf
			pageBufs.Put(bp)
		}
		return out, err
	})
	if err != nil {
		restDomainError(c, err)
		return
	}
	writeBody(c, http.StatusOK, restContentType, body)
}

const restContentType = "application/json; charset=utf-8"

// writePooledPage answers with the page fill appends to a pooled buffer
// (or the error it returns), and gives the buffer back.
func writePooledPage(c *gin.Context, fill func(buf []byte) ([]byte, error)) {
	bp := pageBufs.Get().(*[]byte)
	buf, err := fill((*bp)[:0])
	if err != nil {
		restDomainError(c, err)
	} else {
		writeBody(c, http.StatusOK, restContentType, buf)
	}
	if cap(buf) <= maxPooledPage {
		*bp = buf
		pageBufs.Put(bp)
	}
}

// appendPage appends the page's JSON to buf.
func (s *Server) appendPage(buf []byte, b core.Bucket, limit int, after string, keep func(raw []byte) (bool, error)) ([]byte, error) {
	buf = append(buf, `{"items":[`...)
	n := 0
	var last string
	more := false
	err := s.st.View(func(tx core.Tx) error {
		return tx.Scan(b, after, func(k string, raw []byte) (bool, error) {
			if n == limit {
				more = true
				return false, nil
			}
			last = k
			if keep != nil {
				ok, err := keep(raw)
				if err != nil || !ok {
					return err == nil, err
				}
			}
			if n > 0 {
				buf = append(buf, ',')
			}
			buf = append(buf, raw...)
			n++
			return true, nil
		})
	})
	if err != nil {
		return buf, err
	}
	buf = append(buf, ']')
	if more {
		buf = append(buf, `,"next_cursor":"`...)
		buf = append(buf, cursorOf(last)...)
		buf = append(buf, '"')
	}
	return append(buf, '}'), nil
}

// pageBufs recycles page buffers: a page is tens of kilobytes, and
// allocating one per request is most of what the collector has to do.
// writeBody is done with a buffer when it returns.
var pageBufs = sync.Pool{New: func() any { b := make([]byte, 0, 64<<10); return &b }}

const maxPooledPage = 1 << 20

// decodeKeep decodes only when a filter needs it.
func decodeKeep[T any](active bool, match func(*T) bool) func([]byte) (bool, error) {
	if !active {
		return nil
	}
	return func(raw []byte) (bool, error) {
		var v T
		if err := core.Decode(raw, &v); err != nil {
			return false, err
		}
		return match(&v), nil
	}
}

func (s *Server) listDevices(c *gin.Context) {
	limit, after, ok := listParams(c)
	if !ok {
		return
	}
	state, kind, cluster, subnet, approved := c.Query("state"), c.Query("kind"), c.Query("cluster"), c.Query("subnet"), c.Query("approved")
	if approved != "" && approved != "true" && approved != "false" {
		restError(c, http.StatusBadRequest, "invalid", "approved must be true or false")
		return
	}
	type filter struct {
		Kind     core.DeviceKind  `json:"kind"`
		Subnet   string           `json:"subnet"`
		State    core.DeviceState `json:"state"`
		Approved bool             `json:"approved"`
		Cluster  string           `json:"cluster"`
	}
	own, ok := s.ownClusters(c)
	if !ok {
		return
	}
	active := state != "" || kind != "" || cluster != "" || subnet != "" || approved != "" || own != nil
	s.rawPage(c, core.BucketDevices, limit, after, decodeKeep(active, func(d *filter) bool {
		return (own == nil || own[d.Cluster]) && (state == "" || string(d.State) == state) && (kind == "" || string(d.Kind) == kind) &&
			(cluster == "" || d.Cluster == cluster) && (subnet == "" || d.Subnet == subnet) &&
			(approved == "" || strconv.FormatBool(d.Approved) == approved)
	}))
}

func (s *Server) getDevice(c *gin.Context) {
	id := c.Param("id")
	if mac, err := core.NormalizeMAC(id); err == nil {
		id = mac
	}
	var d core.Device
	err := s.st.View(func(tx core.Tx) error {
		var err error
		if d, err = core.GetDevice(tx, id); err != nil {
			d, err = core.DeviceBySerial(tx, c.Param("id"))
		}
		return err
	})
	own, ok := s.ownClusters(c)
	if !ok {
		return
	}
	if err != nil || (own != nil && !own[d.Cluster]) {
		restError(c, http.StatusNotFound, "not_found", "device "+c.Param("id")+" not found")
		return
	}
	c.JSON(http.StatusOK, d)
}

// ownClusters is nil for admin keys, else the IDs of the clusters of the
// key's account: a user key sees only their devices, leases and events.
// ok is false when the answer was already written.
func (s *Server) ownClusters(c *gin.Context) (map[string]bool, bool) {
	if credOf(c).IsAdmin() {
		return nil, true
	}
	own, err := s.clusters.AccountClusters(c.Request.Context(), callerOf(c))
	if err != nil {
		restDomainError(c, err)
		return nil, false
	}
	return own, true
}

// ownMACs is nil for admin keys, else the MAC addresses of the devices in
// the key's account's clusters.
func (s *Server) ownMACs(c *gin.Context) (map[string]bool, bool) {
	own, ok := s.ownClusters(c)
	if own == nil || !ok {
		return nil, ok
	}
	macs := map[string]bool{}
	err := s.st.View(func(tx core.Tx) error {
		return tx.Scan(core.BucketDevices, "", func(_ string, raw []byte) (bool, error) {
			var d struct {
				MAC     string `json:"mac"`
				Cluster string `json:"cluster"`
			}
			if err := core.Decode(raw, &d); err != nil {
				return false, err
			}
			if own[d.Cluster] {
				macs[d.MAC] = true
			}
			return true, nil
		})
	})
	if err != nil {
		restDomainError(c, err)
		return nil, false
	}
	return macs, true
}

func (s *Server) approveDevice(c *gin.Context) {
	var req struct {
		Cluster string `json:"cluster"`
	}
	if !bindBody(c, &req) {
		return
	}
	d, err := s.clusters.ApproveDevice(c.Request.Context(), callerOf(c), c.Param("id"), req.Cluster)
	if err != nil {
		restDomainError(c, err)
		return
	}
	c.JSON(http.StatusOK, d)
}

func (s *Server) resetDevice(c *gin.Context) {
	d, err := s.clusters.ResetDevice(c.Request.Context(), callerOf(c), c.Param("id"))
	if err != nil {
		restDomainError(c, err)
		return
	}
	c.JSON(http.StatusOK, d)
}

func (s *Server) listLeases(c *gin.Context) {
	limit, after, ok := listParams(c)
	if !ok {
		return
	}
	state, subnet, mac := c.Query("state"), c.Query("subnet"), strings.ToLower(c.Query("mac"))
	type filter struct {
		MAC    string          `json:"mac"`
		Subnet string          `json:"subnet"`
		State  core.LeaseState `json:"state"`
	}
	macs, ok := s.ownMACs(c)
	if !ok {
		return
	}
	s.rawPage(c, core.BucketLeases, limit, after, decodeKeep(state != "" || subnet != "" || mac != "" || macs != nil, func(l *filter) bool {
		return (macs == nil || macs[l.MAC]) && (state == "" || string(l.State) == state) && (subnet == "" || l.Subnet == subnet) && (mac == "" || l.MAC == mac)
	}))
}

// ---- clusters ----

type restVersionRef struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	SemVer string `json:"semver"`
}

type restMember struct {
	Device   string           `json:"device"`
	Role     string           `json:"role"`
	State    core.DeviceState `json:"state"`
	Version  string           `json:"version,omitempty"`
	IP       string           `json:"ip,omitempty"`
	Hostname string           `json:"hostname,omitempty"`
}

type restCluster struct {
	ID           string            `json:"id"`
	Name         string            `json:"name"`
	Description  string            `json:"description"`
	Account      string            `json:"account"`
	State        core.ClusterState `json:"state"`
	Version      restVersionRef    `json:"version"`
	Size         int               `json:"size"`
	ControlNodes int               `json:"control_nodes"`
	OfferingID   string            `json:"offering_id"`
	OfferingName string            `json:"offering_name"`
	CPU          int               `json:"cpu"`
	MemoryMB     int               `json:"memory_mb"`
	Endpoint     string            `json:"endpoint"`
	JoinMethod   string            `json:"join_method"`
	Keypair      string            `json:"keypair,omitempty"`
	NetworkID    string            `json:"network_id,omitempty"`
	ExternalLBIP string            `json:"external_lb_ip,omitempty"`
	Members      []restMember      `json:"members"`
	Created      time.Time         `json:"created"`
	UpdatedAt    time.Time         `json:"updated_at"`
}

func restClusterOf(v clusters.ClusterView) restCluster {
	c := v.Cluster
	ep, _ := v.Endpoint()
	out := restCluster{ID: c.ID, Name: c.Name, Description: c.Description, Account: core.ClusterAccount(c), State: c.State,
		Version: restVersionRef{ID: c.VersionID, Name: v.Version.Name, SemVer: v.Version.SemVer},
		Size:    c.Size, ControlNodes: c.ControlNodes, OfferingID: c.ServiceOfferingID, OfferingName: v.Offering.Name,
		CPU: v.Cores(), MemoryMB: v.MemoryMB(), Endpoint: ep, JoinMethod: c.JoinMethod, Keypair: c.Keypair,
		NetworkID: c.NetworkID, ExternalLBIP: c.ExternalLBIP, Members: []restMember{}, Created: c.Created, UpdatedAt: c.UpdatedAt}
	for _, m := range v.Members {
		rm := restMember{Device: m.Membership.Device, Role: m.Role, State: m.State, Version: m.Version}
		if m.Device != nil {
			rm.IP, rm.Hostname = m.Device.IP, m.Device.Hostname
		}
		out.Members = append(out.Members, rm)
	}
	return out
}

type restJob struct {
	ID           string       `json:"id"`
	Command      string       `json:"command"`
	Status       string       `json:"status"`
	InstanceType string       `json:"instance_type"`
	InstanceID   string       `json:"instance_id"`
	Error        *restErrBody `json:"error,omitempty"`
	Cluster      *restCluster `json:"cluster,omitempty"`
	Created      time.Time    `json:"created"`
	Completed    *time.Time   `json:"completed,omitempty"`
}

type restErrBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

var kindCodes = map[clusters.Kind]string{clusters.KindInvalid: "invalid", clusters.KindNotFound: "not_found",
	clusters.KindState: "state", clusters.KindConflict: "conflict", clusters.KindInUse: "in_use",
	clusters.KindPermission: "forbidden", clusters.KindUnavailable: "unavailable", clusters.KindInternal: "internal"}

func (s *Server) restJobOf(c *gin.Context, j clusters.Job) (restJob, error) {
	out := restJob{ID: j.ID, Command: j.Command, InstanceType: j.InstanceType, InstanceID: j.InstanceID, Created: j.Created}
	switch j.Status {
	case clusters.JobPending:
		out.Status = "pending"
	case clusters.JobSucceeded:
		out.Status = "succeeded"
	default:
		out.Status = "failed"
		out.Error = &restErrBody{Code: kindCodes[j.ErrorKind], Message: j.Error}
	}
	if !j.Completed.IsZero() {
		t := j.Completed
		out.Completed = &t
	}
	if j.Cluster != nil && j.Status == clusters.JobSucceeded {
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
func (s *Server) accepted(c *gin.Context, j clusters.Job, err error) {
	if err != nil {
		restDomainError(c, err)
		return
	}
	rj, err := s.restJobOf(c, j)
	if err != nil {
		restDomainError(c, err)
		return
	}
	c.Header("Location", core.PathAPI+"jobs/"+j.ID)
	c.JSON(http.StatusAccepted, gin.H{"job": rj})
}

func (s *Server) listClusters(c *gin.Context) {
	limit, after, ok := listParams(c)
	if !ok {
		return
	}
	f := clusters.ClusterFilter{State: c.Query("state"), Keyword: c.Query("keyword"), ListAll: c.Query("listall") == "true"}
	ctx := context.WithoutCancel(c.Request.Context()) // others may wait for this rendering
	caller := callerOf(c)
	render := func() ([]byte, error) {
		views, _, err := s.clusters.ListClusters(ctx, caller, f, 0, 0)
		if err != nil {
			return nil, err
		}
		out := page[restCluster]{Items: []restCluster{}}
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
		return json.Marshal(out)
	}
	var body []byte
	var err error
	if gen, ok := s.clusters.ViewsGeneration(); ok {
		cred := credOf(c)
		key := cacheKey(c.Request.Method, c.Request.URL.Path, c.Request.URL.RawQuery, cred.APIKey, string(cred.Role))
		body, err = s.bodies.get(key, gen, render)
	} else {
		body, err = render()
	}
	if err != nil {
		restDomainError(c, err)
		return
	}
	writeBody(c, http.StatusOK, restContentType, body)
}

func (s *Server) getCluster(c *gin.Context) {
	v, err := s.clusters.GetCluster(c.Request.Context(), callerOf(c), c.Param("id"))
	if err != nil {
		restDomainError(c, err)
		return
	}
	c.JSON(http.StatusOK, restClusterOf(v))
}

func (s *Server) createCluster(c *gin.Context) {
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
	}
	if !bindBody(c, &req) {
		return
	}
	if req.Offering == "" {
		req.Offering = clusters.Offerings[0].ID
	}
	spec := clusters.ClusterSpec{Name: req.Name, Description: req.Description, ZoneID: s.clusters.Zone().ID,
		VersionID: req.Version, ServiceOfferingID: req.Offering, Size: req.Size, ControlNodes: req.ControlNodes,
		JoinMethod: req.JoinMethod, Keypair: req.Keypair, NetworkID: req.NetworkID, ExternalLBIP: req.ExternalLBIP}
	_, j, err := s.clusters.CreateCluster(c.Request.Context(), callerOf(c), spec)
	s.accepted(c, j, err)
}

// clusterOp serves DELETE /clusters/{id} and POST /clusters/{id}/{scale,upgrade,start,stop}.
func (s *Server) clusterOp(c *gin.Context) {
	ctx, caller, id := c.Request.Context(), callerOf(c), c.Param("id")
	if c.Request.Method == http.MethodDelete {
		j, err := s.clusters.DeleteCluster(ctx, caller, id)
		s.accepted(c, j, err)
		return
	}
	var j clusters.Job
	var err error
	switch op := c.FullPath()[strings.LastIndexByte(c.FullPath(), '/')+1:]; op {
	case "scale":
		var req struct {
			Size     int    `json:"size"`
			Offering string `json:"offering"`
		}
		if !bindBody(c, &req) {
			return
		}
		if req.Size < 0 {
			restError(c, http.StatusBadRequest, "invalid", "size must be at least 1")
			return
		}
		j, err = s.clusters.ScaleCluster(ctx, caller, id, req.Size, req.Offering)
	case "upgrade":
		var req struct {
			Version string `json:"version"`
		}
		if !bindBody(c, &req) {
			return
		}
		if req.Version == "" {
			restError(c, http.StatusBadRequest, "invalid", "version is required")
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

func (s *Server) kubeconfig(c *gin.Context) {
	cl, cfg, err := s.clusters.Kubeconfig(c.Request.Context(), callerOf(c), c.Param("id"))
	if err != nil {
		restDomainError(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"id": cl.ID, "name": cl.Name, "kubeconfig": string(cfg)})
}

func (s *Server) getJob(c *gin.Context) {
	j, err := s.clusters.GetJob(c.Request.Context(), callerOf(c), c.Param("id"))
	if err != nil {
		restDomainError(c, err)
		return
	}
	rj, err := s.restJobOf(c, j)
	if err != nil {
		restDomainError(c, err)
		return
	}
	c.JSON(http.StatusOK, rj)
}

// ---- versions, offerings, images ----

func (s *Server) listVersions(c *gin.Context) {
	vs, err := s.clusters.ListVersions(c.Request.Context(), clusters.VersionFilter{State: c.Query("state"), MinSemVer: c.Query("min_semver")})
	if err != nil {
		restDomainError(c, err)
		return
	}
	c.JSON(http.StatusOK, page[core.Version]{Items: vs})
}

func (s *Server) getVersion(c *gin.Context) {
	v, err := s.clusters.GetVersion(c.Request.Context(), c.Param("id"))
	if err != nil {
		restDomainError(c, err)
		return
	}
	c.JSON(http.StatusOK, v)
}

func (s *Server) addVersion(c *gin.Context) {
	var req struct {
		Name        string `json:"name"`
		SemVer      string `json:"semver"`
		URL         string `json:"url"`
		Checksum    string `json:"checksum"`
		MinCPU      int    `json:"min_cpu"`
		MinMemoryMB int    `json:"min_memory_mb"`
	}
	if !bindBody(c, &req) {
		return
	}
	v, err := s.clusters.AddVersion(c.Request.Context(), callerOf(c), clusters.VersionSpec{Name: req.Name, SemVer: req.SemVer,
		URL: req.URL, Checksum: req.Checksum, MinCPU: req.MinCPU, MinMemoryMB: req.MinMemoryMB})
	if err != nil {
		restDomainError(c, err)
		return
	}
	c.JSON(http.StatusCreated, v)
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
		restDomainError(c, err)
		return
	}
	c.JSON(http.StatusOK, v)
}

func (s *Server) deleteVersion(c *gin.Context) {
	j, err := s.clusters.DeleteVersion(c.Request.Context(), callerOf(c), c.Param("id"), c.Query("delete_iso") == "true")
	s.accepted(c, j, err)
}

func (s *Server) listOfferings(c *gin.Context) {
	c.JSON(http.StatusOK, page[clusters.Offering]{Items: clusters.Offerings})
}

func (s *Server) listImages(c *gin.Context) {
	if s.images == nil {
		c.JSON(http.StatusOK, page[core.Image]{Items: []core.Image{}})
		return
	}
	list, err := s.images.List(c.Query("kind"))
	if err != nil {
		restDomainError(c, err)
		return
	}
	if list == nil {
		list = []core.Image{}
	}
	c.JSON(http.StatusOK, page[core.Image]{Items: list})
}

// ---- tokens, events ----

// restToken is a token without its secret hash.
type restToken struct {
	ID          string    `json:"id"`
	Kind        string    `json:"kind"`
	Cluster     string    `json:"cluster,omitempty"`
	Device      string    `json:"device,omitempty"`
	Usages      []string  `json:"usages,omitempty"`
	Description string    `json:"description,omitempty"`
	Expires     time.Time `json:"expires,omitzero"`
	UsedAt      time.Time `json:"used_at,omitzero"`
	Revoked     bool      `json:"revoked"`
	Created     time.Time `json:"created"`
}

func (s *Server) listTokens(c *gin.Context) {
	limit, after, ok := listParams(c)
	if !ok {
		return
	}
	cluster, kind, revoked := c.Query("cluster"), c.Query("kind"), c.Query("revoked")
	p, err := scanPage(s, core.BucketTokens, limit, after, func(t *core.Token) bool {
		return (cluster == "" || t.Cluster == cluster) && (kind == "" || t.Kind == kind) &&
			(revoked == "" || strconv.FormatBool(t.Revoked) == revoked)
	})
	if err != nil {
		restDomainError(c, err)
		return
	}
	out := page[restToken]{Items: make([]restToken, 0, len(p.Items)), NextCursor: p.NextCursor}
	for _, t := range p.Items {
		out.Items = append(out.Items, restToken{ID: t.ID, Kind: t.Kind, Cluster: t.Cluster, Device: t.Device, Usages: t.Usages,
			Description: t.Description, Expires: t.Expires, UsedAt: t.UsedAt, Revoked: t.Revoked, Created: t.Created})
	}
	c.JSON(http.StatusOK, out)
}

func (s *Server) revokeToken(c *gin.Context) {
	ref := c.Param("id")
	if k := c.Query("kind"); k != "" {
		ref = k + "/" + ref
	}
	t, err := s.clusters.RevokeToken(c.Request.Context(), callerOf(c), ref)
	if err != nil {
		restDomainError(c, err)
		return
	}
	c.JSON(http.StatusOK, restToken{ID: t.ID, Kind: t.Kind, Cluster: t.Cluster, Device: t.Device, Usages: t.Usages,
		Description: t.Description, Expires: t.Expires, UsedAt: t.UsedAt, Revoked: t.Revoked, Created: t.Created})
}

func (s *Server) listEvents(c *gin.Context) {
	limit, after, ok := listParams(c)
	if !ok {
		return
	}
	if v := c.Query("since"); v != "" {
		seq, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			restError(c, http.StatusBadRequest, "invalid", "since must be an event sequence number")
			return
		}
		if k := core.EventKey(seq); k > after {
			after = k
		}
	}
	typ, device, cluster := c.Query("type"), c.Query("device"), c.Query("cluster")
	type filter struct {
		Type    string `json:"type"`
		Device  string `json:"device"`
		Cluster string `json:"cluster"`
		Fields  struct {
			Account string `json:"account"`
		} `json:"fields"`
	}
	// A user key sees its clusters' events and those naming its account
	// (its writes, also of clusters since deleted).
	own, ok := s.ownClusters(c)
	if !ok {
		return
	}
	account := callerOf(c).AccountName()
	keep := decodeKeep(typ != "" || device != "" || cluster != "" || own != nil, func(e *filter) bool {
		return (own == nil || (e.Cluster != "" && own[e.Cluster]) || e.Fields.Account == account) && (typ == "" || e.Type == typ || strings.HasPrefix(e.Type, typ+".")) &&
			(device == "" || e.Device == device) && (cluster == "" || e.Cluster == cluster)
	})
	var streams []core.Bucket
	switch c.DefaultQuery("stream", "all") {
	case "all":
		streams = []core.Bucket{core.BucketEvents, core.BucketAudit}
	case "device":
		streams = []core.Bucket{core.BucketEvents}
	case "audit":
		streams = []core.Bucket{core.BucketAudit}
	default:
		restError(c, http.StatusBadRequest, "invalid", "stream must be all, device or audit")
		return
	}
	writePooledPage(c, func(buf []byte) ([]byte, error) { return s.appendMergedPage(buf, streams, limit, after, keep) })
}

// appendMergedPage is appendPage over several buckets whose keys share one
// order (the device and audit event streams share a sequence): each bucket
// contributes up to limit+1 kept records after the cursor, and the page is
// their merge in key order.
func (s *Server) appendMergedPage(buf []byte, buckets []core.Bucket, limit int, after string, keep func(raw []byte) (bool, error)) ([]byte, error) {
	if len(buckets) == 1 {
		return s.appendPage(buf, buckets[0], limit, after, keep)
	}
	type rec struct {
		key string
		raw []byte
	}
	var all []rec
	err := s.st.View(func(tx core.Tx) error {
		for _, b := range buckets {
			n := 0
			err := tx.Scan(b, after, func(k string, raw []byte) (bool, error) {
				if keep != nil {
					ok, err := keep(raw)
					if err != nil || !ok {
						return err == nil, err
					}
				}
				all = append(all, rec{k, bytes.Clone(raw)})
				n++
				return n <= limit, nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return buf, err
	}
	slices.SortFunc(all, func(a, b rec) int { return strings.Compare(a.key, b.key) })
	more := len(all) > limit
	if more {
		all = all[:limit]
	}
	buf = append(buf, `{"items":[`...)
	for i, r := range all {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, r.raw...)
	}
	buf = append(buf, ']')
	if more {
		buf = append(buf, `,"next_cursor":"`...)
		buf = append(buf, cursorOf(all[len(all)-1].key)...)
		buf = append(buf, '"')
	}
	return append(buf, '}'), nil
}
