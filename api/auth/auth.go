// Package auth is what every API door shares to authenticate a caller:
// the signature policy, CloudStack and REST signature verification, the
// replay memory of signed writes, and the per-address limit of failed
// authentications. The doors (CloudStack, REST, console) decide what a
// failure answers; this package decides whether a request is who it says.
package auth

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/ztpd/ztpd/api/signing"
	"github.com/ztpd/ztpd/internal/apikeys"
)

// Error says why a request was not authenticated. Its Reason goes to
// the log (with the client address and API key); the client learns only
// that authentication failed, plus Hint when set (for refusals a correct
// client can run into, such as a replayed write).
type Error struct{ Reason, Hint string }

func (e *Error) Error() string { return e.Reason }

// Fail is an Error without a hint.
func Fail(reason string) error { return &Error{Reason: reason} }

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

// Verifier checks signed requests against the API keys and remembers
// accepted writes' signatures so they are not accepted twice.
type Verifier struct {
	keys   *apikeys.Service
	sigs   SignaturePolicy
	replay *replayGuard
	now    func() time.Time
}

// NewVerifier builds a Verifier; zero MaxLifetime or ReplayMemory take the
// defaults, nil now is time.Now.
func NewVerifier(keys *apikeys.Service, sigs SignaturePolicy, now func() time.Time, reg prometheus.Registerer) *Verifier {
	if now == nil {
		now = time.Now
	}
	if sigs.MaxLifetime <= 0 {
		sigs.MaxLifetime = DefaultMaxSignatureLifetime
	}
	if sigs.ReplayMemory <= 0 {
		sigs.ReplayMemory = DefaultReplayMemory
	}
	replay := newReplayGuard(sigs.ReplayMemory)
	replay.entries = newReplayEntries(reg)
	return &Verifier{keys: keys, sigs: sigs, replay: replay, now: now}
}

// VerifyCloudStack checks a CloudStack-signed request (every parameter except
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
func (s *Verifier) VerifyCloudStack(form url.Values, write bool) (apikeys.Credential, error) {
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
		return apikeys.Credential{}, Fail("missing apiKey or signature")
	}
	now := s.now()
	var unversioned *Error
	if s.sigs.RequireExpiryCloudStack {
		unversioned = &Error{Reason: "unversioned signature (no signatureversion=3 and expires) refused by api.require_expiry_cloudstack",
			Hint: "sign with signatureversion=3 and expires"}
	}
	// An expires is honoured whatever the version says: a client that sent
	// one meant it.
	cred, until, err := s.checkSigned(apiKey, expires, sigVersion == "3" || hasExpires, unversioned, now)
	if err != nil {
		return apikeys.Credential{}, err
	}
	if !signing.Verify(cred.Secret, signing.Params(form), signature) {
		return apikeys.Credential{}, Fail("signature mismatch")
	}
	switch {
	case !write:
	case until.IsZero() && !s.sigs.AllowUnversionedCloudStackWrites:
		// Checked after the signature, so only the key's holder learns why.
		return apikeys.Credential{}, ErrUnversionedWrite
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
func (s *Verifier) remember(apiKey, signature string, until, now time.Time) error {
	err := s.replay.admit(apiKey, signing.NormalizeSignature(signature), until, now)
	switch {
	case errors.Is(err, ErrReplayed):
		return &Error{Reason: "replayed signature: this signed write was already accepted",
			Hint: "request signature already used; sign every write afresh"}
	case err != nil:
		return err
	}
	return nil
}

// RESTSigned is what a REST request's Authorization header proved before
// its body was read: the caller's credential, and for a signature what
// VerifyRESTSignature checks with the body.
type RESTSigned struct {
	cred      apikeys.Credential
	bearer    bool // the secret itself was checked: nothing left to verify
	apiKey    string
	expires   string
	signature string
	until     time.Time // when the signature expires (the replay memory's horizon)
}

// RESTHeader checks what a REST request's Authorization header proves on
// its own: a bearer secret, or a signature's scheme, expiry and key. It
// never reads the body, so a request refused here costs none.
func (s *Verifier) RESTHeader(r *http.Request) (RESTSigned, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return RESTSigned{}, Fail("missing Authorization header")
	}
	if rest, ok := strings.CutPrefix(h, "Bearer "); ok {
		// The secret itself travels in the header: accepted over TLS only,
		// and checked against the stored hash.
		if r.TLS == nil {
			return RESTSigned{}, Fail("bearer credentials sent without TLS")
		}
		key, secret, ok := strings.Cut(strings.TrimSpace(rest), ":")
		if !ok {
			return RESTSigned{}, Fail("malformed bearer credentials")
		}
		cred, err := s.keys.VerifySecret(key, secret)
		if err != nil {
			if errors.Is(err, apikeys.ErrUnknownKey) {
				return RESTSigned{}, Fail("unknown API key or wrong secret")
			}
			return RESTSigned{}, err
		}
		return RESTSigned{cred: cred, bearer: true}, nil
	}
	apiKey, expires, signature, err := signing.ParseRESTAuthorization(h)
	if err != nil {
		return RESTSigned{}, Fail(err.Error())
	}
	now := s.now()
	var unversioned *Error
	if s.sigs.RequireExpiryREST {
		unversioned = &Error{Reason: "unversioned signature (no expires) refused by api.require_expiry_rest",
			Hint: "sign with an expires field"}
	}
	cred, until, err := s.checkSigned(apiKey, expires, expires != "", unversioned, now)
	if err != nil {
		return RESTSigned{}, err
	}
	if until.IsZero() {
		// An unversioned REST signature is remembered as long as the
		// longest one allowed.
		until = now.Add(s.sigs.MaxLifetime)
	}
	return RESTSigned{cred: cred, apiKey: apiKey, expires: expires, signature: signature, until: until}, nil
}

// VerifyRESTSignature checks a signature RESTHeader accepted against the
// request and its body's hex SHA-256 (bodySHA, "" for no body), and
// remembers a write's. q must have passed signing.CheckNames.
func (s *Verifier) VerifyRESTSignature(r *http.Request, q url.Values, h RESTSigned, bodySHA string) (apikeys.Credential, error) {
	if h.bearer {
		return h.cred, nil
	}
	ps := signing.RESTParams(r.Method, r.URL.EscapedPath(), q, h.apiKey, h.expires, bodySHA)
	if !signing.VerifyREST(h.cred.Secret, ps, h.signature) {
		return apikeys.Credential{}, Fail("signature mismatch")
	}
	if IsWriteMethod(r.Method) {
		if err := s.remember(h.apiKey, h.signature, h.until, s.now()); err != nil {
			return apikeys.Credential{}, err
		}
	}
	return h.cred, nil
}

// checkSigned is the check both signature schemes make before their HMAC:
// the expiry against the policy, then the API key. withExpiry says the
// request carries an expiry (checked against the policy, returned as until);
// without one, unversioned is the refusal when the door requires an expiry,
// nil when it accepts none (until is then zero).
func (s *Verifier) checkSigned(apiKey, expires string, withExpiry bool, unversioned *Error, now time.Time) (apikeys.Credential, time.Time, error) {
	var until time.Time
	switch {
	case withExpiry:
		t, err := s.checkExpires(expires, now)
		if err != nil {
			return apikeys.Credential{}, time.Time{}, err
		}
		until = t
	case unversioned != nil:
		return apikeys.Credential{}, time.Time{}, unversioned
	}
	cred, err := s.keys.Lookup(apiKey)
	if err != nil {
		if errors.Is(err, apikeys.ErrUnknownKey) {
			return apikeys.Credential{}, time.Time{}, Fail("unknown API key")
		}
		return apikeys.Credential{}, time.Time{}, err
	}
	return cred, until, nil
}

// IsWriteMethod reports whether an HTTP method may change something (its
// signature is then accepted once).
func IsWriteMethod(m string) bool {
	return m != http.MethodGet && m != http.MethodHead && m != http.MethodOptions
}

// checkExpires parses expires and refuses it when past, or further in the
// future than the policy's MaxLifetime (a signature minted to last a year).
func (s *Verifier) checkExpires(expires string, now time.Time) (time.Time, error) {
	if expires == "" {
		return time.Time{}, Fail("signatureversion 3 without expires")
	}
	t, err := signing.ParseExpires(expires)
	if err != nil {
		return t, Fail("malformed expires")
	}
	if !now.Before(t) {
		return t, Fail("request expired at " + t.UTC().Format(time.RFC3339))
	}
	if t.Sub(now) > s.sigs.MaxLifetime {
		return t, &Error{Reason: fmt.Sprintf("expires %s is more than %s ahead (api.max_signature_lifetime)", t.UTC().Format(time.RFC3339), s.sigs.MaxLifetime),
			Hint: fmt.Sprintf("expires must be at most %s ahead", s.sigs.MaxLifetime)}
	}
	return t, nil
}

// FailLimiter bounds failed authentications per client address: each failure
// takes a token from the address's bucket (perMinute per minute, burst
// perMinute); with the bucket empty, the address's requests are refused
// before any verification until it refills.
type FailLimiter struct {
	perMinute int
	mu        sync.Mutex
	m         map[string]*failEntry
}

type failEntry struct {
	lim  *rate.Limiter
	seen time.Time
}

func NewFailLimiter(perMinute int) *FailLimiter {
	return &FailLimiter{perMinute: perMinute, m: map[string]*failEntry{}}
}

// Blocked reports whether ip has no failures left, and for how long.
func (f *FailLimiter) Blocked(ip string, now time.Time) (bool, time.Duration) {
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

// Failed records one failed authentication from ip.
func (f *FailLimiter) Failed(ip string, now time.Time) {
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
func (f *FailLimiter) sweep(now time.Time) {
	for ip, e := range f.m {
		if now.Sub(e.seen) > time.Minute {
			delete(f.m, ip)
		}
	}
}

// ClientIP is the peer address of the connection. Forwarding headers are
// not trusted: a client could set them to dodge the limiter.
func ClientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// RememberedWrites is how many signed writes the replay memory holds now.
func (s *Verifier) RememberedWrites() int { return s.replay.len() }
