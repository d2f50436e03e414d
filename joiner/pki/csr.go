package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/cryptobyte"
	casn1 "golang.org/x/crypto/cryptobyte/asn1"
)

// A device's key is born on the device: it sends a certificate signing
// request and ztpd signs the public key in it. What a CSR may ask for is
// exactly what ztpd would issue anyway, so a device can never obtain a
// certificate ztpd would not have made for it:
//
//   - the key: ECDSA P-256 or P-384, or RSA of 2048 to 8192 bits (what the
//     API server, kubeadm, kubectl and Python's ssl all load, and what
//     sonic-ctrmgrd's restapiserver.key is read by; Ed25519 is refused,
//     TLS 1.2 clients and Kubernetes' own certificate tooling do not all
//     take it);
//   - the signature: made by that key with SHA-256 or stronger, and it
//     verifies;
//   - the subject: empty (ztpd fills it in), or only attributes of the
//     subject ztpd issues: at most the common name it issues, and
//     organizations among those it issues. Any other attribute type (OU,
//     C, serialNumber, ...) is refused. The issued certificate always
//     carries ztpd's whole subject;
//   - extensions: none, or only those the issued certificate carries
//     anyway with the same value (key usage digitalSignature, extended key
//     usage clientAuth, basic constraints CA:FALSE). A subject alternative
//     name, another usage or any other extension is refused;
//   - attributes: only the extension request (PKCS #9 extensionRequest);
//     a challenge password or any other attribute is refused.

// MaxCSRBytes bounds the PEM a device may send: an 8192-bit RSA request
// with an empty subject is under 3 KB.
const MaxCSRBytes = 8 << 10

// CSRError is why a certificate signing request is refused, in words the
// device's operator can act on.
type CSRError struct{ Reason string }

func (e *CSRError) Error() string { return "certificate signing request refused: " + e.Reason }

func csrRefused(format string, args ...any) error {
	return &CSRError{Reason: fmt.Sprintf(format, args...)}
}

// CSR is a certificate signing request whose signature, key, extensions
// and attributes passed ParseCSR; its subject is checked against what ztpd
// issues by CheckSubject.
type CSR struct {
	req *x509.CertificateRequest
}

// PublicKey is the key the device holds the private half of.
func (c *CSR) PublicKey() crypto.PublicKey { return c.req.PublicKey }

// CheckCSR is the whole check of a device's request for want: ParseCSR,
// then CheckSubject. Errors are *CSRError.
func CheckCSR(pemBytes []byte, want ClientCertRequest) (*CSR, error) {
	c, err := ParseCSR(pemBytes)
	if err != nil {
		return nil, err
	}
	if err := c.CheckSubject(want); err != nil {
		return nil, err
	}
	return c, nil
}

// ParseCSR decodes one PEM CERTIFICATE REQUEST and checks everything that
// does not depend on the subject ztpd will issue: the key, the signature,
// the attributes and the requested extensions. It is the costly part (a
// signature verification), done before the caller's store transaction.
// Errors are *CSRError.
func ParseCSR(pemBytes []byte) (*CSR, error) {
	req, err := parseCSR(pemBytes, deviceCertRules.check)
	if err != nil {
		return nil, err
	}
	return &CSR{req: req}, nil
}

// parseCSR is what every request ztpd signs goes through: one PEM block
// of bounded size, a key and signature algorithm ztpd accepts, a
// signature that verifies with the request's own key, no attributes
// beyond the extensions, and each extension admitted by checkExt (which
// differs by the kind of certificate asked for).
func parseCSR(pemBytes []byte, checkExt func(pkix.Extension) error) (*x509.CertificateRequest, error) {
	if len(pemBytes) > MaxCSRBytes {
		return nil, csrRefused("it is %d bytes, more than %d", len(pemBytes), MaxCSRBytes)
	}
	block, rest := pem.Decode(pemBytes)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, csrRefused("not a PEM CERTIFICATE REQUEST")
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, csrRefused("data after the PEM CERTIFICATE REQUEST")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, csrRefused("cannot parse it: %v", err)
	}
	if err := checkCSRKey(req.PublicKey); err != nil {
		return nil, err
	}
	switch req.SignatureAlgorithm {
	case x509.ECDSAWithSHA256, x509.ECDSAWithSHA384, x509.ECDSAWithSHA512,
		x509.SHA256WithRSA, x509.SHA384WithRSA, x509.SHA512WithRSA,
		x509.SHA256WithRSAPSS, x509.SHA384WithRSAPSS, x509.SHA512WithRSAPSS:
	default:
		return nil, csrRefused("signature algorithm %v: sign it with SHA-256 or stronger", req.SignatureAlgorithm)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, csrRefused("its signature does not verify with its own key: %v", err)
	}
	if err := checkCSRAttributes(req.RawTBSCertificateRequest); err != nil {
		return nil, err
	}
	for _, ext := range req.Extensions {
		if err := checkExt(ext); err != nil {
			return nil, err
		}
	}
	return req, nil
}

// checkCSRKey admits the key types the issued certificate may carry.
func checkCSRKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			return csrRefused("ECDSA key on curve %s: use P-256 or P-384", k.Curve.Params().Name)
		}
	case *rsa.PublicKey:
		if n := k.N.BitLen(); n < 2048 || n > 8192 {
			return csrRefused("RSA key of %d bits: use 2048 to 8192 bits (or ECDSA P-256)", n)
		}
	default:
		return csrRefused("key of type %T: use ECDSA P-256 or P-384, or RSA of 2048 bits or more", pub)
	}
	return nil
}

var (
	oidExtensionRequest      = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 14}
	oidExtKeyUsage           = asn1.ObjectIdentifier{2, 5, 29, 15}
	oidExtBasicConstraints   = asn1.ObjectIdentifier{2, 5, 29, 19}
	oidExtExtendedKeyUsage   = asn1.ObjectIdentifier{2, 5, 29, 37}
	oidExtSubjectAltName     = asn1.ObjectIdentifier{2, 5, 29, 17}
	oidAttributeCommonName   = asn1.ObjectIdentifier{2, 5, 4, 3}
	oidAttributeOrganization = asn1.ObjectIdentifier{2, 5, 4, 10}
)

// checkCSRAttributes walks the request's attributes itself: the standard
// library keeps only those it can decode, and an unknown one must be
// refused, not dropped.
func checkCSRAttributes(tbs []byte) error {
	in := cryptobyte.String(tbs)
	var info, attrs cryptobyte.String
	var present bool
	if !in.ReadASN1(&info, casn1.SEQUENCE) ||
		!info.SkipASN1(casn1.INTEGER) || // version
		!info.SkipASN1(casn1.SEQUENCE) || // subject
		!info.SkipASN1(casn1.SEQUENCE) || // subjectPKInfo
		!info.ReadOptionalASN1(&attrs, &present, casn1.Tag(0).Constructed().ContextSpecific()) {
		return csrRefused("malformed request info")
	}
	for !attrs.Empty() {
		var attr cryptobyte.String
		var oid asn1.ObjectIdentifier
		if !attrs.ReadASN1(&attr, casn1.SEQUENCE) || !attr.ReadASN1ObjectIdentifier(&oid) {
			return csrRefused("malformed attribute")
		}
		if !oid.Equal(oidExtensionRequest) {
			return csrRefused("attribute %v: only an extension request may be asked for", oid)
		}
	}
	return nil
}

// extensionRules is what a kind of certificate ztpd issues may be asked
// for in a request: an extension is admitted only when the issued
// certificate carries it with that value.
type extensionRules struct {
	kind string // "a device certificate", in refusals
	// sans admits DNS names and IP addresses (checked against the
	// device's entitlement later); without it a request naming any is refused.
	sans          bool
	keyUsageBits  []int // bit numbers of keyUsage
	keyUsageWords string
	extKeyUsages  []asn1.ObjectIdentifier
	extKeyWords   string
}

var (
	oidServerAuth = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 1}
	oidClientAuth = asn1.ObjectIdentifier{1, 3, 6, 1, 5, 5, 7, 3, 2}
)

// deviceCertRules: a switch's client certificate (bit 0: digitalSignature).
var deviceCertRules = extensionRules{kind: "a device certificate",
	keyUsageBits: []int{0}, keyUsageWords: "digitalSignature",
	extKeyUsages: []asn1.ObjectIdentifier{oidClientAuth}, extKeyWords: "client authentication"}

func (r extensionRules) check(ext pkix.Extension) error {
	switch {
	case ext.Id.Equal(oidExtSubjectAltName):
		if !r.sans {
			return csrRefused("it asks for subject alternative names; %s has none", r.kind)
		}
		return checkSANKinds(ext.Value, r.kind)
	case ext.Id.Equal(oidExtKeyUsage):
		var bits asn1.BitString
		if rest, err := asn1.Unmarshal(ext.Value, &bits); err != nil || len(rest) != 0 {
			return csrRefused("malformed key usage extension")
		}
		for i := range bits.BitLength {
			if bits.At(i) == 1 && !slices.Contains(r.keyUsageBits, i) {
				return csrRefused("it asks for key usages beyond %s", r.keyUsageWords)
			}
		}
	case ext.Id.Equal(oidExtExtendedKeyUsage):
		var usages []asn1.ObjectIdentifier
		if rest, err := asn1.Unmarshal(ext.Value, &usages); err != nil || len(rest) != 0 {
			return csrRefused("malformed extended key usage extension")
		}
		for _, u := range usages {
			if !slices.ContainsFunc(r.extKeyUsages, u.Equal) {
				return csrRefused("it asks for extended key usage %v; %s is for %s only", u, r.kind, r.extKeyWords)
			}
		}
	case ext.Id.Equal(oidExtBasicConstraints):
		var bc struct {
			IsCA       bool `asn1:"optional"`
			MaxPathLen int  `asn1:"optional,default:-1"`
		}
		if rest, err := asn1.Unmarshal(ext.Value, &bc); err != nil || len(rest) != 0 {
			return csrRefused("malformed basic constraints extension")
		}
		if bc.IsCA || bc.MaxPathLen != -1 {
			return csrRefused("it asks to be a certificate authority")
		}
	default:
		return csrRefused("it asks for extension %v, which %s does not carry", ext.Id, r.kind)
	}
	return nil
}

// checkSANKinds refuses a subject alternative name extension naming
// anything but DNS names (tag 2) and IP addresses (tag 7).
func checkSANKinds(der []byte, kind string) error {
	var seq asn1.RawValue
	if rest, err := asn1.Unmarshal(der, &seq); err != nil || len(rest) != 0 || !seq.IsCompound || seq.Tag != asn1.TagSequence {
		return csrRefused("malformed subject alternative name extension")
	}
	in := seq.Bytes
	for len(in) > 0 {
		var v asn1.RawValue
		rest, err := asn1.Unmarshal(in, &v)
		if err != nil {
			return csrRefused("malformed subject alternative name extension")
		}
		if v.Class != asn1.ClassContextSpecific || (v.Tag != 2 && v.Tag != 7) {
			return csrRefused("it asks for a subject alternative name of kind %d; %s has DNS names and IP addresses only", v.Tag, kind)
		}
		in = rest
	}
	return nil
}

// CheckSubject refuses a request whose subject names anything ztpd would
// not issue for want (see the rules above).
func (c *CSR) CheckSubject(want ClientCertRequest) error {
	var rdns pkix.RDNSequence
	if rest, err := asn1.Unmarshal(c.req.RawSubject, &rdns); err != nil || len(rest) != 0 {
		return csrRefused("malformed subject")
	}
	commonNames := 0
	for _, rdn := range rdns {
		for _, atv := range rdn {
			v, ok := atv.Value.(string)
			switch {
			case !ok:
				return csrRefused("subject attribute %v is not a string", atv.Type)
			case atv.Type.Equal(oidAttributeCommonName):
				commonNames++
				if v != want.CommonName || commonNames > 1 {
					return csrRefused("subject common name %q: this device's is %q (or leave the subject empty)", v, want.CommonName)
				}
			case atv.Type.Equal(oidAttributeOrganization):
				if !slices.Contains(want.Organizations, v) {
					return csrRefused("subject organization %q: this device's are %s (or leave the subject empty)",
						v, strings.Join(want.Organizations, ", "))
				}
			default:
				return csrRefused("subject attribute %v: only the common name and organizations ztpd issues may be named", atv.Type)
			}
		}
	}
	return nil
}

// Certificate is an issued certificate without a private key: the device
// that asked holds the key.
type Certificate struct {
	cert    *x509.Certificate
	certPEM []byte
}

// Certificate is the parsed certificate.
func (c *Certificate) Certificate() *x509.Certificate { return c.cert }

// CertPEM is the certificate in PEM form.
func (c *Certificate) CertPEM() []byte { return bytes.Clone(c.certPEM) }

// SignCSR issues the client certificate req describes for the key of a
// checked request, with the profile of every client certificate
// (IssueClient's): the CSR contributes its public key and nothing else.
func (ca *CA) SignCSR(req ClientCertRequest, csr *CSR, now time.Time) (*Certificate, error) {
	if csr == nil {
		return nil, errors.New("pki: no certificate signing request")
	}
	if err := csr.CheckSubject(req); err != nil {
		return nil, err
	}
	cert, pemBytes, err := ca.issueClient(req, csr.PublicKey(), now)
	if err != nil {
		return nil, err
	}
	return &Certificate{cert: cert, certPEM: pemBytes}, nil
}
