package wirecapture

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"sort"
	"strings"
)

// Kind is what a secret found on the wire is.
type Kind string

// The kinds of secret the scanner knows by their shape. ztpd's credentials
// carry a versioned prefix precisely so that a scanner finds them.
const (
	PEMPrivateKey    Kind = "pem-private-key"   // -----BEGIN ... PRIVATE KEY-----
	BootstrapToken   Kind = "bootstrap-token"   // [a-z0-9]{6}.[a-z0-9]{16}
	K3sToken         Kind = "k3s-token"         // K10<ca-hash>::<user>:<password> or ::<bootstrap token>
	AgentCredential  Kind = "agent-credential"  // ztpa1.<id>.<secret>
	EnrollmentSecret Kind = "enrollment-secret" // ztpe1.<id>.<secret>
	ReportCredential Kind = "report-credential" // ztpr1.<id>.<secret>
	// KnownSecret is a secret the test supplied by value (Secret.Label
	// says which) found where no shape matched.
	KnownSecret Kind = "known-secret"
)

// Secret is a secret the test knows it issued, by value.
type Secret struct {
	Label string // what it is, e.g. "cluster CA key lab-0" (printed)
	Value string // never printed
}

// minKnownSecret is the shortest known secret searched for: shorter
// values match by chance.
const minKnownSecret = 12

// shape finds one kind of secret by its form.
type shape struct {
	kind Kind
	re   *regexp.Regexp
	// ok checks the bytes around a match (word boundaries Go's regexp
	// cannot express in bytes without consuming them).
	ok func(data []byte, start, end int) bool
}

var (
	pemBegin = regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----`)
	pemEnd   = regexp.MustCompile(`-----END [A-Z0-9 ]*PRIVATE KEY-----`)
	shapes   = []shape{
		{PEMPrivateKey, pemBegin, nil},
		{K3sToken, regexp.MustCompile(`K10[0-9a-f]{0,64}::[A-Za-z0-9._:-]+`), nil},
		{AgentCredential, regexp.MustCompile(`ztpa1\.[a-z0-9]{12}\.[a-z0-9]{32}`), nil},
		{EnrollmentSecret, regexp.MustCompile(`ztpe1\.[a-z0-9]{12}\.[a-z0-9]{32}`), nil},
		{ReportCredential, regexp.MustCompile(`ztpr1\.[a-z0-9]{12}\.[a-z0-9]{32}`), nil},
		{BootstrapToken, regexp.MustCompile(`[a-z0-9]{6}\.[a-z0-9]{16}`), func(d []byte, s, e int) bool {
			// A whole word: not part of a longer name (a.b.c, x-abcdef.…).
			return (s == 0 || !isTokenByte(d[s-1])) && (e == len(d) || !isTokenByte(d[e]))
		}},
	}
)

func isTokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_' || c >= 'A' && c <= 'Z'
}

// Match is one secret in a buffer.
type Match struct {
	Kind       Kind
	Known      string // the label of the known secret it is, if any
	Start, End int    // the secret's span
	// Digest names the secret without revealing it: a prefix of the
	// SHA-256 of its canonical form (a PEM key's base64 body without line
	// breaks, so the same key in a file and JSON-escaped is one secret).
	Digest string
}

// Scanner finds secrets by shape and by value.
type Scanner struct {
	known []Secret
}

// NewScanner scans for the shapes and for known's values (those shorter
// than 12 bytes are ignored).
func NewScanner(known []Secret) *Scanner {
	s := &Scanner{}
	seen := map[string]bool{}
	for _, k := range known {
		if len(k.Value) >= minKnownSecret && !seen[k.Value] {
			seen[k.Value] = true
			s.known = append(s.known, k)
		}
	}
	return s
}

// Scan returns every secret in data, in order. A span is reported once:
// the first shape to claim it wins (a bootstrap token inside a k3s token is
// the k3s token), and a known secret inside a shape's span names it.
func (s *Scanner) Scan(data []byte) []Match {
	var ms []Match
	overlaps := func(a, b int) int {
		for i, m := range ms {
			if a < m.End && m.Start < b {
				return i
			}
		}
		return -1
	}
	for _, sh := range shapes {
		for _, loc := range sh.re.FindAllIndex(data, -1) {
			start, end := loc[0], loc[1]
			if sh.ok != nil && !sh.ok(data, start, end) {
				continue
			}
			canon := data[start:end]
			if sh.kind == PEMPrivateKey {
				end, canon = pemSpan(data, start, end)
			}
			if overlaps(start, end) >= 0 {
				continue
			}
			ms = append(ms, Match{Kind: sh.kind, Start: start, End: end, Digest: digest(canon)})
		}
	}
	for _, k := range s.known {
		v := []byte(k.Value)
		for off := 0; ; {
			i := bytes.Index(data[off:], v)
			if i < 0 {
				break
			}
			start, end := off+i, off+i+len(v)
			off = end
			if j := overlaps(start, end); j >= 0 {
				if ms[j].Known == "" {
					ms[j].Known = k.Label
				}
				continue
			}
			ms = append(ms, Match{Kind: KnownSecret, Known: k.Label, Start: start, End: end, Digest: digest(v)})
		}
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Start < ms[j].Start })
	return ms
}

// pemSpan extends a PEM private key's header to its footer (or, cut off,
// to the end of its base64 body) and returns the key's canonical form.
func pemSpan(data []byte, start, headerEnd int) (int, []byte) {
	rest := data[headerEnd:]
	if len(rest) > 16<<10 {
		rest = rest[:16<<10]
	}
	end := headerEnd
	body := rest
	if loc := pemEnd.FindIndex(rest); loc != nil {
		end, body = headerEnd+loc[1], rest[:loc[0]]
	} else {
		n := 0
		for n < len(rest) && (isBase64Byte(rest[n]) || rest[n] == '\n' || rest[n] == '\r' || rest[n] == '\\') {
			n++
		}
		end, body = headerEnd+n, rest[:n]
	}
	// JSON and YAML escape the line breaks: "\n" is two bytes there.
	body = bytes.ReplaceAll(body, []byte(`\n`), nil)
	canon := make([]byte, 0, len(body))
	for _, c := range body {
		if isBase64Byte(c) {
			canon = append(canon, c)
		}
	}
	if len(canon) == 0 {
		// A header alone (a name in a document, or cut at a piece's end):
		// it names itself.
		canon = data[start:headerEnd]
	}
	return end, canon
}

func isBase64Byte(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '='
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// Redact replaces every secret in s by its kind and digest, for text that
// is printed (a URL's path, a file name).
func (s *Scanner) Redact(text string) string {
	ms := s.Scan([]byte(text))
	if len(ms) == 0 {
		return text
	}
	var b strings.Builder
	last := 0
	for _, m := range ms {
		b.WriteString(text[last:m.Start])
		b.WriteString("<" + string(m.Kind) + " " + m.Digest + ">")
		last = m.End
	}
	b.WriteString(text[last:])
	return b.String()
}

// excerpt is the text around a match with the secret replaced by its kind
// and digest. The context is short, non-printing bytes are dots and long
// runs of letters and digits are elided: a neighbour may be a secret the
// shapes do not know (a password next to its user).
func excerpt(data []byte, m Match) string {
	const ctx = 20
	left := data[max(0, m.Start-ctx):m.Start]
	right := data[m.End:min(len(data), m.End+ctx)]
	return safeText(left) + "[" + string(m.Kind) + " " + m.Digest + "]" + safeText(right)
}

func safeText(b []byte) string {
	var out strings.Builder
	flush := func(word []byte) {
		if len(word) >= 8 {
			out.WriteString("…")
		} else {
			out.Write(word)
		}
	}
	var word []byte
	for _, c := range b {
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' {
			word = append(word, c)
			continue
		}
		flush(word)
		word = word[:0]
		switch {
		case c == '\n':
			out.WriteString(`\n`)
		case c == '\r':
			out.WriteString(`\r`)
		case c < 0x20 || c >= 0x7f:
			out.WriteByte('.')
		default:
			out.WriteByte(c)
		}
	}
	flush(word)
	return out.String()
}

// SecretsIn returns the secrets data holds by shape, also under the
// encodings the scan undoes, as values to search the wire for: a test
// reads them from what devices were given and finds them again wherever
// they travel, in any shape. A PEM key is searched for by the first line
// of its body (the header alone names no key).
func SecretsIn(data []byte) []Secret {
	var out []Secret
	seen := map[string]bool{}
	sc := &Scanner{}
	expand("", data, 0, func(v view) {
		for _, m := range sc.Scan(v.data) {
			val := string(v.data[m.Start:m.End])
			if m.Kind == PEMPrivateKey {
				val = pemFirstLine(v.data[m.Start:m.End])
			}
			if len(val) >= minKnownSecret && !seen[val] {
				seen[val] = true
				out = append(out, Secret{Label: string(m.Kind), Value: val})
			}
		}
	})
	return out
}

// pemFirstLine is the first body line of a PEM block ("" when it has
// none).
func pemFirstLine(block []byte) string {
	lines := strings.Split(strings.ReplaceAll(string(block), `\n`, "\n"), "\n")
	for _, l := range lines[1:] {
		l = strings.TrimSpace(l)
		if l == "" || strings.Contains(l, ":") {
			continue // blank, or a header of a legacy encrypted PEM
		}
		if strings.HasPrefix(l, "-----") {
			return ""
		}
		return l
	}
	return ""
}
