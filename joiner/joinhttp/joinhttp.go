// Package joinhttp is the thin HTTP adapter over the joiner service, for
// devices: they present an enrollment secret and get their join bundle, and
// nodes report back joined or failed. The ZTP HTTP server mounts it under
// /join/.
//
//	POST /join                 JSON request (or SONiC ZTP headers) -> JSON bundle
//	GET  /join/cloud-config    ?enrollment=... -> text/cloud-config, for a
//	                           CloudStack VM's user-data "#include" line
//	POST /join/report          Authorization: Bearer <report token>,
//	                           {"state":"joined"|"failed","detail":"..."}
//	GET  /join/sonic-plugin    the SONiC ZTP plugin that calls POST /join
//
// Answers: 200 bundle; 202 waiting (Retry-After); 400 bad request; 403 any
// credential failure (one message, so a prober learns nothing); 409 member
// of another cluster; 503 cluster not accepting members. Errors have
// ztpd's one error body (httpserve.WriteError).
package joinhttp

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
	"github.com/ztpd/ztpd/internal/positions"
	"github.com/ztpd/ztpd/joiner"
	"github.com/ztpd/ztpd/ztp/endpoints"
)

// Service is what the adapter needs from the joiner.
type Service interface {
	Join(ctx context.Context, req joiner.JoinRequest) (*joiner.Bundle, error)
	Report(ctx context.Context, credential string, remote netip.Addr, state, detail string) (core.Membership, error)
}

const maxBody = 64 << 10

// sonicPlugin is the SONiC ZTP plugin named by the joiner's ztp.json section.
//
//go:embed ztpd-join-plugin.py
var sonicPlugin []byte

// Plugin is the SONiC ZTP join plugin (the device agent installs it too,
// for a later rejoin).
func Plugin() []byte { return bytes.Clone(sonicPlugin) }

// Handler serves the join endpoints.
type Handler struct {
	svc Service
	log *slog.Logger
	mux *http.ServeMux
}

// New builds the handler.
func New(svc Service, log *slog.Logger) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{svc: svc, log: log, mux: http.NewServeMux()}
	h.Mount(h.mux)
	return h
}

// Mount registers the routes on mux (for example the ZTP server's mux).
func (h *Handler) Mount(mux *http.ServeMux) {
	mux.HandleFunc("POST "+endpoints.JoinPath+"{$}", h.join)
	mux.HandleFunc("POST /join", h.join)
	mux.HandleFunc("GET "+endpoints.JoinPath+"cloud-config", h.cloudConfig)
	mux.HandleFunc("POST "+endpoints.JoinPath+"report", h.report)
	mux.HandleFunc("GET "+joiner.PluginPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/x-python; charset=utf-8")
		w.Write(sonicPlugin)
	})
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// joinBody is the JSON a device posts. SONiC's curl-based plugins can send
// the same identity as the headers every SONiC ZTP download carries.
type joinBody struct {
	Enrollment   string `json:"enrollment"`
	MAC          string `json:"mac"`
	Serial       string `json:"serial"`
	Hostname     string `json:"hostname"`
	Product      string `json:"product"`
	SONiCVersion string `json:"sonic_version"`
	Kind         string `json:"kind"` // sonic | vm
	// FileEncodings the device can decode (joiner.FileEncodingGzip).
	FileEncodings []string `json:"file_encodings"`
	// CSR is the PEM certificate signing request for the key the device
	// made (joiner.JoinRequest.CSR).
	CSR string `json:"csr"`
	// EtcdCSRs are the etcd certificate signing requests of a device
	// joining a cluster with etcd nodes (joiner.JoinRequest.Etcd).
	EtcdCSRs joiner.EtcdCSRs `json:"etcd_csrs"`
	// Neighbors are the switch's LLDP neighbours, when it has any
	// (joiner.JoinRequest.Neighbors).
	Neighbors []positions.Neighbor `json:"lldp_neighbors"`
}

func (h *Handler) join(w http.ResponseWriter, r *http.Request) {
	var body joinBody
	if r.ContentLength != 0 {
		dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil && !errors.Is(err, io.EOF) {
			httpserve.WriteErrorCode(w, http.StatusBadRequest, core.KindInvalid, "request body: "+err.Error())
			return
		}
	}
	req := joiner.JoinRequest{
		Enrollment:   first(body.Enrollment, bearer(r)),
		MAC:          first(body.MAC, r.Header.Get("BASE-MAC-ADDRESS")),
		Serial:       first(body.Serial, r.Header.Get("SERIAL-NUMBER")),
		Hostname:     body.Hostname,
		Product:      first(body.Product, r.Header.Get("PRODUCT-NAME")),
		SONiCVersion: first(body.SONiCVersion, sonicVersion(r.Header.Get("SONiC-VERSION"))),
		Kind:         core.DeviceKind(body.Kind),
		RemoteIP:     remoteIP(r),
		CSR:          body.CSR,
		Etcd:         body.EtcdCSRs,
		Neighbors:    body.Neighbors,
	}
	if req.Kind == "" && (strings.HasPrefix(r.UserAgent(), "SONiC-ZTP") || r.Header.Get("SONiC-VERSION") != "") {
		req.Kind = core.KindSONiC
	}
	if req.Kind != "" && req.Kind != core.KindSONiC && req.Kind != core.KindVM {
		httpserve.WriteErrorCode(w, http.StatusBadRequest, core.KindInvalid, "kind must be sonic or vm")
		return
	}
	b, err := h.svc.Join(r.Context(), req)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	d := b.Deliver()
	if slices.Contains(body.FileEncodings, joiner.FileEncodingGzip) {
		if err := d.CompressFiles(); err != nil {
			httpserve.WriteError(w, r, h.log, err)
			return
		}
	}
	doc, err := d.AppendJSON(make([]byte, 0, 64<<10))
	if err != nil {
		httpserve.WriteError(w, r, h.log, err)
		return
	}
	httpserve.WriteJSONBody(w, http.StatusOK, append(doc, '\n'))
}

func (h *Handler) cloudConfig(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := joiner.JoinRequest{
		Enrollment: first(q.Get("enrollment"), bearer(r)),
		MAC:        q.Get("mac"),
		Serial:     q.Get("serial"),
		Hostname:   q.Get("hostname"),
		Kind:       core.KindVM,
		RemoteIP:   remoteIP(r),
	}
	b, err := h.svc.Join(r.Context(), req)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if b.CloudConfig == nil {
		httpserve.WriteErrorCode(w, http.StatusConflict, core.KindConflict, "this device joins by "+b.Method+", not cloud-config; use POST /join")
		return
	}
	w.Header().Set("Content-Type", "text/cloud-config; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(b.CloudConfig)
}

func (h *Handler) report(w http.ResponseWriter, r *http.Request) {
	var body struct {
		State  string `json:"state"`
		Detail string `json:"detail"`
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		httpserve.WriteErrorCode(w, http.StatusBadRequest, core.KindInvalid, "request body: "+err.Error())
		return
	}
	remote, _ := netip.ParseAddr(remoteIP(r)) // invalid: no holder, refused
	m, err := h.svc.Report(r.Context(), bearer(r), remote, body.State, body.Detail)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	// state is the membership as the cluster shows it; the report itself is
	// recorded as a hint (reported).
	httpserve.WriteJSON(w, http.StatusOK, map[string]any{"device": m.Device, "cluster": m.Cluster, "state": m.State, "reported": m.Reported})
}

// fail answers a joiner error: a wait is 202 with Retry-After; every
// credential failure is one 403 (a prober learns nothing); the rest by its
// kind (core.KindOf), a cluster not accepting members with Retry-After.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	var we *joiner.WaitError
	switch {
	case errors.As(err, &we):
		secs := int(we.RetryAfter.Seconds())
		if secs < 1 {
			secs = 30
		}
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		httpserve.WriteJSON(w, http.StatusAccepted, map[string]string{"state": "waiting", "reason": we.Reason})
	case joiner.IsUnauthorized(err):
		httpserve.WriteErrorCode(w, http.StatusForbidden, core.KindRefused, "credential invalid, expired, used, revoked or not issued to this device")
	case errors.Is(err, context.Canceled):
		// the client went away
	default:
		if errors.Is(err, joiner.ErrClusterUnavailable) {
			w.Header().Set("Retry-After", "60")
		}
		httpserve.WriteError(w, r, h.log, err)
	}
}

func bearer(r *http.Request) string {
	v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	return strings.TrimSpace(v)
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return strings.TrimSpace(b)
}

// sonicVersion drops SONiC ZTP's "N.A" placeholder for an unknown version.
func sonicVersion(v string) string {
	if v == "N.A" {
		return ""
	}
	return v
}

// remoteIP is the peer address; forwarding headers are not trusted.
func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil {
		if v4 := ip.To4(); v4 != nil {
			return v4.String()
		}
		return ip.String()
	}
	return ""
}
