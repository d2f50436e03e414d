package api

import (
	"context"
	"errors"
	"fmt"
	"github.com/ztpd/ztpd/api/auth"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/signing"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// CloudStack error codes (ApiErrorCode) and exception codes (CSExceptionErrorCode).
const (
	csUnauthorized   = 401
	csRateLimited    = 429
	csMalformed      = 430
	csParamError     = 431
	csUnsupported    = 432
	csInternal       = 530
	csUnavailable    = 534
	csInUse          = 536
	csInvalidValue   = 4350 // InvalidParameterValueException
	csServerAPIError = 9999 // ServerApiException
)

// authFailedText is CloudStack's exact text for every authentication failure.
const authFailedText = "unable to verify user credentials and/or request signature"

// csError is a CloudStack error answer.
type csError struct {
	code   int // HTTP status and errorcode
	cscode int
	text   string
	// generic answers use the "errorresponse" key instead of the command's.
	generic bool
}

func (e *csError) Error() string { return e.text }

func paramMissing(cmd, name string) *csError {
	return &csError{code: csParamError, cscode: csServerAPIError,
		text: fmt.Sprintf("Unable to execute API command %s due to missing parameter %s", strings.ToLower(cmd), name)}
}

func paramInvalid(cmd, name, value, kind string) *csError {
	return &csError{code: csParamError, cscode: csServerAPIError,
		text: fmt.Sprintf("Unable to execute API command %s due to invalid value. Invalid parameter %s value=%s due to incorrect %s value format, or entity does not exist or due to incorrect parameter annotation for the field in api cmd class.", strings.ToLower(cmd), name, value, kind)}
}

// domainError maps a domain error to CloudStack's codes.
func domainError(err error) *csError {
	msg := err.Error()
	switch core.KindOf(err) {
	case core.KindInvalid, core.KindNotFound, core.KindState, core.KindConflict:
		return &csError{code: csParamError, cscode: csInvalidValue, text: msg}
	case core.KindInUse:
		return &csError{code: csInUse, cscode: csServerAPIError, text: msg}
	case core.KindPermission:
		return &csError{code: csUnsupported, cscode: csServerAPIError, text: msg, generic: true}
	case core.KindUnavailable:
		return &csError{code: csInternal, cscode: csServerAPIError, text: msg}
	}
	return &csError{code: csInternal, cscode: csServerAPIError, text: "Internal error executing command: " + msg}
}

// paramDef describes one command parameter (validation and listApis).
type paramDef struct {
	Name     string
	Type     string // string, uuid, integer, long, boolean, list (comma-separated)
	Required bool
	Desc     string
}

// command is one CloudStack API command ztpd answers.
type command struct {
	Name      string
	Desc      string
	Async     bool
	Admin     bool
	JavaClass string
	Params    []paramDef
	Response  []string // response field names, for listApis
	run       func(s *Server, r *csRequest) (any, *csError)
}

// writes reports whether the command changes anything: everything but
// list*, get* and queryAsyncJobResult. A write's signature is accepted once.
func (c *command) writes() bool {
	n := strings.ToLower(c.Name)
	return !strings.HasPrefix(n, "list") && !strings.HasPrefix(n, "get") && !strings.HasPrefix(n, "query")
}

// responseKey is the envelope key: lowercased command name + "response".
func (c *command) responseKey() string { return strings.ToLower(c.Name) + "response" }

// csRequest is one authenticated, parameter-checked call.
type csRequest struct {
	ctx    context.Context
	cmd    *command
	cred   apikeys.Credential
	caller clusters.Caller
	p      map[string]string // parameter names lowercased, first values
}

func (r *csRequest) str(name string) string { return r.p[name] }

func (r *csRequest) has(name string) bool { _, ok := r.p[name]; return ok && r.p[name] != "" }

// integer parses an integer parameter; absent gives def.
func (r *csRequest) integer(name string, def int) (int, *csError) {
	v, ok := r.p[name]
	if !ok || v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
	if err != nil {
		return 0, paramInvalid(r.cmd.Name, name, v, "long")
	}
	return int(n), nil
}

// boolean parses like Java's Boolean.valueOf: "true" (any case) is true.
func (r *csRequest) boolean(name string) bool { return strings.EqualFold(r.p[name], "true") }

// cloudStack serves /client/api.
func (s *Server) cloudStack(c *gin.Context) {
	req := c.Request
	ip := auth.ClientIP(req)
	local := isLocal(req)
	// CloudStack signs the form, which may be the body: the limiter is
	// consulted before reading it, and the guard has bounded what it holds.
	if blocked, wait := s.limiter.Blocked(ip, s.now()); blocked && !local {
		s.metrics.authFailures.WithLabelValues("cloudstack", "rate_limited").Inc()
		c.Header("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
		c.Header("Connection", "close") // the body is never read
		s.csWrite(c, "errorresponse", &csError{code: csRateLimited, cscode: csServerAPIError,
			text: fmt.Sprintf("too many failed authentications from %s; retry in %d seconds", ip, int(wait.Seconds())+1)})
		return
	}
	req.Body = http.MaxBytesReader(c.Writer, req.Body, 1<<20)
	if err := req.ParseForm(); err != nil {
		s.csWrite(c, "errorresponse", &csError{code: csMalformed, cscode: csServerAPIError, text: "malformed request: " + err.Error()})
		return
	}
	form := req.Form
	if err := signing.CheckNames(form); err != nil {
		// A malformed name could reshape what was signed: refused before
		// anything reads the parameters, and counted like a failed login.
		s.limiter.Failed(ip, s.now())
		s.metrics.authFailures.WithLabelValues("cloudstack", "bad_parameter_name").Inc()
		s.log.Warn("API request refused: bad parameter name", "api", "cloudstack", "client", ip, "reason", err.Error())
		s.csWrite(c, "errorresponse", &csError{code: csMalformed, cscode: csServerAPIError, text: "malformed request: " + err.Error()})
		return
	}
	p := make(map[string]string, len(form))
	for name, vals := range form {
		if len(vals) > 0 {
			if _, dup := p[strings.ToLower(name)]; !dup {
				p[strings.ToLower(name)] = vals[0]
			}
		}
	}
	cmdName := p["command"]
	cmd := s.commands[strings.ToLower(cmdName)]
	key := "errorresponse"
	if cmd != nil {
		key = cmd.responseKey()
		c.Set("op", cmd.Name)
	} else {
		c.Set("op", "unknown")
	}

	var cred apikeys.Credential
	var err error
	if local {
		cred = localAdmin // the admin socket: its file mode is the access control
	} else {
		cred, err = s.verifier.VerifyCloudStack(form, cmd != nil && cmd.writes())
	}
	if errors.Is(err, auth.ErrReplayFull) {
		s.log.Warn("API write refused: replay memory full", "api", "cloudstack", "client", ip, "api_key", p["apikey"], "op", cmdName)
		c.Header("Retry-After", "60")
		s.csWrite(c, key, &csError{code: csRateLimited, cscode: csServerAPIError,
			text: "too many signed writes within the signature lifetime; retry in a minute"})
		return
	}
	if errors.Is(err, auth.ErrUnversionedWrite) || errors.Is(err, auth.ErrUnversionedFull) {
		// A correct old client, not a failed login: counted, logged,
		// never rate-limited as one.
		reason := "unversioned_write"
		if errors.Is(err, auth.ErrUnversionedFull) {
			reason = "unversioned_memory_full"
		}
		s.metrics.authFailures.WithLabelValues("cloudstack", reason).Inc()
		if ok, _ := s.unversionedLog.Allow(p["apikey"], s.now()); ok {
			s.log.Info("API write refused", "api", "cloudstack", "client", ip, "api_key", p["apikey"], "op", cmdName, "reason", err.Error())
		}
		s.csWrite(c, key, &csError{code: csUnauthorized, cscode: csServerAPIError, text: err.Error()})
		return
	}
	if err != nil {
		s.authFailed(c, "cloudstack", ip, p["apikey"], cmdName, err)
		text := authFailedText
		if ae, ok := err.(*auth.Error); ok && ae.Hint != "" {
			text += ": " + ae.Hint
		}
		s.csWrite(c, key, &csError{code: csUnauthorized, cscode: csServerAPIError, text: text})
		return
	}
	if cmd == nil {
		s.csWrite(c, "errorresponse", &csError{code: csUnsupported, cscode: csServerAPIError, generic: true,
			text: fmt.Sprintf("The given command '%s' either does not exist or is not available for user", cmdName)})
		return
	}
	if cmd.Admin && !cred.IsAdmin() {
		s.log.Info("API command refused for role", "api_key", cred.APIKey, "role", cred.Role, "command", cmd.Name, "client", ip)
		s.csWrite(c, "errorresponse", &csError{code: csUnsupported, cscode: csServerAPIError, generic: true,
			text: fmt.Sprintf("The API [%s] does not exist or is not available for the account %s.", cmd.Name, accountName(cred))})
		return
	}
	if rt := p["response"]; rt != "" && !strings.EqualFold(rt, "json") {
		s.csWrite(c, key, &csError{code: csUnsupported, cscode: csServerAPIError,
			text: fmt.Sprintf("response=%s is not supported by ztpd; use response=json", rt)})
		return
	}
	for _, pd := range cmd.Params {
		if pd.Required && p[pd.Name] == "" {
			s.csWrite(c, key, paramMissing(cmd.Name, pd.Name))
			return
		}
	}
	r := &csRequest{ctx: req.Context(), cmd: cmd, cred: cred, p: p, caller: callerFromCred(cred)}
	body, cerr := cmd.run(s, r)
	if cerr != nil {
		s.csWrite(c, key, cerr)
		return
	}
	s.csWriteOK(c, key, body)
}

// callerFromCred is the clusters service's view of an API key.
func callerFromCred(cred apikeys.Credential) clusters.Caller {
	return clusters.Caller{APIKey: cred.APIKey, Name: cred.Name, Account: cred.Account, Admin: cred.IsAdmin()}
}

func accountName(cred apikeys.Credential) string {
	if cred.Name != "" {
		return cred.Name
	}
	return cred.APIKey
}

// authFailed counts, logs and rate-limits one failed authentication.
func (s *Server) authFailed(c *gin.Context, api, ip, apiKey, what string, err error) {
	if _, ok := err.(*auth.Error); !ok {
		s.log.Error("API authentication error", "api", api, "client", ip, "err", err)
	}
	s.limiter.Failed(ip, s.now())
	s.metrics.authFailures.WithLabelValues(api, "failed").Inc()
	s.log.Warn("API authentication failed", "api", api, "client", ip, "api_key", loggedKey(s.keys, apiKey), "op", what, "reason", err.Error())
}

// loggedKey is how a failed authentication's API key is logged: a known
// key as it is, anything else cut to its first 6 characters. Keys and
// secrets look alike (43 characters), and an operator who swaps the
// console's two fields, or a client that sends its secret as its key,
// must not leave the secret in the log.
func loggedKey(keys *apikeys.Service, apiKey string) string {
	if apiKey == "" {
		return ""
	}
	if keys != nil {
		if _, err := keys.Lookup(apiKey); err == nil {
			return apiKey
		}
	}
	if len(apiKey) > 6 {
		return apiKey[:6] + "... (unknown)"
	}
	return apiKey + " (unknown)"
}

// csWrite answers with a CloudStack error body and HTTP status = errorcode.
func (s *Server) csWrite(c *gin.Context, key string, e *csError) {
	if e.generic {
		key = "errorresponse"
	}
	body := map[string]any{key: struct {
		UUIDList    []any  `json:"uuidList"`
		ErrorCode   int    `json:"errorcode"`
		CSErrorCode int    `json:"cserrorcode"`
		ErrorText   string `json:"errortext"`
	}{[]any{}, e.code, e.cscode, e.text}}
	httpserve.WriteJSON(c.Writer, e.code, body)
}

func (s *Server) csWriteOK(c *gin.Context, key string, body any) {
	if whole, ok := body.(wholeBody); ok {
		httpserve.WriteCachedJSON(c.Writer, c.Request, http.StatusOK, whole.raw, whole.gzipped)
		return
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, map[string]any{key: body})
}

// listBody is CloudStack's list shape: {} when empty, else count + items.
func listBody(objKey string, count int, items any) any {
	if count == 0 {
		return struct{}{}
	}
	return map[string]any{"count": count, objKey: items}
}

// paging reads page and pagesize (pagesize -1 means all, as in CloudStack).
func paging(r *csRequest) (page, size int, e *csError) {
	if page, e = r.integer("page", 1); e != nil {
		return
	}
	if size, e = r.integer("pagesize", -1); e != nil {
		return
	}
	if page < 1 {
		return 0, 0, paramInvalid(r.cmd.Name, "page", r.str("page"), "long")
	}
	if size == 0 || size < -1 {
		return 0, 0, paramInvalid(r.cmd.Name, "pagesize", r.str("pagesize"), "long")
	}
	if size == -1 {
		size = 0
	}
	return page, size, nil
}

func pageOf[T any](items []T, page, size int) []T {
	if size <= 0 {
		return items
	}
	start := (page - 1) * size
	if start >= len(items) {
		return []T{}
	}
	return items[start:min(start+size, len(items))]
}
