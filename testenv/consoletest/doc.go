// Package consoletest drives the web console of a real `ztpd serve` with a
// real browser (Debian's chromium, headless, through testenv/browser):
// sign-in, roles and account ownership, cluster operations from the pages,
// CSRF on writes, and screenshots of every page at 1280 and 390 px. It has
// only tests.
package consoletest
