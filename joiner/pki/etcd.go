package pki

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// A cluster built with external etcd (kubeadm's external etcd topology)
// has an etcd CA of its own, and every etcd key is born where it is used:
// an etcd node makes its server and peer keys, the first control plane
// its apiserver-etcd-client key, and each sends a certificate signing
// request. The request may name subject alternative names, but only among
// those ztpd issues for that device (its address, its node name,
// loopback for the server certificate); the issued certificate carries
// ztpd's whole list whatever the request named, so a device never obtains
// a certificate for another device's address.

// EtcdUsage is what an etcd certificate is for.
type EtcdUsage string

const (
	// EtcdServer serves etcd's clients (the API server, etcdctl): server
	// and client authentication, as kubeadm's etcd/server.crt.
	EtcdServer EtcdUsage = "server"
	// EtcdPeer is a member's certificate towards the other members, which
	// dial it and which it dials: server and client authentication, as
	// kubeadm's etcd/peer.crt.
	EtcdPeer EtcdUsage = "peer"
	// EtcdClient is the API server's client certificate
	// (apiserver-etcd-client.crt): client authentication only.
	EtcdClient EtcdUsage = "client"
)

// EtcdCACommonName is kubeadm's etcd CA's common name.
const EtcdCACommonName = "etcd-ca"

// EtcdAPIServerClientName is the common name kubeadm gives the API
// server's etcd client certificate.
const EtcdAPIServerClientName = "kube-apiserver-etcd-client"

// EtcdCertRequest describes an etcd certificate ztpd issues: for a server
// or peer certificate, the names and addresses the device is entitled to.
type EtcdCertRequest struct {
	Usage      EtcdUsage
	CommonName string
	DNSNames   []string
	IPs        []netip.Addr
}

// EtcdMemberCerts is the request of a member's server and peer
// certificates for the node name and address a device holds: the server's
// adds localhost, 127.0.0.1 and ::1 (etcdctl on the node itself dials
// them), as kubeadm's does.
func EtcdMemberCerts(nodeName string, addr netip.Addr) (server, peer EtcdCertRequest) {
	addr = addr.Unmap()
	peer = EtcdCertRequest{Usage: EtcdPeer, CommonName: nodeName, DNSNames: []string{nodeName}, IPs: []netip.Addr{addr}}
	server = EtcdCertRequest{Usage: EtcdServer, CommonName: nodeName, DNSNames: []string{nodeName, "localhost"},
		IPs: []netip.Addr{addr}}
	for _, lo := range []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()} {
		if lo != addr {
			server.IPs = append(server.IPs, lo)
		}
	}
	return server, peer
}

// EtcdAPIServerClient is the request of the API server's etcd client
// certificate.
func EtcdAPIServerClient() EtcdCertRequest {
	return EtcdCertRequest{Usage: EtcdClient, CommonName: EtcdAPIServerClientName}
}

// NewEtcdCA creates a cluster's etcd CA (kubeadm's etcd/ca.crt).
func NewEtcdCA(alg Algorithm, now time.Time) (*CA, error) { return NewCA(EtcdCACommonName, alg, now) }

// EtcdCSR is an etcd certificate signing request whose signature, key,
// attributes and extensions passed ParseEtcdCSR; the names it asks for
// are checked against the device's by CheckEtcd.
type EtcdCSR struct {
	req *x509.CertificateRequest
}

// ParseEtcdCSR decodes one PEM CERTIFICATE REQUEST for an etcd
// certificate: the checks of ParseCSR, except that it may ask for subject
// alternative names (DNS names and IP addresses only), server
// authentication and keyEncipherment, which etcd's certificates carry.
// Errors are *CSRError.
func ParseEtcdCSR(pemBytes []byte) (*EtcdCSR, error) {
	req, err := parseCSR(pemBytes, etcdCertRules.check)
	if err != nil {
		return nil, err
	}
	// The standard library drops the names it cannot represent (other
	// names, directory names): only DNS names and addresses may be asked.
	if len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		return nil, csrRefused("it asks for e-mail or URI names; an etcd certificate has DNS names and IP addresses only")
	}
	return &EtcdCSR{req: req}, nil
}

// etcdCertRules: an etcd server, peer or client certificate; its names
// are checked against the device's entitlement by CheckEtcd. Bit 2,
// keyEncipherment, is what RSA TLS servers carry.
var etcdCertRules = extensionRules{kind: "an etcd certificate", sans: true,
	keyUsageBits: []int{0, 2}, keyUsageWords: "digitalSignature and keyEncipherment",
	extKeyUsages: []asn1.ObjectIdentifier{oidServerAuth, oidClientAuth}, extKeyWords: "server and client authentication"}

// CheckEtcd refuses a request that names anything ztpd would not issue
// for want: a common name other than want's, any other subject attribute,
// a DNS name or address the device is not entitled to (a client
// certificate has none).
func (c *EtcdCSR) CheckEtcd(want EtcdCertRequest) error {
	var rdns pkix.RDNSequence
	if rest, err := asn1.Unmarshal(c.req.RawSubject, &rdns); err != nil || len(rest) != 0 {
		return csrRefused("malformed subject")
	}
	for _, rdn := range rdns {
		for _, atv := range rdn {
			v, ok := atv.Value.(string)
			switch {
			case !ok:
				return csrRefused("subject attribute %v is not a string", atv.Type)
			case atv.Type.Equal(oidAttributeCommonName):
				if v != want.CommonName {
					return csrRefused("subject common name %q: this %s certificate's is %q (or leave the subject empty)", v, want.Usage, want.CommonName)
				}
			default:
				return csrRefused("subject attribute %v: an etcd certificate's subject is its common name only", atv.Type)
			}
		}
	}
	for _, n := range c.req.DNSNames {
		if !slices.Contains(want.DNSNames, strings.ToLower(n)) {
			return csrRefused("it asks for DNS name %q, which this device is not entitled to (its %s certificate names %s)",
				n, want.Usage, describeNames(want))
		}
	}
	for _, ip := range c.req.IPAddresses {
		a, ok := netip.AddrFromSlice(ip)
		if !ok || !slices.Contains(want.IPs, a.Unmap()) {
			return csrRefused("it asks for address %s, which is not this device's (its %s certificate names %s)",
				ip, want.Usage, describeNames(want))
		}
	}
	return nil
}

func describeNames(want EtcdCertRequest) string {
	var names []string
	names = append(names, want.DNSNames...)
	for _, a := range want.IPs {
		names = append(names, a.String())
	}
	if len(names) == 0 {
		return "no name"
	}
	return strings.Join(names, ", ")
}

// SignEtcd issues the etcd certificate want describes for the key of a
// checked request: the request contributes its public key and nothing
// else; the names are want's.
func (ca *CA) SignEtcd(want EtcdCertRequest, csr *EtcdCSR, now time.Time) (*Certificate, error) {
	if csr == nil {
		return nil, errors.New("pki: no certificate signing request")
	}
	if err := csr.CheckEtcd(want); err != nil {
		return nil, err
	}
	if err := validateSubjectField("common name", want.CommonName); err != nil {
		return nil, err
	}
	tmpl, err := etcdTemplate(want, now, ca.cert.NotAfter)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, csr.req.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("pki: sign etcd %s certificate: %w", want.Usage, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Certificate{cert: cert, certPEM: encodeCertPEM(der)}, nil
}

// IssueEtcdClient signs an etcd client certificate with a fresh key, for
// ztpd's own calls to a cluster's etcd (its health probe).
func (ca *CA) IssueEtcdClient(commonName string, now time.Time) (*KeyPair, error) {
	key, err := generateKey(ECDSAP256)
	if err != nil {
		return nil, err
	}
	if err := validateSubjectField("common name", commonName); err != nil {
		return nil, err
	}
	tmpl, err := etcdTemplate(EtcdCertRequest{Usage: EtcdClient, CommonName: commonName}, now, ca.cert.NotAfter)
	if err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &KeyPair{cert: cert, certPEM: encodeCertPEM(der), key: key}, nil
}

func etcdTemplate(want EtcdCertRequest, now, caNotAfter time.Time) (*x509.Certificate, error) {
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(ClientValidity).UTC()
	if notAfter.After(caNotAfter) {
		notAfter = caNotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: want.CommonName},
		NotBefore:             now.Add(-backdate).UTC(),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
	}
	switch want.Usage {
	case EtcdServer, EtcdPeer:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.DNSNames = slices.Clone(want.DNSNames)
		for _, a := range want.IPs {
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.IP(a.AsSlice()))
		}
		if len(tmpl.DNSNames)+len(tmpl.IPAddresses) == 0 {
			return nil, fmt.Errorf("pki: an etcd %s certificate needs a name", want.Usage)
		}
	case EtcdClient:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	default:
		return nil, fmt.Errorf("pki: etcd certificate usage %q", want.Usage)
	}
	return tmpl, nil
}
