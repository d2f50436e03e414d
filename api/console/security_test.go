package console

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// Security review of the console: attacks that once worked,
// each kept as a test.

// Every answer on a console path carries the console's CSP (with
// frame-ancestors 'none'), X-Frame-Options and nosniff: error answers
// too, which reflect the path they refuse.
func TestConsoleErrorAnswersCarryCSP(t *testing.T) {
	e := newEnv(t, envOpts{})
	hc := pgClient(t, e)
	for _, tc := range []struct{ method, path string }{
		{"GET", "/ui/no-such-page<script>"}, {"GET", "/devices/a/b"}, {"GET", "/ui/static/0000/app.js"},
		{"GET", "/ui/static/x/no-such.js"}, {"POST", "/devices"}, {"GET", SignOutPath},
		{"GET", StreamPath}, {"GET", "/api/v1/no-such-path"}, {"GET", "/"},
	} {
		req, _ := http.NewRequest(tc.method, e.ts.URL+tc.path, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h := resp.Header
		if !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") || h.Get("X-Frame-Options") != "DENY" ||
			h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s %s: %d without the console's security headers: CSP %q, XFO %q, XCTO %q", tc.method, tc.path,
				resp.StatusCode, h.Get("Content-Security-Policy"), h.Get("X-Frame-Options"), h.Get("X-Content-Type-Options"))
		}
		if h.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("%s %s: Access-Control-Allow-Origin %q", tc.method, tc.path, h.Get("Access-Control-Allow-Origin"))
		}
	}
}

// No answer of the console sends the browser to another site: not the
// router's trailing-slash redirect of a path that starts with two
// slashes ("//evil.example/devices/" must not become
// "//evil.example/devices", which a browser reads as another host). The
// request line is written as a browser sends it (Go's client would turn
// "//host/..." into a proxy request). A guard: gin's router finds no
// route for such paths, so it never redirects them.
func TestConsoleNoOpenRedirect(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, p := range []string{"//evil.example/", "//evil.example/devices/", "/\\evil.example/devices/", "///evil.example/devices/",
		"/devices/", "/ui/", "/%2Fevil.example/devices/", "/api/v1//evil.example/"} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(e.ts.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: ztpd.example\r\nConnection: close\r\n\r\n", p)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		conn.Close()
		loc := resp.Header.Get("Location")
		if u, err := url.Parse(strings.ReplaceAll(loc, "\\", "/")); loc != "" && (err != nil || u.Host != "") {
			t.Errorf("GET %s: %d to %q, another site", p, resp.StatusCode, loc)
		}
	}
}

// Session attacks: a cookie value planted before sign-in is never the
// session's (fixation), signing in again changes the value and ends the
// old one, a GET cannot sign out, failed sign-ins add no sessions.
func TestConsoleSessionAttacks(t *testing.T) {
	e := newEnv(t, envOpts{})
	b := sessNewBrowser(t, e)
	planted, _, err := newSessionValue()
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(e.ts.URL)
	b.http.Jar.SetCookies(u, []*http.Cookie{{Name: sessionCookieName, Value: planted, Path: "/"}})
	r := b.signIn(e.admin.APIKey, e.adminSec, "/")
	if r.cookie == nil || r.cookie.Value == planted {
		t.Fatalf("sign-in kept the planted cookie value: %+v", r.cookie)
	}
	if _, ok := parseSessionCookie(planted); !ok {
		t.Fatal("planted value not well formed")
	}
	if _, _, ok := e.srv.sessionByID(sha256Of(planted), false); ok {
		t.Fatal("the planted value is a session")
	}
	first := r.cookie.Value
	r = b.signIn(e.admin.APIKey, e.adminSec, "/")
	if r.cookie == nil || r.cookie.Value == first {
		t.Fatalf("signing in again kept the value: %+v", r.cookie)
	}
	if _, _, ok := e.srv.sessionByID(sha256Of(first), false); ok {
		t.Error("the replaced session still works")
	}
	if n := e.srv.sessions.len(); n != 1 {
		t.Errorf("%d sessions after two sign-ins of one browser", n)
	}
	// A GET (an <img src="/ui/signout"> on another page) signs nobody out.
	if r := b.do(http.MethodGet, SignOutPath, nil); r.status != http.StatusMethodNotAllowed {
		t.Errorf("GET sign-out: %d", r.status)
	}
	if r := b.do(http.MethodGet, "/api/v1/devices", nil); r.status != http.StatusOK {
		t.Errorf("after GET sign-out the session is gone: %d", r.status)
	}
	// Failed sign-ins (a wrong secret, until rate limited) add no session.
	for i := 0; i < 30; i++ {
		sessNewBrowser(t, e).signIn(e.admin.APIKey, "wrong-secret", "/")
	}
	if n := e.srv.sessions.len(); n != 1 {
		t.Errorf("%d sessions after failed sign-ins", n)
	}
}

func sha256Of(v string) sessionID { return sha256.Sum256([]byte(v)) }

// Upload attacks through a console session: a user session cannot upload
// (and nothing is stored), an admin session without the CSRF token
// cannot, and a name with a path is refused.
func TestConsoleUploadAttacks(t *testing.T) {
	e := newEnv(t, envOpts{images: true})
	st := e.images
	body := []byte("installer bytes")
	upload := func(b *sessBrowser, name string, csrf bool) sessResp {
		q := url.Values{"name": {name}, "kind": {"file"}}
		req, _ := http.NewRequest(http.MethodPost, e.ts.URL+"/api/v1/images?"+q.Encode(), bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/octet-stream")
		if csrf {
			req.Header.Set(csrfHeader, b.csrf)
		}
		return b.send(req)
	}
	user := sessNewBrowser(t, e)
	user.mustSignIn(e, e.user.APIKey, e.userSec)
	if r := upload(user, "evil.bin", true); r.status != http.StatusForbidden {
		t.Errorf("user session upload: %d %s", r.status, r.body)
	}
	admin := sessNewBrowser(t, e)
	admin.mustSignIn(e, e.admin.APIKey, e.adminSec)
	if r := upload(admin, "evil.bin", false); r.status != http.StatusForbidden {
		t.Errorf("admin session upload without CSRF token: %d %s", r.status, r.body)
	}
	for _, name := range []string{"../../etc/passwd", "a/b", "..", ".hidden", `a\b`} {
		if r := upload(admin, name, true); r.status != http.StatusBadRequest {
			t.Errorf("upload named %q: %d %s", name, r.status, r.body)
		}
	}
	if l, _ := st.List(""); len(l) != 0 {
		t.Errorf("stored: %+v", l)
	}
	if r := upload(admin, "ok.bin", true); r.status != http.StatusCreated {
		t.Errorf("admin session upload: %d %s", r.status, r.body)
	}
}

// app.js puts data in the page as text only: no HTML parsing sink, no
// eval, no script URL built from data. A guard on the source (the
// chromium tests cover the rendering).
func TestConsoleScriptHasNoHTMLSinks(t *testing.T) {
	a, ok := StaticAsset("app.js")
	if !ok {
		t.Fatal("no app.js")
	}
	src := string(a.Body)
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function",
		"setTimeout('", `setTimeout("`, "srcdoc", "javascript:", "createContextualFragment", "DOMParser"} {
		if strings.Contains(src, sink) {
			t.Errorf("app.js uses %s", sink)
		}
	}
	// Every href is a fixed local path plus encoded parts, or a blob: URL.
	hrefs := regexp.MustCompile(`href(?::| =)\s*([^,})]+)`).FindAllStringSubmatch(src, -1)
	if len(hrefs) < 4 {
		t.Fatalf("found %d hrefs in app.js: the check no longer reads it", len(hrefs))
	}
	for _, m := range hrefs {
		v := strings.TrimSpace(m[1])
		if !strings.HasPrefix(v, "'/") && !strings.HasPrefix(v, "`/") && v != "url" && v != "href" {
			t.Errorf("app.js sets href from %s", v)
		}
	}
}

// An operator who swaps the two fields of the sign-in form (key and
// secret look alike: 43 characters each) must not find the secret in the
// log: a failed sign-in logs the API key only when it is a known key.
func TestConsoleSignInSwappedFieldsNotLogged(t *testing.T) {
	e := newEnv(t, envOpts{})
	r := sessNewBrowser(t, e).signIn(e.adminSec, e.admin.APIKey, "/")
	if r.cookie != nil || !strings.HasPrefix(r.header.Get("Location"), "/?signin=failed") {
		t.Fatalf("swapped fields signed in: %d %v", r.status, r.header)
	}
	if strings.Contains(e.logs.String(), e.adminSec) {
		t.Fatalf("the secret typed in the API key field was logged:\n%s", e.logs.String())
	}
	// A known key with a wrong secret is still logged by its key.
	sessNewBrowser(t, e).signIn(e.admin.APIKey, "wrong", "/")
	if !strings.Contains(e.logs.String(), "api_key="+e.admin.APIKey) {
		t.Errorf("a known key's failure is not logged with its key:\n%s", e.logs.String())
	}
}
