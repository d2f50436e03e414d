package wirecapture

import (
	"bytes"
	"compress/gzip"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func testKeyPEM(t testing.TB) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
}

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

// kinds scans data with expand (the decodings) and returns the kinds found,
// each with where, once per secret.
func kinds(sc *Scanner, data []byte) []string {
	var out []string
	seen := map[string]bool{}
	expand("body", data, 0, func(v view) {
		for _, m := range sc.Scan(v.data) {
			if seen[m.Digest] {
				continue
			}
			seen[m.Digest] = true
			s := string(m.Kind) + "@" + v.where
			if m.Known != "" {
				s += "=" + m.Known
			}
			out = append(out, s)
		}
	})
	return out
}

func TestScanner(t *testing.T) {
	key := testKeyPEM(t)
	jsonKey, _ := json.Marshal(map[string]string{"key": key})
	const (
		bt    = "abcdef.0123456789abcdef"
		agent = "ztpa1.abcdefghijkl.0123456789abcdefghijklmnopqrstuv"
		enr   = "ztpe1.abcdefghijkl.0123456789abcdefghijklmnopqrstuv"
		rep   = "ztpr1.abcdefghijkl.0123456789abcdefghijklmnopqrstuv"
		k3s   = "K10" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" + "::server:0123456789abcdef0123456789abcdef"
		known = "an-operator-password-42"
	)
	bundle, _ := json.Marshal(map[string]any{"files": []map[string]string{
		{"path": "/etc/kubernetes/pki/client.key", "encoding": "gzip+base64", "content": base64.StdEncoding.EncodeToString(gz(t, []byte(key)))},
	}})
	kubeconfig := "users:\n- name: x\n  user:\n    client-key-data: " + base64.StdEncoding.EncodeToString([]byte(key)) + "\n"
	sc := NewScanner([]Secret{{Label: "operator password", Value: known}, {Label: "the worker's token", Value: bt}, {Label: "short", Value: "abc"}})
	cases := []struct {
		name string
		data []byte
		want []string
	}{
		{"nothing", []byte("GET /healthz HTTP/1.1\r\nHost: 10.0.0.1\r\n\r\n"), nil},
		{"a PEM key", []byte("x\n" + key), []string{"pem-private-key@body"}},
		{"a PEM key JSON-escaped", jsonKey, []string{"pem-private-key@body"}},
		{"a certificate is no secret", []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), nil},
		{"a bootstrap token, known", []byte(`token: "` + bt + `"`), []string{"bootstrap-token@body=the worker's token"}},
		{"names that look like tokens are not", []byte("zyxwvu.0123456789abcdef.svc x-zyxwvu.0123456789abcdef zyxwvu.0123456789abcdefg"), nil},
		{"a k3s token, its bootstrap part not twice", []byte("token: " + k3s + "\nt2: K10::" + "zyxwvu.0123456789zyxwvu"), []string{"k3s-token@body", "k3s-token@body"}},
		{"ztpd credentials", []byte(agent + " " + enr + " " + rep), []string{"agent-credential@body", "enrollment-secret@body", "report-credential@body"}},
		{"a known secret", []byte("password=" + known + "&x=1"), []string{"known-secret@body=operator password"}},
		{"gzip+base64 inside JSON", bundle, []string{"pem-private-key@body (gzip+base64)"}},
		{"base64 in a kubeconfig", []byte(kubeconfig), []string{"pem-private-key@body (base64)"}},
		{"a gzip body", gz(t, []byte("x="+agent)), []string{"agent-credential@body (gzip)"}},
		{"base64 of gzip of base64", []byte(base64.StdEncoding.EncodeToString(gz(t, []byte(base64.StdEncoding.EncodeToString([]byte(enr)))))),
			[]string{"enrollment-secret@body (gzip+base64) (base64)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := kinds(sc, tc.data)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestFindingsNeverHoldTheSecret: what a finding prints (its excerpt and
// place) never holds the secret, nor a PEM key's body.
func TestFindingsNeverHoldTheSecret(t *testing.T) {
	key := testKeyPEM(t)
	body := strings.Split(key, "\n")[1]
	const agent = "ztpa1.abcdefghijkl.0123456789abcdefghijklmnopqrstuv"
	const pw = "hunter2-hunter2-hunter2"
	sc := NewScanner([]Secret{{Label: "pw", Value: pw}})
	form := "user=admin&password=" + pw + "&k=" + key + "&a=" + agent
	data := []byte(fmt.Sprintf("POST /agent/%s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", agent, len(form), form))
	tr := trafficOf(t, data, []byte("HTTP/1.1 204 No Content\r\n\r\n"))
	r := Scan(tr, sc)
	if len(r.Findings) != 3 {
		t.Fatalf("findings: %v", r.Findings)
	}
	for _, f := range r.Findings {
		s := f.String()
		for _, secret := range []string{agent, pw, body, body[:16], "ztpa1.abcdefghijkl"} {
			if strings.Contains(s, secret) {
				t.Errorf("finding %s prints the secret %q", s, secret[:4])
			}
		}
	}
	if w := r.Findings[0].Where; !strings.Contains(w, "POST /agent/<agent-credential ") {
		t.Errorf("place %q: want the path with the credential redacted", w)
	}
	t.Logf("%s", r.Table())
}

func trafficOf(t testing.TB, client, server []byte) *Traffic {
	t.Helper()
	a := NewAssembler()
	a.Add(c2s, 1, true, false, nil)
	a.Add(s2c, 1, true, true, nil)
	a.Add(c2s, 2, false, true, client)
	a.Add(s2c, 2, false, true, server)
	return &Traffic{Conns: a.Finish()}
}

// TestHTTP: bodies chunked and gzip-compressed, a secret split across
// chunks and segments, responses labelled with their requests.
func TestHTTP(t *testing.T) {
	key := testKeyPEM(t)
	const agent = "ztpa1.abcdefghijkl.0123456789abcdefghijklmnopqrstuv"
	zipped := gz(t, []byte(`{"agent":"`+agent+`","key":`+fmt.Sprintf("%q", key)+`}`))
	var chunked bytes.Buffer
	for i := 0; i < len(zipped); i += 7 {
		c := zipped[i:min(i+7, len(zipped))]
		fmt.Fprintf(&chunked, "%x\r\n%s\r\n", len(c), c)
	}
	chunked.WriteString("0\r\n\r\n")
	req := "POST /join HTTP/1.1\r\nHost: 10.0.0.1\r\nContent-Length: 2\r\n\r\n{}" +
		"GET /ztp.json?x=1 HTTP/1.1\r\nHost: 10.0.0.1\r\n\r\n"
	resp := "HTTP/1.1 100 Continue\r\n\r\n" + "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked.String() +
		"HTTP/1.1 200 OK\r\nContent-Length: 31\r\n\r\n{\"t\":\"abcdef.0123456789abcdef\"}"
	// The response arrives in small segments, out of order.
	a := NewAssembler()
	a.Add(c2s, 1, true, false, nil)
	a.Add(s2c, 1000, true, true, nil)
	a.Add(c2s, 2, false, true, []byte(req))
	var offs []int
	for i := 0; i < len(resp); i += 5 {
		offs = append(offs, i)
	}
	slices.Reverse(offs)
	for _, o := range offs {
		a.Add(s2c, 1001+uint32(o), false, true, []byte(resp[o:min(o+5, len(resp))]))
	}
	r := Scan(&Traffic{Conns: a.Finish()}, NewScanner(nil))
	var got []string
	for _, f := range r.Findings {
		got = append(got, string(f.Kind)+"@"+f.Where)
	}
	want := []string{
		"agent-credential@HTTP response to POST /join body (Content-Encoding: gzip)",
		"pem-private-key@HTTP response to POST /join body (Content-Encoding: gzip)",
		"bootstrap-token@HTTP response to GET /ztp.json body",
	}
	if !slices.Equal(got, want) {
		t.Errorf("findings:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// FuzzScan: any bytes scan and decode without a panic, and what a finding
// prints never holds a known secret.
func FuzzScan(f *testing.F) {
	f.Add([]byte("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----"))
	f.Add([]byte("K10::abcdef.0123456789abcdef ztpa1.abcdefghijkl.0123456789abcdefghijklmnopqrstuv"))
	f.Add([]byte("H4sIAAAAAAAA/wEAAP//AAAAAAAAAAA="))
	f.Add([]byte("the-known-secret-value"))
	const known = "the-known-secret-value"
	sc := NewScanner([]Secret{{Label: "k", Value: known}})
	f.Fuzz(func(t *testing.T, data []byte) {
		tr := trafficOf(t, data, data)
		for _, fd := range Scan(tr, sc).Findings {
			if strings.Contains(fd.String(), known) {
				t.Fatalf("finding prints the known secret: %s", fd)
			}
		}
	})
}

func TestSecretsIn(t *testing.T) {
	key := testKeyPEM(t)
	line := strings.Split(key, "\n")[1]
	const agent = "ztpa1.abcdefghijkl.0123456789abcdefghijklmnopqrstuv"
	doc := []byte("agent: " + agent + "\nclient-key-data: " + base64.StdEncoding.EncodeToString([]byte(key)) + "\n" + key)
	got := SecretsIn(doc)
	want := []Secret{{Label: "agent-credential", Value: agent}, {Label: "pem-private-key", Value: line}}
	if !slices.Equal(got, want) {
		t.Errorf("got %d secrets, want the credential and the key's first line", len(got))
	}
	// Found again on the wire, JSON-escaped: the key's first line is intact.
	wire, _ := json.Marshal(map[string]string{"k": key})
	ms := NewScanner(got).Scan(wire)
	if len(ms) != 1 || ms[0].Kind != PEMPrivateKey || ms[0].Known != "pem-private-key" {
		t.Errorf("matches on the wire: %+v", ms)
	}
}
