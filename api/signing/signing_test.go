package signing

import (
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// The worked example of the CloudStack developer guide ("How to sign an API
// call with Python"): listUsers with response=json signs to TTpdDq/7....
func TestCloudStackDocumentedVector(t *testing.T) {
	apiKey := "plgWJfZK4gyS3mOMTVmjUVg-X-jlWlnfaUJ9GAbBbf9EdM-kAYMmAiLqzzq1ElZLYq_u38zCm0bewzGUdP66mg"
	secret := "VDaACYb0LV9eNjTetIOElcVQkvJck_J_QljX_FcHRj87ZKiy0z0ty0ZsYBkoXkY9b7eq1EhwJaw7FF3akA3KBQ"
	ps := []Param{{"command", "listUsers"}, {"response", "json"}, {"apikey", apiKey}}
	if got := Sign([]byte(secret), Canonical(ps)); got != "TTpdDq/7j/J58XCRHomKoQXEQds=" {
		t.Fatalf("signature %s", got)
	}
}

func TestEncodeValueIsJavaURLEncoder(t *testing.T) {
	cases := map[string]string{
		"a b":                  "a%20b",
		"a+b":                  "a%2Bb",
		"*-._":                 "*-._",
		"~":                    "%7E",
		"2026-01-01T00:00:00Z": "2026-01-01T00%3A00%3A00Z",
		"ä/é?&=":               "%C3%A4%2F%C3%A9%3F%26%3D",
		"":                     "",
	}
	for in, want := range cases {
		if got := EncodeValue(in); got != want {
			t.Errorf("EncodeValue(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCanonicalSortsByNameAsSentAndSkipsSignature(t *testing.T) {
	v := url.Values{"command": {"listKubernetesClusters"}, "apiKey": {"KEY"}, "Signature": {"zzz"},
		"name": {"My Cluster"}, "response": {"json"}}
	got := Canonical(Params(v))
	want := "apikey=key&command=listkubernetesclusters&name=my%20cluster&response=json"
	if got != want {
		t.Fatalf("canonical\n got %s\nwant %s", got, want)
	}
}

func TestCandidatesAcceptGoSDKTildeEncoding(t *testing.T) {
	ps := []Param{{"command", "x"}, {"name", "a~b"}}
	c := Candidates([]byte("s"), ps)
	if len(c) != 2 || c[0] == c[1] {
		t.Fatalf("candidates %v", c)
	}
	goForm := strings.ToLower("command=x&name=" + url.QueryEscape("a~b"))
	if Sign([]byte("s"), goForm) != c[1] {
		t.Fatal("tilde variant does not match url.QueryEscape")
	}
	if len(Candidates([]byte("s"), []Param{{"a", "b"}})) != 1 {
		t.Fatal("extra candidate without a tilde")
	}
}

func TestSignQueryRoundTrip(t *testing.T) {
	exp := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	q := SignQuery(url.Values{"command": {"listZones"}, "keyword": {"a b+c*"}}, "KEY", []byte("SECRET"), exp)
	parsed, err := url.ParseQuery(q)
	if err != nil {
		t.Fatal(err)
	}
	if parsed.Get("expires") != "2030-01-02T03:04:05Z" || parsed.Get("signatureversion") != "3" || parsed.Get("keyword") != "a b+c*" {
		t.Fatalf("parsed %v", parsed)
	}
	sig := parsed.Get("signature")
	if Sign([]byte("SECRET"), Canonical(Params(parsed))) != sig {
		t.Fatal("server-side recomputation differs")
	}
}

func TestParseExpires(t *testing.T) {
	want := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, s := range []string{"2026-01-01T00:00:00Z", "2026-01-01T01:00:00+01:00", "2026-01-01T00:00:00+0000",
		"2026-01-01T00:00:00.000Z", "2026-01-01T00:00:00Z+0000"} {
		got, err := ParseExpires(s)
		if err != nil || !got.Equal(want) {
			t.Errorf("ParseExpires(%q) = %v, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "tomorrow", "2026-01-01", "2026-01-01 00:00:00"} {
		if _, err := ParseExpires(s); err == nil {
			t.Errorf("ParseExpires(%q) accepted", s)
		}
	}
}

func TestRESTAuthorizationRoundTrip(t *testing.T) {
	exp := time.Now().Add(time.Hour)
	q := url.Values{"limit": {"10"}}
	h := RESTAuthorization("get", "/api/v1/devices", q, nil, "KEY", []byte("S"), exp)
	k, e, sig, err := ParseRESTAuthorization(h)
	if err != nil || k != "KEY" {
		t.Fatalf("%q: %v", h, err)
	}
	if Sign([]byte("S"), Canonical(RESTParams("GET", "/api/v1/devices", q, k, e, ""))) != sig {
		t.Fatal("REST signature does not verify")
	}
	// Method, path, query and body are all bound.
	for _, ps := range [][]Param{
		RESTParams("DELETE", "/api/v1/devices", q, k, e, ""),
		RESTParams("GET", "/api/v1/tokens", q, k, e, ""),
		RESTParams("GET", "/api/v1/devices", url.Values{"limit": {"11"}}, k, e, ""),
		RESTParams("GET", "/api/v1/devices", q, k, e, BodySHA256([]byte("x"))),
	} {
		if Sign([]byte("S"), Canonical(ps)) == sig {
			t.Fatalf("signature not bound: %v", ps)
		}
	}
	for _, bad := range []string{"", "Bearer x", RESTScheme + " apikey=a", RESTScheme + " junk"} {
		if _, _, _, err := ParseRESTAuthorization(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// FuzzEncodeValue checks the encoding is reversible and uses only the
// characters Java's URLEncoder emits.
func FuzzEncodeValue(f *testing.F) {
	for _, s := range []string{"a b", "~*+", "ä", "\x00\xff", "2026-01-01T00:00:00Z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e := EncodeValue(s)
		if strings.Trim(e, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-*_%") != "" {
			t.Fatalf("unexpected character in %q", e)
		}
		back, err := url.PathUnescape(e)
		if err != nil || back != s {
			t.Fatalf("round trip %q -> %q -> %q (%v)", s, e, back, err)
		}
		if utf8.ValidString(s) && strings.ToLower(EncodeValue(s)) != strings.ToLower(encode(s, false)) {
			t.Fatal("unstable")
		}
	})
}
