// Package cloudstack is the CloudStack-compatible door, /client/api: the
// Kubernetes service's commands (CKS) and the discovery commands its
// clients call, signed as CloudStack signs them, answered in CloudStack's
// JSON shapes and error codes, over the clusters service.
package cloudstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/api/auth"
	"github.com/ztpd/ztpd/api/bodycache"
	"github.com/ztpd/ztpd/api/caller"
	"github.com/ztpd/ztpd/api/signing"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
	"github.com/ztpd/ztpd/internal/ratelimit"
)

// Deps are what the CloudStack door needs; the API front end shares its
// verifier, limiter, failure records and body cache with the other doors.
type Deps struct {
	Log      *slog.Logger
	Clusters *clusters.Service
	Verifier *auth.Verifier
	Limiter  *auth.FailLimiter
	Failures *auth.Failures
	// AuthFailures counts refused authentications by api and outcome.
	AuthFailures *prometheus.CounterVec
	Bodies       *bodycache.Cache
	Now          func() time.Time
}

// Door serves /client/api.
type Door struct {
	log          *slog.Logger
	clusters     *clusters.Service
	verifier     *auth.Verifier
	limiter      *auth.FailLimiter
	failures     *auth.Failures
	authFailures *prometheus.CounterVec
	bodies       *bodycache.Cache
	now          func() time.Time
	commands     map[string]*command
	renders      renderCache

	unversionedLog *ratelimit.Keyed // refused unversioned writes, logged once a minute per key
}

// New builds the door and its command table.
func New(d Deps) *Door {
	door := &Door{log: d.Log, clusters: d.Clusters, verifier: d.Verifier, limiter: d.Limiter, failures: d.Failures,
		authFailures: d.AuthFailures, bodies: d.Bodies, now: d.Now, unversionedLog: ratelimit.New(1, time.Minute, 1024)}
	door.commands = door.commandTable()
	return door
}

// RenderedClusters is each cluster's rendered object as the door holds it
// now (by cluster ID), for tests that check what a listing re-renders.
func (d *Door) RenderedClusters() map[string]any {
	d.renders.mu.Lock()
	defer d.renders.mu.Unlock()
	out := make(map[string]any, len(d.renders.m))
	for id, e := range d.renders.m {
		out[id] = e
	}
	return out
}

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
	case core.KindUnavailable, core.KindWaiting:
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
	// Since is the CloudStack release that added the command ("": before
	// 4.14, which listApis leaves unsaid).
	Since string
	// Limits are parameters ztpd honours only in some values (limit).
	Limits []limit
	run    func(d *Door, r *csRequest) (any, *csError)
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

// Serve answers one call of /client/api.
func (d *Door) Serve(c *gin.Context) {
	req := c.Request
	ip := auth.ClientIP(req)
	local := caller.IsLocal(req)
	// CloudStack signs the form, which may be the body: the limiter is
	// consulted before reading it, and the guard has bounded what it holds.
	if blocked, wait := d.limiter.Blocked(ip, d.now()); blocked && !local {
		d.authFailures.WithLabelValues("cloudstack", "rate_limited").Inc()
		c.Header("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
		c.Header("Connection", "close") // the body is never read
		d.csWrite(c, "errorresponse", &csError{code: csRateLimited, cscode: csServerAPIError,
			text: fmt.Sprintf("too many failed authentications from %s; retry in %d seconds", ip, int(wait.Seconds())+1)})
		return
	}
	req.Body = http.MaxBytesReader(c.Writer, req.Body, 1<<20)
	if err := req.ParseForm(); err != nil {
		d.csWrite(c, "errorresponse", &csError{code: csMalformed, cscode: csServerAPIError, text: "malformed request: " + err.Error()})
		return
	}
	form := req.Form
	if err := signing.CheckNames(form); err != nil {
		// A malformed name could reshape what was signed: refused before
		// anything reads the parameters, and counted like a failed login.
		d.limiter.Failed(ip, d.now())
		d.authFailures.WithLabelValues("cloudstack", "bad_parameter_name").Inc()
		d.log.Warn("API request refused: bad parameter name", "api", "cloudstack", "client", ip, "reason", err.Error())
		d.csWrite(c, "errorresponse", &csError{code: csMalformed, cscode: csServerAPIError, text: "malformed request: " + err.Error()})
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
	cmd := d.commands[strings.ToLower(cmdName)]
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
		cred = caller.LocalAdmin // the admin socket: its file mode is the access control
	} else {
		cred, err = d.verifier.VerifyCloudStack(form, cmd != nil && cmd.writes())
	}
	if errors.Is(err, auth.ErrReplayFull) {
		d.log.Warn("API write refused: replay memory full", "api", "cloudstack", "client", ip, "api_key", p["apikey"], "op", cmdName)
		c.Header("Retry-After", "60")
		d.csWrite(c, key, &csError{code: csRateLimited, cscode: csServerAPIError,
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
		d.authFailures.WithLabelValues("cloudstack", reason).Inc()
		if ok, _ := d.unversionedLog.Allow(p["apikey"], d.now()); ok {
			d.log.Info("API write refused", "api", "cloudstack", "client", ip, "api_key", p["apikey"], "op", cmdName, "reason", err.Error())
		}
		d.csWrite(c, key, &csError{code: csUnauthorized, cscode: csServerAPIError, text: err.Error()})
		return
	}
	if err != nil {
		d.failures.Record("cloudstack", ip, p["apikey"], cmdName, err)
		text := auth.FailedText
		if ae, ok := err.(*auth.Error); ok && ae.Hint != "" {
			text += ": " + ae.Hint
		}
		d.csWrite(c, key, &csError{code: csUnauthorized, cscode: csServerAPIError, text: text})
		return
	}
	if cmd == nil {
		d.csWrite(c, "errorresponse", &csError{code: csUnsupported, cscode: csServerAPIError, generic: true,
			text: fmt.Sprintf("The given command '%s' either does not exist or is not available for user", cmdName)})
		return
	}
	if cmd.Admin && !cred.IsAdmin() {
		d.log.Info("API command refused for role", "api_key", cred.APIKey, "role", cred.Role, "command", cmd.Name, "client", ip)
		d.csWrite(c, "errorresponse", &csError{code: csUnsupported, cscode: csServerAPIError, generic: true,
			text: fmt.Sprintf("The API [%s] does not exist or is not available for the account %s.", cmd.Name, caller.AccountName(cred))})
		return
	}
	if rt := p["response"]; rt != "" && !strings.EqualFold(rt, "json") {
		d.csWrite(c, key, &csError{code: csUnsupported, cscode: csServerAPIError,
			text: fmt.Sprintf("response=%s is not supported by ztpd; use response=json", rt)})
		return
	}
	for _, pd := range cmd.Params {
		if pd.Required && p[pd.Name] == "" {
			d.csWrite(c, key, paramMissing(cmd.Name, pd.Name))
			return
		}
	}
	r := &csRequest{ctx: req.Context(), cmd: cmd, cred: cred, p: p, caller: caller.Of(cred)}
	if e := checkLimits(r); e != nil {
		d.csWrite(c, key, e)
		return
	}
	body, cerr := cmd.run(d, r)
	if cerr != nil {
		d.csWrite(c, key, cerr)
		return
	}
	d.csWriteOK(c, key, body)
}

// csWrite answers with a CloudStack error body and HTTP status = errorcode.
func (d *Door) csWrite(c *gin.Context, key string, e *csError) {
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

func (d *Door) csWriteOK(c *gin.Context, key string, body any) {
	if whole, ok := body.(wholeBody); ok {
		httpserve.WriteCachedJSON(c.Writer, c.Request, http.StatusOK, whole.Raw, whole.Gzipped)
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
