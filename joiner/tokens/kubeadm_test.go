package tokens

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestGenerateBootstrapTokenMatchesUpstreamRegexp(t *testing.T) {
	upstream := regexp.MustCompile(bootstrapapi.BootstrapTokenPattern)
	seen := map[string]bool{}
	for range 500 {
		tok, err := GenerateBootstrapToken()
		if err != nil {
			t.Fatal(err)
		}
		s := tok.Reveal()
		if !upstream.MatchString(s) || !bootstraputil.BootstrapTokenRegexp.MatchString(s) {
			t.Fatalf("%q does not match %s", s, bootstrapapi.BootstrapTokenPattern)
		}
		if !bootstraputil.IsValidBootstrapTokenID(tok.ID()) {
			t.Fatalf("id %q invalid", tok.ID())
		}
		if seen[s] {
			t.Fatalf("duplicate token %q", s)
		}
		seen[s] = true
	}
}

func TestParseBootstrapToken(t *testing.T) {
	good := []string{"abcdef.0123456789abcdef", "000000.0000000000000000", "zzzzzz.zzzzzzzzzzzzzzzz"}
	bad := []string{
		"", ".", "abcdef", "abcdef.", ".0123456789abcdef",
		"ABCDEF.0123456789abcdef", "abcdef.0123456789ABCDEF",
		"abcde.0123456789abcdef", "abcdefg.0123456789abcdef",
		"abcdef.0123456789abcde", "abcdef.0123456789abcdefg",
		"abcdef.0123456789abcdef\n", " abcdef.0123456789abcdef",
		"abcdef:0123456789abcdef", "abcdef.0123456789.abcdef", "abcdef.012345678_abcdef",
		"abcdef.0123456789abcd\x00f",
	}
	for _, s := range good {
		tok, err := ParseBootstrapToken(s)
		if err != nil || tok.Reveal() != s {
			t.Fatalf("%q: %v", s, err)
		}
	}
	for _, s := range bad {
		_, err := ParseBootstrapToken(s)
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("%q accepted (err %v)", s, err)
		}
		if len(s) > 8 && strings.Contains(err.Error(), s[7:]) {
			t.Fatalf("error repeats the secret: %v", err)
		}
	}
}

func TestBootstrapTokenNeverPrintsSecret(t *testing.T) {
	tok, _ := ParseBootstrapToken("abcdef.0123456789abcdef")
	key, _ := GenerateCertificateKey()
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "tok", tok, "key", key)
	slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "tok", tok, "key", key)
	j, _ := json.Marshal(map[string]any{"t": tok, "k": key})
	out := fmt.Sprintf("%v %+v %#v %s %v %#v", tok, tok, tok, tok, key, key) + buf.String() + string(j)
	if strings.Contains(out, "0123456789abcdef") || strings.Contains(out, key.Reveal()) {
		t.Fatalf("secret printed: %s", out)
	}
	if !strings.Contains(out, "abcdef.<redacted>") {
		t.Fatalf("id not shown: %s", out)
	}
}

func TestCertificateKey(t *testing.T) {
	k, err := GenerateCertificateKey()
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(k.Reveal()) {
		t.Fatalf("certificate key %q is not 64 lower-case hex", k.Reveal())
	}
	k2, _ := GenerateCertificateKey()
	if k.Reveal() == k2.Reveal() {
		t.Fatal("two certificate keys are equal")
	}
	if back, err := ParseCertificateKey(k.Reveal()); err != nil || back != k {
		t.Fatalf("parse: %v", err)
	}
	for _, s := range []string{"", "00", strings.Repeat("g", 64), strings.Repeat("0", 63), strings.Repeat("0", 66)} {
		if _, err := ParseCertificateKey(s); err == nil {
			t.Fatalf("accepted %q", s)
		}
	}
}

func TestKubeadmRecordVerify(t *testing.T) {
	tok, _ := GenerateBootstrapToken()
	rec, err := NewKubeadmRecord(tok, KubeadmOptions{ClusterID: "c1", DeviceID: "d1", TTL: time.Hour, Description: "worker d1"}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if rec.ID != tok.ID() || !rec.ExpiresAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("record %+v", rec)
	}
	if got := strings.Join(rec.Usages, ","); got != "signing,authentication" {
		t.Fatalf("default usages %s", got)
	}
	if got := strings.Join(rec.Groups, ","); got != DefaultNodeGroup {
		t.Fatalf("default groups %s", got)
	}
	stored, _ := json.Marshal(rec)
	if bytes.Contains(stored, []byte(tok.secret)) {
		t.Fatal("stored record contains the secret")
	}

	if err := rec.VerifyBootstrapToken(tok, t0.Add(time.Minute)); err != nil {
		t.Fatalf("valid token refused: %v", err)
	}
	other, _ := GenerateBootstrapToken()
	forged, _ := ParseBootstrapToken(tok.ID() + "." + other.secret)
	if err := rec.VerifyBootstrapToken(forged, t0); !errors.Is(err, ErrMismatch) {
		t.Fatalf("wrong secret: %v", err)
	}
	if err := rec.VerifyBootstrapToken(other, t0); !errors.Is(err, ErrMismatch) {
		t.Fatalf("other token: %v", err)
	}
	// Expired exactly at ExpiresAt.
	if err := rec.VerifyBootstrapToken(tok, t0.Add(time.Hour)); !errors.Is(err, ErrExpired) {
		t.Fatalf("expired token: %v", err)
	}
	rec.Revoke(t0.Add(time.Second))
	rec.Revoke(t0.Add(time.Minute))
	if !rec.RevokedAt.Equal(t0.Add(time.Second)) {
		t.Fatal("second revoke moved RevokedAt")
	}
	if err := rec.VerifyBootstrapToken(tok, t0); !errors.Is(err, ErrRevoked) {
		t.Fatalf("revoked token: %v", err)
	}
	// A wrong secret on a revoked token still says only "mismatch".
	if err := rec.VerifyBootstrapToken(forged, t0); !errors.Is(err, ErrMismatch) {
		t.Fatalf("wrong secret on revoked token: %v", err)
	}
	// A hash copied to another record id never verifies.
	moved := rec
	moved.ID, moved.Revoked = other.ID(), false
	if err := moved.Verify(tok.secret, t0); !errors.Is(err, ErrMismatch) {
		t.Fatalf("hash moved to another id verified: %v", err)
	}
}

func TestKubeadmRecordValidation(t *testing.T) {
	tok, _ := GenerateBootstrapToken()
	if _, err := NewKubeadmRecord(tok, KubeadmOptions{Usages: []string{"signing", "root"}}, t0); err == nil {
		t.Fatal("unknown usage accepted")
	}
	if _, err := NewKubeadmRecord(tok, KubeadmOptions{Groups: []string{"system:masters"}}, t0); err == nil {
		t.Fatal("non-bootstrapper group accepted")
	}
	if _, err := NewKubeadmRecord(BootstrapToken{}, KubeadmOptions{}, t0); err == nil {
		t.Fatal("zero token accepted")
	}
	rec, err := NewKubeadmRecord(tok, KubeadmOptions{}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !rec.ExpiresAt.IsZero() || rec.Expired(t0.Add(100*365*24*time.Hour)) {
		t.Fatal("TTL 0 must mean never expires")
	}
	if ttl, err := rec.RemainingTTL(t0); ttl != 0 || err != nil {
		t.Fatalf("remaining TTL of a non-expiring token: %v %v", ttl, err)
	}
	rec, _ = NewKubeadmRecord(tok, KubeadmOptions{TTL: 24 * time.Hour}, t0)
	if ttl, _ := rec.RemainingTTL(t0.Add(90*time.Minute + 500*time.Millisecond)); ttl != 22*time.Hour+29*time.Minute+59*time.Second {
		t.Fatalf("remaining TTL %v", ttl)
	}
	if _, err := rec.RemainingTTL(t0.Add(24 * time.Hour)); !errors.Is(err, ErrExpired) {
		t.Fatalf("remaining TTL of an expired token: %v", err)
	}
}

func FuzzParseBootstrapToken(f *testing.F) {
	for _, s := range []string{"abcdef.0123456789abcdef", "ABCDEF.0123456789abcdef", "", ".", "abcdef.0123456789abcdef\n", "a.b.c"} {
		f.Add(s)
	}
	upstream := regexp.MustCompile(bootstrapapi.BootstrapTokenPattern)
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseBootstrapToken(s)
		if (err == nil) != upstream.MatchString(s) {
			t.Fatalf("%q: parse error %v but upstream regexp match %v", s, err, upstream.MatchString(s))
		}
		if err != nil {
			return
		}
		if tok.Reveal() != s {
			t.Fatalf("round trip %q -> %q", s, tok.Reveal())
		}
		if strings.Contains(tok.String(), tok.secret) {
			t.Fatalf("String shows the secret: %s", tok.String())
		}
	})
}
