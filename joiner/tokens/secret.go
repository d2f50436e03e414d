package tokens

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
)

// Kinds of ztpd's own credentials.
const (
	// KindReport is the per-member credential a node reports joined/failed with.
	KindReport Kind = "report"
	// KindAgent is the per-device credential the device agent polls its
	// desired state and reports its steps with.
	KindAgent Kind = "agent"
)

// ztpd credentials are "<prefix>.<id>.<secret>": a recognisable, versioned
// prefix (so secret scanners can find leaked ones), a public id the record is
// stored under, and a secret of 32 characters of [a-z0-9] (165 bits).
const (
	enrollmentPrefix = "ztpe1"
	reportPrefix     = "ztpr1"
	agentPrefix      = "ztpa1"
	credIDLen        = 12
	credSecretLen    = 32
	alphabet         = "0123456789abcdefghijklmnopqrstuvwxyz"
)

// Credential is an enrollment secret, a report or an agent credential.
type Credential struct {
	kind   Kind
	id     string
	secret string
}

// NewEnrollmentSecret makes a one-time enrollment secret.
func NewEnrollmentSecret() (Credential, error) { return newCredential(KindEnrollment) }

// NewReportCredential makes a node's report credential.
func NewReportCredential() (Credential, error) { return newCredential(KindReport) }

// NewAgentCredential makes a device agent's credential.
func NewAgentCredential() (Credential, error) { return newCredential(KindAgent) }

// credentialPrefix is kind's text prefix ("" for kinds without one).
func credentialPrefix(kind Kind) string {
	switch kind {
	case KindEnrollment:
		return enrollmentPrefix
	case KindReport:
		return reportPrefix
	case KindAgent:
		return agentPrefix
	}
	return ""
}

func newCredential(kind Kind) (Credential, error) {
	id, err := RandomString(credIDLen)
	if err != nil {
		return Credential{}, err
	}
	secret, err := RandomString(credSecretLen)
	if err != nil {
		return Credential{}, err
	}
	return Credential{kind: kind, id: id, secret: secret}, nil
}

// ParseCredential parses an enrollment secret or report credential of the
// expected kind. The error never repeats the secret.
func ParseCredential(kind Kind, s string) (Credential, error) {
	prefix := credentialPrefix(kind)
	if prefix == "" {
		return Credential{}, fmt.Errorf("tokens: no credential format for kind %q", kind)
	}
	rest, ok := strings.CutPrefix(s, prefix+".")
	if !ok || len(rest) != credIDLen+1+credSecretLen || rest[credIDLen] != '.' {
		return Credential{}, fmt.Errorf("%w: a %s credential is %s.<12 chars>.<32 chars>", ErrMalformed, kind, prefix)
	}
	id, secret := rest[:credIDLen], rest[credIDLen+1:]
	if !inAlphabet(id) || !inAlphabet(secret) {
		return Credential{}, fmt.Errorf("%w: a %s credential uses only [a-z0-9]", ErrMalformed, kind)
	}
	return Credential{kind: kind, id: id, secret: secret}, nil
}

// Kind is the credential's kind.
func (c Credential) Kind() Kind { return c.kind }

// ID is the public part the record is stored under.
func (c Credential) ID() string { return c.id }

// Hash is the stored form of the secret.
func (c Credential) Hash() []byte { return HashSecret(c.kind, c.id, c.secret) }

// Matches compares the credential with a stored hash in constant time.
func (c Credential) Matches(hash []byte) bool { return secretMatches(hash, c.kind, c.id, c.secret) }

// Reveal returns the credential text, for the one device it is for.
func (c Credential) Reveal() string {
	return credentialPrefix(c.kind) + "." + c.id + "." + c.secret
}

// String shows the id only.
func (c Credential) String() string { return string(c.kind) + ":" + c.id + ".<redacted>" }

// GoString keeps %#v from printing the secret.
func (c Credential) GoString() string { return c.String() }

// LogValue keeps slog from printing the secret.
func (c Credential) LogValue() slog.Value { return slog.StringValue(c.String()) }

// MarshalJSON emits the redacted form.
func (c Credential) MarshalJSON() ([]byte, error) { return json.Marshal(c.String()) }

// RandomString returns n characters of [a-z0-9] from crypto/rand, without
// modulo bias.
func RandomString(n int) (string, error) {
	out := make([]byte, 0, n)
	buf := make([]byte, n+n/4+8)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			return "", err
		}
		for _, b := range buf {
			if b < 252 { // 252 = 7*36: keeps the distribution uniform
				out = append(out, alphabet[b%36])
				if len(out) == n {
					break
				}
			}
		}
	}
	return string(out), nil
}

// DeriveBootstrapToken derives a kubeadm token's secret from a cluster's
// token seed and the token id: HMAC-SHA256(seed, id) mapped to 16 characters
// of [a-z0-9]. ztpd keeps only the sealed seed and each token's hash, yet
// can render a token again into the first control plane's init config and
// into the node's own join config.
func DeriveBootstrapToken(seed []byte, id string) (BootstrapToken, error) {
	if len(seed) < 32 {
		return BootstrapToken{}, fmt.Errorf("tokens: seed of %d bytes is too short", len(seed))
	}
	out := make([]byte, 0, 16)
	for counter := byte(0); len(out) < 16; counter++ {
		m := hmac.New(sha256.New, seed)
		m.Write([]byte("ztpd bootstrap token v1\x00"))
		m.Write([]byte(id))
		m.Write([]byte{0, counter})
		for _, b := range m.Sum(nil) {
			if b < 252 {
				out = append(out, alphabet[b%36])
				if len(out) == 16 {
					break
				}
			}
		}
	}
	return ParseBootstrapToken(id + "." + string(out))
}

func inAlphabet(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'z') {
			return false
		}
	}
	return true
}
