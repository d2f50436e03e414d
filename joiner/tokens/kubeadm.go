// Package tokens holds the join credentials' formats: kubeadm bootstrap
// tokens, kubeadm certificate keys, k3s tokens and ztpd enrollment secrets,
// plus the stored record of a token (its id and a hash of its secret, never
// the secret). Secret-holding types print and marshal redacted; the secret
// leaves only through an explicit Reveal call.
package tokens

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
)

// Kubeadm's defaults for a node-joining token.
const (
	// DefaultNodeGroup is the group kubeadm's RBAC lets create node CSRs
	// and have them auto-approved (kubeadm's NodeBootstrapTokenAuthGroup).
	DefaultNodeGroup = "system:bootstrappers:kubeadm:default-node-token"
	// UsageSigning lets the token sign the cluster-info ConfigMap (discovery).
	UsageSigning = "signing"
	// UsageAuthentication lets the token authenticate as a bootstrapper.
	UsageAuthentication = "authentication"
)

// DefaultUsages are kubeadm's default token usages.
func DefaultUsages() []string { return []string{UsageSigning, UsageAuthentication} }

// DefaultGroups are kubeadm's default extra groups for a node token.
func DefaultGroups() []string { return []string{DefaultNodeGroup} }

// ErrMalformed means a credential does not have the expected format. Its
// message never repeats the secret.
var ErrMalformed = errors.New("malformed token")

// BootstrapToken is a kubeadm bootstrap token "<id>.<secret>" (6 and 16
// characters of [a-z0-9]).
type BootstrapToken struct {
	id     string
	secret string
}

// GenerateBootstrapToken makes a random token with cluster-bootstrap's generator.
func GenerateBootstrapToken() (BootstrapToken, error) {
	s, err := bootstraputil.GenerateBootstrapToken()
	if err != nil {
		return BootstrapToken{}, err
	}
	return ParseBootstrapToken(s)
}

// ParseBootstrapToken accepts exactly what kubeadm accepts: the upstream
// BootstrapTokenPattern, with the secret checked in constant time.
func ParseBootstrapToken(s string) (BootstrapToken, error) {
	if !bootstraputil.IsValidBootstrapToken(s) {
		return BootstrapToken{}, fmt.Errorf("%w: a kubeadm bootstrap token is 6 and 16 characters of [a-z0-9] joined by a dot", ErrMalformed)
	}
	id, secret, _ := strings.Cut(s, ".")
	return BootstrapToken{id: id, secret: secret}, nil
}

// ID is the public half of the token.
func (t BootstrapToken) ID() string { return t.id }

// IsZero reports whether t is the zero token.
func (t BootstrapToken) IsZero() bool { return t.id == "" }

// Reveal returns the full "<id>.<secret>" token, for the one device it is for.
func (t BootstrapToken) Reveal() string {
	if t.id == "" {
		return ""
	}
	return bootstraputil.TokenFromIDAndSecret(t.id, t.secret)
}

// Hash is the stored form of the secret.
func (t BootstrapToken) Hash() []byte { return HashSecret(KindKubeadm, t.id, t.secret) }

// String shows the id only.
func (t BootstrapToken) String() string { return t.id + ".<redacted>" }

// GoString keeps %#v from printing the secret.
func (t BootstrapToken) GoString() string { return t.String() }

// LogValue keeps slog from printing the secret.
func (t BootstrapToken) LogValue() slog.Value { return slog.StringValue(t.String()) }

// MarshalJSON emits the id only.
func (t BootstrapToken) MarshalJSON() ([]byte, error) { return json.Marshal(t.String()) }

// ValidateUsages checks usages against cluster-bootstrap's known list.
func ValidateUsages(usages []string) error { return bootstraputil.ValidateUsages(usages) }

// ValidateGroups checks extra groups against cluster-bootstrap's pattern
// (every group must start with "system:bootstrappers:").
func ValidateGroups(groups []string) error {
	for _, g := range groups {
		if err := bootstraputil.ValidateBootstrapGroupName(g); err != nil {
			return err
		}
	}
	return nil
}

// KnownUsages lists the usages a bootstrap token may carry.
func KnownUsages() []string { return append([]string(nil), bootstrapapi.KnownTokenUsages...) }

// CertificateKey is kubeadm's --certificate-key: 32 random bytes as hex,
// the AES key that encrypts control-plane certificates uploaded for HA joins.
type CertificateKey struct{ hex string }

// GenerateCertificateKey makes a random certificate key.
func GenerateCertificateKey() (CertificateKey, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return CertificateKey{}, err
	}
	return CertificateKey{hex: hex.EncodeToString(b)}, nil
}

// ParseCertificateKey accepts 64 hex characters, as kubeadm does.
func ParseCertificateKey(s string) (CertificateKey, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 32 {
		return CertificateKey{}, fmt.Errorf("%w: a certificate key is 64 hex characters", ErrMalformed)
	}
	return CertificateKey{hex: strings.ToLower(s)}, nil
}

// Reveal returns the hex key.
func (k CertificateKey) Reveal() string { return k.hex }

// IsZero reports whether k is unset.
func (k CertificateKey) IsZero() bool { return k.hex == "" }

// String never shows the key.
func (k CertificateKey) String() string { return "<redacted certificate key>" }

// GoString keeps %#v from printing the key.
func (k CertificateKey) GoString() string { return k.String() }

// LogValue keeps slog from printing the key.
func (k CertificateKey) LogValue() slog.Value { return slog.StringValue(k.String()) }

// MarshalJSON never emits the key.
func (k CertificateKey) MarshalJSON() ([]byte, error) { return json.Marshal(k.String()) }

// HashSecret is the stored form of a token secret: SHA-256 over a domain
// tag, the token kind and id, and the secret. Binding kind and id means a
// hash copied onto another record never verifies. Secrets are random and
// at least 80 bits, so a fast hash is the right tool (no password stretching).
func HashSecret(kind Kind, id, secret string) []byte {
	h := sha256.New()
	h.Write([]byte("ztpd token v1\x00"))
	h.Write([]byte(kind))
	h.Write([]byte{0})
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write([]byte(secret))
	return h.Sum(nil)
}

// secretMatches compares a presented secret with a stored hash in constant time.
func secretMatches(hash []byte, kind Kind, id, secret string) bool {
	return subtle.ConstantTimeCompare(hash, HashSecret(kind, id, secret)) == 1
}
