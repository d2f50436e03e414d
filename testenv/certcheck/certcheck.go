// Package certcheck reads certificates the way an operator would check
// them, with the real openssl, for tests that must not trust the code that
// made the certificate to also read it.
package certcheck

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// SubjectAndEnd runs `openssl x509 -noout -subject -enddate` on a PEM
// certificate and returns its subject (oneline form, e.g.
// "O = ztpd:cluster-admins, CN = alice") and notAfter. It skips the test
// when openssl is missing.
func SubjectAndEnd(t testing.TB, pem []byte) (string, time.Time) {
	t.Helper()
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl not installed")
	}
	cmd := exec.Command(openssl, "x509", "-noout", "-subject", "-enddate", "-nameopt", "oneline,-esc_msb")
	cmd.Stdin = bytes.NewReader(pem)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("openssl x509: %v\n%s", err, out)
	}
	var subject string
	var notAfter time.Time
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "subject="); ok {
			subject = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "notAfter="); ok {
			if notAfter, err = time.Parse("Jan _2 15:04:05 2006 MST", strings.TrimSpace(v)); err != nil {
				t.Fatalf("openssl enddate %q: %v", v, err)
			}
		}
	}
	if subject == "" || notAfter.IsZero() {
		t.Fatalf("openssl output %q", out)
	}
	return subject, notAfter
}
