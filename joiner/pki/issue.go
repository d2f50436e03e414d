package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"math/big"
	"sync"
	"time"

	"golang.org/x/crypto/cryptobyte"
	casn1 "golang.org/x/crypto/cryptobyte/asn1"
)

// clientShape is what every client certificate of one CA has in common, cut
// from a certificate x509.CreateCertificate made for it: the signature
// algorithm and the extensions (digitalSignature, clientAuth, CA:FALSE and
// the CA's key id). signClient puts the rest around them and signs. The
// bytes are CreateCertificate's (TestSignClientIsCreateCertificate); what it
// leaves out is CreateCertificate's check of the signature it has just
// made, against signers that misbehave (HSMs): a P-256 verify, twice the
// cost of the signature. The CA keys here are the standard library's own.
type clientShape struct {
	sigAlg     []byte // AlgorithmIdentifier
	extensions []byte // [3] EXPLICIT Extensions
	hash       crypto.Hash
}

// shapeCell is computed once per CA, on its first client certificate.
type shapeCell struct {
	once  sync.Once
	shape *clientShape // nil: issue through CreateCertificate
}

// clientTemplate is the template of every client certificate.
func clientTemplate(serial *big.Int, subject pkix.Name, notBefore, notAfter time.Time) *x509.Certificate {
	return &x509.Certificate{
		SerialNumber:          serial,
		Subject:               subject,
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
}

func (ca *CA) clientShape() *clientShape {
	if ca.shape == nil {
		return nil
	}
	ca.shape.once.Do(func() { ca.shape.shape = cutClientShape(ca) })
	return ca.shape.shape
}

// cutClientShape issues a prototype through CreateCertificate and keeps
// its signature algorithm and extensions; nil for a CA key or signature
// algorithm signClient does not handle.
func cutClientShape(ca *CA) *clientShape {
	switch ca.key.(type) {
	case *ecdsa.PrivateKey, *rsa.PrivateKey:
	default:
		return nil
	}
	hashes := map[x509.SignatureAlgorithm]crypto.Hash{
		x509.ECDSAWithSHA256: crypto.SHA256, x509.ECDSAWithSHA384: crypto.SHA384, x509.ECDSAWithSHA512: crypto.SHA512,
		x509.SHA256WithRSA: crypto.SHA256, x509.SHA384WithRSA: crypto.SHA384, x509.SHA512WithRSA: crypto.SHA512,
	}
	key, err := generateKey(ECDSAP256)
	if err != nil {
		return nil
	}
	now := time.Now()
	tmpl := clientTemplate(big.NewInt(1), pkix.Name{CommonName: "ztpd client certificate prototype"}, now, now.Add(time.Hour))
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil
	}
	proto, err := x509.ParseCertificate(der)
	if err != nil {
		return nil
	}
	hash, ok := hashes[proto.SignatureAlgorithm]
	if !ok {
		return nil
	}
	in := cryptobyte.String(proto.RawTBSCertificate)
	var tbs, sigAlg, extensions cryptobyte.String
	if !in.ReadASN1(&tbs, casn1.SEQUENCE) || !in.Empty() ||
		!tbs.SkipASN1(casn1.Tag(0).Constructed().ContextSpecific()) || // version
		!tbs.SkipASN1(casn1.INTEGER) || // serial
		!tbs.ReadASN1Element(&sigAlg, casn1.SEQUENCE) ||
		!tbs.SkipASN1(casn1.SEQUENCE) || // issuer
		!tbs.SkipASN1(casn1.SEQUENCE) || // validity
		!tbs.SkipASN1(casn1.SEQUENCE) || // subject
		!tbs.SkipASN1(casn1.SEQUENCE) || // subjectPublicKeyInfo
		!tbs.ReadASN1Element(&extensions, casn1.Tag(3).Constructed().ContextSpecific()) || !tbs.Empty() {
		return nil
	}
	return &clientShape{sigAlg: []byte(sigAlg), extensions: []byte(extensions), hash: hash}
}

// asn1Validity is RFC 5280's Validity as encoding/asn1 writes it for x509:
// UTCTime through 2049, GeneralizedTime after.
type asn1Validity struct {
	NotBefore, NotAfter time.Time
}

// signClient returns the DER certificate CreateCertificate would make from
// clientTemplate(serial, subject, notBefore, notAfter) for pub, signed by
// ca; ok is false where it would differ (a subject equal to the CA's: then
// CreateCertificate leaves the authority key id out).
func (ca *CA) signClient(shape *clientShape, serial *big.Int, subject pkix.Name, notBefore, notAfter time.Time,
	pub crypto.PublicKey) (der []byte, ok bool, err error) {
	serialDER, err := asn1.Marshal(serial)
	if err != nil {
		return nil, false, err
	}
	validityDER, err := asn1.Marshal(asn1Validity{notBefore.UTC(), notAfter.UTC()})
	if err != nil {
		return nil, false, err
	}
	subjectDER, err := asn1.Marshal(subject.ToRDNSequence())
	if err != nil {
		return nil, false, err
	}
	if string(subjectDER) == string(ca.cert.RawSubject) {
		return nil, false, nil
	}
	spki, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, false, err
	}
	b := cryptobyte.NewBuilder(make([]byte, 0, 512))
	b.AddASN1(casn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddASN1(casn1.Tag(0).Constructed().ContextSpecific(), func(b *cryptobyte.Builder) { b.AddASN1Int64(2) })
		b.AddBytes(serialDER)
		b.AddBytes(shape.sigAlg)
		b.AddBytes(ca.cert.RawSubject)
		b.AddBytes(validityDER)
		b.AddBytes(subjectDER)
		b.AddBytes(spki)
		b.AddBytes(shape.extensions)
	})
	tbs, err := b.Bytes()
	if err != nil {
		return nil, false, err
	}
	sig, err := crypto.SignMessage(ca.key, rand.Reader, tbs, shape.hash)
	if err != nil {
		return nil, false, err
	}
	if len(sig) == 0 {
		return nil, false, errors.New("pki: empty signature")
	}
	c := cryptobyte.NewBuilder(make([]byte, 0, len(tbs)+len(shape.sigAlg)+len(sig)+16))
	c.AddASN1(casn1.SEQUENCE, func(b *cryptobyte.Builder) {
		b.AddBytes(tbs)
		b.AddBytes(shape.sigAlg)
		b.AddASN1BitString(sig)
	})
	der, err = c.Bytes()
	return der, err == nil, err
}
