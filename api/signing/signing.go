// Package signing implements CloudStack API request signing, as the
// CloudStack management server verifies it (ApiServer.verifyRequest):
//
//  1. take every request parameter except "signature" (first value of each),
//  2. sort them by name (byte order, names as sent: "apiKey" sorts before "command"),
//  3. join "name=value" pairs with "&", the value URL-encoded as Java's
//     URLEncoder does (UTF-8; letters, digits and . - * _ stay; space becomes
//     %20, every other byte %XX),
//  4. lowercase the whole string,
//  5. HMAC-SHA1 it with the secret key and Base64 (standard, padded) the digest.
//
// With signatureversion=3 the request also carries "expires" (e.g.
// 2026-01-01T00:00:00Z) and is refused after that instant.
//
// Parameter names enter the signed string as sent, unencoded, so a name
// holding "=" or "&" could shift where one parameter ends and the next
// begins without changing the string (turning "signatureversion=3" into
// part of another name, say). CheckNames refuses such names: a server must
// call it before it trusts the parsed parameters.
//
// ztpd's REST API signs the query parameters plus the method, path, expiry
// and body digest (see RESTParams) with the same encoding and HMAC, but
// without lowercasing (RESTCanonical): the path and values are compared
// exactly, so /api/v1/DEVICES does not verify with a signature made for
// /api/v1/devices.
package signing

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

const upperhex = "0123456789ABCDEF"

// EncodeValue URL-encodes v like java.net.URLEncoder.encode(v, "UTF-8") with
// "+" then replaced by "%20".
func EncodeValue(v string) string {
	return encode(v, false)
}

// encode is EncodeValue; keepTilde leaves "~" unescaped, which is what Go's
// url.QueryEscape (and so the Go SDK) produces.
func encode(v string, keepTilde bool) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '.', c == '-', c == '*', c == '_':
			b.WriteByte(c)
		case c == '~' && keepTilde:
			b.WriteByte(c)
		case c == ' ':
			b.WriteString("%20")
		default:
			b.WriteByte('%')
			b.WriteByte(upperhex[c>>4])
			b.WriteByte(upperhex[c&15])
		}
	}
	return b.String()
}

// Param is one request parameter as sent.
type Param struct {
	Name, Value string
}

// Params turns url.Values into the parameter list the server signs: the
// first value of each name, "signature" (any case) left out.
func Params(v url.Values) []Param {
	out := make([]Param, 0, len(v))
	for name, vals := range v {
		if strings.EqualFold(name, "signature") || len(vals) == 0 {
			continue
		}
		out = append(out, Param{name, vals[0]})
	}
	return out
}

// nameOK marks the bytes a parameter name may hold: letters, digits and
// _ . - [ ] (CloudStack's map parameters look like details[0].key).
var nameOK = func() (t [256]bool) {
	for c := 0; c < 256; c++ {
		t[c] = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '_' || c == '.' || c == '-' || c == '[' || c == ']'
	}
	return t
}()

// MaxNameLength bounds a parameter name.
const MaxNameLength = 128

// ValidName reports whether name may be a signed parameter's name.
func ValidName(name string) bool {
	if name == "" || len(name) > MaxNameLength {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !nameOK[name[i]] {
			return false
		}
	}
	return true
}

// CheckNames refuses request parameters whose names could make two
// different requests sign the same string: a name outside
// [A-Za-z0-9_.-[]], a name given twice in different case (the signed
// string lowercases names, so both would land on one name) and a name with
// more than one value (only the first is signed).
func CheckNames(v url.Values) error {
	// Two names that lowercase alike differ, so at least one holds an upper
	// case letter: only those need a look.
	var folded [8]string
	uppers := folded[:0]
	for name, vals := range v {
		if !ValidName(name) {
			return fmt.Errorf("parameter name %s is not allowed: names are 1-%d letters, digits and _ . - [ ]", quoteName(name), MaxNameLength)
		}
		if len(vals) > 1 {
			return fmt.Errorf("parameter %s is given %d times: give each parameter once", name, len(vals))
		}
		if hasUpper(name) {
			uppers = append(uppers, name)
		}
	}
	for i, name := range uppers {
		l := strings.ToLower(name)
		if _, dup := v[l]; dup {
			return fmt.Errorf("parameters %s and %s differ only in case: give each parameter once", l, name)
		}
		for _, other := range uppers[:i] {
			if strings.EqualFold(name, other) {
				return fmt.Errorf("parameters %s and %s differ only in case: give each parameter once", other, name)
			}
		}
	}
	return nil
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// quoteName quotes a refused name for an error message, shortened.
func quoteName(name string) string {
	if len(name) > 40 {
		name = name[:40] + "..."
	}
	return fmt.Sprintf("%q", name)
}

// Canonical is the string that is signed: sorted, encoded, lowercased.
func Canonical(ps []Param) string { return canonical(ps, false) }

func canonical(ps []Param, keepTilde bool) string {
	return string(appendCanonical(nil, sortedParams(ps), keepTilde))
}

// RESTCanonical is the string a REST request signs: sorted by name and
// encoded like Canonical, but not lowercased, so names, values and the
// path are bound exactly.
func RESTCanonical(ps []Param) string {
	return string(appendExact(nil, sortedParams(ps), false))
}

// appendExact appends names as sent and values encoded as EncodeValue does
// (keepTilde: "~" left as is, as url.QueryEscape leaves it).
func appendExact(dst []byte, sorted []Param, keepTilde bool) []byte {
	for i, p := range sorted {
		if i > 0 {
			dst = append(dst, '&')
		}
		dst = append(dst, p.Name...)
		dst = append(dst, '=')
		v := p.Value
		for j := 0; j < len(v); j++ {
			c := v[j]
			switch {
			case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '-', c == '*', c == '_':
				dst = append(dst, c)
			case c == '~' && keepTilde:
				dst = append(dst, c)
			case c == ' ':
				dst = append(dst, "%20"...)
			default:
				dst = append(dst, '%', upperhex[c>>4], upperhex[c&15])
			}
		}
	}
	return dst
}

func sortedParams(ps []Param) []Param {
	sorted := append([]Param(nil), ps...)
	slices.SortFunc(sorted, func(a, b Param) int { return strings.Compare(a.Name, b.Name) })
	return sorted
}

const lowerhex = "0123456789abcdef"

// appendCanonical appends the canonical form of sorted to dst: names as
// sent and values encoded as EncodeValue does, all lowercased, in one pass
// (the same bytes as strings.ToLower over the joined string: everything
// but a name is ASCII, and a non-ASCII name is lowercased alone).
func appendCanonical(dst []byte, sorted []Param, keepTilde bool) []byte {
	for i, p := range sorted {
		if i > 0 {
			dst = append(dst, '&')
		}
		dst = appendLowerName(dst, p.Name)
		dst = append(dst, '=')
		v := p.Value
		for j := 0; j < len(v); j++ {
			c := v[j]
			switch {
			case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '.', c == '-', c == '*', c == '_':
				dst = append(dst, c)
			case 'A' <= c && c <= 'Z':
				dst = append(dst, c+('a'-'A'))
			case c == '~' && keepTilde:
				dst = append(dst, c)
			case c == ' ':
				dst = append(dst, "%20"...)
			default:
				dst = append(dst, '%', lowerhex[c>>4], lowerhex[c&15])
			}
		}
	}
	return dst
}

func appendLowerName(dst []byte, name string) []byte {
	for i := 0; i < len(name); i++ {
		if name[i] >= utf8.RuneSelf {
			return append(dst, strings.ToLower(name)...)
		}
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// Sign returns the Base64 HMAC-SHA1 of canonical under secret.
func Sign(secret []byte, canonical string) string {
	m := hmac.New(sha1.New, secret)
	m.Write([]byte(canonical))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Candidates returns the signatures a correct client may have produced for
// ps: CloudStack's canonical form and, when a value holds "~", the variant
// with "~" unescaped that Go's url.QueryEscape (used by the Go SDK) yields.
func Candidates(secret []byte, ps []Param) []string {
	out := []string{Sign(secret, canonical(ps, false))}
	if hasTilde(ps) {
		out = append(out, Sign(secret, canonical(ps, true)))
	}
	return out
}

func hasTilde(ps []Param) bool {
	for _, p := range ps {
		if strings.IndexByte(p.Value, '~') >= 0 {
			return true
		}
	}
	return false
}

// Verify reports whether sent is a correct signature of ps under secret
// (any of Candidates), comparing in constant time. A "+" turned into a
// space by a client that did not escape the signature is put back first.
// It is Candidates without the garbage: the per-request path.
func Verify(secret []byte, ps []Param, sent string) bool {
	return verify(secret, ps, sent, appendCanonical)
}

// NormalizeSignature is the signature as the client computed it: a "+"
// that arrived as a space (an unescaped query) put back. Use it to compare
// or remember signatures.
func NormalizeSignature(sent string) string {
	return string(normalizeSig(make([]byte, 0, len(sent)), sent))
}

func normalizeSig(dst []byte, sent string) []byte {
	for i := 0; i < len(sent); i++ {
		c := sent[i]
		if c == ' ' {
			c = '+'
		}
		dst = append(dst, c)
	}
	return dst
}

// VerifyREST reports whether sent is the signature of RESTCanonical(ps)
// under secret (or of its variant with "~" unescaped, as url.QueryEscape
// writes it), comparing in constant time.
func VerifyREST(secret []byte, ps []Param, sent string) bool {
	return verify(secret, ps, sent, appendExact)
}

// verify is Verify and VerifyREST, which differ only in how the sorted
// parameters become the signed string (canonical). Both "~" spellings are
// tried when a value holds one, and both compared, so the time does not
// tell which matched.
func verify(secret []byte, ps []Param, sent string, canonical func(dst []byte, sorted []Param, keepTilde bool) []byte) bool {
	var sentBuf [64]byte
	if len(sent) > len(sentBuf) {
		return false // a Base64 SHA-1 digest is 28 bytes
	}
	got := normalizeSig(sentBuf[:0], sent)
	sorted := sortedParams(ps)
	var canon [512]byte
	m := hmac.New(sha1.New, secret)
	ok := 0
	variants := 1
	if hasTilde(ps) {
		variants = 2
	}
	for v := 0; v < variants; v++ {
		m.Reset()
		m.Write(canonical(canon[:0], sorted, v == 1))
		var sum [sha1.Size]byte
		var want [28]byte // base64.StdEncoding.EncodedLen(sha1.Size)
		base64.StdEncoding.Encode(want[:], m.Sum(sum[:0]))
		ok |= subtle.ConstantTimeCompare(got, want[:])
	}
	return ok == 1
}

// ExpiresFormat is how SignQuery and RESTAuthorization write "expires":
// RFC 3339 in UTC with milliseconds. A write's signature is accepted once,
// so two identical writes must sign differently: with whole seconds, the
// same write sent twice within a second would be refused as a replay.
// (CloudStack's DateUtil.parseTZDateString reads the fraction too.)
const ExpiresFormat = "2006-01-02T15:04:05.000Z"

// ParseExpires accepts the forms CloudStack's DateUtil.parseTZDateString
// accepts: RFC 3339 (with optional fraction), a numeric zone without colon
// ("2026-01-01T00:00:00+0000"), and the legacy "...Z+0000".
func ParseExpires(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999Z0700",
		"2006-01-02T15:04:05Z0700", "2006-01-02T15:04:05Z-0700"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("expires %q is not a date like 2026-01-01T00:00:00Z", s)
}

// SignQuery adds apiKey, signatureversion=3 and expires to params and
// returns the query string to send, signature last, exactly as the Go SDK
// builds it. params is modified.
func SignQuery(params url.Values, apiKey string, secret []byte, expires time.Time) string {
	params.Set("apiKey", apiKey)
	params.Set("signatureversion", "3")
	params.Set("expires", expires.UTC().Format(ExpiresFormat))
	params.Del("signature")
	ps := Params(params)
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(url.QueryEscape(p.Name))
		b.WriteByte('=')
		b.WriteString(EncodeValue(p.Value))
	}
	sig := Sign(secret, Canonical(ps))
	b.WriteString("&signature=")
	b.WriteString(url.QueryEscape(sig))
	return b.String()
}

// REST request signing. The Authorization header is
//
//	Authorization: ZTPD-HMAC-SHA1 apikey=<key>, expires=<RFC3339>, signature=<base64>
//
// and the signature is Sign(secret, RESTCanonical(RESTParams(...))). The
// expires field may be left out (an unversioned signature, which never
// expires); servers refuse that unless told otherwise.
const RESTScheme = "ZTPD-HMAC-SHA1"

// Names of the synthetic parameters bound into a REST signature. A REST
// request may not use them as query parameters.
const (
	RESTMethod     = "ztpd-method"
	RESTPath       = "ztpd-path"
	RESTExpires    = "ztpd-expires"
	RESTAPIKey     = "ztpd-apikey"
	RESTBodySHA256 = "ztpd-body-sha256"
)

// BodySHA256 is the hex SHA-256 of a request body ("" for an empty body).
func BodySHA256(body []byte) string {
	if len(body) == 0 {
		return ""
	}
	s := sha256.Sum256(body)
	return hex.EncodeToString(s[:])
}

// RESTParams is the parameter list a REST request signs: its query
// parameters plus method, escaped path, expiry, API key and body digest.
func RESTParams(method, escapedPath string, query url.Values, apiKey, expires, bodySHA string) []Param {
	ps := Params(query)
	ps = append(ps, Param{RESTMethod, strings.ToUpper(method)}, Param{RESTPath, escapedPath},
		Param{RESTExpires, expires}, Param{RESTAPIKey, apiKey})
	if bodySHA != "" {
		ps = append(ps, Param{RESTBodySHA256, bodySHA})
	}
	return ps
}

// RESTAuthorization returns the Authorization header value for a REST
// request. A zero expires makes an unversioned signature (no expiry).
func RESTAuthorization(method, escapedPath string, query url.Values, body []byte, apiKey string, secret []byte, expires time.Time) string {
	exp := ""
	if !expires.IsZero() {
		exp = expires.UTC().Format(ExpiresFormat)
	}
	sig := Sign(secret, RESTCanonical(RESTParams(method, escapedPath, query, apiKey, exp, BodySHA256(body))))
	if exp == "" {
		return fmt.Sprintf("%s apikey=%s, signature=%s", RESTScheme, apiKey, sig)
	}
	return fmt.Sprintf("%s apikey=%s, expires=%s, signature=%s", RESTScheme, apiKey, exp, sig)
}

// ParseRESTAuthorization splits the header value into its fields; expires
// is "" when the header has none.
func ParseRESTAuthorization(h string) (apiKey, expires, signature string, err error) {
	rest, ok := strings.CutPrefix(h, RESTScheme+" ")
	if !ok {
		return "", "", "", fmt.Errorf("authorization scheme is not %s", RESTScheme)
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return "", "", "", fmt.Errorf("malformed authorization field %q", part)
		}
		k = strings.ToLower(k)
		if seen[k] {
			return "", "", "", fmt.Errorf("authorization field %s given twice", k)
		}
		seen[k] = true
		switch k {
		case "apikey":
			apiKey = v
		case "expires":
			expires = v
			if v == "" {
				return "", "", "", fmt.Errorf("authorization field expires is empty")
			}
		case "signature":
			signature = v
		}
	}
	if apiKey == "" || signature == "" {
		return "", "", "", fmt.Errorf("authorization needs apikey and signature (and expires)")
	}
	return apiKey, expires, signature, nil
}
