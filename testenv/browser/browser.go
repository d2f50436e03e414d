// Package browser drives Debian's chromium headless (chromedp, over the
// DevTools pipe) for the web console's tests and benchmark: sign in, wait
// for selectors and text, full-page screenshots at a given width, the
// document's load mark (window.ztpdLoadedAt) to prove a page never
// reloaded, and every console error or uncaught exception the page raised
// (tests fail on any). Forward lets the host's browser reach a server
// inside a network namespace.
package browser

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/performance"
	"github.com/chromedp/cdproto/systeminfo"
	"github.com/chromedp/chromedp"
)

// DefaultPath is where Debian's chromium package installs its launcher.
const DefaultPath = "/usr/bin/chromium"

// Path is the chromium to run: $ZTPD_CHROMIUM, else DefaultPath, else
// chromium on PATH.
func Path() (string, error) {
	if p := os.Getenv("ZTPD_CHROMIUM"); p != "" {
		return p, nil
	}
	if _, err := os.Stat(DefaultPath); err == nil {
		return DefaultPath, nil
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p, nil
	}
	return "", errors.New("needs Debian's chromium (apt-get install chromium) at " + DefaultPath + " or $ZTPD_CHROMIUM")
}

// Browser is one headless chromium with a temporary profile.
type Browser struct {
	ctx     context.Context // the browser's first tab; its cancel stops chromium
	cancel  context.CancelFunc
	alloc   context.CancelFunc
	dir     string
	Width   int // default viewport width of new tabs
	Height  int
	Verbose func(format string, args ...any) // chromedp's own log, or nil
}

// Launch starts chromium headless (--headless=new, --disable-gpu, a fresh
// user-data-dir; --no-sandbox when running as root, where chromium's
// sandbox refuses to start).
func Launch(ctx context.Context) (*Browser, error) {
	bin, err := Path()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ztpd-chromium-")
	if err != nil {
		return nil, err
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", "new"),
		chromedp.DisableGPU,
		chromedp.UserDataDir(dir),
		chromedp.WindowSize(1280, 900),
		// Console pages talk to 127.0.0.1 only; nothing else to fetch.
		chromedp.Flag("no-proxy-server", true),
		// The appliances under test serve their API (and console) with the
		// self-signed certificate ztpd makes when none is configured.
		chromedp.IgnoreCertErrors,
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	b := &Browser{ctx: bctx, cancel: bcancel, alloc: acancel, dir: dir, Width: 1280, Height: 900}
	// The first Run starts chromium; fail here, not in the first test step.
	// It must run on bctx itself: chromium lives as long as the context of
	// that first Run, so a timeout there is a timer that stops it instead.
	stuck := time.AfterFunc(60*time.Second, b.Close)
	err = chromedp.Do(bctx, chromedp.Navigate("about:blank"))
	if !stuck.Stop() && err == nil {
		err = errors.New("no answer in 60 s")
	}
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	return b, nil
}

// New launches a browser for a test and closes it when the test ends; it
// skips the test when chromium is not installed.
func New(t testing.TB) *Browser {
	t.Helper()
	if _, err := Path(); err != nil {
		t.Skip(err)
	}
	b, err := Launch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// Close stops chromium and removes its profile.
func (b *Browser) Close() {
	b.cancel()
	b.alloc()
	os.RemoveAll(b.dir)
}

// Tab is one browser tab. Its methods are not safe for concurrent use (one
// tab runs one action at a time).
type Tab struct {
	Ctx     context.Context
	close   context.CancelFunc
	b       *Browser
	Timeout time.Duration // for each wait (default 20 s)

	mu     sync.Mutex
	errs   []string
	ignore []string
}

// NewTab opens a tab in its own browser context (its own cookie jar, so
// two tabs are two users) and starts collecting its console errors.
func (b *Browser) NewTab() (*Tab, error) {
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext())
	t := &Tab{Ctx: ctx, close: cancel, b: b, Timeout: 20 * time.Second}
	messages := chromedp.Console(ctx) // subscribes now: nothing of the first page is lost
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(int64(b.Width), int64(b.Height))); err != nil {
		cancel()
		return nil, err
	}
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				where := ""
				if m.URL != "" {
					where = fmt.Sprintf(" (%s:%d)", m.URL, m.Line+1)
				}
				t.mu.Lock()
				t.errs = append(t.errs, m.String()+where)
				t.mu.Unlock()
			}
		}
	}()
	return t, nil
}

// Tab is NewTab for a test: it fails the test on error, and at the end of
// the test fails it for every console error or uncaught exception the tab
// saw that was not ignored (IgnoreErrors).
func (b *Browser) Tab(t testing.TB) *Tab {
	t.Helper()
	tab, err := b.NewTab()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, e := range tab.Errors() {
			t.Errorf("browser console: %s", e)
		}
		tab.Close()
	})
	return tab
}

// Close closes the tab.
func (t *Tab) Close() { t.close() }

// IgnoreErrors makes console errors containing any of subs expected (a
// test that provokes a 403 on purpose sees the browser log it).
func (t *Tab) IgnoreErrors(subs ...string) {
	t.mu.Lock()
	t.ignore = append(t.ignore, subs...)
	t.mu.Unlock()
}

// Errors are the console errors and uncaught exceptions so far, less the
// ignored ones.
func (t *Tab) Errors() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
next:
	for _, e := range t.errs {
		for _, s := range t.ignore {
			if strings.Contains(e, s) {
				continue next
			}
		}
		out = append(out, e)
	}
	return out
}

func (t *Tab) timeout() (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Ctx, t.Timeout)
}

// Do runs actions with the tab's timeout.
func (t *Tab) Do(actions ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := t.timeout()
	defer cancel()
	return chromedp.Do(ctx, actions...)
}

// Navigate loads u and waits for its load event.
func (t *Tab) Navigate(u string) error {
	return t.Do(chromedp.Navigate(u))
}

// SignIn opens baseURL/ and signs in through the page's form (#signin-form,
// api_key, secret_key), then waits for the signed-in page: a document
// without the sign-in form.
func (t *Tab) SignIn(baseURL, key, secret string) error {
	if err := t.SubmitSignIn(baseURL, key, secret); err != nil {
		return err
	}
	if err := t.Do(chromedp.WaitNotPresent(chromedp.CSS("#signin-form"))); err != nil {
		msg, _ := t.TextOf("#signin-error")
		return fmt.Errorf("sign in as %s: still on the sign-in form (%q): %w", key, msg, err)
	}
	return nil
}

// SubmitSignIn fills and submits the sign-in form and waits for the next
// document, whatever it shows.
func (t *Tab) SubmitSignIn(baseURL, key, secret string) error {
	base := strings.TrimSuffix(baseURL, "/")
	if err := t.Navigate(base + "/"); err != nil {
		return err
	}
	if err := t.Do(chromedp.WaitVisible(chromedp.CSS("#signin-form"))); err != nil {
		return fmt.Errorf("no #signin-form at %s/: %w", base, err)
	}
	before, _ := t.LoadedAt()
	if err := t.Do(
		chromedp.SetValue(chromedp.CSS(`#signin-form input[name=api_key]`), key),
		chromedp.SetValue(chromedp.CSS(`#signin-form input[name=secret_key]`), secret),
		chromedp.Submit(chromedp.CSS(`#signin-form`)),
	); err != nil {
		return err
	}
	// The form posts and the server answers 303 to a new document; wait for
	// it to be a different one and loaded.
	ctx, cancel := t.timeout()
	defer cancel()
	for {
		if at, err := t.LoadedAt(); err == nil && at != before && at != 0 {
			if ready, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.readyState`)); ready == "complete" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sign-in form submitted, no new page loaded: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// WaitFor waits until an element matching the CSS selector is visible.
func (t *Tab) WaitFor(css string) error {
	if err := t.Do(chromedp.WaitVisible(chromedp.CSS(css))); err != nil {
		return fmt.Errorf("wait for %s: %w", css, err)
	}
	return nil
}

// WaitGone waits until no element matches the CSS selector.
func (t *Tab) WaitGone(css string) error {
	if err := t.Do(chromedp.WaitNotPresent(chromedp.CSS(css))); err != nil {
		return fmt.Errorf("wait for %s to go: %w", css, err)
	}
	return nil
}

// WaitText waits until the text of the first element matching css contains
// text, and returns that text.
func (t *Tab) WaitText(css, text string) (string, error) {
	return t.WaitJS(fmt.Sprintf(`(() => { const e = document.querySelector(%s); return e && e.textContent.includes(%s) ? e.textContent : ""; })()`,
		strconv.Quote(css), strconv.Quote(text)), "wait for "+css+" to contain "+strconv.Quote(text))
}

// WaitJS polls a JavaScript expression until it returns a non-empty
// string, and returns it. It survives navigations on the way (an
// evaluation cut off by one is retried).
func (t *Tab) WaitJS(expr, what string) (string, error) {
	deadline := time.Now().Add(t.Timeout)
	var last error
	for {
		ctx, cancel := context.WithTimeout(t.Ctx, time.Until(deadline))
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr, chromedp.EvalAwaitPromise))
		cancel()
		if err == nil && v != "" {
			return v, nil
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			if last != nil {
				return "", fmt.Errorf("%s: not after %s (last error: %w)", what, t.Timeout, last)
			}
			return "", fmt.Errorf("%s: not after %s", what, t.Timeout)
		}
		select {
		case <-t.Ctx.Done():
			return "", t.Ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TextOf is the text content of the first element matching css.
func (t *Tab) TextOf(css string) (string, error) {
	return Eval[string](t, fmt.Sprintf(`(() => { const e = document.querySelector(%s); if (!e) throw new Error("no " + %[1]s); return e.textContent.trim(); })()`, strconv.Quote(css)))
}

// Exists reports whether an element matches css now.
func (t *Tab) Exists(css string) (bool, error) {
	return Eval[bool](t, fmt.Sprintf(`document.querySelector(%s) !== null`, strconv.Quote(css)))
}

// Eval evaluates a JavaScript expression in the page (promises awaited)
// and decodes its value into T.
func Eval[T any](t *Tab, expr string) (T, error) {
	ctx, cancel := t.timeout()
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
}

// LoadedAt is window.ztpdLoadedAt, which the console sets once per document
// load: the same value before and after something happened means the page
// did not reload in between. 0 when the page has none.
func (t *Tab) LoadedAt() (float64, error) {
	return Eval[float64](t, `Number(window.ztpdLoadedAt || 0)`)
}

// OnNewDocument runs the JavaScript source in every document the tab
// loads from now on, before the page's own scripts (instrumentation: a
// benchmark counts what the page's EventSource receives).
func (t *Tab) OnNewDocument(source string) error {
	ctx, cancel := t.timeout()
	defer cancel()
	_, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: source})
	return err
}

// Location is the tab's URL.
func (t *Tab) Location() (string, error) {
	ctx, cancel := t.timeout()
	defer cancel()
	return chromedp.Run(ctx, chromedp.Location())
}

// Cookies are the cookies the browser holds for u.
func (t *Tab) Cookies(u string) ([]*network.Cookie, error) {
	ctx, cancel := t.timeout()
	defer cancel()
	r, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{u}})
	if err != nil {
		return nil, err
	}
	return r.Cookies, nil
}

// Fetch runs fetch(path, init) in the page (same origin, with the session
// cookie) and returns the status and body. init is a JavaScript object
// literal ("{}" for a GET).
func (t *Tab) Fetch(path, init string) (status int, body string, err error) {
	r, err := Eval[fetchResult](t, fmt.Sprintf(`fetch(%s, %s).then(async r => ({status: r.status, body: await r.text()}))`, strconv.Quote(path), init))
	return r.Status, r.Body, err
}

type fetchResult struct {
	Status int    `json:"status"`
	Body   string `json:"body"`
}

// Screenshot writes a PNG of the whole page (not only the viewport) at
// width CSS pixels to path, then puts the tab's viewport back.
func (t *Tab) Screenshot(path string, width int) error {
	ctx, cancel := t.timeout()
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(int64(width), int64(t.b.Height))); err != nil {
		return err
	}
	defer chromedp.Do(ctx, chromedp.EmulateViewport(int64(t.b.Width), int64(t.b.Height)))
	// Let the page lay out at the new width (and its media queries apply).
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`, chromedp.EvalAwaitPromise)); err != nil {
		return err
	}
	m, err := chromedp.Call(ctx, page.GetLayoutMetrics, cdp.Empty{})
	if err != nil {
		return err
	}
	h := float64(t.b.Height)
	if m.CSSContentSize != nil {
		h = max(h, m.CSSContentSize.Height)
	}
	shot, err := chromedp.Call(ctx, page.CaptureScreenshot, page.CaptureScreenshotParams{
		Format: page.CaptureScreenshotFormatPng, CaptureBeyondViewport: ptr(true), FromSurface: ptr(true),
		Clip: &page.Viewport{Width: float64(width), Height: min(h, 16384), Scale: 1},
	})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, shot.Data, 0o644)
}

// Download clicks the element matching css and waits for the file it
// downloads into dir; it returns the file's path.
func (t *Tab) Download(css, dir string) (string, error) {
	ctx, cancel := t.timeout()
	defer cancel()
	progress := chromedp.BrowserEvents(ctx, browser.DownloadProgress)
	if _, err := chromedp.CallBrowser(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllowAndName, DownloadPath: dir, EventsEnabled: ptr(true),
		BrowserContextID: chromedp.FromContext(t.Ctx).BrowserContextID,
	}); err != nil {
		return "", err
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(css))); err != nil {
		return "", err
	}
	for ev, err := range progress {
		if err != nil {
			return "", fmt.Errorf("download from %s: %w", css, err)
		}
		switch ev.State {
		case browser.DownloadProgressStateCompleted:
			if ev.FilePath != "" {
				return ev.FilePath, nil
			}
			return filepath.Join(dir, ev.GUID), nil
		case browser.DownloadProgressStateCanceled:
			return "", fmt.Errorf("download from %s canceled", css)
		}
	}
	return "", fmt.Errorf("download from %s: no progress", css)
}

// Memory is what the tab costs.
type Memory struct {
	JSHeapUsed  int64 // bytes, Performance.getMetrics JSHeapUsedSize
	JSHeapTotal int64
	RendererRSS int64 // bytes, the largest renderer's VmRSS from /proc (0 when unknown)
}

// Memory reads the tab's JavaScript heap and the renderer processes' RSS.
func (t *Tab) Memory() (Memory, error) {
	ctx, cancel := t.timeout()
	defer cancel()
	var m Memory
	if _, err := chromedp.Call(ctx, performance.Enable, performance.EnableParams{}); err != nil {
		return m, err
	}
	r, err := chromedp.Call(ctx, performance.GetMetrics, cdp.Empty{})
	if err != nil {
		return m, err
	}
	for _, x := range r.Metrics {
		switch x.Name {
		case "JSHeapUsedSize":
			m.JSHeapUsed = int64(x.Value)
		case "JSHeapTotalSize":
			m.JSHeapTotal = int64(x.Value)
		}
	}
	// One tab, one site: its renderer is the largest renderer process.
	if p, err := chromedp.CallBrowser(ctx, systeminfo.GetProcessInfo, cdp.Empty{}); err == nil {
		for _, pi := range p.ProcessInfo {
			if pi.Type == "renderer" {
				m.RendererRSS = max(m.RendererRSS, rss(int(pi.ID)))
			}
		}
	}
	return m, nil
}

// rss is a process's resident set in bytes (0 when unreadable).
func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// Origin is scheme://host of u (for cookie look-ups).
func Origin(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	return p.Scheme + "://" + p.Host
}

func ptr[T any](v T) *T { return &v }
