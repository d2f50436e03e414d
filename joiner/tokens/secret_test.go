package tokens

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	bootstraputil "k8s.io/cluster-bootstrap/token/util"
)

func TestCredentials(t *testing.T) {
	for _, kind := range []Kind{KindEnrollment, KindReport, KindAgent} {
		c, err := newCredential(kind)
		if err != nil {
			t.Fatal(err)
		}
		s := c.Reveal()
		if !regexp.MustCompile(`^ztp[era]1\.[a-z0-9]{12}\.[a-z0-9]{32}$`).MatchString(s) {
			t.Fatalf("credential %q", s)
		}
		back, err := ParseCredential(kind, s)
		if err != nil || back != c || !back.Matches(c.Hash()) {
			t.Fatalf("round trip: %v", err)
		}
		other := KindReport
		if kind == KindReport {
			other = KindEnrollment
		}
		if _, err := ParseCredential(other, s); err == nil {
			t.Fatal("credential parsed as the other kind")
		}
		j, _ := json.Marshal(c)
		if out := fmt.Sprintf("%v %+v %#v %s", c, c, c, j); strings.Contains(out, c.secret) {
			t.Fatalf("secret printed: %s", out)
		}
	}
	c, _ := NewEnrollmentSecret()
	for _, bad := range []string{"", c.Reveal() + "x", strings.ToUpper(c.Reveal()), strings.Replace(c.Reveal(), ".", "-", 2), "ztpe1." + c.id + "." + c.secret[:31] + "_"} {
		if _, err := ParseCredential(KindEnrollment, bad); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%q accepted (%v)", bad, err)
		}
	}
	d, _ := NewEnrollmentSecret()
	if c.Matches(d.Hash()) {
		t.Fatal("two credentials match")
	}
}

func TestDeriveBootstrapToken(t *testing.T) {
	seed := bytes.Repeat([]byte{7}, 32)
	a, err := DeriveBootstrapToken(seed, "abcdef")
	if err != nil {
		t.Fatal(err)
	}
	if !bootstraputil.IsValidBootstrapToken(a.Reveal()) || a.ID() != "abcdef" {
		t.Fatalf("derived %q", a.Reveal())
	}
	again, _ := DeriveBootstrapToken(seed, "abcdef")
	if again != a {
		t.Fatal("derivation is not deterministic")
	}
	b, _ := DeriveBootstrapToken(seed, "abcdeg")
	other, _ := DeriveBootstrapToken(bytes.Repeat([]byte{8}, 32), "abcdef")
	if b.secret == a.secret || other.secret == a.secret {
		t.Fatal("different ids or seeds gave the same secret")
	}
	if _, err := DeriveBootstrapToken(seed[:16], "abcdef"); err == nil {
		t.Fatal("short seed accepted")
	}
	if _, err := DeriveBootstrapToken(seed, "ABCDEF"); err == nil {
		t.Fatal("invalid id accepted")
	}
}

func TestRandomStringAlphabetAndSpread(t *testing.T) {
	counts := map[rune]int{}
	for range 200 {
		s, err := RandomString(36)
		if err != nil {
			t.Fatal(err)
		}
		if !inAlphabet(s) || len(s) != 36 {
			t.Fatalf("%q", s)
		}
		for _, r := range s {
			counts[r]++
		}
	}
	// 7200 draws over 36 symbols: each ~200; a missing or wildly rare
	// symbol would mean a broken mapping.
	if len(counts) != 36 {
		t.Fatalf("only %d symbols seen", len(counts))
	}
	for r, n := range counts {
		if n < 100 || n > 320 {
			t.Fatalf("symbol %q drawn %d times", r, n)
		}
	}
}

func FuzzParseCredential(f *testing.F) {
	c, _ := NewEnrollmentSecret()
	r, _ := NewReportCredential()
	for _, s := range []string{c.Reveal(), r.Reveal(), "", "ztpe1.", "ztpe1..", "ztpr1.aaaaaaaaaaaa.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, kind := range []Kind{KindEnrollment, KindReport, KindAgent} {
			c, err := ParseCredential(kind, s)
			if err != nil {
				continue
			}
			if c.Reveal() != s || !c.Matches(c.Hash()) {
				t.Fatalf("%q: round trip", s)
			}
		}
	})
}
