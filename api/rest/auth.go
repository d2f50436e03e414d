package rest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/auth"
	"github.com/ztpd/ztpd/api/caller"
	"github.com/ztpd/ztpd/api/signing"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// Every REST error is {"error": {"code", "message"}} (httpserve's one
// shape): domain errors by their core.ErrorKind, refusals of HTTP itself
// (rate_limited, method_not_allowed) by httpserve's codes.

// restFail answers err by its kind and stops the handler chain. Internal
// errors are logged with a request id, which is all the client sees.
func (s *Door) restFail(c *gin.Context, err error) {
	httpserve.WriteError(c.Writer, c.Request, s.log, err)
	c.Abort()
}

// Refuse answers a refusal of kind k in the REST error shape, with the
// kind's status, and stops the handler chain: the composer's answer to an
// unknown path and the console's refusals are REST's.
func Refuse(c *gin.Context, k core.ErrorKind, msg string) {
	httpserve.WriteErrorCode(c.Writer, httpserve.StatusOf(k), k, msg)
	c.Abort()
}

// NoRoute answers a path no door of the engine serves, in the REST error
// shape: the composer's (package api) fallback for every path.
func NoRoute(c *gin.Context) {
	Refuse(c, core.KindNotFound, "no such API path: "+c.Request.URL.Path)
}

// NoMethod answers a method a path is not served with (405), in the REST
// error shape.
func NoMethod(c *gin.Context) {
	httpserve.WriteRefusal(c.Writer, http.StatusMethodNotAllowed, httpserve.CodeMethodNotAllowed, c.Request.Method+" is not allowed on "+c.Request.URL.Path)
	c.Abort()
}

// restAuth authenticates every /api/v1 request and keeps the body for
// handlers. What the headers prove is checked before the body is read: the
// failure limiter, and for a signed request its key, expiry and scheme, so
// a request nobody can authenticate costs no body (the guard reserves its
// size, then lets it go unread). The signature over the body is checked
// against the SHA-256 taken as the body arrives.
func (s *Door) restAuth(c *gin.Context) {
	r := c.Request
	ip := auth.ClientIP(r)
	local := caller.IsLocal(r)
	hasBody := r.Body != nil && r.Body != http.NoBody && r.Method != http.MethodGet && r.Method != http.MethodHead
	if hasBody {
		// A refusal before the body is read whole closes the connection
		// rather than reading the rest to keep it.
		c.Header("Connection", "close")
	}
	if blocked, wait := s.limiter.Blocked(ip, s.now()); blocked && !local {
		s.metrics.authFailures.WithLabelValues("rest", "rate_limited").Inc()
		c.Header("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
		httpserve.WriteRefusal(c.Writer, http.StatusTooManyRequests, httpserve.CodeRateLimited, "too many failed authentications from "+ip)
		c.Abort()
		return
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err == nil {
		err = signing.CheckNames(q)
	}
	if err != nil {
		s.limiter.Failed(ip, s.now())
		s.metrics.authFailures.WithLabelValues("rest", "bad_parameter_name").Inc()
		s.log.Warn("API request refused: bad query", "api", "rest", "client", ip, "reason", err.Error())
		Refuse(c, core.KindInvalid, "malformed query: "+err.Error())
		return
	}
	for name := range q {
		if len(name) >= 5 && strings.EqualFold(name[:5], "ztpd-") {
			Refuse(c, core.KindInvalid, "query parameters starting with ztpd- are reserved")
			return
		}
	}
	var cred apikeys.Credential
	var body []byte
	var sum string
	ok := true
	read := func() bool {
		if body, sum, ok = readRESTBody(c, hasBody); ok && hasBody {
			c.Writer.Header().Del("Connection") // read whole: the connection may be kept
		}
		return ok
	}
	switch {
	case local:
		cred = caller.LocalAdmin // the admin socket: its file mode is the access control
		read()
	case r.Header.Get("Authorization") == "" && s.sessions != nil && s.sessions.HasSession(r):
		// The web console: its session cookie, and its CSRF token on writes.
		if cred, ok = s.sessions.Authenticate(c); ok {
			read()
		}
	default:
		var signed auth.RESTSigned
		if signed, err = s.verifier.RESTHeader(r); err == nil && read() {
			cred, err = s.verifier.VerifyRESTSignature(r, q, signed, sum)
		}
	}
	if !ok {
		return
	}
	if errors.Is(err, auth.ErrReplayFull) {
		s.log.Warn("API write refused: replay memory full", "api", "rest", "client", ip, "op", r.Method+" "+r.URL.Path)
		c.Header("Retry-After", "60")
		httpserve.WriteRefusal(c.Writer, http.StatusTooManyRequests, httpserve.CodeRateLimited, "too many signed writes within the signature lifetime; retry in a minute")
		c.Abort()
		return
	}
	if err != nil {
		apiKey, _, _, _ := signing.ParseRESTAuthorization(r.Header.Get("Authorization"))
		s.failures.Record("rest", ip, apiKey, r.Method+" "+r.URL.Path, err)
		c.Header("WWW-Authenticate", signing.RESTScheme)
		text := auth.FailedText
		if ae, ok := err.(*auth.Error); ok && ae.Hint != "" {
			text += ": " + ae.Hint
		}
		Refuse(c, core.KindAuth, text)
		return
	}
	c.Set("cred", cred)
	c.Set("body", body)
	c.Next()
}

// readRESTBody reads the request body whole (at most maxBody) when the
// request has one, with its hex SHA-256 ("" when empty, as
// signing.BodySHA256) taken as it arrives, or answers why it could not and
// reports false.
func readRESTBody(c *gin.Context, hasBody bool) ([]byte, string, bool) {
	if !hasBody {
		return nil, "", true
	}
	r := c.Request
	buf := bytes.NewBuffer(make([]byte, 0, max(0, min(r.ContentLength, maxBody))+bytes.MinRead))
	h := sha256.New()
	_, err := buf.ReadFrom(io.TeeReader(http.MaxBytesReader(c.Writer, r.Body, maxBody), h))
	if err != nil {
		var be *httpserve.BodyError
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &be) && be.Status == http.StatusRequestTimeout:
			httpserve.WriteRefusal(c.Writer, be.Status, httpserve.CodeTimeout, be.Reason)
			c.Abort()
		case errors.As(err, &be) && be.Status != http.StatusRequestEntityTooLarge:
			Refuse(c, core.KindInvalid, be.Reason)
		case errors.As(err, &be) || errors.As(err, &tooLarge):
			Refuse(c, core.KindTooLarge, "request body over 1 MiB")
		default:
			Refuse(c, core.KindInvalid, "request body could not be read")
		}
		return nil, "", false
	}
	if buf.Len() == 0 {
		return nil, "", true
	}
	return buf.Bytes(), hex.EncodeToString(h.Sum(nil)), true
}

func credOf(c *gin.Context) apikeys.Credential {
	v, _ := c.Get("cred")
	cred, _ := v.(apikeys.Credential)
	return cred
}

func callerOf(c *gin.Context) clusters.Caller {
	return caller.Of(credOf(c))
}

func requireAdmin(c *gin.Context) {
	if !credOf(c).IsAdmin() {
		Refuse(c, core.KindPermission, "this operation needs an admin API key")
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
		Refuse(c, core.KindInvalid, "request body: "+err.Error())
		return false
	}
	return true
}
