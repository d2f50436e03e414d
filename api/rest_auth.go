package api

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

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
func (s *Server) restFail(c *gin.Context, err error) {
	httpserve.WriteError(c.Writer, c.Request, s.log, err)
	c.Abort()
}

// restRefuse answers a refusal of kind k, with the kind's status.
func restRefuse(c *gin.Context, k core.ErrorKind, msg string) {
	httpserve.WriteErrorCode(c.Writer, httpserve.StatusOf(k), k, msg)
	c.Abort()
}

// restAuth authenticates every /api/v1 request and keeps the body for handlers.
func (s *Server) restAuth(c *gin.Context) {
	r := c.Request
	ip := clientIP(r)
	local := isLocal(r)
	if blocked, wait := s.limiter.blocked(ip, s.now()); blocked && !local {
		authFailures.WithLabelValues("rest", "rate_limited").Inc()
		c.Header("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
		httpserve.WriteRefusal(c.Writer, http.StatusTooManyRequests, httpserve.CodeRateLimited, "too many failed authentications from "+ip)
		c.Abort()
		return
	}
	var body []byte
	if r.Body != nil && r.Method != http.MethodGet && r.Method != http.MethodHead {
		var err error
		body, err = io.ReadAll(http.MaxBytesReader(c.Writer, r.Body, maxBody))
		if err != nil {
			restRefuse(c, core.KindTooLarge, "request body over 1 MiB")
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
		restRefuse(c, core.KindInvalid, "malformed query: "+err.Error())
		return
	}
	for name := range q {
		if len(name) >= 5 && strings.EqualFold(name[:5], "ztpd-") {
			restRefuse(c, core.KindInvalid, "query parameters starting with ztpd- are reserved")
			return
		}
	}
	var cred apikeys.Credential
	switch {
	case local:
		cred = localAdmin // the admin socket: its file mode is the access control
	case r.Header.Get("Authorization") == "" && hasSessionCookie(r):
		// The web console: its session cookie, and its CSRF token on writes.
		var ok bool
		if cred, ok = s.consoleAuth(c); !ok {
			return
		}
	default:
		cred, err = s.verifyREST(r, q, body)
	}
	if errors.Is(err, errReplayFull) {
		s.log.Warn("API write refused: replay memory full", "api", "rest", "client", ip, "op", r.Method+" "+r.URL.Path)
		c.Header("Retry-After", "60")
		httpserve.WriteRefusal(c.Writer, http.StatusTooManyRequests, httpserve.CodeRateLimited, "too many signed writes within the signature lifetime; retry in a minute")
		c.Abort()
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
		restRefuse(c, core.KindAuth, text)
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
		restRefuse(c, core.KindPermission, "this operation needs an admin API key")
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
		restRefuse(c, core.KindInvalid, "request body: "+err.Error())
		return false
	}
	return true
}
