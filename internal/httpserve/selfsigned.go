package httpserve

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// SelfSignedCert returns <dir>/cert.pem and <dir>/key.pem, a self-signed
// server certificate (subject commonName) for every name of names (IP addresses and DNS names)
// and its key, creating them (ECDSA P-256, key mode 0600, directory 0700)
// when absent, when the certificate does not cover every name, or when it
// expires within 30 days; clients can pin cert.pem. created reports
// whether they were (re)generated.
func SelfSignedCert(dir, commonName string, names []string) (certPath, keyPath string, created bool, err error) {
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if raw, err := os.ReadFile(certPath); err == nil {
		if _, err := os.Stat(keyPath); err == nil && covers(raw, names) {
			return certPath, keyPath, false, nil
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", false, err
	}
	now := time.Now()
	der, kder, err := NewSelfSigned(commonName, names, now, now.AddDate(5, 0, 0))
	if err != nil {
		return "", "", false, err
	}
	if err := writeFileAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return "", "", false, err
	}
	if err := writeFileAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", false, err
	}
	return certPath, keyPath, true, nil
}

// NewSelfSigned makes an ECDSA P-256 key and a self-signed server
// certificate for it (subject commonName, organization ztpd) naming every
// entry of names as an IP address or DNS name, valid from an hour before
// now until notAfter: the certificate's DER and the key's SEC 1 DER.
func NewSelfSigned(commonName string, names []string, now, notAfter time.Time) (certDER, keyDER []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName, Organization: []string{"ztpd"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			if !slices.ContainsFunc(tmpl.IPAddresses, ip.Equal) {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			}
		} else if n != "" && !slices.Contains(tmpl.DNSNames, n) {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	if certDER, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key); err != nil {
		return nil, nil, err
	}
	if keyDER, err = x509.MarshalECPrivateKey(key); err != nil {
		return nil, nil, err
	}
	return certDER, keyDER, nil
}

// covers reports whether the PEM certificate names every entry of names.
func covers(certPEM []byte, names []string) bool {
	b, _ := pem.Decode(certPEM)
	if b == nil {
		return false
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil || time.Now().After(c.NotAfter.Add(-30*24*time.Hour)) {
		return false
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			if !slices.ContainsFunc(c.IPAddresses, func(a net.IP) bool { return a.Equal(ip) }) {
				return false
			}
		} else if !slices.Contains(c.DNSNames, n) {
			return false
		}
	}
	return true
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	_, werr := tmp.Write(data)
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
