package signing

import (
	"net/url"
	"sort"
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
	if parsed.Get("expires") != "2030-01-02T03:04:05.000Z" || parsed.Get("signatureversion") != "3" || parsed.Get("keyword") != "a b+c*" {
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
	if Sign([]byte("S"), RESTCanonical(RESTParams("GET", "/api/v1/devices", q, k, e, ""))) != sig ||
		!VerifyREST([]byte("S"), RESTParams("GET", "/api/v1/devices", q, k, e, ""), sig) {
		t.Fatal("REST signature does not verify")
	}
	// Method, path, query and body are all bound.
	for _, ps := range [][]Param{
		RESTParams("DELETE", "/api/v1/devices", q, k, e, ""),
		RESTParams("GET", "/api/v1/tokens", q, k, e, ""),
		RESTParams("GET", "/api/v1/devices", url.Values{"limit": {"11"}}, k, e, ""),
		RESTParams("GET", "/api/v1/devices", q, k, e, BodySHA256([]byte("x"))),
		// Case is bound too: path, query values, names.
		RESTParams("GET", "/api/v1/DEVICES", q, k, e, ""),
		RESTParams("GET", "/API/v1/devices", q, k, e, ""),
		RESTParams("GET", "/api/v1/devices", url.Values{"LIMIT": {"10"}}, k, e, ""),
	} {
		if Sign([]byte("S"), RESTCanonical(ps)) == sig || VerifyREST([]byte("S"), ps, sig) {
			t.Fatalf("signature not bound: %v", ps)
		}
	}
	if v := RESTParams("get", "/api/v1/devices", url.Values{"state": {"Joined"}}, k, e, ""); VerifyREST([]byte("S"), v,
		Sign([]byte("S"), RESTCanonical(RESTParams("get", "/api/v1/devices", url.Values{"state": {"joined"}}, k, e, "")))) {
		t.Fatal("REST query value case not bound")
	}
	// Unversioned: no expires field, still parses.
	h2 := RESTAuthorization("GET", "/api/v1/devices", q, nil, "KEY", []byte("S"), time.Time{})
	if k2, e2, sig2, err := ParseRESTAuthorization(h2); err != nil || k2 != "KEY" || e2 != "" ||
		!VerifyREST([]byte("S"), RESTParams("GET", "/api/v1/devices", q, "KEY", "", ""), sig2) {
		t.Fatalf("unversioned header %q: %v", h2, err)
	}
	for _, bad := range []string{"", "Bearer x", RESTScheme + " apikey=a", RESTScheme + " junk",
		RESTScheme + " apikey=a, expires=, signature=s", RESTScheme + " apikey=a, signature=s, signature=t"} {
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
		if utf8.ValidString(s) && !strings.EqualFold(EncodeValue(s), encode(s, false)) {
			t.Fatal("unstable")
		}
	})
}

// referenceCanonical is the canonical form written the plain way (sort,
// join, strings.ToLower), the oracle for the one-pass appendCanonical.
func referenceCanonical(ps []Param, keepTilde bool) string {
	sorted := append([]Param(nil), ps...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var b strings.Builder
	for i, p := range sorted {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(p.Name)
		b.WriteByte('=')
		b.WriteString(encode(p.Value, keepTilde))
	}
	return strings.ToLower(b.String())
}

func checkCanonicalAndVerify(t *testing.T, ps []Param) {
	t.Helper()
	for _, tilde := range []bool{false, true} {
		if got, want := canonical(ps, tilde), referenceCanonical(ps, tilde); got != want {
			t.Fatalf("canonical(%q, %v)\n got %q\nwant %q", ps, tilde, got, want)
		}
	}
	secret := []byte("s3cret")
	for _, sig := range Candidates(secret, ps) {
		if !Verify(secret, ps, sig) {
			t.Fatalf("Verify refuses candidate %s of %q", sig, ps)
		}
		if !Verify(secret, ps, strings.ReplaceAll(sig, "+", " ")) && strings.Contains(sig, "+") {
			t.Fatalf("Verify refuses an unescaped '+' in %s", sig)
		}
		bad := []byte(sig)
		bad[3] ^= 1
		if Verify(secret, ps, string(bad)) {
			t.Fatalf("Verify accepts a wrong signature for %q", ps)
		}
	}
	if Verify([]byte("other"), ps, Candidates(secret, ps)[0]) {
		t.Fatal("Verify accepts a signature made with another secret")
	}
}

func TestCanonicalMatchesReference(t *testing.T) {
	cases := [][]Param{
		{{"command", "listKubernetesClusters"}, {"apiKey", "AbC"}, {"response", "json"}},
		{{"Name", "My Cluster ~ä"}, {"name", "x"}, {"ÄPIkey", "Ü"}, {"k\xff", "\xfe\x00"}},
		{{"expires", "2026-01-01T00:00:00+0000"}, {"keyword", "a+b*c/d?e&f=g"}},
		{},
	}
	for _, ps := range cases {
		checkCanonicalAndVerify(t, ps)
	}
	if Verify([]byte("s"), nil, strings.Repeat("A", 65)) {
		t.Fatal("overlong signature accepted")
	}
}

func FuzzCanonicalMatchesReference(f *testing.F) {
	f.Add("command", "listZones", "apiKey", "K~ y", "Ä", "\xff")
	f.Add("", "", "a", "b", "A", "B")
	f.Fuzz(func(t *testing.T, n1, v1, n2, v2, n3, v3 string) {
		seen := map[string]bool{}
		var ps []Param
		for _, p := range []Param{{n1, v1}, {n2, v2}, {n3, v3}} {
			if !seen[p.Name] { // names are unique, as in url.Values
				seen[p.Name] = true
				ps = append(ps, p)
			}
		}
		checkCanonicalAndVerify(t, ps)
	})
}

func BenchmarkVerify(b *testing.B) {
	ps := []Param{{"command", "listKubernetesClusters"}, {"response", "json"}, {"apiKey", strings.Repeat("K", 43)},
		{"signatureversion", "3"}, {"expires", "2027-01-01T00:00:00Z"}}
	secret := []byte(strings.Repeat("S", 43))
	sig := Candidates(secret, ps)[0]
	b.ReportAllocs()
	for b.Loop() {
		if !Verify(secret, ps, sig) {
			b.Fatal("refused")
		}
	}
}

// parseCanonical splits a canonical string back into name -> value.
func parseCanonical(s string) (map[string]string, bool) {
	out := map[string]string{}
	if s == "" {
		return out, true
	}
	for _, pair := range strings.Split(s, "&") {
		n, v, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, false
		}
		if _, dup := out[n]; dup {
			return nil, false
		}
		out[n] = v
	}
	return out, true
}

// FuzzSignedStringIsUnambiguous: for any query the server accepts
// (CheckNames passes), the signed string splits back into exactly the
// parameters that were sent, lowercased, for CloudStack's form and into
// exactly the parameters for the REST form. So no two different sets of
// accepted parameters sign alike, and nothing can be moved out of sight
// (the reshaped-name replay). Findings are kept in testdata/fuzz.
func FuzzSignedStringIsUnambiguous(f *testing.F) {
	f.Add("apiKey=K&command=deleteKubernetesCluster&expires=2026-01-01T00%3A00%3A00Z&id=x&response=json&signatureversion=3")
	f.Add("apiKey=K&command=x&expires=E&id=x&response%3Djson%26signatureversion=3")
	f.Add("details%5B0%5D.key=a&details%5B0%5D.value=b%20c&Name=%7E&name=y")
	f.Add("a=1&a=2&A=3")
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil || CheckNames(v) != nil {
			return
		}
		ps := Params(v)
		want := map[string]string{}
		wantExact := map[string]string{}
		for _, p := range ps {
			want[strings.ToLower(p.Name)] = strings.ToLower(EncodeValue(p.Value))
			wantExact[p.Name] = EncodeValue(p.Value)
		}
		for name, m := range map[string]map[string]string{Canonical(ps): want, RESTCanonical(ps): wantExact} {
			got, ok := parseCanonical(name)
			if !ok || len(got) != len(m) {
				t.Fatalf("signed string %q does not split back into %v", name, m)
			}
			for k, val := range m {
				if got[k] != val {
					t.Fatalf("signed string %q: %s=%q, sent %q", name, k, got[k], val)
				}
			}
		}
	})
}
