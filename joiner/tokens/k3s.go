package tokens

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// k3s token format, as k3s's pkg/clientaccess parses it:
//
//	K10<ca-hash>::<credentials>
//
// ca-hash is empty or 64 lower-case hex characters; credentials are a
// kubeadm-style bootstrap token "<id>.<secret>" or "<username>:<password>"
// with a non-empty password (k3s's own full token is "server:<password>").
// A token without the K10 prefix is a bare bootstrap token or password and
// carries no CA hash.
const (
	k3sPrefix       = "K10"
	k3sHashLen      = sha256.Size * 2
	k3sServerUser   = "server"
	k3sSecretBytes  = 16 // k3s generates 16 random bytes as hex for its own tokens
	k3sMaxTokenSize = 4096
)

// ErrCAHashMismatch means the server's CA bundle is not the one the token pins.
var ErrCAHashMismatch = errors.New("k3s token CA hash does not match the server CA bundle")

// K3sToken is a parsed k3s join token. Exactly one of the two credential
// forms is set: Username and password, or a bootstrap token.
type K3sToken struct {
	caHash    string // "" when the token pins no CA
	username  string
	password  string
	bootstrap BootstrapToken
}

// NewK3sServerToken makes a full token "K10<hash>::server:<secret>" for the
// CA bundle, with a 32-hex-character random secret (as k3s generates).
func NewK3sServerToken(caBundlePEM []byte) (K3sToken, error) {
	hash, err := HashCABundle(caBundlePEM)
	if err != nil {
		return K3sToken{}, err
	}
	b := make([]byte, k3sSecretBytes)
	if _, err := rand.Read(b); err != nil {
		return K3sToken{}, err
	}
	return K3sToken{caHash: hash, username: k3sServerUser, password: hex.EncodeToString(b)}, nil
}

// NewK3sBootstrapToken makes "K10<hash>::<id>.<secret>" for the CA bundle,
// the per-agent form (id 6 and secret 16 characters of [a-z0-9]).
func NewK3sBootstrapToken(caBundlePEM []byte) (K3sToken, error) {
	hash, err := HashCABundle(caBundlePEM)
	if err != nil {
		return K3sToken{}, err
	}
	bt, err := GenerateBootstrapToken()
	if err != nil {
		return K3sToken{}, err
	}
	return K3sToken{caHash: hash, bootstrap: bt}, nil
}

// K3sTokenFor pins an existing bootstrap token to a CA bundle:
// "K10<hash>::<id>.<secret>".
func K3sTokenFor(caBundlePEM []byte, bt BootstrapToken) (K3sToken, error) {
	if bt.IsZero() {
		return K3sToken{}, errors.New("k3s token: empty bootstrap token")
	}
	hash, err := HashCABundle(caBundlePEM)
	if err != nil {
		return K3sToken{}, err
	}
	return K3sToken{caHash: hash, bootstrap: bt}, nil
}

// ParseK3sToken parses any token k3s accepts. Where k3s would accept a
// hash it can never match (upper-case or non-hex characters) this refuses
// it at once instead.
func ParseK3sToken(s string) (K3sToken, error) {
	if s == "" {
		return K3sToken{}, fmt.Errorf("%w: k3s token is empty", ErrMalformed)
	}
	if len(s) > k3sMaxTokenSize {
		return K3sToken{}, fmt.Errorf("%w: k3s token longer than %d bytes", ErrMalformed, k3sMaxTokenSize)
	}
	var t K3sToken
	rest, hasPrefix := strings.CutPrefix(s, k3sPrefix)
	if !hasPrefix {
		// No K10 prefix: a bare bootstrap token, or else the whole string
		// is a password (k3s supplies the user name later).
		if bt, err := ParseBootstrapToken(s); err == nil {
			t.bootstrap = bt
		} else {
			t.password = s
			// Its full form (K10:::<password>) must fit the limit too, or
			// the token could not be handed on.
			if len(t.Reveal()) > k3sMaxTokenSize {
				return K3sToken{}, fmt.Errorf("%w: k3s token longer than %d bytes", ErrMalformed, k3sMaxTokenSize)
			}
		}
		return t, nil
	}
	hash, creds, found := strings.Cut(rest, "::")
	if !found {
		// "K10" with no "::": k3s reads the remainder as credentials, no hash.
		hash, creds = "", rest
	}
	if hash != "" {
		if len(hash) != k3sHashLen {
			return K3sToken{}, fmt.Errorf("%w: k3s token CA hash is %d characters, want %d", ErrMalformed, len(hash), k3sHashLen)
		}
		if !isLowerHex(hash) {
			return K3sToken{}, fmt.Errorf("%w: k3s token CA hash must be lower-case hex", ErrMalformed)
		}
	}
	t.caHash = hash
	if bt, err := ParseBootstrapToken(creds); err == nil {
		t.bootstrap = bt
		return t, nil
	}
	user, pass, ok := strings.Cut(creds, ":")
	if !ok || pass == "" {
		return K3sToken{}, fmt.Errorf("%w: k3s credentials must be <id>.<secret> or <user>:<password>", ErrMalformed)
	}
	t.username, t.password = user, pass
	return t, nil
}

// CAHash is the pinned CA hash (hex), or "" for a token without one.
func (t K3sToken) CAHash() string { return t.caHash }

// IsBootstrap reports whether the credentials are a bootstrap token.
func (t K3sToken) IsBootstrap() bool { return !t.bootstrap.IsZero() }

// Username is the basic-auth user ("server" for full tokens); "" for bootstrap tokens.
func (t K3sToken) Username() string { return t.username }

// Bootstrap is the bootstrap token credential, zero for user/password tokens.
func (t K3sToken) Bootstrap() BootstrapToken { return t.bootstrap }

// ID names the credential without revealing it: the bootstrap token id, or
// the user name.
func (t K3sToken) ID() string {
	if t.IsBootstrap() {
		return t.bootstrap.ID()
	}
	return t.username
}

// Hash is the stored form of the credential's secret.
func (t K3sToken) Hash() []byte {
	if t.IsBootstrap() {
		return HashSecret(KindK3s, t.bootstrap.id, t.bootstrap.secret)
	}
	return HashSecret(KindK3s, t.username, t.password)
}

// Reveal returns the token text as k3s formats it.
func (t K3sToken) Reveal() string {
	return t.format(t.credentials())
}

func (t K3sToken) credentials() string {
	if t.IsBootstrap() {
		return t.bootstrap.Reveal()
	}
	return t.username + ":" + t.password
}

func (t K3sToken) format(creds string) string {
	if t.caHash == "" && t.IsBootstrap() {
		return creds
	}
	return k3sPrefix + t.caHash + "::" + creds
}

// String shows the structure without the secret.
func (t K3sToken) String() string {
	if t.IsBootstrap() {
		return t.format(t.bootstrap.String())
	}
	return t.format(t.username + ":<redacted>")
}

// GoString keeps %#v from printing the secret.
func (t K3sToken) GoString() string { return t.String() }

// LogValue keeps slog from printing the secret.
func (t K3sToken) LogValue() slog.Value { return slog.StringValue(t.String()) }

// MarshalJSON emits the redacted form.
func (t K3sToken) MarshalJSON() ([]byte, error) { return json.Marshal(t.String()) }

// ValidateCA checks the server's CA bundle against the token's pin, as a
// k3s agent does before it sends credentials. A token without a pin fails:
// ztpd never hands out unpinned tokens.
func (t K3sToken) ValidateCA(caBundlePEM []byte) error {
	if t.caHash == "" {
		return fmt.Errorf("%w: token pins no CA (use the full K10<hash>:: form)", ErrCAHashMismatch)
	}
	got, err := HashCABundle(caBundlePEM)
	if err != nil {
		return err
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(t.caHash)) != 1 {
		return ErrCAHashMismatch
	}
	return nil
}

// HashCABundle computes k3s's CA hash. For a bundle holding one certificate
// (every CA ztpd makes) it is the SHA-256 of the PEM bytes exactly as given.
// For a bundle of several certificates k3s hashes the DER of the root that
// the first certificate chains to, so an intermediate can be renewed without
// changing tokens; this does the same. Lower-case hex, like k3s.
func HashCABundle(caBundlePEM []byte) (string, error) {
	certs, err := parseCertsPEM(caBundlePEM)
	if err != nil {
		return "", err
	}
	b := caBundlePEM
	if len(certs) > 1 {
		roots, inters := x509.NewCertPool(), x509.NewCertPool()
		for _, c := range certs[1:] {
			if len(c.AuthorityKeyId) == 0 || bytes.Equal(c.AuthorityKeyId, c.SubjectKeyId) {
				roots.AddCert(c)
			} else {
				inters.AddCert(c)
			}
		}
		if chains, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inters}); err == nil {
			chain := chains[0]
			b = chain[len(chain)-1].Raw
		}
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

func parseCertsPEM(b []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" || len(block.Headers) != 0 {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("k3s CA bundle: %w", err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("k3s CA bundle holds no PEM certificate")
	}
	return certs, nil
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
