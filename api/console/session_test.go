package console

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/ztpd/ztpd/internal/core"
)

// sessBrowser is a client with a cookie jar that does not follow
// redirects, so each answer's Location and Set-Cookie can be checked.
type sessBrowser struct {
	t    *testing.T
	base string
	http *http.Client
	csrf string
}

func sessNewBrowser(t *testing.T, e *env) *sessBrowser {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := *e.ts.Client()
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &sessBrowser{t: t, base: e.ts.URL, http: &c}
}

type sessResp struct {
	status int
	header http.Header
	body   []byte
	cookie *http.Cookie // the ztpd_session cookie set, if any
}

func (b *sessBrowser) send(req *http.Request) sessResp {
	b.t.Helper()
	resp, err := b.http.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	out := sessResp{status: resp.StatusCode, header: resp.Header, body: body}
	for _, ck := range resp.Cookies() {
		if ck.Name == sessionCookieName {
			out.cookie = ck
		}
	}
	return out
}

// signIn posts the sign-in form; hdr adds headers (Origin, Sec-Fetch-Site).
func (b *sessBrowser) signIn(key, secret, next string, hdr ...string) sessResp {
	b.t.Helper()
	form := url.Values{"api_key": {key}, "secret_key": {secret}, "next": {next}}
	req, _ := http.NewRequest(http.MethodPost, b.base+SignInPath, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return b.send(req)
}

// mustSignIn signs in and learns the session's CSRF token from the table
// (the pages carry it in <meta name="csrf-token">).
func (b *sessBrowser) mustSignIn(e *env, key, secret string) {
	b.t.Helper()
	r := b.signIn(key, secret, "/")
	if r.status != http.StatusSeeOther || r.cookie == nil || r.header.Get("Location") != "/" {
		b.t.Fatalf("sign-in: %d %v %s", r.status, r.header, r.body)
	}
	req, _ := http.NewRequest(http.MethodGet, b.base+"/", nil)
	for _, ck := range b.http.Jar.Cookies(req.URL) {
		req.AddCookie(ck)
	}
	sess, ok := e.srv.sessionOf(req)
	if !ok {
		b.t.Fatal("no session after signing in")
	}
	b.csrf = sess.CSRF
}

func (b *sessBrowser) do(method, path string, body any, hdr ...string) sessResp {
	b.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, b.base+path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return b.send(req)
}

func sessErrorCode(t *testing.T, r sessResp) string {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("not an error body (%d): %s", r.status, r.body)
	}
	return e.Error.Code
}

func sessFailures(srv *testServer, outcome string) float64 {
	var m dto.Metric
	if err := srv.metrics.authFailures.WithLabelValues("console", outcome).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// TestConsoleSignIn: the right secret gets a session cookie (HttpOnly,
// SameSite=Strict, 12 h, not Secure over plain HTTP) and the local next
// path; a wrong secret, an unknown key and a revoked key get the form
// back with signin=failed, are logged with the key and reason (never the
// secret) and counted.
func TestConsoleSignIn(t *testing.T) {
	e := newEnv(t, envOpts{})
	b := sessNewBrowser(t, e)

	r := b.signIn(e.user.APIKey, e.userSec, "/devices?state=waiting")
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/devices?state=waiting" {
		t.Fatalf("sign-in: %d %q", r.status, r.header.Get("Location"))
	}
	ck := r.cookie
	if ck == nil || len(ck.Value) != 43 || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure ||
		ck.Path != "/" || ck.MaxAge != 12*3600 {
		t.Fatalf("session cookie: %+v", ck)
	}
	if strings.Contains(e.logs.String(), ck.Value) {
		t.Fatal("the cookie value was logged")
	}
	if got := e.srv.sessions.len(); got != 1 {
		t.Fatalf("%d sessions", got)
	}

	before := sessFailures(e.srv, "failed")
	for _, tc := range []struct{ name, key, secret string }{
		{"wrong secret", e.user.APIKey, "not-the-secret-" + e.userSec[:4]},
		{"unknown key", "no-such-key", e.userSec},
		{"empty secret", e.user.APIKey, ""},
	} {
		fresh := sessNewBrowser(t, e)
		r := fresh.signIn(tc.key, tc.secret, "/devices")
		if r.status != http.StatusSeeOther || r.header.Get("Location") != "/?signin=failed&next=%2Fdevices" || r.cookie != nil {
			t.Errorf("%s: %d %q cookie %v", tc.name, r.status, r.header.Get("Location"), r.cookie)
		}
		if tc.secret != "" && strings.Contains(e.logs.String(), tc.secret) {
			t.Errorf("%s: the secret was logged", tc.name)
		}
	}
	if got := sessFailures(e.srv, "failed") - before; got != 3 {
		t.Errorf("console failures counted: %v, want 3", got)
	}
	logs := e.logs.String()
	if !strings.Contains(logs, "api=console") || !strings.Contains(logs, "api_key="+e.user.APIKey) ||
		!strings.Contains(logs, `reason="unknown API key or wrong secret"`) {
		t.Errorf("failures not logged with key and reason:\n%s", logs)
	}

	// A revoked key cannot sign in.
	if _, err := e.keys.Revoke(e.user.APIKey); err != nil {
		t.Fatal(err)
	}
	if r := sessNewBrowser(t, e).signIn(e.user.APIKey, e.userSec, "/"); r.cookie != nil || !strings.HasPrefix(r.header.Get("Location"), "/?signin=failed") {
		t.Fatalf("revoked key signed in: %d %v", r.status, r.header)
	}
}

// TestConsoleSignInTLS: under TLS the cookie is Secure.
func TestConsoleSignInTLS(t *testing.T) {
	e := newEnv(t, envOpts{tls: true})
	r := sessNewBrowser(t, e).signIn(e.admin.APIKey, e.adminSec, "/")
	if r.status != http.StatusSeeOther || r.cookie == nil || !r.cookie.Secure || !r.cookie.HttpOnly || r.cookie.SameSite != http.SameSiteStrictMode {
		t.Fatalf("sign-in over TLS: %d cookie %+v", r.status, r.cookie)
	}
	if !strings.Contains(r.header.Get("Set-Cookie"), "; Secure") {
		t.Fatalf("Set-Cookie: %s", r.header.Get("Set-Cookie"))
	}
}

// TestConsoleSignInRateLimited: past auth_failures_per_minute, even the
// right secret is refused from that address until the budget refills.
func TestConsoleSignInRateLimited(t *testing.T) {
	e := newEnv(t, envOpts{failuresPerMinute: 2})
	b := sessNewBrowser(t, e)
	for range 2 {
		b.signIn(e.admin.APIKey, "wrong", "/")
	}
	r := b.signIn(e.admin.APIKey, e.adminSec, "/")
	if r.cookie != nil || !strings.HasPrefix(r.header.Get("Location"), "/?signin=failed") || r.header.Get("Retry-After") == "" {
		t.Fatalf("limited sign-in: %d %v", r.status, r.header)
	}
	e.clock.Advance(2 * time.Minute)
	if r := b.signIn(e.admin.APIKey, e.adminSec, "/"); r.cookie == nil {
		t.Fatalf("sign-in after the budget refilled: %d %v", r.status, r.header)
	}
}

// TestConsoleSignInNext: next goes only to a path of this site.
func TestConsoleSignInNext(t *testing.T) {
	e := newEnv(t, envOpts{})
	for next, want := range map[string]string{
		"":                       "/",
		"/clusters/abc":          "/clusters/abc",
		"/devices?q=leaf#top":    "/devices?q=leaf#top",
		"//evil.example/x":       "/",
		"/\\evil.example":        "/",
		"https://evil.example/":  "/",
		"evil.example":           "/",
		"/%2F/evil.example":      "/",
		"javascript:alert(1)":    "/",
		"/\t/evil.example":       "/",
		"///evil.example":        "/",
		"/ok\r\nSet-Cookie: x=1": "/",
	} {
		r := sessNewBrowser(t, e).signIn(e.admin.APIKey, e.adminSec, next)
		if got := r.header.Get("Location"); r.status != http.StatusSeeOther || got != want {
			t.Errorf("next %q: %d Location %q, want %q", next, r.status, got, want)
		}
	}
}

// TestConsoleLoginCSRF: a sign-in form posted from another site (Origin
// of another host, or a browser saying cross-site) gets no session.
func TestConsoleLoginCSRF(t *testing.T) {
	e := newEnv(t, envOpts{})
	host := strings.TrimPrefix(e.ts.URL, "http://")
	for _, tc := range []struct {
		hdr  []string
		want int
	}{
		{[]string{"Origin", "http://evil.example"}, http.StatusForbidden},
		{[]string{"Origin", "null"}, http.StatusForbidden},
		{[]string{"Origin", "https://" + host}, http.StatusForbidden}, // another scheme is another origin
		{[]string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{[]string{"Sec-Fetch-Site", "same-site"}, http.StatusForbidden},
		{[]string{"Origin", "http://" + host, "Sec-Fetch-Site", "same-origin"}, http.StatusSeeOther},
		{[]string{"Sec-Fetch-Site", "none"}, http.StatusSeeOther},
	} {
		r := sessNewBrowser(t, e).signIn(e.admin.APIKey, e.adminSec, "/", tc.hdr...)
		if r.status != tc.want || (tc.want == http.StatusForbidden) != (r.cookie == nil) {
			t.Errorf("%v: %d cookie %v, want %d", tc.hdr, r.status, r.cookie != nil, tc.want)
		}
		if r.status == http.StatusForbidden && sessErrorCode(t, r) != "forbidden" {
			t.Errorf("%v: %s", tc.hdr, r.body)
		}
	}
}

// TestConsoleSessionREST: the session cookie authenticates /api/v1 like a
// signature of the same key: the same answers, a user key sees only its
// account's clusters and devices; writes need the CSRF token; a cross-site
// request is refused.
func TestConsoleSessionREST(t *testing.T) {
	e, _, _, mine, theirs, _ := tenancyEnv(t)
	b := sessNewBrowser(t, e)
	b.mustSignIn(e, e.user.APIKey, e.userSec)
	signed := e.rest(e.user.APIKey, e.userSec)

	for _, path := range []string{"/api/v1/devices", "/api/v1/clusters", "/api/v1/leases", "/api/v1/devices/02:00:00:00:0b:01"} {
		viaCookie := b.do(http.MethodGet, path, nil)
		viaSig := signed.Do(http.MethodGet, path, nil)
		if viaCookie.status != viaSig.Status || !bytes.Equal(viaCookie.body, viaSig.Raw) {
			t.Errorf("GET %s: cookie %d %s\nsigned %d %s", path, viaCookie.status, viaCookie.body, viaSig.Status, viaSig.Raw)
		}
	}
	r := b.do(http.MethodGet, "/api/v1/clusters", nil)
	if !bytes.Contains(r.body, []byte(mine.ID)) || bytes.Contains(r.body, []byte(theirs.ID)) {
		t.Fatalf("user session lists %s", r.body)
	}
	if r := b.do(http.MethodGet, "/api/v1/devices/02:00:00:00:0b:01", nil); r.status != http.StatusNotFound {
		t.Fatalf("another account's device: %d %s", r.status, r.body)
	}
	if r := b.do(http.MethodGet, "/api/v1/tokens", nil); r.status != http.StatusForbidden {
		t.Fatalf("admin route with a user session: %d %s", r.status, r.body)
	}

	// Writes: without the token, with a wrong one, then with it.
	stop := "/api/v1/clusters/" + mine.ID + "/stop"
	for _, hdr := range [][]string{nil, {csrfHeader, "wrong"}, {csrfHeader, b.csrf + "x"}} {
		r := b.do(http.MethodPost, stop, nil, hdr...)
		if r.status != http.StatusForbidden || sessErrorCode(t, r) != "forbidden" || !bytes.Contains(r.body, []byte("missing or wrong CSRF token")) {
			t.Fatalf("write with %v: %d %s", hdr, r.status, r.body)
		}
	}
	if got := clusterState(t, e, mine.ID); got != core.ClusterRunning {
		t.Fatalf("refused write changed the cluster: %s", got)
	}
	if r := b.do(http.MethodPost, stop, nil, csrfHeader, b.csrf); r.status >= 300 {
		t.Fatalf("write with the CSRF token: %d %s", r.status, r.body)
	}
	// Another account's cluster: the service refuses it as for any caller.
	if r := b.do(http.MethodPost, "/api/v1/clusters/"+theirs.ID+"/stop", nil, csrfHeader, b.csrf); r.status != http.StatusNotFound {
		t.Fatalf("stop another account's cluster: %d %s", r.status, r.body)
	}
	// Cross-site, even a GET.
	if r := b.do(http.MethodGet, "/api/v1/clusters", nil, "Sec-Fetch-Site", "cross-site"); r.status != http.StatusForbidden {
		t.Fatalf("cross-site GET: %d %s", r.status, r.body)
	}
	// A bad session cookie is 401 like any failed authentication.
	anon := sessNewBrowser(t, e)
	u, _ := url.Parse(e.ts.URL)
	anon.http.Jar.SetCookies(u, []*http.Cookie{{Name: sessionCookieName, Value: strings.Repeat("A", 43)}})
	if r := anon.do(http.MethodGet, "/api/v1/clusters", nil); r.status != http.StatusUnauthorized || sessErrorCode(t, r) != "unauthorized" {
		t.Fatalf("unknown session: %d %s", r.status, r.body)
	}
}

// TestConsoleSignOut: signing out needs the CSRF token, ends the session
// and expires the cookie.
func TestConsoleSignOut(t *testing.T) {
	e := newEnv(t, envOpts{})
	b := sessNewBrowser(t, e)
	b.mustSignIn(e, e.admin.APIKey, e.adminSec)
	signOut := func(csrf string) sessResp {
		req, _ := http.NewRequest(http.MethodPost, b.base+SignOutPath, strings.NewReader(url.Values{"csrf": {csrf}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return b.send(req)
	}
	if r := signOut("forged"); r.status != http.StatusForbidden {
		t.Fatalf("sign-out without the token: %d %s", r.status, r.body)
	}
	if r := b.do(http.MethodGet, "/api/v1/devices", nil); r.status != http.StatusOK {
		t.Fatalf("session after a refused sign-out: %d", r.status)
	}
	r := signOut(b.csrf)
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/" || r.cookie == nil || r.cookie.MaxAge >= 0 {
		t.Fatalf("sign-out: %d %v", r.status, r.header)
	}
	if e.srv.sessions.len() != 0 {
		t.Fatal("session still held")
	}
	if r := b.do(http.MethodGet, "/api/v1/devices", nil); r.status != http.StatusUnauthorized {
		t.Fatalf("after sign-out: %d %s", r.status, r.body)
	}
	// Both are in the audit trail, with the key, its account and the client.
	var got []string
	e.st.View(func(tx core.Tx) error {
		return tx.Events().List(core.AuditEvents, 0, func(ev core.Event) (bool, error) {
			if strings.HasPrefix(ev.Type, "api.console.") {
				if ev.Fields["api_key"] != e.admin.APIKey || ev.Fields["account"] == "" || ev.Fields["client"] == "" {
					t.Errorf("%s event fields %v", ev.Type, ev.Fields)
				}
				got = append(got, ev.Type)
			}
			return true, nil
		})
	})
	if strings.Join(got, ",") != "api.console.signin,api.console.signout" {
		t.Fatalf("console audit events %v", got)
	}
}

// TestConsoleSessionRevokedKey: revoking the key ends its sessions at
// their next request.
func TestConsoleSessionRevokedKey(t *testing.T) {
	e := newEnv(t, envOpts{})
	b := sessNewBrowser(t, e)
	b.mustSignIn(e, e.user.APIKey, e.userSec)
	if r := b.do(http.MethodGet, "/api/v1/devices", nil); r.status != http.StatusOK {
		t.Fatalf("before revoke: %d", r.status)
	}
	if _, err := e.keys.Revoke(e.user.APIKey); err != nil {
		t.Fatal(err)
	}
	if r := b.do(http.MethodGet, "/api/v1/devices", nil); r.status != http.StatusUnauthorized {
		t.Fatalf("after revoke: %d %s", r.status, r.body)
	}
	if e.srv.sessions.len() != 0 {
		t.Fatal("the revoked key's session is still held")
	}
}

// TestConsoleSessionExpiry: an hour without a request ends a session, and
// so do 12 hours however active.
func TestConsoleSessionExpiry(t *testing.T) {
	e := newEnv(t, envOpts{})
	idle := sessNewBrowser(t, e)
	idle.mustSignIn(e, e.admin.APIKey, e.adminSec)
	busy := sessNewBrowser(t, e)
	busy.mustSignIn(e, e.admin.APIKey, e.adminSec)
	for i := range 23 { // 11.5 hours, a request every 30 minutes
		e.clock.Advance(30 * time.Minute)
		if r := busy.do(http.MethodGet, "/api/v1/devices", nil); r.status != http.StatusOK {
			t.Fatalf("busy session at %d min: %d", (i+1)*30, r.status)
		}
	}
	if r := idle.do(http.MethodGet, "/api/v1/devices", nil); r.status != http.StatusUnauthorized {
		t.Fatalf("idle session after 11.5 h: %d", r.status)
	}
	e.clock.Advance(30 * time.Minute)
	if r := busy.do(http.MethodGet, "/api/v1/devices", nil); r.status != http.StatusUnauthorized {
		t.Fatalf("busy session after 12 h: %d", r.status)
	}
}

// TestConsoleSessionsPerKey: a key holds at most 64 sessions, the oldest
// going first, and expired ones are swept when others sign in.
func TestConsoleSessionsPerKey(t *testing.T) {
	e := newEnv(t, envOpts{})
	first := sessNewBrowser(t, e)
	first.mustSignIn(e, e.admin.APIKey, e.adminSec)
	for range sessionsPerKey {
		sessNewBrowser(t, e).mustSignIn(e, e.admin.APIKey, e.adminSec)
	}
	if got := e.srv.sessions.len(); got != sessionsPerKey {
		t.Fatalf("%d sessions held, want %d", got, sessionsPerKey)
	}
	if r := first.do(http.MethodGet, "/api/v1/devices", nil); r.status != http.StatusUnauthorized {
		t.Fatalf("the oldest session after 64 more: %d", r.status)
	}
	e.clock.Advance(2 * time.Hour)
	sessNewBrowser(t, e).mustSignIn(e, e.user.APIKey, e.userSec)
	if got := e.srv.sessions.len(); got != 1 {
		t.Fatalf("%d sessions held after the sweep, want 1", got)
	}
}

// FuzzConsoleCookieAndNext: the cookie parser accepts exactly the values
// sign-in mints, and next never leads off the site.
func FuzzConsoleCookieAndNext(f *testing.F) {
	v, _, _ := newSessionValue()
	for _, s := range []string{v, "", "//evil", "/\\evil", "/ok", "/%2F%2Fevil", "https://x", strings.Repeat("A", 43), "/a?b=//c"} {
		f.Add(s)
	}
	base, _ := url.Parse("https://ztpd.example:8443/")
	f.Fuzz(func(t *testing.T, s string) {
		if _, ok := parseSessionCookie(s); ok {
			if len(s) != 43 || strings.ContainsAny(s, "+/=") {
				t.Fatalf("accepted cookie %q", s)
			}
		}
		next := localNext(s)
		if next != "/" && next != s {
			t.Fatalf("next %q became %q", s, next)
		}
		u, err := url.Parse(next)
		if err != nil {
			t.Fatalf("next %q: %v", next, err)
		}
		if to := base.ResolveReference(u); to.Host != base.Host || to.Scheme != base.Scheme {
			t.Fatalf("next %q leads to %s", s, to)
		}
		if strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n\t") {
			t.Fatalf("next %q kept", next)
		}
	})
}
