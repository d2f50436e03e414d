package kubeconfig

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/ztpd/ztpd/joiner/pki"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func adminCreds(t *testing.T, alg pki.Algorithm) (*pki.CA, Credentials) {
	t.Helper()
	ca, err := pki.NewCA("kubernetes", alg, now)
	if err != nil {
		t.Fatal(err)
	}
	c, err := IssueAdmin(ca, "prod-a", "https://10.99.1.10:6443", 0, now)
	if err != nil {
		t.Fatal(err)
	}
	return ca, c
}

// TestKubectlAcceptsAdminKubeconfig runs the real kubectl on the file.
func TestKubectlAcceptsAdminKubeconfig(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed")
	}
	for _, alg := range []pki.Algorithm{pki.RSA2048, pki.ECDSAP256} {
		t.Run(string(alg), func(t *testing.T) {
			ca, creds := adminCreds(t, alg)
			path := filepath.Join(t.TempDir(), "admin.conf")
			if err := creds.WriteFile(path); err != nil {
				t.Fatal(err)
			}
			if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
				t.Fatalf("mode %o, want 0600", fi.Mode().Perm())
			}
			run := func(args ...string) string {
				cmd := exec.Command(kubectl, append([]string{"--kubeconfig", path}, args...)...)
				cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				out, err := cmd.Output()
				if err != nil {
					t.Fatalf("kubectl %v: %v\n%s", args, err, stderr.String())
				}
				return string(out)
			}
			raw := run("config", "view", "--raw")
			// kubectl's own rendering parses back into the same credentials.
			cfg, err := clientcmd.Load([]byte(raw))
			if err != nil {
				t.Fatalf("kubectl output does not load: %v\n%s", err, raw)
			}
			cluster := cfg.Clusters["prod-a"]
			user := cfg.AuthInfos[AdminUser]
			if cluster == nil || user == nil {
				t.Fatalf("kubectl view lacks cluster or user:\n%s", raw)
			}
			if cluster.Server != "https://10.99.1.10:6443" || !bytes.Equal(cluster.CertificateAuthorityData, ca.CertPEM()) {
				t.Fatalf("cluster %+v", cluster)
			}
			if !bytes.Equal(user.ClientCertificateData, creds.ClientCertPEM) || !bytes.Equal(user.ClientKeyData, creds.ClientKeyPEM) {
				t.Fatal("client certificate or key changed")
			}
			if got := strings.TrimSpace(run("config", "current-context")); got != "kubernetes-admin@prod-a" {
				t.Fatalf("current context %q", got)
			}
			if got := run("config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server} {.users[0].name} {.contexts[0].context.user}"); got != "https://10.99.1.10:6443 kubernetes-admin kubernetes-admin" {
				t.Fatalf("jsonpath view %q", got)
			}
			// Without --raw kubectl redacts the key: proof it saw one.
			if red := run("config", "view"); !strings.Contains(red, "client-key-data: DATA+OMITTED") {
				t.Fatalf("kubectl did not find embedded key data:\n%s", red)
			}

			// The embedded pair is a usable TLS client identity for the CA.
			pair, err := tls.X509KeyPair(user.ClientCertificateData, user.ClientKeyData)
			if err != nil {
				t.Fatal(err)
			}
			leaf, _ := x509.ParseCertificate(pair.Certificate[0])
			if leaf.Subject.CommonName != AdminUser || fmt.Sprint(leaf.Subject.Organization) != "[system:masters]" {
				t.Fatalf("admin subject %v", leaf.Subject)
			}
			roots := x509.NewCertPool()
			roots.AddCert(ca.Certificate())
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestWriteFileReplacesAtomicallyAndTightensMode(t *testing.T) {
	_, creds := adminCreds(t, pki.ECDSAP256)
	path := filepath.Join(t.TempDir(), "admin.conf")
	os.WriteFile(path, []byte("old"), 0o644)
	if err := creds.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("existing 0644 file kept its mode: %o", fi.Mode().Perm())
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	if len(ents) != 1 {
		t.Fatalf("temporary files left: %v", ents)
	}
	if _, err := clientcmd.LoadFromFile(path); err != nil {
		t.Fatal(err)
	}
}

func TestCredentialsValidation(t *testing.T) {
	_, good := adminCreds(t, pki.ECDSAP256)
	for name, mutate := range map[string]func(*Credentials){
		"http server":  func(c *Credentials) { c.Server = "http://10.0.0.1:6443" },
		"no host":      func(c *Credentials) { c.Server = "https://" },
		"no CA":        func(c *Credentials) { c.CAPEM = nil },
		"no user":      func(c *Credentials) { c.UserName = "" },
		"no key":       func(c *Credentials) { c.ClientKeyPEM = nil },
		"garbage URL":  func(c *Credentials) { c.Server = "::" },
		"missing cert": func(c *Credentials) { c.ClientCertPEM = nil },
	} {
		c := good
		mutate(&c)
		if _, err := c.Marshal(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	j, _ := json.Marshal(good)
	if s := fmt.Sprintf("%v %+v %#v", good, good, good) + string(j); strings.Contains(s, "PRIVATE KEY") || strings.Contains(s, string(good.ClientKeyPEM[30:60])) {
		t.Fatalf("credentials print the key: %s", s)
	}
}

// TestIssueUser: the kubeconfig's certificate names the user and groups
// given (not system:masters), lasts the validity asked for, and its serial
// and expiry are reported.
func TestIssueUser(t *testing.T) {
	ca, err := pki.NewCA("kubernetes", pki.ECDSAP256, now)
	if err != nil {
		t.Fatal(err)
	}
	c, err := IssueUser(ca, "prod-a", "https://10.99.1.10:6443", "alice", []string{"ztpd:cluster-admins"}, 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := pki.ParseCertPEM(c.ClientCertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if leaf.Subject.CommonName != "alice" || fmt.Sprint(leaf.Subject.Organization) != "[ztpd:cluster-admins]" ||
		!leaf.NotAfter.Equal(now.Add(24*time.Hour)) || !c.NotAfter.Equal(leaf.NotAfter) || c.Serial != leaf.SerialNumber.Text(16) {
		t.Fatalf("certificate %v until %v serial %s; reported %v %s", leaf.Subject, leaf.NotAfter, leaf.SerialNumber.Text(16), c.NotAfter, c.Serial)
	}
	cfg, err := clientcmd.Load(must(c.Marshal()))
	if err != nil || cfg.CurrentContext != "alice@prod-a" || cfg.AuthInfos["alice"] == nil {
		t.Fatalf("kubeconfig %v %v", cfg, err)
	}
	if _, err := IssueUser(ca, "prod-a", "https://10.99.1.10:6443", "", nil, time.Hour, now); err == nil {
		t.Fatal("empty user accepted")
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
