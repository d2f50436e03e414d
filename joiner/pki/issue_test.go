package pki

import (
	"bytes"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"strings"
	"testing"
	"time"
)

// sameAsCreateCertificate signs a client certificate both ways, with the
// same serial, key and times, and wants the same to-be-signed bytes and a
// signature that verifies against the CA.
func sameAsCreateCertificate(t *testing.T, ca *CA, subject pkix.Name, notBefore, notAfter time.Time) {
	t.Helper()
	shape := ca.clientShape()
	if shape == nil {
		t.Fatalf("%s CA: no client shape", ca.alg)
	}
	key, err := generateKey(ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := randomSerial()
	if err != nil {
		t.Fatal(err)
	}
	der, ok, err := ca.signClient(shape, serial, subject, notBefore, notAfter, key.Public())
	if err != nil || !ok {
		t.Fatalf("signClient(%v): ok %v, %v", subject, ok, err)
	}
	ours, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("%v: parse: %v", subject, err)
	}
	want, err := x509.CreateCertificate(rand.Reader, clientTemplate(serial, subject, notBefore, notAfter), ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := x509.ParseCertificate(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ours.RawTBSCertificate, theirs.RawTBSCertificate) {
		t.Fatalf("%v: to-be-signed bytes differ from CreateCertificate's\n ours   %x\n theirs %x", subject, ours.RawTBSCertificate, theirs.RawTBSCertificate)
	}
	if ours.SignatureAlgorithm != theirs.SignatureAlgorithm {
		t.Fatalf("signature algorithm %v, CreateCertificate %v", ours.SignatureAlgorithm, theirs.SignatureAlgorithm)
	}
	if err := ours.CheckSignatureFrom(ca.cert); err != nil {
		t.Fatalf("%v: signature: %v", subject, err)
	}
	// RSA PKCS #1 v1.5 signatures are deterministic: there the whole
	// certificate must be CreateCertificate's, byte for byte.
	if ca.alg == RSA2048 && !bytes.Equal(der, want) {
		t.Fatalf("%v: certificate differs from CreateCertificate's", subject)
	}
}

func TestSignClientIsCreateCertificate(t *testing.T) {
	subjects := []pkix.Name{
		{CommonName: "sonic:leaf-1", Organization: []string{"system:bootstrappers:kubeadm:default-node-token", "system:bootstrappers", "sonic:switches"}},
		{CommonName: "kubernetes-admin", Organization: []string{"system:masters"}},
		{CommonName: "no organisation"},
		{CommonName: "ünïcödé ノード", Organization: []string{"grüppe", "a*b&c", "z", "a"}},
		{CommonName: strings.Repeat("x", 64), Organization: []string{strings.Repeat("o", 64)}},
		{CommonName: "quote\"back\\slash<>", Organization: []string{"@#$%^"}},
	}
	for _, alg := range []Algorithm{RSA2048, ECDSAP256} {
		t.Run(string(alg), func(t *testing.T) {
			ca := newTestCA(t, alg)
			for _, s := range subjects {
				sameAsCreateCertificate(t, ca, s, testNow.Add(-backdate), testNow.Add(ClientValidity))
			}
			// GeneralizedTime past 2049, sub-second times.
			sameAsCreateCertificate(t, ca, subjects[0], time.Date(2049, 12, 31, 23, 59, 59, 999, time.UTC),
				time.Date(2051, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600)))
		})
	}
}

// A client whose subject is the CA's own gets no authority key id from
// CreateCertificate, so IssueClient leaves that case to it.
func TestIssueClientWithTheCAsSubject(t *testing.T) {
	ca := newTestCA(t, ECDSAP256)
	shape := ca.clientShape()
	key, _ := generateKey(ECDSAP256)
	_, ok, err := ca.signClient(shape, big.NewInt(7), pkix.Name{CommonName: "kubernetes"}, testNow, testNow.Add(time.Hour), key.Public())
	if err != nil || ok {
		t.Fatalf("signClient with the CA's subject: ok %v, %v (want a fallback)", ok, err)
	}
	kp, err := ca.IssueClient(ClientCertRequest{CommonName: "kubernetes"}, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if len(kp.Certificate().AuthorityKeyId) != 0 {
		t.Fatal("authority key id on a certificate whose subject is the issuer's (CreateCertificate leaves it out)")
	}
	if err := kp.Certificate().CheckSignatureFrom(ca.cert); err != nil {
		t.Fatal(err)
	}
}

func FuzzSignClientIsCreateCertificate(f *testing.F) {
	f.Add("sonic:leaf-1", "system:bootstrappers", "sonic:switches")
	f.Add("ü", "", "\u00a0")
	f.Add("a,b=c+d", "#x", " y ")
	ca := newTestCA(f, ECDSAP256)
	f.Fuzz(func(t *testing.T, cn, o1, o2 string) {
		var orgs []string
		for _, o := range []string{o1, o2} {
			if validateSubjectField("organization", o) == nil {
				orgs = append(orgs, o)
			}
		}
		if validateSubjectField("common name", cn) != nil || cn == "kubernetes" && len(orgs) == 0 {
			return
		}
		sameAsCreateCertificate(t, ca, pkix.Name{CommonName: cn, Organization: orgs}, testNow, testNow.Add(time.Hour))
	})
}

func BenchmarkIssueClient(b *testing.B) {
	ca := newTestCA(b, ECDSAP256)
	req := ClientCertRequest{CommonName: "sonic:leaf-1", Organizations: []string{"system:bootstrappers", "sonic:switches"}}
	for b.Loop() {
		if _, err := ca.IssueClient(req, testNow); err != nil {
			b.Fatal(err)
		}
	}
}
