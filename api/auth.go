package api

import (
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/ztpd/ztpd/api/signing"
	"github.com/ztpd/ztpd/internal/apikeys"
)

// authError says why a request was not authenticated. Its text goes to the
// log (with the client address and API key), never to the client, which
// only learns that authentication failed.
type authError struct{ reason string }

func (e *authError) Error() string { return e.reason }

func authFail(reason string) error { return &authError{reason} }

// verifyCloudStack checks a CloudStack-signed request (every parameter except
// signature, see package signing) and returns the caller's credential.
func (s *Server) verifyCloudStack(form url.Values) (apikeys.Credential, error) {
	var apiKey, signature, sigVersion, expires string
	for name, vals := range form {
		if len(vals) == 0 {
			continue
		}
		switch strings.ToLower(name) {
		case "apikey":
			apiKey = vals[0]
		case "signature":
			signature = vals[0]
		case "signatureversion":
			sigVersion = vals[0]
		case "expires":
			expires = vals[0]
		}
	}
	if apiKey == "" || signature == "" {
		return apikeys.Credential{}, authFail("missing apiKey or signature")
	}
	if sigVersion == "3" {
		if err := s.checkExpires(expires); err != nil {
			return apikeys.Credential{}, err
		}
	}
	cred, err := s.keys.Lookup(apiKey)
	if err != nil {
		if errors.Is(err, apikeys.ErrUnknownKey) {
			return cred, authFail("unknown API key")
		}
		return cred, err
	}
	if !signatureMatches(signature, signing.Candidates(cred.Secret, signing.Params(form))) {
		return apikeys.Credential{}, authFail("signature mismatch")
	}
	return cred, nil
}

// verifyREST checks a REST request's Authorization header.
func (s *Server) verifyREST(r *http.Request, body []byte) (apikeys.Credential, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return apikeys.Credential{}, authFail("missing Authorization header")
	}
	if rest, ok := strings.CutPrefix(h, "Bearer "); ok {
		// The secret itself travels in the header: accepted over TLS only,
		// and checked against the stored hash.
		if r.TLS == nil {
			return apikeys.Credential{}, authFail("bearer credentials sent without TLS")
		}
		key, secret, ok := strings.Cut(strings.TrimSpace(rest), ":")
		if !ok {
			return apikeys.Credential{}, authFail("malformed bearer credentials")
		}
		cred, err := s.keys.VerifySecret(key, secret)
		if err != nil {
			if errors.Is(err, apikeys.ErrUnknownKey) {
				return cred, authFail("unknown API key or wrong secret")
			}
			return cred, err
		}
		return cred, nil
	}
	apiKey, expires, signature, err := signing.ParseRESTAuthorization(h)
	if err != nil {
		return apikeys.Credential{}, authFail(err.Error())
	}
	if err := s.checkExpires(expires); err != nil {
		return apikeys.Credential{}, err
	}
	cred, err := s.keys.Lookup(apiKey)
	if err != nil {
		if errors.Is(err, apikeys.ErrUnknownKey) {
			return cred, authFail("unknown API key")
		}
		return cred, err
	}
	q := r.URL.Query()
	ps := signing.RESTParams(r.Method, r.URL.EscapedPath(), q, apiKey, expires, signing.BodySHA256(body))
	if !signatureMatches(signature, signing.Candidates(cred.Secret, ps)) {
		return apikeys.Credential{}, authFail("signature mismatch")
	}
	return cred, nil
}

func (s *Server) checkExpires(expires string) error {
	if expires == "" {
		return authFail("signatureversion 3 without expires")
	}
	t, err := signing.ParseExpires(expires)
	if err != nil {
		return authFail("malformed expires")
	}
	if !s.now().Before(t) {
		return authFail("request expired at " + t.UTC().Format(time.RFC3339))
	}
	return nil
}

// signatureMatches compares the sent signature with every acceptable one in
// constant time. A "+" turned into a space by a client that did not escape
// the signature is put back first.
func signatureMatches(sent string, candidates []string) bool {
	sent = strings.ReplaceAll(sent, " ", "+")
	ok := 0
	for _, c := range candidates {
		ok |= subtle.ConstantTimeCompare([]byte(sent), []byte(c))
	}
	return ok == 1
}

// failLimiter bounds failed authentications per client address: each failure
// takes a token from the address's bucket (perMinute per minute, burst
// perMinute); with the bucket empty, the address's requests are refused
// before any verification until it refills.
type failLimiter struct {
	perMinute int
	mu        sync.Mutex
	m         map[string]*failEntry
}

type failEntry struct {
	lim  *rate.Limiter
	seen time.Time
}

func newFailLimiter(perMinute int) *failLimiter {
	return &failLimiter{perMinute: perMinute, m: map[string]*failEntry{}}
}

// blocked reports whether ip has no failures left, and for how long.
func (f *failLimiter) blocked(ip string, now time.Time) (bool, time.Duration) {
	if f.perMinute <= 0 {
		return false, 0
	}
	f.mu.Lock()
	e := f.m[ip]
	f.mu.Unlock()
	if e == nil {
		return false, 0
	}
	tokens := e.lim.TokensAt(now)
	if tokens >= 1 {
		return false, 0
	}
	wait := time.Duration((1 - tokens) * float64(time.Minute) / float64(f.perMinute))
	return true, wait
}

// failed records one failed authentication from ip.
func (f *failLimiter) failed(ip string, now time.Time) {
	if f.perMinute <= 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.m[ip]
	if e == nil {
		if len(f.m) >= 4096 {
			f.sweep(now)
		}
		e = &failEntry{lim: rate.NewLimiter(rate.Limit(float64(f.perMinute)/60), f.perMinute)}
		f.m[ip] = e
	}
	e.seen = now
	e.lim.AllowN(now, 1)
}

// sweep forgets addresses whose bucket has refilled (idle over a minute).
func (f *failLimiter) sweep(now time.Time) {
	for ip, e := range f.m {
		if now.Sub(e.seen) > time.Minute {
			delete(f.m, ip)
		}
	}
}

// clientIP is the peer address of the connection. Forwarding headers are
// not trusted: a client could set them to dodge the limiter.
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
