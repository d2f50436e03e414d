package consoletest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ztpd/ztpd/internal/app"
	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/testenv/browser"
	"github.com/ztpd/ztpd/testenv/e2etest"
	"github.com/ztpd/ztpd/testenv/hermetic"
	"github.com/ztpd/ztpd/testenv/inproc"
)

func TestMain(m *testing.M) {
	hermetic.Isolate()
	code := m.Run()
	e2etest.Cleanup()
	os.Exit(code)
}

// ztpd is a whole ztpd in the test process (testenv/inproc: the wiring of
// `ztpd serve`) on a loopback port with its own data directory, so the
// test can play the clusters' API servers (inproc.Healthy); the real CLI
// binary reaches it through the admin socket.
type ztpd struct {
	t    *testing.T
	bin  string
	dir  string // data directory
	Base string // http://127.0.0.1:<port>
	App  *app.App
	env  []string
}

// serveZtpd seeds the data directory with seed (offline, may be nil), then
// starts the server and waits until it serves and its admin socket exists.
func serveZtpd(t *testing.T, seed func(tx core.Tx) error) *ztpd {
	t.Helper()
	work := t.TempDir()
	z := &ztpd{t: t, bin: e2etest.Ztpd(t)}
	// A clean environment for the CLI: no ZTPD_* credentials,
	// configuration or cli.yaml of the user running the tests.
	z.env = hermetic.Env(work)
	var seedErr error
	z.Base, _, z.App = inproc.ServeApp(t, func(cfg *config.Config) {
		z.dir = cfg.DataDir
		if seed == nil {
			return
		}
		st, err := boltstore.Open(cfg.DataDir, boltstore.Options{})
		if err != nil {
			seedErr = err
			return
		}
		seedErr = st.Update(seed)
		st.Close()
	})
	if seedErr != nil {
		t.Fatal(seedErr)
	}
	return z
}

// CLI runs `ztpd --data-dir <dir> args...` and returns its standard output.
func (z *ztpd) CLI(args ...string) ([]byte, error) {
	cmd := exec.Command(z.bin, append([]string{"--data-dir", z.dir}, args...)...)
	cmd.Env = z.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("ztpd %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// MustJSON runs a CLI command with -o json and decodes its output.
func (z *ztpd) MustJSON(v any, args ...string) {
	z.t.Helper()
	out, err := z.CLI(append(args, "-o", "json")...)
	if err != nil {
		z.t.Fatal(err)
	}
	if err := json.Unmarshal(out, v); err != nil {
		z.t.Fatalf("ztpd %s: %q: %v", strings.Join(args, " "), out, err)
	}
}

type apiKey struct {
	APIKey    string `json:"api_key"`
	SecretKey string `json:"secret_key"`
	Account   string `json:"account"`
	Role      string `json:"role"`
}

// Key creates an API key through the admin socket (extra: --account ...).
func (z *ztpd) Key(role, name string, extra ...string) apiKey {
	z.t.Helper()
	var k apiKey
	z.MustJSON(&k, append([]string{"apikey", "create", "--role", role, "--name", name}, extra...)...)
	if k.APIKey == "" || k.SecretKey == "" {
		z.t.Fatalf("apikey create: %+v", k)
	}
	return k
}

// APICLI runs a CLI command against the server's API with key k (-o json)
// and decodes its output into v.
func (z *ztpd) APICLI(v any, k apiKey, args ...string) {
	z.t.Helper()
	z.MustJSON(v, append(args, "--api-url", z.Base, "--api-key", k.APIKey, "--secret-key", k.SecretKey)...)
}

// shotDir is where screenshots go: $ZTPD_SCREENSHOTS (kept), else a
// directory removed with the test.
func shotDir(t *testing.T) string {
	if d := os.Getenv("ZTPD_SCREENSHOTS"); d != "" {
		abs, err := filepath.Abs(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(abs, 0o755); err != nil {
			t.Fatal(err)
		}
		return abs
	}
	return t.TempDir()
}

// seedDevices stores three devices and their leases, as DHCP and ZTP would
// have: a switch that fetched its config, a VM that leased, a switch
// refused for having no profile.
func seedDevices(tx core.Tx) error {
	now := time.Now().UTC().Truncate(time.Second)
	devs := []core.Device{
		{ID: "02:00:00:00:16:01", Kind: core.KindSONiC, MAC: "02:00:00:00:16:01", Serial: "CONSOLE0001", Product: "Accton-AS7712-32X",
			Hostname: "leaf-1", IP: "10.99.16.11", Subnet: "fabric", State: core.StateConfigServed, Profile: "leaf", Role: "sonic"},
		{ID: "1e:00:00:00:16:02", Kind: core.KindVM, MAC: "1e:00:00:00:16:02", Hostname: "vm-2", IP: "10.99.16.12", Subnet: "fabric",
			State: core.StateLeased},
		{ID: "02:00:00:00:16:03", Kind: core.KindSONiC, MAC: "02:00:00:00:16:03", Serial: "CONSOLE0003", Product: "Accton-AS7726-32X",
			IP: "10.99.16.13", Subnet: "fabric", State: core.StateLeased,
			Refusal: core.Refusal{What: "ztp.json", Kind: "no-profile", Reason: "no profile matches this device", At: now}},
	}
	for i, d := range devs {
		d.FirstSeen, d.LastSeen, d.UpdatedAt = now.Add(-time.Duration(10-i)*time.Minute), now, now
		if err := tx.Devices().Put(d); err != nil {
			return err
		}
		if err := tx.Leases().Put(core.Lease{IP: d.IP, MAC: d.MAC, Hostname: d.Hostname, Subnet: "fabric", State: core.LeaseActive,
			Start: d.FirstSeen, Expiry: now.Add(time.Hour), UpdatedAt: now}); err != nil {
			return err
		}
	}
	return nil
}

type restCluster struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	State   string `json:"state"`
	Size    int    `json:"size"`
	Account string `json:"account"`
}

// clusters lists the clusters the tab's session sees through /api/v1.
func clusters(t *testing.T, tab *browser.Tab) []restCluster {
	t.Helper()
	status, body, err := tab.Fetch("/api/v1/clusters", "{}")
	if err != nil || status != 200 {
		t.Fatalf("GET /api/v1/clusters from the page: %d %v %s", status, err, body)
	}
	var page struct {
		Items []restCluster `json:"items"`
	}
	if err := json.Unmarshal([]byte(body), &page); err != nil {
		// A bare array is fine too.
		if err2 := json.Unmarshal([]byte(body), &page.Items); err2 != nil {
			t.Fatalf("clusters: %v: %s", err, body)
		}
	}
	return page.Items
}

func clusterNamed(t *testing.T, tab *browser.Tab, name string) (restCluster, bool) {
	for _, c := range clusters(t, tab) {
		if c.Name == name {
			return c, true
		}
	}
	return restCluster{}, false
}

// eventually polls cond every 200 ms for up to d.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(200 * time.Millisecond) {
		if time.Since(start) > d {
			t.Fatalf("after %s: %s", d, what)
		}
	}
}

// open navigates to path and waits until the page rendered its data
// (body[data-loaded]).
func open(t *testing.T, tab *browser.Tab, base, path string) {
	t.Helper()
	if err := tab.Navigate(base + path); err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	if err := tab.WaitFor("body[data-loaded]"); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// shoot writes <dir>/<name>-1280.png and -390.png.
func shoot(t *testing.T, tab *browser.Tab, dir, name string) {
	t.Helper()
	for _, w := range []int{1280, 390} {
		if err := tab.Screenshot(filepath.Join(dir, fmt.Sprintf("%s-%d.png", name, w)), w); err != nil {
			t.Fatalf("screenshot %s at %d px: %v", name, w, err)
		}
	}
}

// TestConsoleInBrowser drives the console of a real `ztpd serve` with
// chromium: a wrong secret is refused, the admin creates, scales and
// deletes a cluster from the pages, a write without the CSRF token is
// refused, a user key sees only its account's clusters and gets 403 on
// /settings, and every page is photographed at 1280 and 390 px.
func TestConsoleInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	if _, err := browser.Path(); err != nil {
		t.Skip(err)
	}
	z := serveZtpd(t, seedDevices)
	admin := z.Key("admin", "ops")
	var version struct {
		ID string `json:"id"`
	}
	z.MustJSON(&version, "kube-version", "add", "--semver", "1.31.4", "--url", z.Base+"/isos/v1.31.4.iso")
	shots := shotDir(t)
	t.Logf("screenshots in %s", shots)
	b := browser.New(t)

	// A wrong secret: the sign-in form again with #signin-error, no session.
	t.Run("wrong secret", func(t *testing.T) {
		tab := b.Tab(t)
		if err := tab.SubmitSignIn(z.Base, admin.APIKey, strings.Repeat("x", len(admin.SecretKey))); err != nil {
			t.Fatal(err)
		}
		if err := tab.WaitFor("#signin-error"); err != nil {
			t.Fatal(err)
		}
		if err := tab.WaitFor("#signin-form"); err != nil {
			t.Fatal(err)
		}
		cookies, err := tab.Cookies(z.Base)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cookies {
			if c.Name == "ztpd_session" {
				t.Fatalf("a refused sign-in set the session cookie: %+v", c)
			}
		}
		// No data without a session: /devices answers the sign-in form.
		if err := tab.Navigate(z.Base + "/devices"); err != nil {
			t.Fatal(err)
		}
		if err := tab.WaitFor("#signin-form"); err != nil {
			t.Fatal(err)
		}
		if ok, _ := tab.Exists("table#devices"); ok {
			t.Fatal("/devices without a session shows the devices table")
		}
		checkPage(t, tab, "the sign-in form", 0)
		shoot(t, tab, shots, "signin")
	})

	tab := b.Tab(t)
	if err := tab.SignIn(z.Base, admin.APIKey, admin.SecretKey); err != nil {
		t.Fatal(err)
	}
	cookies, err := tab.Cookies(z.Base)
	if err != nil {
		t.Fatal(err)
	}
	var session bool
	for _, c := range cookies {
		if c.Name == "ztpd_session" {
			session = true
			if !c.HTTPOnly || c.SameSite != "Strict" || c.Path != "/" {
				t.Errorf("session cookie: HttpOnly=%v SameSite=%s Path=%s", c.HTTPOnly, c.SameSite, c.Path)
			}
		}
	}
	if !session {
		t.Fatalf("no ztpd_session cookie after signing in: %+v", cookies)
	}
	if role, err := tab.TextOf("#key-role"); err != nil || role != "admin" {
		t.Errorf("#key-role: %q %v", role, err)
	}

	// Create a cluster from the clusters page.
	open(t, tab, z.Base, "/clusters")
	if _, err := tab.WaitJS(`document.querySelector('#cluster-create [name=version] option[value]') ? "y" : ""`, "the create form's versions"); err != nil {
		t.Fatal(err)
	}
	loaded, _ := tab.LoadedAt()
	if err := tab.Do(
		chromedp.SetValue(chromedp.CSS(`#cluster-create [name=name]`), "web-c1"),
		chromedp.SetValue(chromedp.CSS(`#cluster-create [name=size]`), "2"),
		chromedp.SetValue(chromedp.CSS(`#cluster-create [name=control_nodes]`), "1"),
		chromedp.Click(chromedp.CSS(`#cluster-create button[type=submit]`)),
	); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.WaitText("table#clusters tbody", "web-c1"); err != nil {
		t.Fatal(err)
	}
	c, ok := clusterNamed(t, tab, "web-c1")
	if !ok || c.Size != 2 {
		t.Fatalf("after create from the page: %+v %v", c, ok)
	}
	if now, _ := tab.LoadedAt(); now != loaded {
		t.Errorf("creating a cluster reloaded the page")
	}
	t.Logf("created cluster web-c1 (%s) from the page: %s", c.ID, c.State)
	// Its API server answers with every Node Ready (what ztpd's watch would
	// see): Running, so it can be scaled.
	inproc.Healthy(t, z.App, c.ID)

	// Scale it from its page.
	open(t, tab, z.Base, "/clusters/"+c.ID)
	if _, err := tab.WaitText("#cluster-title", "web-c1"); err != nil {
		t.Fatal(err)
	}
	if err := tab.Do(
		chromedp.SetValue(chromedp.CSS(`#cluster-scale [name=size]`), "3"),
		chromedp.Click(chromedp.CSS(`#cluster-scale button[type=submit]`)),
	); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "web-c1 scaled to 3 workers from its page", func() bool {
		c, _ = clusterNamed(t, tab, "web-c1")
		return c.Size == 3
	})

	// A write without the CSRF token is refused; the same with the page's
	// token is accepted (the refusal is the token's doing).
	tab.IgnoreErrors("403")
	status, body, err := tab.Fetch("/api/v1/clusters/"+c.ID+"/scale",
		`{method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify({size: 4})}`)
	if err != nil || status != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Fatalf("scale without X-CSRF-Token: %d %v %s", status, err, body)
	}
	status, body, err = tab.Fetch("/api/v1/clusters/"+c.ID+"/scale",
		`{method: "POST", headers: {"Content-Type": "application/json", "X-CSRF-Token": "not-the-token"}, body: JSON.stringify({size: 4})}`)
	if err != nil || status != http.StatusForbidden {
		t.Fatalf("scale with a wrong X-CSRF-Token: %d %v %s", status, err, body)
	}
	status, body, err = tab.Fetch("/api/v1/clusters/"+c.ID+"/scale",
		`{method: "POST", headers: {"Content-Type": "application/json", "X-CSRF-Token": document.querySelector('meta[name=csrf-token]').content}, body: JSON.stringify({size: 4})}`)
	if err != nil || status >= 300 {
		t.Fatalf("scale with the page's X-CSRF-Token: %d %v %s", status, err, body)
	}
	if c, _ = clusterNamed(t, tab, "web-c1"); c.Size == 3 {
		// The refused writes changed nothing; the accepted one is a job.
		eventually(t, 20*time.Second, "web-c1 scaled to 4 with the token", func() bool {
			c, _ = clusterNamed(t, tab, "web-c1")
			return c.Size == 4
		})
	}

	// A binaries ISO uploaded from the images page (streamed, its sha256
	// shown) and a version added from it on the versions page, which then
	// shows the ISO's size and sha256.
	iso := filepath.Join(t.TempDir(), "k8s-v1.32.1-binaries.iso")
	isoBody := bytes.Repeat([]byte("ztpd binaries ISO\n"), 3<<20/18)
	if err := os.WriteFile(iso, isoBody, 0o644); err != nil {
		t.Fatal(err)
	}
	isoSum := fmt.Sprintf("%x", sha256.Sum256(isoBody))
	open(t, tab, z.Base, "/images")
	if err := tab.Do(
		chromedp.SetUploadFiles(chromedp.CSS(`#image-upload [name=file]`), []string{iso}),
		chromedp.SetValue(chromedp.CSS(`#image-upload [name=name]`), "k8s-v1.32.1-binaries.iso"),
		chromedp.SetValue(chromedp.CSS(`#image-upload [name=kind]`), "binaries-iso"),
		chromedp.Click(chromedp.CSS(`#image-upload button[type=submit]`)),
	); err != nil {
		t.Fatal(err)
	}
	if got, err := tab.WaitText("#upload-sha256", isoSum); err != nil || strings.TrimSpace(got) != isoSum {
		t.Fatalf("#upload-sha256 after uploading from the page: %q %v, want %s", got, err, isoSum)
	}
	if err := tab.WaitFor(`table#images tbody tr[data-id="` + isoSum + `"]`); err != nil {
		t.Fatal(err)
	}
	open(t, tab, z.Base, "/versions")
	if _, err := tab.WaitJS(`document.querySelector('#version-add [name=image] option[value="`+isoSum+`"]') ? "y" : ""`, "the stored ISO offered by the add-version form"); err != nil {
		t.Fatal(err)
	}
	if err := tab.Do(
		chromedp.SetValue(chromedp.CSS(`#version-add [name=name]`), "v1.32.1"),
		chromedp.SetValue(chromedp.CSS(`#version-add [name=semver]`), "1.32.1"),
		chromedp.SetValue(chromedp.CSS(`#version-add [name=image]`), isoSum),
		chromedp.Click(chromedp.CSS(`#version-add button[type=submit]`)),
	); err != nil {
		t.Fatal(err)
	}
	row := `table#versions tbody tr:has(td:first-child)`
	if _, err := tab.WaitJS(`[...document.querySelectorAll("`+row+`")].some(r => r.cells[0].textContent === "v1.32.1") ? "y" : ""`, "v1.32.1 listed"); err != nil {
		t.Fatal(err)
	}
	var shown struct{ Size, SHA string }
	shown, err = browser.Eval[struct{ Size, SHA string }](tab, `(() => { const r = [...document.querySelectorAll("`+row+`")].find(r => r.cells[0].textContent === "v1.32.1");
	  const h = r.querySelector("td.iso-sha256 code"); return {Size: r.querySelector("td.iso-size").textContent, SHA: h ? h.title : ""}; })()`)
	if err != nil || shown.Size != "3.00 MiB" || shown.SHA != isoSum {
		t.Errorf("the versions page shows v1.32.1's ISO as size %q sha256 %q (%v), want 3.00 MiB and %s", shown.Size, shown.SHA, err, isoSum)
	}

	// Every page, at both widths, with data in it; every form control
	// labelled, every time local with its UTC value as title.
	var devID string
	if err := tab.Navigate(z.Base + "/devices"); err != nil {
		t.Fatal(err)
	}
	if err := tab.WaitFor(`table#devices tbody tr[data-id="02:00:00:00:16:01"]`); err != nil {
		t.Fatal(err)
	}
	devID = "02:00:00:00:16:01"
	if st, err := tab.TextOf(`table#devices tbody tr[data-id="02:00:00:00:16:01"] td.state`); err != nil || st != "config-served" {
		t.Errorf("the leaf's state cell: %q %v", st, err)
	}
	for _, p := range []struct {
		name, path string
		times      int // at least, in the page's data
	}{
		{"overview", "/", 10}, {"devices", "/devices", 3}, {"device", "/devices/" + devID, 5}, {"clusters", "/clusters", 1},
		{"cluster", "/clusters/" + c.ID, 10}, {"versions", "/versions", 2}, {"images", "/images", 1}, {"leases", "/leases", 6}, {"settings", "/settings", 1},
	} {
		open(t, tab, z.Base, p.path)
		page, err := browser.Eval[string](tab, `document.querySelector("main").dataset.page || ""`)
		if err != nil || page == "" {
			t.Errorf("%s: main[data-page] %q %v", p.path, page, err)
		}
		if p.path == "/" {
			// The device no profile matches is a warning with a way to it.
			w, err := tab.WaitJS(`(document.querySelector("#ov-warning-unmatched") || {}).textContent || ""`, "#ov-warning-unmatched")
			if err != nil || !strings.HasPrefix(w, "1 device asked for content and got none") {
				t.Errorf("overview warning for the unmatched device: %q %v", w, err)
			}
		}
		checkPage(t, tab, p.path, p.times)
		shoot(t, tab, shots, p.name)
	}

	// An API key created from the settings page shows its secret once.
	open(t, tab, z.Base, "/settings")
	if err := tab.Do(
		chromedp.SetValue(chromedp.CSS(`#apikey-create [name=name]`), "ci"),
		chromedp.SetValue(chromedp.CSS(`#apikey-create [name=role]`), "user"),
		chromedp.Click(chromedp.CSS(`#apikey-create button[type=submit]`)),
	); err != nil {
		t.Fatal(err)
	}
	if secret, err := tab.WaitJS(`(document.querySelector("#apikey-secret") || {}).textContent || ""`, "#apikey-secret"); err != nil || len(strings.TrimSpace(secret)) < 20 {
		t.Errorf("#apikey-secret after creating a key: %q %v", secret, err)
	}
	shoot(t, tab, shots, "settings-new-key")

	// Delete the cluster from its page, with the typed confirmation.
	open(t, tab, z.Base, "/clusters/"+c.ID)
	if _, err := tab.WaitText("#cluster-title", "web-c1"); err != nil {
		t.Fatal(err)
	}
	if dis, err := browser.Eval[bool](tab, `document.querySelector("#cluster-delete button[type=submit]").disabled`); err != nil || !dis {
		t.Errorf("delete is enabled before the name is typed: %v %v", dis, err)
	}
	if err := tab.Do(
		chromedp.SendKeys(chromedp.CSS(`#confirm-name`), "web-c1"),
		chromedp.WaitEnabled(chromedp.CSS(`#cluster-delete button[type=submit]`)),
		chromedp.Click(chromedp.CSS(`#cluster-delete button[type=submit]`)),
	); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "web-c1 gone after delete from its page", func() bool {
		c, ok := clusterNamed(t, tab, "web-c1")
		return !ok || c.State == "Destroyed"
	})
	if _, err := tab.WaitJS(`location.pathname === "/clusters" && document.body.dataset.loaded ? "y" : ""`, "back on /clusters after the delete"); err != nil {
		t.Error(err)
	} else if txt, _ := tab.TextOf("table#clusters tbody"); strings.Contains(txt, "web-c1") {
		t.Errorf("/clusters still lists web-c1 after its delete: %q", txt)
	}
	t.Log("deleted web-c1 from its page")

	// A user key of account team-b: its own cluster only, no admin pages.
	user := z.Key("user", "bob", "--account", "team-b")
	var theirs, mine restCluster
	z.MustJSON(&theirs, "cluster", "create", "admin-only", "--version", "1.31.4", "--size", "1")
	z.APICLI(&mine, user, "cluster", "create", "team-b-c1", "--version", "1.31.4", "--size", "1")
	if theirs.ID == "" || mine.ID == "" {
		t.Fatalf("clusters: admin %+v, user %+v", theirs, mine)
	}
	t.Run("user key", func(t *testing.T) {
		ut := b.Tab(t)
		ut.IgnoreErrors("403", "404")
		if err := ut.SignIn(z.Base, user.APIKey, user.SecretKey); err != nil {
			t.Fatal(err)
		}
		if role, err := ut.TextOf("#key-role"); err != nil || role != "user" {
			t.Errorf("#key-role: %q %v", role, err)
		}
		open(t, ut, z.Base, "/clusters")
		if _, err := ut.WaitText("table#clusters tbody", "team-b-c1"); err != nil {
			t.Fatal(err)
		}
		if txt, _ := ut.TextOf("table#clusters tbody"); strings.Contains(txt, "admin-only") {
			t.Errorf("a team-b key sees the admin's cluster: %q", txt)
		}
		for _, cl := range clusters(t, ut) {
			if cl.Name != "team-b-c1" {
				t.Errorf("a team-b key lists cluster %s (account %s)", cl.Name, cl.Account)
			}
		}
		if st, _, _ := ut.Fetch("/api/v1/clusters/"+theirs.ID, "{}"); st == 200 {
			t.Errorf("a team-b key reads the admin's cluster: %d", st)
		}
		if ok, _ := ut.Exists(`nav a[href="/settings"]`); ok {
			t.Error("a user session's nav links to /settings")
		}
		// The admin pages: 403, no data.
		nctx, cancel := context.WithTimeout(ut.Ctx, 20*time.Second)
		resp, err := chromedp.Run(nctx, chromedp.NavigateResponse(z.Base+"/settings"))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != http.StatusForbidden {
			t.Errorf("/settings for a user key: HTTP %d", resp.Status)
		}
		if ok, _ := ut.Exists("#apikey-create"); ok {
			t.Error("/settings for a user key shows the API key form")
		}
		checkPage(t, ut, "/settings for a user key", 0)
		shoot(t, ut, shots, "settings-user-403")
		for _, p := range []string{"/api/v1/tokens", "/api/v1/apikeys", "/api/v1/settings/config"} {
			if st, body, _ := ut.Fetch(p, "{}"); st != http.StatusForbidden && st != http.StatusNotFound {
				t.Errorf("GET %s with a user session: %d %s", p, st, body)
			}
		}
		// The admin's cluster page shows nothing of it.
		if err := ut.Navigate(z.Base + "/clusters/" + theirs.ID); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		if txt, _ := browser.Eval[string](ut, `document.querySelector("main").textContent`); strings.Contains(txt, "admin-only") {
			t.Errorf("the admin's cluster page shows its name to a team-b key")
		}
	})

	// Screenshots listed for whoever keeps them.
	entries, _ := os.ReadDir(shots)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	t.Logf("%d screenshots: %s", len(names), strings.Join(names, " "))
	if len(names) < 2*12 {
		t.Errorf("%d screenshots, want %d", len(names), 2*12)
	}
}
