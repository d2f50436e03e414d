package browser

import (
	"bytes"
	"fmt"
	"image/png"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/testenv/netns"
)

// fakeConsole is the console's sign-in contract in miniature (form hooks,
// session cookie, ztpdLoadedAt), so the harness is tested on its own.
func fakeConsole() http.Handler {
	mux := http.NewServeMux()
	page := func(body string) string {
		return `<!doctype html><html><head><title>t</title><link rel="icon" href="data:,"><script>window.ztpdLoadedAt = performance.timeOrigin + performance.now();</script></head><body>` + body + `</body></html>`
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie("ztpd_session"); err == nil && c.Value == "good" {
			fmt.Fprint(w, page(`<main data-page="overview"><h1>Overview</h1>`+strings.Repeat("<p>row</p>", 100)+`</main>`))
			return
		}
		msg := ""
		if r.URL.Query().Get("signin") == "failed" {
			msg = `<p id="signin-error">wrong key or secret</p>`
		}
		fmt.Fprint(w, page(`<form id="signin-form" method="post" action="/ui/signin">`+msg+
			`<label>key <input name="api_key"></label><label>secret <input name="secret_key" type="password"></label><button>Sign in</button></form>`))
	})
	mux.HandleFunc("POST /ui/signin", func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("api_key") == "k" && r.FormValue("secret_key") == "s" {
			http.SetCookie(w, &http.Cookie{Name: "ztpd_session", Value: "good", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
			http.Redirect(w, r, "/", http.StatusSeeOther)
			return
		}
		http.Redirect(w, r, "/?signin=failed", http.StatusSeeOther)
	})
	mux.HandleFunc("GET /broken", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, page(`<script>console.error("boom"); null.x;</script>`))
	})
	mux.HandleFunc("GET /file", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, page(`<a id="dl" href="/file.txt" download>get</a>`))
	})
	mux.HandleFunc("GET /file.txt", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Disposition", `attachment; filename="file.txt"`)
		fmt.Fprint(w, "hello")
	})
	return mux
}

func TestHarness(t *testing.T) {
	b := New(t)
	srv := httptest.NewServer(fakeConsole())
	defer srv.Close()

	tab := b.Tab(t)
	if err := tab.SubmitSignIn(srv.URL, "k", "wrong"); err != nil {
		t.Fatal(err)
	}
	if msg, err := tab.TextOf("#signin-error"); err != nil || msg == "" {
		t.Fatalf("#signin-error after a wrong secret: %q %v", msg, err)
	}
	if cs, _ := tab.Cookies(srv.URL); len(cs) != 0 {
		t.Fatalf("cookies after a refused sign-in: %v", cs)
	}
	if err := tab.SignIn(srv.URL, "k", "s"); err != nil {
		t.Fatal(err)
	}
	cs, err := tab.Cookies(srv.URL)
	if err != nil || len(cs) != 1 || !cs[0].HTTPOnly {
		t.Fatalf("session cookie: %+v %v", cs, err)
	}
	at, err := tab.LoadedAt()
	if err != nil || at == 0 {
		t.Fatalf("ztpdLoadedAt: %v %v", at, err)
	}
	if _, err := tab.WaitText("main h1", "Overview"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, w := range []int{1280, 390} {
		path := filepath.Join(dir, fmt.Sprintf("overview-%d.png", w))
		if err := tab.Screenshot(path, w); err != nil {
			t.Fatal(err)
		}
		raw, _ := os.ReadFile(path)
		img, err := png.Decode(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		// Full page: 100 paragraphs are taller than the 900 px viewport.
		if sz := img.Bounds().Size(); sz.X != w || sz.Y <= 900 {
			t.Fatalf("screenshot at %d px is %v", w, sz)
		}
	}
	if again, _ := tab.LoadedAt(); again != at {
		t.Fatalf("ztpdLoadedAt changed without a navigation: %v -> %v", at, again)
	}
	if err := tab.Navigate(srv.URL + "/file"); err != nil {
		t.Fatal(err)
	}
	got, err := tab.Download("#dl", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := os.ReadFile(got); string(raw) != "hello" {
		t.Fatalf("downloaded %q", raw)
	}
	mem, err := tab.Memory()
	if err != nil || mem.JSHeapUsed == 0 {
		t.Fatalf("memory: %+v %v", mem, err)
	}
	t.Logf("tab memory: JS heap %d KiB, renderer RSS %d MiB", mem.JSHeapUsed>>10, mem.RendererRSS>>20)

	// Console errors and exceptions are collected.
	other, err := b.NewTab()
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Navigate(srv.URL + "/broken"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.WaitJS(`document.readyState === "complete" ? "y" : ""`, "load"); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if len(other.Errors()) >= 2 {
			break
		}
		other.WaitJS(`new Promise(r => setTimeout(() => r("y"), 20))`, "tick")
	}
	errs := other.Errors()
	if len(errs) != 2 || !strings.Contains(errs[0]+errs[1], "boom") || !strings.Contains(errs[0]+errs[1], "null") {
		t.Fatalf("console errors: %q", errs)
	}
	other.IgnoreErrors("boom", "null")
	if e := other.Errors(); len(e) != 0 {
		t.Fatalf("ignored errors still reported: %q", e)
	}
}

// TestForwardNS: chromium on the host loads a page served inside a
// network namespace through the forwarder.
func TestForwardNS(t *testing.T) {
	if testing.Short() {
		t.Skip("namespace test skipped in -short mode")
	}
	if err := netns.Check(); err != nil {
		t.Skip(err)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip")
	}
	b := New(t)
	pair := netns.ForTest(t, "zbr", "10.99.231.1/24", "10.99.231.2/24")
	var ln net.Listener
	if err := pair.A.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", "10.99.231.1:8080")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: fakeConsole()}
	go srv.Serve(ln)
	defer srv.Close()
	fw, err := ForwardNS(pair.B, "10.99.231.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	tab := b.Tab(t)
	if err := tab.SignIn(fw.URL(), "k", "s"); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.WaitText("main h1", "Overview"); err != nil {
		t.Fatal(err)
	}
}
