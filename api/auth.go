package api

import (
	"errors"
	"fmt"
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

// authError says why a request was not authenticated. Its reason goes to
// the log (with the client address and API key); the client learns only
// that authentication failed, plus hint when set (for refusals a correct
// client can run into, such as a replayed write).
type authError struct{ reason, hint string }

func (e *authError) Error() string { return e.reason }

func authFail(reason string) error { return &authError{reason: reason} }

// SignaturePolicy says which signatures the API accepts.
type SignaturePolicy struct {
	// RequireExpiryREST refuses REST signatures without expires.
	RequireExpiryREST bool
	// RequireExpiryCloudStack refuses CloudStack signatures without
	// signatureversion=3 and expires (unversioned ones never expire).
	RequireExpiryCloudStack bool
	// MaxLifetime is the furthest in the future expires may lie; it is also
	// how long an unversioned write's signature is remembered.
	MaxLifetime time.Duration
	// ReplayMemory bounds the signatures of recent writes kept to refuse
	// replays; when it is full of unexpired ones, writes are refused.
	ReplayMemory int
	// AllowUnversionedCloudStackWrites accepts CloudStack writes signed
	// without signatureversion=3 and expires, for old clients. Such a
	// signature never expires, so each is remembered in the store for good
	// (UnversionedWritesPerKey per API key) and refused if it comes again.
	AllowUnversionedCloudStackWrites bool
}

// Signature policy defaults: the cloudstack-go SDK signs for 15 minutes;
// 5 more allow for the client's clock running ahead of ours.
const (
	DefaultMaxSignatureLifetime = 20 * time.Minute
	DefaultReplayMemory         = 65536
)

// DefaultSignaturePolicy is expiry required on REST, not on CloudStack
// (its own clients may sign without), signatures valid 20 minutes at most.
func DefaultSignaturePolicy() SignaturePolicy {
	return SignaturePolicy{RequireExpiryREST: true, MaxLifetime: DefaultMaxSignatureLifetime, ReplayMemory: DefaultReplayMemory}
}

// verifyCloudStack checks a CloudStack-signed request (every parameter except
// signature, see package signing) and returns the caller's credential. The
// parameter names must have passed signing.CheckNames. A write's signature
// is remembered until it expires and refused if it comes again; a write
// without expiry (unversioned) is refused unless the policy allows it, and
// then remembered for good (replay.go).
//
// Every request is verified afresh; verified signatures are not cached.
// Verification (canonical string plus HMAC-SHA1, signing.Verify) costs about
// 3.5 us of CPU against about 130 us for a whole cached list answer on
// loopback, mostly the kernel's, so a cache of (key, exact query, expires)
// could save under 3% while adding per-query state that any holder of a key
// could grow. The secret itself comes from apikeys' in-memory map, not from
// the store.
func (s *Server) verifyCloudStack(form url.Values, write bool) (apikeys.Credential, error) {
	var apiKey, signature, sigVersion, expires string
	var hasExpires bool
	for name, vals := range form {
		if len(vals) == 0 {
			continue
		}
		switch {
		case strings.EqualFold(name, "apikey"):
			apiKey = vals[0]
		case strings.EqualFold(name, "signature"):
			signature = vals[0]
		case strings.EqualFold(name, "signatureversion"):
			sigVersion = vals[0]
		case strings.EqualFold(name, "expires"):
			expires, hasExpires = vals[0], true
		}
	}
	if apiKey == "" || signature == "" {
		return apikeys.Credential{}, authFail("missing apiKey or signature")
	}
	now := s.now()
	var until time.Time
	switch {
	case sigVersion == "3" || hasExpires:
		// An expires is honoured whatever the version says: a client that
		// sent one meant it.
		t, err := s.checkExpires(expires, now)
		if err != nil {
			return apikeys.Credential{}, err
		}
		until = t
	case s.sigs.RequireExpiryCloudStack:
		return apikeys.Credential{}, &authError{reason: "unversioned signature (no signatureversion=3 and expires) refused by api.require_expiry_cloudstack",
			hint: "sign with signatureversion=3 and expires"}
	}
	cred, err := s.keys.Lookup(apiKey)
	if err != nil {
		if errors.Is(err, apikeys.ErrUnknownKey) {
			return cred, authFail("unknown API key")
		}
		return cred, err
	}
	if !signing.Verify(cred.Secret, signing.Params(form), signature) {
		return apikeys.Credential{}, authFail("signature mismatch")
	}
	switch {
	case !write:
	case until.IsZero() && !s.sigs.AllowUnversionedCloudStackWrites:
		// Checked after the signature, so only the key's holder learns why.
		return apikeys.Credential{}, errUnversionedWrite
	case until.IsZero():
		if err := s.rememberForGood(apiKey, signature); err != nil {
			return apikeys.Credential{}, err
		}
	default:
		if err := s.remember(apiKey, signature, until, now); err != nil {
			return apikeys.Credential{}, err
		}
	}
	return cred, nil
}

// remember admits a verified write's signature into the replay memory.
func (s *Server) remember(apiKey, signature string, until, now time.Time) error {
	err := s.replay.admit(apiKey, signing.NormalizeSignature(signature), until, now)
	switch {
	case errors.Is(err, errReplayed):
		return &authError{reason: "replayed signature: this signed write was already accepted",
			hint: "request signature already used; sign every write afresh"}
	case err != nil:
		return err
	}
	return nil
}

// restSigned is what a REST request's Authorization header proved before
// its body was read: the caller's credential, and for a signature what
// verifyRESTSignature checks with the body.
type restSigned struct {
	cred      apikeys.Credential
	bearer    bool // the secret itself was checked: nothing left to verify
	apiKey    string
	expires   string
	signature string
	until     time.Time // when the signature expires (the replay memory's horizon)
}

// restHeader checks what a REST request's Authorization header proves on
// its own: a bearer secret, or a signature's scheme, expiry and key. It
// never reads the body, so a request refused here costs none.
func (s *Server) restHeader(r *http.Request) (restSigned, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return restSigned{}, authFail("missing Authorization header")
	}
	if rest, ok := strings.CutPrefix(h, "Bearer "); ok {
		// The secret itself travels in the header: accepted over TLS only,
		// and checked against the stored hash.
		if r.TLS == nil {
			return restSigned{}, authFail("bearer credentials sent without TLS")
		}
		key, secret, ok := strings.Cut(strings.TrimSpace(rest), ":")
		if !ok {
			return restSigned{}, authFail("malformed bearer credentials")
		}
		cred, err := s.keys.VerifySecret(key, secret)
		if err != nil {
			if errors.Is(err, apikeys.ErrUnknownKey) {
				return restSigned{}, authFail("unknown API key or wrong secret")
			}
			return restSigned{}, err
		}
		return restSigned{cred: cred, bearer: true}, nil
	}
	apiKey, expires, signature, err := signing.ParseRESTAuthorization(h)
	if err != nil {
		return restSigned{}, authFail(err.Error())
	}
	now := s.now()
	var until time.Time
	switch {
	case expires != "":
		if until, err = s.checkExpires(expires, now); err != nil {
			return restSigned{}, err
		}
	case s.sigs.RequireExpiryREST:
		return restSigned{}, &authError{reason: "unversioned signature (no expires) refused by api.require_expiry_rest",
			hint: "sign with an expires field"}
	default:
		until = now.Add(s.sigs.MaxLifetime)
	}
	cred, err := s.keys.Lookup(apiKey)
	if err != nil {
		if errors.Is(err, apikeys.ErrUnknownKey) {
			return restSigned{}, authFail("unknown API key")
		}
		return restSigned{}, err
	}
	return restSigned{cred: cred, apiKey: apiKey, expires: expires, signature: signature, until: until}, nil
}

// verifyRESTSignature checks a signature restHeader accepted against the
// request and its body's hex SHA-256 (bodySHA, "" for no body), and
// remembers a write's. q must have passed signing.CheckNames.
func (s *Server) verifyRESTSignature(r *http.Request, q url.Values, h restSigned, bodySHA string) (apikeys.Credential, error) {
	if h.bearer {
		return h.cred, nil
	}
	ps := signing.RESTParams(r.Method, r.URL.EscapedPath(), q, h.apiKey, h.expires, bodySHA)
	if !signing.VerifyREST(h.cred.Secret, ps, h.signature) {
		return apikeys.Credential{}, authFail("signature mismatch")
	}
	if isWriteMethod(r.Method) {
		if err := s.remember(h.apiKey, h.signature, h.until, s.now()); err != nil {
			return apikeys.Credential{}, err
		}
	}
	return h.cred, nil
}

func isWriteMethod(m string) bool {
	return m != http.MethodGet && m != http.MethodHead && m != http.MethodOptions
}

// checkExpires parses expires and refuses it when past, or further in the
// future than the policy's MaxLifetime (a signature minted to last a year).
func (s *Server) checkExpires(expires string, now time.Time) (time.Time, error) {
	if expires == "" {
		return time.Time{}, authFail("signatureversion 3 without expires")
	}
	t, err := signing.ParseExpires(expires)
	if err != nil {
		return t, authFail("malformed expires")
	}
	if !now.Before(t) {
		return t, authFail("request expired at " + t.UTC().Format(time.RFC3339))
	}
	if t.Sub(now) > s.sigs.MaxLifetime {
		return t, &authError{reason: fmt.Sprintf("expires %s is more than %s ahead (api.max_signature_lifetime)", t.UTC().Format(time.RFC3339), s.sigs.MaxLifetime),
			hint: fmt.Sprintf("expires must be at most %s ahead", s.sigs.MaxLifetime)}
	}
	return t, nil
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
