package console

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
)

// pgPaths are the console's pages, each with its <main data-page>.
var pgPaths = []struct{ path, page string }{
	{"/", "overview"}, {"/devices", "devices"}, {"/devices/aa:bb:cc:00:00:01", "device"}, {"/clusters", "clusters"},
	{"/clusters/some-id", "cluster"}, {"/rollouts", "rollouts"}, {"/rollouts/ro-some-id", "rollout"}, {"/versions", "versions"},
	{"/images", "images"}, {"/leases", "leases"}, {"/positions", "positions"}, {"/settings", "settings"},
}

// pgClient is a browser-like client of e's server: a cookie jar, no
// redirects followed unless asked.
func pgClient(t *testing.T, e *env) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// pgSignIn signs the client in through the console's form and checks it
// was let in.
func pgSignIn(t *testing.T, e *env, hc *http.Client, key, secret string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.ts.URL+SignInPath,
		strings.NewReader(url.Values{"api_key": {key}, "secret_key": {secret}, "next": {"/devices"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", e.ts.URL)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/devices" {
		t.Fatalf("sign-in: %d to %q, want 303 to /devices", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func pgGet(t *testing.T, hc *http.Client, u string) (*http.Response, string) {
	t.Helper()
	resp, err := hc.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// pgSeed stores a device and a cluster whose names must never appear in a
// page shell.
func pgSeed(t *testing.T, e *env) {
	t.Helper()
	err := e.st.Update(func(tx core.Tx) error {
		return tx.Devices().Put(core.Device{ID: "aa:bb:cc:00:00:01", MAC: "aa:bb:cc:00:00:01", Serial: "SERIAL-SECRET-42",
			Kind: core.KindSONiC, State: core.StateLeased})
	})
	if err != nil {
		t.Fatal(err)
	}
}

var pgMainRE = regexp.MustCompile(`<main id="main" data-page="([a-z]+)"`)

func pgPageOf(t *testing.T, body string) string {
	t.Helper()
	m := pgMainRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no <main data-page> in:\n%s", body)
	}
	return m[1]
}

func TestConsolePagesWithoutSessionAnswerSignIn(t *testing.T) {
	e := newEnv(t, envOpts{})
	pgSeed(t, e)
	hc := pgClient(t, e)
	for _, p := range pgPaths {
		resp, body := pgGet(t, hc, e.ts.URL+p.path)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d, want 200", p.path, resp.StatusCode)
		}
		if got := pgPageOf(t, body); got != "signin" {
			t.Errorf("%s: data-page %q, want signin", p.path, got)
		}
		for _, want := range []string{`id="signin-form"`, `name="api_key"`, `name="secret_key"`, `action="/ui/signin"`,
			`name="next" value="` + p.path + `"`} {
			if !strings.Contains(body, want) {
				t.Errorf("%s: sign-in form lacks %s", p.path, want)
			}
		}
		for _, leak := range []string{"SERIAL-SECRET-42", "csrf-token", "signin-error", `action="/ui/signout"`} {
			if strings.Contains(body, leak) {
				t.Errorf("%s: signed-out page contains %q", p.path, leak)
			}
		}
		pgCheckSecurityHeaders(t, p.path, resp)
		if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
			t.Errorf("%s: Cache-Control %q, want no-store", p.path, cc)
		}
	}
	// A failed sign-in comes back to / with the error and the next page.
	_, body := pgGet(t, hc, e.ts.URL+"/?signin=failed&next=%2Fclusters")
	if !strings.Contains(body, `id="signin-error"`) || !strings.Contains(body, "Wrong API key or secret") {
		t.Errorf("failed sign-in shows no error:\n%s", body)
	}
	if !strings.Contains(body, `name="next" value="/clusters"`) {
		t.Errorf("failed sign-in lost next:\n%s", body)
	}
	// next never leaves the site.
	for _, bad := range []string{"//evil.example/", "https://evil.example/", "/\\evil.example"} {
		_, body := pgGet(t, hc, e.ts.URL+"/?signin=failed&next="+url.QueryEscape(bad))
		if !strings.Contains(body, `name="next" value="/"`) {
			t.Errorf("next %q was kept:\n%s", bad, body)
		}
	}
}

func pgCheckSecurityHeaders(t *testing.T, what string, resp *http.Response) {
	t.Helper()
	want := map[string]string{
		"Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'",
		"X-Content-Type-Options":  "nosniff",
		"Referrer-Policy":         "same-origin",
	}
	for h, v := range want {
		if got := resp.Header.Get(h); got != v {
			t.Errorf("%s: %s = %q, want %q", what, h, got, v)
		}
	}
}

func TestConsolePagesWithSession(t *testing.T) {
	e := newEnv(t, envOpts{})
	pgSeed(t, e)
	admin := pgClient(t, e)
	pgSignIn(t, e, admin, e.admin.APIKey, e.adminSec)
	for _, p := range pgPaths {
		resp, body := pgGet(t, admin, e.ts.URL+p.path)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d, want 200", p.path, resp.StatusCode)
		}
		if got := pgPageOf(t, body); got != p.page {
			t.Errorf("%s: data-page %q, want %q", p.path, got, p.page)
		}
		for _, want := range []string{`<meta name="csrf-token" content="`, `action="/ui/signout"`, `href="/settings"`,
			`id="key-name">ops<`, `id="key-role">admin<`} {
			if !strings.Contains(body, want) {
				t.Errorf("%s: page lacks %s", p.path, want)
			}
		}
		if strings.Contains(body, "SERIAL-SECRET-42") || strings.Contains(body, "signin-form") {
			t.Errorf("%s: shell carries data or the sign-in form", p.path)
		}
		if strings.Contains(body, "<script>") || strings.Contains(body, "style=") {
			t.Errorf("%s: inline script or style (the CSP forbids them)", p.path)
		}
		pgCheckSecurityHeaders(t, p.path, resp)
	}
	_, body := pgGet(t, admin, e.ts.URL+"/devices/aa:bb:cc:00:00:01")
	if !strings.Contains(body, `data-id="aa:bb:cc:00:00:01"`) {
		t.Errorf("device page lacks its data-id:\n%s", body)
	}
	// The hooks the browser tests rely on.
	for path, hooks := range map[string][]string{
		"/devices":        {`<table id="devices"`},
		"/devices/x":      {`id="device-approve"`, `id="device-reset"`},
		"/clusters":       {`id="cluster-create"`, `name="name"`, `name="version"`, `name="size"`, `name="control_nodes"`, `name="offering"`, `name="join_method"`},
		"/clusters/x":     {`id="cluster-scale"`, `id="cluster-delete"`, `id="confirm-name"`, `id="kubeconfig"`},
		"/settings":       {`id="apikey-create"`, `id="apikey-secret"`},
		"/images":         {`id="image-upload"`, `id="upload-sha256"`},
		"/versions":       {`id="version-add"`},
		"/leases":         {`<table id="leases"`},
		"/positions":      {`id="racks"`},
		"/?ignored=query": {`id="ov-states"`},
	} {
		_, body := pgGet(t, admin, e.ts.URL+path)
		for _, h := range hooks {
			if !strings.Contains(body, h) {
				t.Errorf("%s lacks hook %s", path, h)
			}
		}
	}

	// A user key: no settings (403 page), no admin actions, no settings link.
	user := pgClient(t, e)
	pgSignIn(t, e, user, e.user.APIKey, e.userSec)
	resp, body := pgGet(t, user, e.ts.URL+"/settings")
	if resp.StatusCode != http.StatusForbidden || pgPageOf(t, body) != "forbidden" {
		t.Errorf("/settings for a user key: %d %q, want 403 forbidden", resp.StatusCode, pgPageOf(t, body))
	}
	if strings.Contains(body, "apikey-create") || strings.Contains(body, `href="/settings"`) {
		t.Errorf("forbidden settings page shows admin parts:\n%s", body)
	}
	resp, body = pgGet(t, user, e.ts.URL+"/devices/aa:bb:cc:00:00:01")
	if resp.StatusCode != http.StatusOK || strings.Contains(body, "device-approve") || strings.Contains(body, "device-preview") {
		t.Errorf("user's device page: %d, has admin actions: %v", resp.StatusCode, strings.Contains(body, "device-approve"))
	}

	// Signing out ends the session: the pages answer the sign-in form again.
	token := regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)"`).FindStringSubmatch(body)
	if token == nil {
		t.Fatal("no CSRF token on the page")
	}
	req, _ := http.NewRequest(http.MethodPost, e.ts.URL+SignOutPath, strings.NewReader(url.Values{"csrf": {token[1]}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", e.ts.URL)
	if resp, err := user.Do(req); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	if _, body := pgGet(t, user, e.ts.URL+"/devices"); pgPageOf(t, body) != "signin" {
		t.Errorf("after sign-out /devices is %q, want signin", pgPageOf(t, body))
	}
}

// What a shell shows of the request and the key is escaped: the device
// or cluster ID from the path, and the key's name (apikeys allows no
// markup in names today; the template must not rely on that).
func TestConsolePagesEscapeHostileText(t *testing.T) {
	hostile := `<script>alert("x")</script>"><img src=x onerror=alert(1)>`
	var b strings.Builder
	if err := Render(&b, View{Page: "device", Nav: "devices", Title: "Device", Signed: true,
		Name: hostile, Role: "admin", Admin: true, CSRF: `t"ok`, ID: hostile}); err != nil {
		t.Fatal(err)
	}
	body := b.String()
	if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") || strings.Contains(body, `t"ok`) {
		t.Errorf("hostile text unescaped:\n%s", body)
	}
	if !strings.Contains(body, `id="key-name">&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&#34;&gt;&lt;img src=x onerror=alert(1)&gt;<`) {
		t.Errorf("key name not shown escaped:\n%s", body)
	}

	e := newEnv(t, envOpts{})
	hc := pgClient(t, e)
	pgSignIn(t, e, hc, e.admin.APIKey, e.adminSec)
	hostileID := `"><img src=x onerror=alert(1)><script>x` // no "/": it is one path segment
	for _, path := range []string{"/devices/" + url.PathEscape(hostileID), "/clusters/" + url.PathEscape(hostileID), "/rollouts/" + url.PathEscape(hostileID)} {
		resp, body := pgGet(t, hc, e.ts.URL+path)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d", path, resp.StatusCode)
		}
		if strings.Contains(body, "<script>x") || strings.Contains(body, "<img src=x") {
			t.Errorf("%s: hostile ID unescaped:\n%s", path, body)
		}
		if !strings.Contains(body, `data-id="&#34;&gt;&lt;img src=x onerror=alert(1)&gt;&lt;script&gt;x"`) {
			t.Errorf("%s: ID not in data-id, escaped:\n%s", path, body)
		}
	}
}

func TestConsoleStaticAssets(t *testing.T) {
	e := newEnv(t, envOpts{})
	hc := pgClient(t, e)
	_, body := pgGet(t, hc, e.ts.URL+"/")
	for _, name := range []string{"app.js", "style.css", "favicon.svg"} {
		a, ok := StaticAsset(name)
		if !ok {
			t.Fatalf("no asset %s", name)
		}
		if !regexp.MustCompile(`^/ui/static/[0-9a-f]{16}/` + regexp.QuoteMeta(name) + `$`).MatchString(a.URL()) {
			t.Errorf("%s: URL %q has no content hash", name, a.URL())
		}
		if !strings.Contains(body, `"`+a.URL()+`"`) {
			t.Errorf("the page does not link %s", a.URL())
		}
		resp, got := pgGet(t, hc, e.ts.URL+a.URL())
		if resp.StatusCode != http.StatusOK || got != string(a.Body) {
			t.Fatalf("%s: %d, body %d bytes, want 200 and %d bytes", a.URL(), resp.StatusCode, len(got), len(a.Body))
		}
		if cc := resp.Header.Get("Cache-Control"); cc != "public, max-age=31536000, immutable" {
			t.Errorf("%s: Cache-Control %q", name, cc)
		}
		if ct := resp.Header.Get("Content-Type"); ct != a.ContentType || ct == "" {
			t.Errorf("%s: Content-Type %q, want %q", name, ct, a.ContentType)
		}
		pgCheckSecurityHeaders(t, name, resp)
		// A stale hash is not served (an old page must not run a new script).
		if resp, _ := pgGet(t, hc, e.ts.URL+"/ui/static/0000000000000000/"+name); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s under a wrong hash: %d, want 404", name, resp.StatusCode)
		}
	}
	js, _ := StaticAsset("app.js")
	for _, bad := range []string{".innerHTML", "insertAdjacentHTML", "eval(", "document.write"} {
		if strings.Contains(string(js.Body), bad) {
			t.Errorf("app.js uses %s: data must go into the page as text", bad)
		}
	}
	if n := strings.Count(string(js.Body), "\n"); n > 1500 {
		t.Errorf("app.js has %d lines; keep it under 1,500", n)
	}
	if resp, _ := pgGet(t, hc, e.ts.URL+"/ui/static/"+"x/nothing.js"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown asset: %d, want 404", resp.StatusCode)
	}
}

// The REST API is unchanged by the console's routes: JSON 404s and 401s.
func TestConsolePagesLeaveAPIAlone(t *testing.T) {
	e := newEnv(t, envOpts{})
	hc := pgClient(t, e)
	resp, body := pgGet(t, hc, e.ts.URL+"/api/v1/devices")
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `"error"`) {
		t.Errorf("/api/v1/devices without credentials: %d %s", resp.StatusCode, body)
	}
	resp, _ = pgGet(t, hc, e.ts.URL+"/nothing-here")
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("/nothing-here: %d, want 404", resp.StatusCode)
	}
}
