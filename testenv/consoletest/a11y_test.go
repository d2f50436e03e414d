package consoletest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/testenv/browser"
)

// pageAudit is what checkPage reads from a rendered page.
type pageAudit struct {
	Unlabelled []string `json:"unlabelled"`  // form controls without an accessible name
	Nameless   []string `json:"nameless"`    // buttons and links without one
	NotButtons []string `json:"not_buttons"` // clickable things that are not buttons or links
	BadTimes   []string `json:"bad_times"`   // <time> without its UTC value as title
	LooseTimes []string `json:"loose_times"` // text that looks like a time outside <time>
	Times      int      `json:"times"`
}

// auditJS checks the page as a keyboard and screen-reader user meets it:
// every input, select and textarea has a label (or aria-label), every
// button and link has a name, nothing else acts as a button, and every
// time is a <time> whose title is its UTC value (datetime = title, ending
// in Z); text that looks like a clock time or an RFC 3339 time outside a
// <time> (and outside code and preformatted documents) is reported too.
const auditJS = `(() => {
  const nameOf = (e) => (e.getAttribute('aria-label') || '').trim() || (e.getAttribute('aria-labelledby') || '').trim() ||
    [...(e.labels || [])].map((l) => l.textContent.trim()).join(' ').trim();
  const short = (e) => e.outerHTML.slice(0, 160);
  const unlabelled = [...document.querySelectorAll('input, select, textarea')]
    .filter((e) => e.type !== 'hidden' && !nameOf(e)).map(short);
  const nameless = [...document.querySelectorAll('button, a[href]')]
    .filter((e) => !(e.textContent.trim() || (e.getAttribute('aria-label') || '').trim())).map(short);
  const notButtons = [...document.querySelectorAll('[onclick], a:not([href]), [role=button]:not(button), div[tabindex], span[tabindex]')].map(short);
  const times = [...document.querySelectorAll('time')];
  const utc = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/;
  const badTimes = times.filter((t) => !utc.test(t.title) || t.getAttribute('datetime') !== t.title || !t.textContent.trim()).map(short);
  const looks = /\d{4}-\d\d-\d\dT\d\d:\d\d|(?<![\w:])\d{1,2}:\d\d:\d\d(?![\w:])/;
  const loose = [];
  const walk = document.createTreeWalker(document.querySelector('main'), NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    if (n.parentElement.closest('time, pre, code, svg, script, style')) continue;
    if (looks.test(n.textContent)) loose.push(n.textContent.trim().slice(0, 120));
  }
  return { unlabelled, nameless, not_buttons: notButtons, bad_times: badTimes, loose_times: loose, times: times.length };
})()`

// checkPage fails the test for every finding of auditJS on the tab's page;
// minTimes is how many times the page must show at least (its data has
// them).
func checkPage(t *testing.T, tab *browser.Tab, what string, minTimes int) {
	t.Helper()
	a, err := browser.Eval[pageAudit](tab, auditJS)
	if err != nil {
		t.Fatalf("%s: audit: %v", what, err)
	}
	for _, e := range a.Unlabelled {
		t.Errorf("%s: a form control without a label: %s", what, e)
	}
	for _, e := range a.Nameless {
		t.Errorf("%s: a button or link without a name: %s", what, e)
	}
	for _, e := range a.NotButtons {
		t.Errorf("%s: acts as a button but is none: %s", what, e)
	}
	for _, e := range a.BadTimes {
		t.Errorf("%s: a time without its UTC value as title: %s", what, e)
	}
	for _, e := range a.LooseTimes {
		t.Errorf("%s: a time shown outside <time> (no local/UTC rule): %q", what, e)
	}
	if a.Times < minTimes {
		t.Errorf("%s: %d times shown, want at least %d", what, a.Times, minTimes)
	}
}

// focusStop is the focused element after a key press.
type focusStop struct {
	Sel      string `json:"sel"` // tag#id
	Href     string `json:"href"`
	Text     string `json:"text"`
	InNav    bool   `json:"in_nav"`
	InTable  bool   `json:"in_table"`
	Ring     bool   `json:"ring"`     // a focus indicator at least 2 px wide is drawn
	Visible  bool   `json:"visible"`  // it has a box inside the page
	Expanded string `json:"expanded"` // aria-expanded, if any
}

func (s focusStop) String() string {
	out := s.Sel
	if s.Href != "" {
		out += "[" + s.Href + "]"
	}
	return out
}

const focusJS = `(() => {
  const e = document.activeElement;
  if (!e || e === document.body) return { sel: 'body' };
  const cs = getComputedStyle(e);
  const r = e.getBoundingClientRect();
  return { sel: e.tagName.toLowerCase() + (e.id ? '#' + e.id : ''), href: e.getAttribute('href') || '',
    text: e.textContent.trim().slice(0, 40), in_nav: !!e.closest('nav'), in_table: !!e.closest('table'),
    ring: cs.outlineStyle !== 'none' && parseFloat(cs.outlineWidth) >= 2,
    visible: r.width > 0 && r.height > 0 && r.right > 0 && r.bottom > 0,
    expanded: e.getAttribute('aria-expanded') || '' };
})()`

// press sends keys (chromedp/kb) to the page and returns what has the
// focus then.
func press(t *testing.T, tab *browser.Tab, keys string) focusStop {
	t.Helper()
	if err := tab.Do(chromedp.KeyEvent(keys)); err != nil {
		t.Fatalf("key %q: %v", keys, err)
	}
	s, err := browser.Eval[focusStop](tab, focusJS)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tabUntil presses Tab until done(stop) or max presses; every stop must
// be visible and show a focus ring.
func tabUntil(t *testing.T, tab *browser.Tab, max int, done func(focusStop) bool) []focusStop {
	t.Helper()
	var stops []focusStop
	for range max {
		s := press(t, tab, kb.Tab)
		stops = append(stops, s)
		if s.Sel != "body" && (!s.Ring || !s.Visible) {
			t.Errorf("focus on %s (%q): ring %v, visible %v", s, s.Text, s.Ring, s.Visible)
		}
		if done(s) {
			return stops
		}
	}
	t.Fatalf("%d presses of Tab never reached the end: %v", max, stops)
	return nil
}

// seedFleet stores n devices with leases: enough for a second page of the
// devices table (100 a page).
func seedFleet(n int) func(tx core.Tx) error {
	return func(tx core.Tx) error {
		now := time.Now().UTC().Truncate(time.Second)
		for i := range n {
			mac := fmt.Sprintf("02:00:00:10:%02x:%02x", i/256, i%256)
			ip := fmt.Sprintf("10.99.%d.%d", 20+i/200, 10+i%200)
			d := core.Device{ID: mac, Kind: core.KindSONiC, MAC: mac, Serial: fmt.Sprintf("KB%05d", i), Product: "Accton-AS7712-32X",
				Hostname: fmt.Sprintf("leaf-%d", i), IP: ip, Subnet: "fabric", State: core.StateLeased,
				FirstSeen: now.Add(-time.Hour), LastSeen: now, UpdatedAt: now}
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
			if err := tx.Leases().Put(core.Lease{IP: ip, MAC: mac, Hostname: d.Hostname, Subnet: "fabric", State: core.LeaseActive,
				Start: d.FirstSeen, Expiry: now.Add(time.Hour), UpdatedAt: now}); err != nil {
				return err
			}
		}
		return nil
	}
}

// TestConsoleKeyboard uses the console with the keyboard only: the sign-in
// form is filled and sent by keys; on the devices page (130 devices, so
// two pages) Tab walks from the skip link through the nav to the search
// box, the filters, every device link and the pagination, each stop with a
// visible focus ring, and Enter on Next shows the second page; at 390 px
// the nav is folded behind the Menu button (aria-expanded false), Enter
// opens it (true) and Tab goes on into its links.
func TestConsoleKeyboard(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	if _, err := browser.Path(); err != nil {
		t.Skip(err)
	}
	z := serveZtpd(t, seedFleet(130))
	admin := z.Key("admin", "ops")
	b := browser.New(t)
	tab := b.Tab(t)

	// Sign in by keyboard: the API key field has the focus on arrival.
	if err := tab.Navigate(z.Base + "/devices"); err != nil {
		t.Fatal(err)
	}
	if err := tab.WaitFor("#signin-form"); err != nil {
		t.Fatal(err)
	}
	checkPage(t, tab, "sign-in form", 0)
	s, err := browser.Eval[focusStop](tab, focusJS)
	if err != nil || s.Sel != "input#api_key" {
		t.Fatalf("focus on arrival at the sign-in form: %s %v, want the API key field", s, err)
	}
	if err := tab.Do(chromedp.KeyEvent(admin.APIKey)); err != nil {
		t.Fatal(err)
	}
	if s := press(t, tab, kb.Tab); s.Sel != "input#secret_key" || !s.Ring {
		t.Fatalf("Tab from the API key: focus on %s (ring %v), want the secret field", s, s.Ring)
	}
	if err := tab.Do(chromedp.KeyEvent(admin.SecretKey)); err != nil {
		t.Fatal(err)
	}
	if s := press(t, tab, kb.Tab); s.Sel != "button" || s.Text != "Sign in" || !s.Ring {
		t.Fatalf("Tab from the secret: focus on %s %q (ring %v), want the Sign in button", s, s.Text, s.Ring)
	}
	if err := tab.Do(chromedp.KeyEvent(kb.Enter)); err != nil {
		t.Fatal(err)
	}
	// The form sends the browser on to the page it was opened for.
	if _, err := tab.WaitJS(`location.pathname === "/devices" && document.querySelector("table#devices tbody tr[data-id]") ? "y" : ""`, "the devices page after a keyboard sign-in"); err != nil {
		t.Fatal(err)
	}
	if err := tab.WaitFor("body[data-loaded]"); err != nil {
		t.Fatal(err)
	}
	checkPage(t, tab, "/devices", 100)

	// Tab from the top of the devices page to the pagination.
	stops := tabUntil(t, tab, 200, func(s focusStop) bool { return s.Sel == "button#page-next" })
	if stops[0].Href != "#main" {
		t.Errorf("the first Tab stop is %s, want the skip link", stops[0])
	}
	index := func(match func(focusStop) bool) int {
		for i, s := range stops {
			if match(s) {
				return i
			}
		}
		return -1
	}
	nav := map[string]bool{}
	for _, s := range stops {
		if s.InNav {
			nav[s.Href] = true
		}
	}
	for _, p := range []string{"/", "/devices", "/clusters", "/rollouts", "/versions", "/images", "/leases", "/settings"} {
		if !nav[p] {
			t.Errorf("Tab never reached the nav link to %s: %v", p, stops)
		}
	}
	search := index(func(s focusStop) bool { return s.Sel == "input#f-q" })
	filters := index(func(s focusStop) bool { return s.Sel == "select#f-cluster" })
	signout := index(func(s focusStop) bool { return s.Sel == "button" && s.Text == "Sign out" })
	firstDevice := index(func(s focusStop) bool { return s.InTable && strings.HasPrefix(s.Href, "/devices/") })
	devLinks := 0
	for _, s := range stops {
		if s.InTable && strings.HasPrefix(s.Href, "/devices/") {
			devLinks++
		}
	}
	switch {
	case signout < 0:
		t.Errorf("Tab never reached Sign out: %v", stops)
	case search < 0 || filters < search:
		t.Errorf("Tab: search box at stop %d, cluster filter at %d: %v", search, filters, stops)
	case firstDevice < filters:
		t.Errorf("Tab: first device link at stop %d, before the filters (%d)", firstDevice, filters)
	case devLinks != 100:
		t.Errorf("Tab reached %d device links, want the 100 of the first page", devLinks)
	}
	t.Logf("Tab reached the pagination in %d presses: skip link, %d nav links, sign out, search at %d, %d device links", len(stops), len(nav), search+1, devLinks)
	// Enter on Next shows the second page, and the focus stays on the pager.
	if err := tab.Do(chromedp.KeyEvent(kb.Enter)); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.WaitText("#page-info", "devices 101–130"); err != nil {
		t.Fatal(err)
	}
	if s, _ := browser.Eval[focusStop](tab, focusJS); s.Sel != "button#page-next" && s.Sel != "button#page-prev" {
		t.Errorf("after Enter on Next the focus is on %s, not on the pager", s)
	}

	// Every page, as the keyboard user sees them: labels, names, times.
	for _, p := range []struct {
		path  string
		times int
	}{{"/", 0}, {"/devices/02:00:00:10:00:07", 3}, {"/clusters", 0}, {"/versions", 0}, {"/images", 0}, {"/leases", 100}, {"/settings", 1}} {
		open(t, tab, z.Base, p.path)
		checkPage(t, tab, p.path, p.times)
	}

	// 390 px: the nav folds behind Menu.
	if err := tab.Do(chromedp.EmulateViewport(390, 844)); err != nil {
		t.Fatal(err)
	}
	defer tab.Do(chromedp.EmulateViewport(int64(b.Width), int64(b.Height)))
	open(t, tab, z.Base, "/devices")
	stops = tabUntil(t, tab, 10, func(s focusStop) bool { return s.Sel == "button#nav-toggle" })
	if s := stops[len(stops)-1]; s.Expanded != "false" {
		t.Errorf("the Menu button folded: aria-expanded=%q, want false", s.Expanded)
	}
	for _, s := range stops {
		if s.InNav {
			t.Errorf("Tab reached %s in the folded nav", s)
		}
	}
	if s := press(t, tab, kb.Tab); s.InNav {
		t.Errorf("Tab after the folded Menu went into the nav: %s", s)
	}
	if err := tab.Do(chromedp.Focus(chromedp.CSS("#nav-toggle"))); err != nil {
		t.Fatal(err)
	}
	if err := tab.Do(chromedp.KeyEvent(kb.Enter)); err != nil {
		t.Fatal(err)
	}
	if s, _ := browser.Eval[focusStop](tab, focusJS); s.Sel != "button#nav-toggle" || s.Expanded != "true" {
		t.Errorf("Enter on Menu: focus on %s, aria-expanded=%q, want the opened Menu button", s, s.Expanded)
	}
	if s := press(t, tab, kb.Tab); !s.InNav || s.Href != "/" || !s.Ring {
		t.Errorf("Tab after opening Menu: %s (in nav %v, ring %v), want the nav's first link", s, s.InNav, s.Ring)
	}
}
