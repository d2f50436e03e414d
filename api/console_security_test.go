package api

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/ztp/content"
)

// Security review of the console (issue 16): attacks that once worked,
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
