package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/auth"
	"github.com/ztpd/ztpd/api/caller"
	"github.com/ztpd/ztpd/api/rest"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// Console sessions: the web console signs in once with an API key and its
// secret and then carries a cookie instead of signing every request. The
// session table lives in memory only (a restart means signing in again),
// keyed by the SHA-256 of the cookie value, so neither the table nor a log
// line ever holds a value that would let someone in. A session acts with
// its API key's current role and account, looked up on every request
// (apikeys keeps them in memory): revoking the key ends its sessions.

// Console paths and names.
const (
	SignInPath  = "/ui/signin"
	SignOutPath = "/ui/signout"
	StreamPath  = "/ui/stream"

	sessionCookieName = "ztpd_session"
	// csrfHeader carries the session's CSRF token on every write of the
	// console's JavaScript (the sign-out form sends it as field csrf).
	csrfHeader = "X-CSRF-Token"
)

// Session lifetimes and bounds.
const (
	sessionTTL  = 12 * time.Hour // from sign-in, however active
	sessionIdle = time.Hour      // since the last request
	// sessionsPerKey bounds the sessions of one API key (browsers, tabs
	// that signed in again); the oldest goes first. With keys created only
	// by admins, the table holds at most 64 times the number of keys.
	sessionsPerKey = 64
	// sessionSweepEvery: expired sessions are dropped when one is looked
	// up, and the whole table swept at most this often on sign-in.
	sessionSweepEvery = time.Minute
	// maxSignInForm bounds the sign-in and sign-out form bodies.
	maxSignInForm = 16 << 10
)

// consoleSession is a signed-in console session as pages see it.
type consoleSession struct {
	APIKey, Name, Account string
	Role                  apikeys.Role
	Admin                 bool
	CSRF                  string
	Expires               time.Time
}

// sessionID is the SHA-256 of a cookie value: what the table is keyed by.
type sessionID [sha256.Size]byte

type sessionEntry struct {
	apiKey   string
	csrf     string
	created  time.Time
	lastUsed time.Time
	expires  time.Time // absolute: created + sessionTTL
}

// alive reports whether the session is still within both of its expiries.
func (e *sessionEntry) alive(now time.Time) bool {
	return now.Before(e.expires) && now.Before(e.lastUsed.Add(sessionIdle))
}

// sessionTable is the in-memory session store.
type sessionTable struct {
	mu        sync.Mutex
	byID      map[sessionID]*sessionEntry
	byKey     map[string]map[sessionID]struct{}
	lastSweep time.Time
}

func newSessionTable() *sessionTable {
	return &sessionTable{byID: map[sessionID]*sessionEntry{}, byKey: map[string]map[sessionID]struct{}{}}
}

// add stores a new session of apiKey, evicting the key's oldest beyond
// sessionsPerKey and, at most once a minute, every expired one.
func (t *sessionTable) add(id sessionID, e *sessionEntry, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Sub(t.lastSweep) >= sessionSweepEvery {
		t.lastSweep = now
		for sid, old := range t.byID {
			if !old.alive(now) {
				t.removeLocked(sid)
			}
		}
	}
	ids := t.byKey[e.apiKey]
	if ids == nil {
		ids = map[sessionID]struct{}{}
		t.byKey[e.apiKey] = ids
	}
	for len(ids) >= sessionsPerKey {
		var oldest sessionID
		var at time.Time
		first := true
		for sid := range ids {
			if c := t.byID[sid].created; first || c.Before(at) {
				oldest, at, first = sid, c, false
			}
		}
		t.removeLocked(oldest)
	}
	ids[id] = struct{}{}
	t.byID[id] = e
}

// use returns a copy of the live session id and marks it used now; an
// expired one is removed.
func (t *sessionTable) use(id sessionID, now time.Time, touch bool) (sessionEntry, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.byID[id]
	if e == nil {
		return sessionEntry{}, false
	}
	if !e.alive(now) {
		t.removeLocked(id)
		return sessionEntry{}, false
	}
	if touch {
		e.lastUsed = now
	}
	return *e, true
}

func (t *sessionTable) remove(id sessionID) {
	t.mu.Lock()
	t.removeLocked(id)
	t.mu.Unlock()
}

func (t *sessionTable) removeLocked(id sessionID) {
	e := t.byID[id]
	if e == nil {
		return
	}
	delete(t.byID, id)
	if ids := t.byKey[e.apiKey]; ids != nil {
		delete(ids, id)
		if len(ids) == 0 {
			delete(t.byKey, e.apiKey)
		}
	}
}

// len is the number of sessions held (tests).
func (t *sessionTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID)
}

// routeConsoleSession registers sign-in, sign-out and the live stream.
func (s *Door) routeConsoleSession(e *gin.Engine) {
	e.POST(SignInPath, s.consoleSignIn)
	e.POST(SignOutPath, s.consoleSignOut)
	e.GET(StreamPath, s.consoleStream)
}

// sessionIDOf is the table key of the request's session cookie, if it
// carries a well-formed one (32 bytes, base64url without padding).
func sessionIDOf(r *http.Request) (sessionID, bool) {
	ck, err := r.Cookie(sessionCookieName)
	if err != nil {
		return sessionID{}, false
	}
	return parseSessionCookie(ck.Value)
}

// parseSessionCookie checks a cookie value's form and hashes it.
func parseSessionCookie(v string) (sessionID, bool) {
	if len(v) != base64.RawURLEncoding.EncodedLen(32) {
		return sessionID{}, false
	}
	if raw, err := base64.RawURLEncoding.Strict().DecodeString(v); err != nil || len(raw) != 32 {
		return sessionID{}, false
	}
	return sha256.Sum256([]byte(v)), true
}

// hasSessionCookie reports whether r names a console session at all.
func hasSessionCookie(r *http.Request) bool {
	_, err := r.Cookie(sessionCookieName)
	return err == nil
}

// sessionOf returns the request's live console session, with its key's
// current role and account, and marks it used. A session whose key was
// revoked is removed.
func (s *Door) sessionOf(r *http.Request) (consoleSession, bool) {
	sess, _, ok := s.sessionCred(r, true)
	return sess, ok
}

// sessionCred is sessionOf with the key's credential; touch marks the
// session used (the live stream checks it without keeping it alive).
func (s *Door) sessionCred(r *http.Request, touch bool) (consoleSession, apikeys.Credential, bool) {
	id, ok := sessionIDOf(r)
	if !ok {
		return consoleSession{}, apikeys.Credential{}, false
	}
	return s.sessionByID(id, touch)
}

func (s *Door) sessionByID(id sessionID, touch bool) (consoleSession, apikeys.Credential, bool) {
	e, ok := s.sessions.use(id, s.now(), touch)
	if !ok {
		return consoleSession{}, apikeys.Credential{}, false
	}
	cred, err := s.keys.Lookup(e.apiKey)
	if err != nil {
		if !errors.Is(err, apikeys.ErrUnknownKey) {
			s.log.Error("console session: API key lookup", "api_key", e.apiKey, "err", err)
			return consoleSession{}, apikeys.Credential{}, false
		}
		s.sessions.remove(id) // revoked
		return consoleSession{}, apikeys.Credential{}, false
	}
	return consoleSession{APIKey: cred.APIKey, Name: cred.Name, Account: cred.Account, Role: cred.Role,
		Admin: cred.IsAdmin(), CSRF: e.csrf, Expires: e.expires}, cred, true
}

// consoleAuth authenticates a REST request by its session cookie (restAuth,
// when there is no Authorization header). Writes need the session's CSRF
// token in X-CSRF-Token. It answers refusals itself; ok is false then.
func (s *Door) consoleAuth(c *gin.Context) (apikeys.Credential, bool) {
	r := c.Request
	if !sameOriginFetch(r) {
		s.log.Warn("API request refused: cross-site request with a console session", "api", "console",
			"client", auth.ClientIP(r), "op", r.Method+" "+r.URL.Path, "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"))
		s.metrics.authFailures.WithLabelValues("console", "cross_site").Inc()
		rest.Refuse(c, core.KindPermission, "cross-site request refused")
		return apikeys.Credential{}, false
	}
	sess, cred, ok := s.sessionCred(r, true)
	if !ok {
		// Not counted against the address: a cookie value cannot be
		// guessed, and a tab left open past expiry must not lock its
		// operator out of signing in again.
		s.metrics.authFailures.WithLabelValues("console", "session_invalid").Inc()
		s.log.Info("API request refused: no live console session", "api", "console", "client", auth.ClientIP(r),
			"op", r.Method+" "+r.URL.Path)
		c.Header("WWW-Authenticate", "ztpd-session")
		rest.Refuse(c, core.KindAuth, "console session expired or signed out: sign in again")
		return apikeys.Credential{}, false
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead && !csrfMatches(sess.CSRF, r.Header.Get(csrfHeader)) {
		s.metrics.authFailures.WithLabelValues("console", "csrf").Inc()
		s.log.Warn("API write refused: missing or wrong CSRF token", "api", "console", "client", auth.ClientIP(r),
			"api_key", sess.APIKey, "op", r.Method+" "+r.URL.Path)
		rest.Refuse(c, core.KindPermission, "missing or wrong CSRF token")
		return apikeys.Credential{}, false
	}
	return cred, true
}

func csrfMatches(want, got string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}

// sameOriginFetch reports whether a browser said the request comes from
// the console's own origin (or was typed in): Sec-Fetch-Site absent (an
// older browser or not a browser), same-origin or none.
func sameOriginFetch(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
		return true
	}
	return false
}

// sameOrigin reports whether r's Origin header, when present, names the
// host the request was sent to (login CSRF: a form on another site posting
// the attacker's credentials).
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false // "null" (sandboxed or privacy-sensitive contexts) included
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return u.Scheme == scheme && strings.EqualFold(hostWithPort(u.Host, u.Scheme), hostWithPort(r.Host, scheme))
}

// hostWithPort adds scheme's default port to a host without one.
func hostWithPort(host, scheme string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	port := "80"
	if scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), port)
}

// localNext is where to go after signing in: a path on this site only
// ("/devices?state=waiting"), never another host ("//evil", "/\evil",
// "https://evil"); anything else is "/".
func localNext(next string) string {
	if next == "" || next[0] != '/' || len(next) > 2048 {
		return "/"
	}
	if len(next) > 1 && (next[1] == '/' || next[1] == '\\') {
		return "/"
	}
	for i := 0; i < len(next); i++ {
		if c := next[i]; c < 0x20 || c == 0x7f || c == '\\' {
			return "/"
		}
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || !strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") {
		return "/"
	}
	return next
}

// consoleForm parses a form-encoded body (the body only, never the query:
// a secret in a URL ends up in logs and history).
func consoleForm(c *gin.Context) (url.Values, bool) {
	r := c.Request
	if r.Body == nil {
		return url.Values{}, true
	}
	ct := r.Header.Get("Content-Type")
	if ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/x-www-form-urlencoded") {
		rest.Refuse(c, core.KindInvalid, "the form must be sent as application/x-www-form-urlencoded")
		return nil, false
	}
	r.Body = http.MaxBytesReader(c.Writer, r.Body, maxSignInForm)
	if err := r.ParseForm(); err != nil {
		rest.Refuse(c, core.KindInvalid, "malformed form: "+err.Error())
		return nil, false
	}
	return r.PostForm, true
}

// consoleSignIn exchanges an API key and its secret for a session cookie.
func (s *Door) consoleSignIn(c *gin.Context) {
	c.Set("op", "console.signin")
	r := c.Request
	ip := auth.ClientIP(r)
	if !sameOrigin(r) || !sameOriginFetch(r) {
		s.metrics.authFailures.WithLabelValues("console", "cross_site").Inc()
		s.log.Warn("console sign-in refused: posted from another site", "api", "console", "client", ip,
			"origin", r.Header.Get("Origin"), "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"))
		rest.Refuse(c, core.KindPermission, "sign-in refused: the form was posted from another site")
		return
	}
	next := "/"
	failed := func() {
		c.Header("Cache-Control", "no-store")
		c.Redirect(http.StatusSeeOther, "/?signin=failed&next="+url.QueryEscape(next))
	}
	// Before the form is read: an address over its failures costs no body.
	if blocked, wait := s.limiter.Blocked(ip, s.now()); blocked {
		s.metrics.authFailures.WithLabelValues("console", "rate_limited").Inc()
		s.log.Warn("console sign-in refused: too many failed authentications", "api", "console", "client", ip)
		c.Header("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
		c.Header("Connection", "close") // the form is never read
		failed()
		return
	}
	form, ok := consoleForm(c)
	if !ok {
		return
	}
	next = localNext(form.Get("next"))
	apiKey, secret := strings.TrimSpace(form.Get("api_key")), strings.TrimSpace(form.Get("secret_key"))
	var cred apikeys.Credential
	var err error
	switch {
	case apiKey == "" || secret == "":
		err = auth.Fail("missing API key or secret")
	case len(secret) > 256:
		err = auth.Fail("secret too long")
	default:
		if cred, err = s.keys.VerifySecret(apiKey, secret); errors.Is(err, apikeys.ErrUnknownKey) {
			err = auth.Fail("unknown API key or wrong secret")
		}
	}
	if err != nil {
		s.failures.Record("console", ip, apiKey, "sign-in", err)
		failed()
		return
	}
	value, id, err := newSessionValue()
	if err != nil {
		s.fail(c, err)
		return
	}
	csrf, _, err := newSessionValue()
	if err != nil {
		s.fail(c, err)
		return
	}
	if old, ok := sessionIDOf(r); ok {
		s.sessions.remove(old) // signing in again replaces this browser's session
	}
	now := s.now()
	// The audit trail says who used the console from where; a sign-in
	// that cannot be recorded is refused.
	if err := s.auditConsole("api.console.signin", "console sign-in", cred, ip, now); err != nil {
		s.fail(c, err)
		return
	}
	s.sessions.add(id, &sessionEntry{apiKey: cred.APIKey, csrf: csrf, created: now, lastUsed: now, expires: now.Add(sessionTTL)}, now)
	s.log.Info("console signed in", "api", "console", "client", ip, "api_key", cred.APIKey, "name", cred.Name, "role", string(cred.Role))
	http.SetCookie(c.Writer, &http.Cookie{Name: sessionCookieName, Value: value, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: int(sessionTTL / time.Second)})
	c.Header("Cache-Control", "no-store")
	c.Redirect(http.StatusSeeOther, next)
}

// consoleSignOut ends the session (its CSRF token required: another site
// must not sign the operator out) and expires the cookie.
func (s *Door) consoleSignOut(c *gin.Context) {
	c.Set("op", "console.signout")
	r := c.Request
	form, ok := consoleForm(c)
	if !ok {
		return
	}
	if id, ok := sessionIDOf(r); ok {
		if sess, _, live := s.sessionByID(id, false); live {
			token := form.Get("csrf")
			if token == "" {
				token = r.Header.Get(csrfHeader)
			}
			if !csrfMatches(sess.CSRF, token) {
				s.metrics.authFailures.WithLabelValues("console", "csrf").Inc()
				s.log.Warn("console sign-out refused: missing or wrong CSRF token", "api", "console", "client", auth.ClientIP(r), "api_key", sess.APIKey)
				rest.Refuse(c, core.KindPermission, "missing or wrong CSRF token")
				return
			}
			s.log.Info("console signed out", "api", "console", "client", auth.ClientIP(r), "api_key", sess.APIKey)
			if cred, err := s.keys.Lookup(sess.APIKey); err == nil {
				if err := s.auditConsole("api.console.signout", "console sign-out", cred, auth.ClientIP(r), s.now()); err != nil {
					s.log.Warn("console sign-out not recorded in the audit trail", "api_key", sess.APIKey, "err", err)
				}
			}
		}
		s.sessions.remove(id)
	}
	http.SetCookie(c.Writer, &http.Cookie{Name: sessionCookieName, Value: "", Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: -1})
	c.Header("Cache-Control", "no-store")
	c.Redirect(http.StatusSeeOther, "/")
}

// newSessionValue is 32 random bytes, base64url, and its table key.
func newSessionValue() (string, sessionID, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", sessionID{}, err
	}
	v := base64.RawURLEncoding.EncodeToString(b[:])
	return v, sha256.Sum256([]byte(v)), nil
}

// sessionRefuse answers a console route that needs a session (401, the
// REST error shape).
func sessionRefuse(c *gin.Context) {
	c.Header("Cache-Control", "no-store")
	httpserve.WriteErrorCode(c.Writer, http.StatusUnauthorized, core.KindAuth, "sign in to the console first")
	c.Abort()
}

// auditConsole appends a console sign-in or sign-out to the audit trail,
// with the key's account so that a user key sees its own (listEvents).
func (s *Door) auditConsole(typ, what string, cred apikeys.Credential, client string, now time.Time) error {
	return s.keys.RecordSession(typ, what, cred, caller.Of(cred).AccountName(), client, now)
}
