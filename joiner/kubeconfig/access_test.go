package kubeconfig

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/joiner/pki"
)

func testAccessKubeconfig(t testing.TB) []byte {
	t.Helper()
	ca, err := pki.NewCA("kubernetes", pki.ECDSAP256, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	creds, err := IssueUser(ca, "lab", "https://10.99.0.1:6443", "ztpd-onboarder", nil, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, err := creds.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseAccess(t *testing.T) {
	good := testAccessKubeconfig(t)
	a, err := ParseAccess(good)
	if err != nil {
		t.Fatal(err)
	}
	if a.Server != "https://10.99.0.1:6443" || len(a.CAPEM) == 0 || len(a.ClientCertPEM) == 0 || a.Token != "" {
		t.Fatalf("access: %+v", a)
	}
	if s := a.String() + a.GoString(); strings.Contains(s, "PRIVATE") {
		t.Fatalf("String shows the key: %s", s)
	}
	tokenCfg := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://lab.example:6443", certificate-authority-data: "` + b64(a.CAPEM) + `"}
users:
- name: u
  user: {token: "abc.def"}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`
	if a, err := ParseAccess([]byte(tokenCfg)); err != nil || a.Token != "abc.def" {
		t.Fatalf("token kubeconfig: %+v %v", a, err)
	}
	refused := map[string]string{
		"file CA":       strings.Replace(tokenCfg, `certificate-authority-data: "`+b64(a.CAPEM)+`"`, `certificate-authority: /etc/ztpd/ca.crt`, 1),
		"insecure":      strings.Replace(tokenCfg, `server: "https://lab.example:6443",`, `server: "https://lab.example:6443", insecure-skip-tls-verify: true,`, 1),
		"http":          strings.Replace(tokenCfg, "https://lab.example", "http://lab.example", 1),
		"path":          strings.Replace(tokenCfg, "lab.example:6443", "lab.example:6443/k8s", 1),
		"token file":    strings.Replace(tokenCfg, `token: "abc.def"`, `tokenFile: /var/lib/ztpd/secret`, 1),
		"client file":   strings.Replace(tokenCfg, `token: "abc.def"`, `client-certificate: /etc/ztpd/tls.crt, client-key: /etc/ztpd/tls.key`, 1),
		"exec":          strings.Replace(tokenCfg, `token: "abc.def"`, `exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh}`, 1),
		"no credential": strings.Replace(tokenCfg, `token: "abc.def"`, `username: ""`, 1),
		"basic":         strings.Replace(tokenCfg, `token: "abc.def"`, `username: a, password: b`, 1),
		"not yaml":      "{{{",
		"no context":    strings.Replace(tokenCfg, "current-context: x", "current-context: y", 1),
	}
	for name, cfg := range refused {
		if _, err := ParseAccess([]byte(cfg)); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), "abc.def") {
			t.Errorf("%s: error shows the token: %v", name, err)
		}
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func TestBootstrapKubeconfig(t *testing.T) {
	a, err := ParseAccess(testAccessKubeconfig(t))
	if err != nil {
		t.Fatal(err)
	}
	b, err := BootstrapKubeconfig("https://10.99.0.1:6443", a.CAPEM, "abcdef.0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseAccess(b)
	if err != nil || got.Token != "abcdef.0123456789abcdef" || got.Server != "https://10.99.0.1:6443" {
		t.Fatalf("bootstrap kubeconfig reads back as %+v, %v", got, err)
	}
}

// FuzzParseAccess: no input panics, and an accepted one has an https server,
// a CA and exactly one credential.
func FuzzParseAccess(f *testing.F) {
	f.Add(testAccessKubeconfig(f))
	f.Add([]byte("apiVersion: v1\nkind: Config\n"))
	f.Add([]byte(`{"kind":"Config","clusters":[{"name":"c","cluster":{"server":"https://h"}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ParseAccess(b)
		if err != nil {
			return
		}
		if !strings.HasPrefix(a.Server, "https://") || len(a.CAPEM) == 0 || (a.Token == "") == (len(a.ClientCertPEM) == 0) {
			t.Fatalf("accepted %+v", a)
		}
	})
}
