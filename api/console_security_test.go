package api

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

	"github.com/ztpd/ztpd/api/console"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/ztp/content"
)

// Security review of the console: attacks that once worked,
// each kept as a test.

// A profile's user-data, ztp.json or a firmware URL may carry a secret in
// a form the first masking missed: a YAML block scalar, a prefixed name
// (hashed_passwd, K3S_TOKEN, join_token), a quoted value with spaces, a
// URL's user information, a command line's argument array.
func TestPreviewMaskingAttacks(t *testing.T) {
	texts := []struct{ doc, secret string }{
		{"#cloud-config\npassword: |\n  block-secret-1\n  block-secret-1b\nruncmd:\n  - echo ok\n", "block-secret-1"},
		{"#cloud-config\nchpasswd:\n  expire: false\n  list: |\n    root:chpasswd-secret-2\n", "chpasswd-secret-2"},
		{"users:\n  - name: ops\n    hashed_passwd: $6$rounds=4096$hashed-secret-3\n", "hashed-secret-3"},
		{"runcmd:\n  - curl -sfL https://get.k3s.io | K3S_TOKEN=k3s-secret-4 sh -\n", "k3s-secret-4"},
		{"join_token: join-secret-5\n", "join-secret-5"},
		{"password: \"correct horse secret-6\"\n", "secret-6"},
		{"image: https://ops:url-secret-7@repo.example/sonic.bin\n", "url-secret-7"},
		{"ssh_keys:\n  rsa_private: >-\n    folded-secret-8\n", "folded-secret-8"},
		{"http://10.99.0.1/join?access_token=query-secret-9&x=1", "query-secret-9"},
		{"runcmd:\n  - export AWS_SECRET_ACCESS_KEY=aws-secret-15\n", "aws-secret-15"},
		{"runcmd:\n  - ENCRYPTION_KEY=enc-secret-16 /usr/bin/start\n", "enc-secret-16"},
		{"vault login -method=userpass password_hash=hash-secret-17", "hash-secret-17"},
	}
	for _, tc := range texts {
		if got := maskText(tc.doc); strings.Contains(got, tc.secret) {
			t.Errorf("maskText shows %q:\n%s", tc.secret, got)
		}
	}
	jsons := []struct{ doc, secret string }{
		{`{"MACSEC_PROFILE":{"p1":{"primary_cak":"cak-secret-10","cipher_suite":"GCM-AES-128"}}}`, "cak-secret-10"},
		{`{"ztp":{"01-join":{"args":["join","--password","argv-secret-11","--discovery-token","argv-secret-12"]}}}`, "argv-secret-1"},
		{`{"ztp":{"01-fw":{"url":{"source":"https://admin:json-url-secret-13@10.0.0.5/fw.bin"}}}}`, "json-url-secret-13"},
		{`{"x":{"cmd":"mysql --password='quoted secret-14' db"}}`, "secret-14"},
	}
	for _, tc := range jsons {
		if got := maskJSON([]byte(tc.doc)); strings.Contains(got, tc.secret) {
			t.Errorf("maskJSON shows %q:\n%s", tc.secret, got)
		}
	}
	// What is not secret stays readable.
	keep := maskText("#cloud-config\nhostname: leaf-1\npassword: |\n  x\nruncmd:\n  - echo ok\nimage: https://repo.example/sonic.bin\n")
	for _, s := range []string{"hostname: leaf-1", "runcmd:", "echo ok", "https://repo.example/sonic.bin"} {
		if !strings.Contains(keep, s) {
			t.Errorf("maskText lost %q:\n%s", s, keep)
		}
	}
	if got := maskJSON([]byte(`{"MACSEC_PROFILE":{"p1":{"cipher_suite":"GCM-AES-128"}}}`)); !strings.Contains(got, "GCM-AES-128") {
		t.Errorf("maskJSON lost the cipher suite: %s", got)
	}
}

// Every answer on a console path carries the console's CSP (with
// frame-ancestors 'none'), X-Frame-Options and nosniff: error answers
// too, which reflect the path they refuse.
func TestConsoleErrorAnswersCarryCSP(t *testing.T) {
	e := newEnv(t, envOpts{})
	hc := pgClient(t, e)
	for _, tc := range []struct{ method, path string }{
		{"GET", "/ui/no-such-page<script>"}, {"GET", "/devices/a/b"}, {"GET", "/ui/static/0000/app.js"},
		{"GET", "/ui/static/x/no-such.js"}, {"POST", "/devices"}, {"GET", ConsoleSignOutPath},
		{"GET", ConsoleStreamPath}, {"GET", "/api/v1/no-such-path"}, {"GET", "/"},
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

// The preview's notes and warnings are free text built from the profile
// (a refusal naming the firmware URL, say): masked like the documents.
func TestPreviewMasksNotesAndWarnings(t *testing.T) {
	e := newEnv(t, envOpts{})
	seed(t, e.st, 2)
	e.srv.console.preview = &raPreviewer{pv: content.Preview{Kind: core.KindSONiC, Profile: "leaves",
		Notes:    []string{"firmware: https://fw:note-secret-1@10.99.0.5/sonic.bin"},
		Warnings: []string{"ztp.json would be refused: HTTP 502: fetching https://fw:warn-secret-2@10.99.0.5/sonic.bin"}}}
	r := e.rest(e.admin.APIKey, e.adminSec).do("GET", "/api/v1/devices/SN00001/preview", nil)
	if r.status != 200 {
		t.Fatalf("preview: %d %s", r.status, r.raw)
	}
	for _, s := range []string{"note-secret-1", "warn-secret-2"} {
		if strings.Contains(string(r.raw), s) {
			t.Errorf("the preview shows %q: %s", s, r.raw)
		}
	}
	if !strings.Contains(string(r.raw), "10.99.0.5/sonic.bin") {
		t.Errorf("the preview lost the URL: %s", r.raw)
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
	if r := b.do(http.MethodGet, ConsoleSignOutPath, nil); r.status != http.StatusMethodNotAllowed {
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
	e := newEnv(t, envOpts{})
	st := raStore(t, e)
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
	a, ok := console.StaticAsset("app.js")
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
