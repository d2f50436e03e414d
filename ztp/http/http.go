// Package ztphttp serves ZTP content over HTTP: SONiC ztp.json and per-device
// config_db.json, ONIE installers, cloud-init (CloudStack datasource)
// metadata, a VM's join data (answered on the device HTTPS listener only),
// and stored images and ISOs with Range, ETag and sendfile.
//
// Devices are identified by the connection's source address and their own
// headers (SONiC: SERIAL-NUMBER, BASE-MAC-ADDRESS, PRODUCT-NAME,
// SONiC-VERSION; ONIE: ONIE-*). Forwarding headers such as X-Forwarded-For
// are deliberately ignored: ztpd answers devices on its own networks.
//
// Refusals are JSON in the one shape of every ztpd handler
// (internal/httpserve.WriteError): {"error": {"code": "<kind>", "message":
// "<reason>"}}, with the status of the content error.
package ztphttp

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
	"github.com/ztpd/ztpd/internal/safepath"
	"github.com/ztpd/ztpd/ztp/content"
	"github.com/ztpd/ztpd/ztp/endpoints"
)

// Server is the HTTP front end of the content service.
type Server struct {
	svc  *content.Service
	log  *slog.Logger
	door FrontDoor

	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// New returns the HTTP front end for svc; door is what "/" tells a person
// (frontdoor.go); its metrics register on reg (nil: kept, not exported).
func New(svc *content.Service, log *slog.Logger, door FrontDoor, reg prometheus.Registerer) *Server {
	if log == nil {
		log = slog.Default()
	}
	f := promauto.With(reg)
	return &Server{svc: svc, log: log, door: door,
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_ztp_http_requests_total", Help: "ZTP content HTTP requests by route and status code.",
		}, []string{"route", "code"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ztpd_ztp_http_request_seconds", Help: "Time to answer a ZTP content request (to the last byte for files).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"route"}),
	}
}

// Register mounts every ZTP route on mux: ztp.json and configs, ONIE, images,
// ISOs, Kubernetes versions' binaries, files, the cloud-init metadata paths, and the answer to CloudStack's
// password-server request (port 8080 of the DHCP server, "/" with a
// DomU_Request header).
func (s *Server) Register(mux *http.ServeMux) {
	s.handle(mux, "GET "+endpoints.ZTPJSONPath, "ztp.json", s.ztpJSON)
	s.handle(mux, "GET "+endpoints.ZTPConfigPath+"{id}/config_db.json", "config_db.json", s.configDB)
	s.handle(mux, "GET "+endpoints.ONIEInstallerPath, "onie-installer", s.onieInstaller)
	s.handle(mux, "GET "+endpoints.ImagesPath+"{ref}", "images", s.image(""))
	s.handle(mux, "GET "+endpoints.ISOsPath+"{name}", "isos", s.iso)
	s.handle(mux, "GET "+endpoints.BinariesPath+"{version}/{name}", "binaries", s.binary)
	s.handle(mux, "GET "+endpoints.FilesPath+"{path...}", "files", s.file)
	s.registerMetadata(mux)
}

// MetadataHandler serves only the cloud-init paths, for the extra listener on
// port 80 of the appliance address.
func (s *Server) MetadataHandler() http.Handler {
	mux := http.NewServeMux()
	s.registerMetadata(mux)
	return mux
}

func (s *Server) registerMetadata(mux *http.ServeMux) {
	s.handle(mux, "GET /latest/meta-data", "meta-data", s.metadataIndex)
	s.handle(mux, "GET "+endpoints.MetadataPath+"{$}", "meta-data", s.metadataIndex)
	s.handle(mux, "GET "+endpoints.MetadataPath+"{key}", "meta-data", s.metadata)
	s.handle(mux, "GET "+endpoints.UserDataPath, "user-data", s.userData)
	s.handle(mux, "GET "+endpoints.JoinDataPath, "join-data", s.joinData)
	// A waiter of a cluster with etcd nodes posts its etcd key requests.
	s.handle(mux, "POST "+endpoints.JoinDataPath, "join-data", s.joinData)
	// The CloudStack virtual router also answers /latest/<key>.
	s.handle(mux, "GET /latest/{key}", "meta-data", s.metadata)
	s.handle(mux, "GET /{$}", "password", s.password)
	// ONIE's waterfall asks the DHCP server's address, usually on port 80.
	s.handle(mux, "GET /{name}", "onie-installer", s.onieWaterfall)
}

func (s *Server) handle(mux *http.ServeMux, pattern, route string, h http.HandlerFunc) {
	obs := s.duration.WithLabelValues(route)
	ok := s.requests.WithLabelValues(route, "200")
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h(sw, r)
		if sw.code == 0 || sw.code == http.StatusOK {
			ok.Inc()
		} else {
			s.requests.WithLabelValues(route, strconv.Itoa(sw.code)).Inc()
		}
		obs.Observe(time.Since(start).Seconds())
	})
}

// ClientFrom builds the content client of a request: its addresses and the
// SONiC and ONIE headers (header names are case-insensitive).
func ClientFrom(r *http.Request) *content.Client {
	c := &content.Client{Transport: "http", Secure: r.TLS != nil}
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		c.Addr = ap.Addr().Unmap()
	}
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if ap, err := netip.ParseAddrPort(la.String()); err == nil {
			c.Local = ap.Addr().Unmap()
		}
	}
	h := r.Header
	// Header names are matched case-insensitively: net/http stores them in
	// canonical form, so "SONiC-VERSION" arrives as "Sonic-Version".
	c.Serial = clean(hget(h, "Serial-Number"))
	c.BaseMAC = clean(hget(h, "Base-Mac-Address"))
	c.Product = clean(hget(h, "Product-Name"))
	c.SONiCVersion = clean(hget(h, "Sonic-Version"))
	var o content.ONIE
	if hasONIE(h) {
		o = content.ONIE{Serial: clean(hget(h, "Onie-Serial-Number")), MAC: clean(hget(h, "Onie-Eth-Addr")),
			Vendor: clean(hget(h, "Onie-Vendor-Id")), Machine: clean(hget(h, "Onie-Machine")),
			MachineRev: clean(hget(h, "Onie-Machine-Rev")), Arch: clean(hget(h, "Onie-Arch")),
			Version: clean(hget(h, "Onie-Version"))}
	}
	if o != (content.ONIE{}) {
		c.ONIE = &o
	}
	return c
}

// hget reads a header by its canonical name without re-canonicalising it.
func hget(h http.Header, canonical string) string {
	if v := h[canonical]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func hasONIE(h http.Header) bool {
	for k := range h {
		if strings.HasPrefix(k, "Onie-") {
			return true
		}
	}
	return false
}

// clean trims a header value and drops one that is absurdly long or holds
// control bytes: identity values are short printable strings.
func clean(v string) string {
	v = strings.TrimSpace(v)
	if len(v) > 128 {
		return ""
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] == 0x7f {
			return ""
		}
	}
	return v
}

func (s *Server) ztpJSON(w http.ResponseWriter, r *http.Request) {
	c := ClientFrom(r)
	doc, err := s.svc.ZTPJSON(r.Context(), c)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Debug("served ztp.json", "device", doc.Device.ID, "profile", doc.Profile, "addr", c.Addr)
	writeDoc(w, "application/json", doc.Body)
}

func (s *Server) configDB(w http.ResponseWriter, r *http.Request) {
	doc, err := s.svc.ConfigDB(r.Context(), ClientFrom(r), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeDoc(w, "application/json", doc.Body)
}

func writeDoc(w http.ResponseWriter, ctype string, body []byte) {
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

func (s *Server) onieInstaller(w http.ResponseWriter, r *http.Request) {
	s.serveONIE(w, r, "")
}

// onieWaterfall answers ONIE's fallback names at the root
// (/onie-installer-<platform>...), which it tries on the DHCP server's
// address when no option 114 came; anything else at the root is a 404.
func (s *Server) onieWaterfall(w http.ResponseWriter, r *http.Request) {
	hint, ok := content.ONIEInstallerName(r.PathValue("name"))
	if !ok {
		s.fail(w, r, &content.Error{Status: http.StatusNotFound, Reason: "not found"})
		return
	}
	s.serveONIE(w, r, hint)
}

func (s *Server) serveONIE(w http.ResponseWriter, r *http.Request, hint string) {
	s.serveONIEFor(w, r, ClientFrom(r), hint)
}

func (s *Server) serveONIEFor(w http.ResponseWriter, r *http.Request, c *content.Client, hint string) {
	im, _, err := s.svc.ONIEInstaller(r.Context(), c, hint)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	_, f, err := s.svc.Image(r.Context(), im.SHA256, "")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer f.Close()
	serveImage(w, r, im, f)
}

func (s *Server) image(kind string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.serveStored(w, r, r.PathValue("ref"), kind)
	}
}

// iso serves a binaries ISO by its name, with or without the .iso suffix the
// version store gives it.
func (s *Server) iso(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !strings.HasSuffix(name, ".iso") {
		if im, f, err := s.svc.Image(r.Context(), name+".iso", "binaries-iso"); err == nil {
			defer f.Close()
			s.sendImage(w, r, im, f)
			return
		}
	}
	s.serveStored(w, r, name, "binaries-iso")
}

func (s *Server) serveStored(w http.ResponseWriter, r *http.Request, ref, kind string) {
	if _, err := safepath.Clean(ref); err != nil || strings.Contains(ref, "/") {
		s.fail(w, r, &content.Error{Status: http.StatusForbidden, Reason: "refused path " + strconv.Quote(ref)})
		return
	}
	im, f, err := s.svc.Image(r.Context(), ref, kind)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer f.Close()
	s.sendImage(w, r, im, f)
}

// sendImage serves im and records the fetch for a known device when it is a
// real download (not a revalidation, not a later range).
func (s *Server) sendImage(w http.ResponseWriter, r *http.Request, im core.Image, f io.ReadSeeker) {
	etag := `"` + im.SHA256 + `"`
	if r.Method == http.MethodGet && !etagMatch(r.Header.Get("If-None-Match"), etag) {
		if rg := r.Header.Get("Range"); rg == "" || strings.HasPrefix(strings.TrimSpace(rg), "bytes=0-") {
			s.svc.RecordImage(ClientFrom(r), im)
		}
	}
	serveImage(w, r, im, f)
}

// serveImage answers with Range, strong ETag (the sha256), If-None-Match and
// If-Range, Content-Length; http.ServeContent over an *os.File lets the TCP
// connection use sendfile.
func serveImage(w http.ResponseWriter, r *http.Request, im core.Image, f io.ReadSeeker) {
	h := w.Header()
	h.Set("ETag", `"`+im.SHA256+`"`)
	h.Set("X-Checksum-Sha256", im.SHA256)
	if im.Kind == "binaries-iso" {
		h.Set("Content-Type", "application/x-iso9660-image")
	} else {
		h.Set("Content-Type", "application/octet-stream")
	}
	h.Set("Content-Disposition", `attachment; filename="`+im.Name+`"`)
	h.Set("Cache-Control", "no-cache") // revalidate by ETag: a name may be re-pointed
	if r.PathValue("ref") == im.SHA256 {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	}
	http.ServeContent(w, r, "", im.Created, f)
}

func etagMatch(header, etag string) bool {
	if header == "" {
		return false
	}
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == etag {
			return true
		}
	}
	return false
}

func (s *Server) file(w http.ResponseWriter, r *http.Request) {
	f, err := s.svc.OpenFile(r.PathValue("path"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", st.ModTime(), f)
}

func (s *Server) metadataIndex(w http.ResponseWriter, r *http.Request) {
	if _, err := s.svc.VM(r.Context(), ClientFrom(r), false); err != nil {
		s.fail(w, r, err)
		return
	}
	writeDoc(w, "text/plain; charset=utf-8", []byte(strings.Join(content.MetadataKeys, "\n")+"\n"))
}

func (s *Server) metadata(w http.ResponseWriter, r *http.Request) {
	v, err := s.svc.Metadata(r.Context(), ClientFrom(r), r.PathValue("key"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeDoc(w, "text/plain; charset=utf-8", []byte(v))
}

func (s *Server) userData(w http.ResponseWriter, r *http.Request) {
	b, err := s.svc.UserData(r.Context(), ClientFrom(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeDoc(w, "text/cloud-config; charset=utf-8", b)
}

// joinData answers a VM's join waiter (over the device HTTPS listener).
func (s *Server) joinData(w http.ResponseWriter, r *http.Request) {
	c := ClientFrom(r)
	if r.Method == http.MethodPost {
		var body struct {
			EtcdCSRs content.EtcdCSRs `json:"etcd_csrs"`
		}
		dec := json.NewDecoder(io.LimitReader(r.Body, maxJoinDataBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			s.fail(w, r, &content.Error{Status: http.StatusBadRequest, Reason: "join data request body: " + err.Error()})
			return
		}
		c.EtcdCSRs = body.EtcdCSRs
	}
	b, err := s.svc.JoinData(r.Context(), c)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeDoc(w, "application/json", b)
}

// maxJoinDataBody bounds a waiter's request: three certificate signing
// requests (pki.MaxCSRBytes each) and their JSON.
const maxJoinDataBody = 32 << 10

// password answers CloudStack's password server protocol (cloud-init and
// cloud-set-guest-password ask http://<dhcp-server>:8080/ with header
// "DomU_Request: send_my_password"). ztpd never hands out passwords: VMs get
// SSH keys through public-keys and user-data. "saved_password" is the
// protocol's "nothing for you", on which clients stop without an error.
// Without that header "/" is a person's: the front door.
func (s *Server) password(w http.ResponseWriter, r *http.Request) {
	req := r.Header.Get("DomU_Request")
	if req == "" && s.door.APIURL != "" {
		s.frontDoor(w, r)
		return
	}
	if req == "" {
		s.fail(w, r, &content.Error{Status: http.StatusNotFound, Reason: "not found"})
		return
	}
	ans := "bad_request"
	switch req {
	case "send_my_password", "saved_password":
		ans = "saved_password"
	}
	writeDoc(w, "text/plain; charset=utf-8", []byte(ans))
}

// fail answers a refusal through the one error writer: its status from
// its kind (content errors are classified, see content.Error.ErrorKind),
// an internal error logged with a request id and never shown.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch k := core.KindOf(err); {
	case k == core.KindInternal:
		// WriteError logs it with the request id it answers.
	case k == core.KindWaiting:
		// No failure: the content service logs a wait once per change.
		s.log.Debug("ztp request told to wait", "path", r.URL.Path, "addr", r.RemoteAddr, "reason", err.Error())
	case httpserve.StatusOf(k) >= 500:
		s.log.Error("ztp request failed", "path", r.URL.Path, "addr", r.RemoteAddr, "err", err)
	default:
		s.log.Debug("ztp request refused", "path", r.URL.Path, "addr", r.RemoteAddr, "status", httpserve.StatusOf(k), "reason", err.Error())
	}
	httpserve.WriteError(w, r, s.log, err)
}

// statusWriter records the status for metrics. It forwards ReadFrom so
// http.ServeContent still reaches the connection's sendfile path.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) ReadFrom(r io.Reader) (int64, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return io.Copy(w.ResponseWriter, r)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
