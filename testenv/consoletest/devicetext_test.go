package consoletest

import (
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/testenv/browser"
)

// hostileText is what a device may write where ztpd keeps its words (a
// join report's detail, a step's output): markup that would run script
// if it were parsed, an ANSI colour sequence and a bell.
const hostileText = `<script>window.pwned=1</script><img src=x onerror="window.pwned=2">` + "\x1b[31mred\x1b[0m\x07"

// TestConsoleShowsDeviceWordsAsText: a device's own words in its timeline,
// stored as the joiner stores them (core.PrintableText), are shown by
// chromium as text: no element is made of the markup, no script runs, and
// the control bytes read as their control pictures. The same for an event
// the live stream brings after the page loaded.
func TestConsoleShowsDeviceWordsAsText(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	if _, err := browser.Path(); err != nil {
		t.Skip(err)
	}
	const id = "1e:00:00:00:16:02"
	report := func(tx core.Tx, msg string) error {
		_, err := tx.Events().Append(core.Event{Type: "join.failed", Device: id, Time: time.Now().UTC(),
			Message: "node reported failed: " + core.PrintableText(msg),
			Fields:  map[string]string{"detail": core.PrintableText(msg)}})
		return err
	}
	z := serveZtpd(t, func(tx core.Tx) error {
		if err := seedDevices(tx); err != nil {
			return err
		}
		return report(tx, "first "+hostileText)
	})
	admin := z.Key("admin", "ops")
	b := browser.New(t)
	tab := b.Tab(t)
	if err := tab.SignIn(z.Base, admin.APIKey, admin.SecretKey); err != nil {
		t.Fatal(err)
	}
	open(t, tab, z.Base, "/devices/"+id)
	want := "first <script>window.pwned=1</script><img src=x onerror=\"window.pwned=2\">␛[31mred␛[0m␇"
	if _, err := tab.WaitText("#device-timeline", want); err != nil {
		t.Fatal(err)
	}
	if err := z.App.Store.Update(func(tx core.Tx) error { return report(tx, "live "+hostileText) }); err != nil {
		t.Fatal(err)
	}
	if _, err := tab.WaitText("#device-timeline", strings.Replace(want, "first", "live", 1)); err != nil {
		t.Fatal(err)
	}
	if pwned, err := browser.Eval[bool](tab, `!!window.pwned || !!document.querySelector("main script, main img")`); err != nil || pwned {
		t.Fatalf("a device's words became markup (or ran): %v", err)
	}
	if text, _ := tab.TextOf("#device-timeline"); strings.ContainsAny(text, "\x1b\x07") {
		t.Fatalf("control bytes reached the page: %q", text)
	}
}
