// Package pki holds a cluster's certificate authority: creation, client
// certificates signed by it (for devices, from their own certificate
// signing request, checked by CheckCSR), the kubeadm discovery hash, and
// encryption of private keys at rest. Types that hold a private key never print or marshal
// it; the plaintext key leaves only through an explicit PrivateKeyPEM call.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ztpd/ztpd/internal/secretbox"
)

// Algorithm names a key type using kubeadm's encryptionAlgorithm spelling.
type Algorithm string

const (
	// RSA2048 is kubeadm's default and the only CA key type every kubeadm
	// release loads: before 1.15 kubeadm refused pre-generated ECDSA CA keys
	// (kubernetes/kubeadm#984, fixed by kubernetes/kubernetes#76390).
	RSA2048 Algorithm = "RSA-2048"
	// ECDSAP256 is kubeadm's encryptionAlgorithm "ECDSA-P256" (v1beta4,
	// Kubernetes 1.31+). Signing is ~30x cheaper than RSA-2048.
	ECDSAP256 Algorithm = "ECDSA-P256"
)

// Validity periods, matching kubeadm's defaults (10 years for CAs, 1 year
// for leaf certificates).
const (
	CAValidity     = 10 * 365 * 24 * time.Hour
	ClientValidity = 365 * 24 * time.Hour
	// backdate tolerates nodes whose clock runs a little behind ours.
	backdate = 5 * time.Minute
)

// CA is a cluster certificate authority with its private key in memory.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	alg     Algorithm
	key     crypto.Signer
	shape   *shapeCell
}

// NewCA creates a self-signed CA valid for ten years from now.
func NewCA(commonName string, alg Algorithm, now time.Time) (*CA, error) {
	if commonName == "" {
		return nil, errors.New("pki: CA common name is empty")
	}
	key, err := generateKey(alg)
	if err != nil {
		return nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-backdate).UTC(),
		NotAfter:              now.Add(CAValidity).UTC(),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		// SubjectKeyId left empty: for a CA, Go (1.25+, with this module's
		// go line) derives it by RFC 7093 method 1, truncated SHA-256.
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, certPEM: encodeCertPEM(der), alg: alg, key: key, shape: new(shapeCell)}, nil
}

// Certificate is the parsed CA certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// CertPEM is the CA certificate in PEM form: the exact bytes that go into
// ca.crt files, kubeconfigs and the k3s CA hash.
func (ca *CA) CertPEM() []byte { return append([]byte(nil), ca.certPEM...) }

// Algorithm is the CA key type.
func (ca *CA) Algorithm() Algorithm { return ca.alg }

// DiscoveryHash is the kubeadm --discovery-token-ca-cert-hash of this CA.
func (ca *CA) DiscoveryHash() string { return DiscoveryHash(ca.cert) }

// PrivateKeyPEM returns the plaintext CA key. Only the first control plane's
// join bundle needs it (kubeadm signs the cluster's certificates with it).
// PKCS#1 for RSA and SEC 1 for ECDSA: the encodings kubeadm itself writes.
func (ca *CA) PrivateKeyPEM() ([]byte, error) { return encodeKeyPEM(ca.key) }

// String describes the CA without its key.
func (ca CA) String() string {
	if ca.cert == nil {
		return "CA(<nil>)"
	}
	return fmt.Sprintf("CA(CN=%s, %s, %s, key=<redacted>)", ca.cert.Subject.CommonName, ca.alg, ca.DiscoveryHash())
}

// GoString keeps %#v from dumping the key.
func (ca CA) GoString() string { return ca.String() }

// LogValue keeps slog from dumping the key.
func (ca CA) LogValue() slog.Value { return slog.StringValue(ca.String()) }

// MarshalJSON emits only public data.
func (ca CA) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Algorithm     Algorithm `json:"algorithm"`
		CertPEM       string    `json:"certPEM"`
		DiscoveryHash string    `json:"discoveryHash"`
	}{ca.alg, string(ca.certPEM), ca.DiscoveryHash()})
}

// SealedCA is the at-rest form of a CA: the certificate in clear and the
// private key sealed by the keyring. It is safe to store and to marshal.
type SealedCA struct {
	Algorithm Algorithm `json:"algorithm"`
	CertPEM   []byte    `json:"certPEM"`
	SealedKey []byte    `json:"sealedKey"`
}

// Seal encrypts the CA key for storage. context binds the sealed key to its
// owner (for example the cluster id) so it cannot be moved to another record.
func (ca *CA) Seal(kr *secretbox.Keyring, context string) (SealedCA, error) {
	der, err := marshalKeyDER(ca.key)
	if err != nil {
		return SealedCA{}, err
	}
	defer clear(der)
	sealed, err := kr.Seal(der, caAAD(context))
	if err != nil {
		return SealedCA{}, err
	}
	return SealedCA{Algorithm: ca.alg, CertPEM: ca.CertPEM(), SealedKey: sealed}, nil
}

// OpenCA decrypts a sealed CA and checks that key and certificate belong together.
func OpenCA(s SealedCA, kr *secretbox.Keyring, context string) (*CA, error) {
	cert, err := ParseCertPEM(s.CertPEM)
	if err != nil {
		return nil, err
	}
	der, err := kr.Open(s.SealedKey, caAAD(context))
	if err != nil {
		return nil, fmt.Errorf("pki: open CA key for %s: %w", context, err)
	}
	defer clear(der)
	key, err := parseKeyDER(der)
	if err != nil {
		return nil, err
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, fmt.Errorf("pki: CA key for %s does not match its certificate", context)
	}
	return &CA{cert: cert, certPEM: append([]byte(nil), s.CertPEM...), alg: s.Algorithm, key: key, shape: new(shapeCell)}, nil
}

func caAAD(context string) []byte { return []byte("ztpd ca key\x00" + context) }

// ClientCertRequest describes a client certificate to issue.
type ClientCertRequest struct {
	CommonName    string
	Organizations []string      // Kubernetes groups
	Validity      time.Duration // 0 means ClientValidity
}

// KeyPair is an issued certificate and its private key.
type KeyPair struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
}

// IssueClient signs a client certificate (ExtKeyUsage clientAuth) with a
// fresh ECDSA P-256 key, for ztpd's own calls and the kubeconfigs it hands
// to API callers; devices send a request instead (SignCSR) and keep their
// key. Leaf keys are ECDSA whatever the CA type: the apiserver, kubectl,
// kubeadm and Python requests all accept them, and they cost microseconds
// to generate where RSA costs ~100 ms.
func (ca *CA) IssueClient(req ClientCertRequest, now time.Time) (*KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	cert, certPEM, err := ca.issueClient(req, key.Public(), now)
	if err != nil {
		return nil, err
	}
	return &KeyPair{cert: cert, certPEM: certPEM, key: key}, nil
}

// issueClient signs the client certificate req describes for pub: the one
// profile of every client certificate, whoever made the key.
func (ca *CA) issueClient(req ClientCertRequest, pub crypto.PublicKey, now time.Time) (*x509.Certificate, []byte, error) {
	if err := validateSubjectField("common name", req.CommonName); err != nil {
		return nil, nil, err
	}
	for _, o := range req.Organizations {
		if err := validateSubjectField("organization", o); err != nil {
			return nil, nil, err
		}
	}
	validity := req.Validity
	if validity <= 0 {
		validity = ClientValidity
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(validity).UTC()
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	subject := pkix.Name{CommonName: req.CommonName, Organization: req.Organizations}
	notBefore := now.Add(-backdate).UTC()
	var der []byte
	signed := false
	if shape := ca.clientShape(); shape != nil {
		if der, signed, err = ca.signClient(shape, serial, subject, notBefore, notAfter, pub); err != nil {
			return nil, nil, fmt.Errorf("pki: sign client certificate: %w", err)
		}
	}
	if !signed {
		tmpl := clientTemplate(serial, subject, notBefore, notAfter)
		if der, err = x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key); err != nil {
			return nil, nil, fmt.Errorf("pki: sign client certificate: %w", err)
		}
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return cert, encodeCertPEM(der), nil
}

// Certificate is the parsed certificate.
func (kp *KeyPair) Certificate() *x509.Certificate { return kp.cert }

// CertPEM is the certificate in PEM form.
func (kp *KeyPair) CertPEM() []byte { return append([]byte(nil), kp.certPEM...) }

// PrivateKeyPEM returns the plaintext key (SEC 1 "EC PRIVATE KEY"), for
// delivery to the one device or user the certificate was issued to.
func (kp *KeyPair) PrivateKeyPEM() ([]byte, error) { return encodeKeyPEM(kp.key) }

// String describes the certificate without its key.
func (kp KeyPair) String() string {
	if kp.cert == nil {
		return "KeyPair(<nil>)"
	}
	return fmt.Sprintf("KeyPair(CN=%s, O=%s, serial=%s, key=<redacted>)",
		kp.cert.Subject.CommonName, strings.Join(kp.cert.Subject.Organization, "+"), kp.cert.SerialNumber.Text(16))
}

// GoString keeps %#v from dumping the key.
func (kp KeyPair) GoString() string { return kp.String() }

// LogValue keeps slog from dumping the key.
func (kp KeyPair) LogValue() slog.Value { return slog.StringValue(kp.String()) }

// MarshalJSON emits only the certificate.
func (kp KeyPair) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		CertPEM string `json:"certPEM"`
	}{string(kp.certPEM)})
}

// DiscoveryHash is kubeadm's CA public key pin: "sha256:" and the hex
// SHA-256 of the certificate's DER SubjectPublicKeyInfo.
func DiscoveryHash(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ParseCertPEM parses exactly one PEM certificate.
func ParseCertPEM(b []byte) (*x509.Certificate, error) {
	block, rest := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("pki: no PEM CERTIFICATE block")
	}
	if len(strings.TrimSpace(string(rest))) != 0 {
		return nil, errors.New("pki: trailing data after the certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

func generateKey(alg Algorithm) (crypto.Signer, error) {
	switch alg {
	case RSA2048:
		return rsa.GenerateKey(rand.Reader, 2048)
	case ECDSAP256:
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	default:
		return nil, fmt.Errorf("pki: unsupported key algorithm %q (want %s or %s)", alg, RSA2048, ECDSAP256)
	}
}

// randomSerial returns a positive 127-bit serial number (RFC 5280 allows
// up to 20 octets; random serials make certificates unpredictable).
func randomSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 127)
	n, err := rand.Int(rand.Reader, limit)
	if err != nil {
		return nil, err
	}
	return n.Add(n, big.NewInt(1)), nil
}

func encodeCertPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKeyPEM(key crypto.Signer) ([]byte, error) {
	switch k := key.(type) {
	case *rsa.PrivateKey:
		return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}), nil
	case *ecdsa.PrivateKey:
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
	default:
		return nil, fmt.Errorf("pki: unsupported key type %T", key)
	}
}

// marshalKeyDER is the sealed form: PKCS#8, which carries its own type.
func marshalKeyDER(key crypto.Signer) ([]byte, error) { return x509.MarshalPKCS8PrivateKey(key) }

func parseKeyDER(der []byte) (crypto.Signer, error) {
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parse sealed key: %w", err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("pki: sealed key of type %T cannot sign", k)
	}
	return s, nil
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	e, ok := a.(equaler)
	return ok && e.Equal(b)
}

// validateSubjectField rejects values that would make a confusing or
// invalid certificate subject (empty, not UTF-8, control characters,
// over 64 bytes as RFC 5280's upper bounds for CN and O).
func validateSubjectField(what, v string) error {
	if v == "" {
		return fmt.Errorf("pki: %s is empty", what)
	}
	if len(v) > 64 {
		return fmt.Errorf("pki: %s %q is longer than 64 bytes", what, v)
	}
	if !utf8.ValidString(v) {
		return fmt.Errorf("pki: %s %q is not valid UTF-8", what, v)
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("pki: %s %q contains a control character", what, v)
		}
	}
	return nil
}
