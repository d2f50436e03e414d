package testpki

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
)

// TestMutualTLS: a server and a client holding certificates of the CA talk
// mutual TLS over loopback; a client of another CA is refused, and so is a
// certificate whose IP SANs do not name the server's address.
func TestMutualTLS(t *testing.T) {
	ca := New(t, "appliances")
	server := ca.Issue("server")
	client := ca.Issue("client")
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{server.TLS},
		ClientCAs: ca.Pool, ClientAuth: tls.RequireAndVerifyClientCert})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.TLS.PeerCertificates[0].Subject.CommonName)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	url := "https://" + ln.Addr().String()

	get := func(roots *x509.CertPool, cert *Cert) (string, error) {
		tc := &tls.Config{RootCAs: roots}
		if cert != nil {
			tc.Certificates = []tls.Certificate{cert.TLS}
		}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
		defer c.CloseIdleConnections()
		resp, err := c.Get(url)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	if got, err := get(ca.Pool, client); err != nil || got != "client" {
		t.Fatalf("client of the CA: %q, %v", got, err)
	}
	// The files hold the same pair.
	pair, err := tls.LoadX509KeyPair(client.CertFile, client.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := get(ca.Pool, &Cert{TLS: pair}); err != nil || got != "client" {
		t.Fatalf("client from the files: %q, %v", got, err)
	}
	pemCA, err := os.ReadFile(ca.File)
	if err != nil || string(pemCA) != string(ca.PEM) {
		t.Fatalf("ca.pem: %v", err)
	}
	stranger := New(t, "stranger")
	if _, err := get(ca.Pool, stranger.Issue("stranger")); err == nil {
		t.Fatal("a client of another CA was let in")
	}
	elsewhere, err := ca.CA.IssueFiles(t.TempDir()+"/e.crt", t.TempDir()+"/e.key", "elsewhere", net.ParseIP("10.99.0.3"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := elsewhere.TLS.Leaf.Verify(x509.VerifyOptions{Roots: ca.Pool}); err != nil {
		t.Fatalf("elsewhere does not chain: %v", err)
	}
	if err := elsewhere.TLS.Leaf.VerifyHostname("127.0.0.1"); err == nil {
		t.Fatal("a certificate for 10.99.0.3 names 127.0.0.1")
	}
	if _, err := ca.CA.Issue("server"); err == nil {
		t.Fatal("server issued twice")
	}
	if st, err := os.Stat(client.KeyFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", st.Mode(), err)
	}
}
