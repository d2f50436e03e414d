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
// ztpd's REST API reuses the same algorithm over the query parameters plus
// the method, path, expiry and body digest (see RESTParams), so one signer
// serves both APIs and the CLI.
package signing

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"
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

// Canonical is the string that is signed: sorted, encoded, lowercased.
func Canonical(ps []Param) string { return canonical(ps, false) }

func canonical(ps []Param, keepTilde bool) string {
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

// Sign returns the Base64 HMAC-SHA1 of canonical under secret.
func Sign(secret []byte, canonical string) string {
	m := hmac.New(sha1.New, secret)
	m.Write([]byte(canonical))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Candidates returns the signatures a correct client may have produced for
// ps: CloudStack's canonical form and, when a value holds "~", the variant
// with "~" unescaped that Go's url.QueryEscape (used by the Go SDK) yields.
// The server compares each in constant time.
func Candidates(secret []byte, ps []Param) []string {
	out := []string{Sign(secret, canonical(ps, false))}
	for _, p := range ps {
		if strings.IndexByte(p.Value, '~') >= 0 {
			return append(out, Sign(secret, canonical(ps, true)))
		}
	}
	return out
}

// ExpiresFormat is how clients write "expires" (RFC 3339 in UTC).
const ExpiresFormat = "2006-01-02T15:04:05Z"

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
// and the signature is Sign(secret, Canonical(RESTParams(...))).
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

// RESTAuthorization returns the Authorization header value for a REST request.
func RESTAuthorization(method, escapedPath string, query url.Values, body []byte, apiKey string, secret []byte, expires time.Time) string {
	exp := expires.UTC().Format(ExpiresFormat)
	sig := Sign(secret, Canonical(RESTParams(method, escapedPath, query, apiKey, exp, BodySHA256(body))))
	return fmt.Sprintf("%s apikey=%s, expires=%s, signature=%s", RESTScheme, apiKey, exp, sig)
}

// ParseRESTAuthorization splits the header value into its fields.
func ParseRESTAuthorization(h string) (apiKey, expires, signature string, err error) {
	rest, ok := strings.CutPrefix(h, RESTScheme+" ")
	if !ok {
		return "", "", "", fmt.Errorf("authorization scheme is not %s", RESTScheme)
	}
	for _, part := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return "", "", "", fmt.Errorf("malformed authorization field %q", part)
		}
		switch strings.ToLower(k) {
		case "apikey":
			apiKey = v
		case "expires":
			expires = v
		case "signature":
			signature = v
		}
	}
	if apiKey == "" || expires == "" || signature == "" {
		return "", "", "", fmt.Errorf("authorization needs apikey, expires and signature")
	}
	return apiKey, expires, signature, nil
}
