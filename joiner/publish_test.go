package joiner

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/joiner/pki"
	"github.com/ztpd/ztpd/joiner/tokens"
)

// apiServer is a TLS endpoint serving the one API call the joiner makes,
// with a server certificate from the cluster CA and client certificates
// required and verified against it, as kube-apiserver does.
type apiServer struct {
	mu       sync.Mutex
	secrets  []map[string]any
	users    []string
	deleted  []string         // secret names
	bindings []map[string]any // ClusterRoleBindings created
	roles    []map[string]any // ClusterRoles created
	requests []string         // "METHOD path CN/O" of every request
}

const crbPath = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"

// serveRBAC answers ClusterRoleBinding creation (409 for an existing
// name) and reads, as kube-apiserver does.
func (a *apiServer) serveRBAC(w http.ResponseWriter, r *http.Request) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/apis/rbac.authorization.k8s.io/v1/clusterroles":
		var b map[string]any
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return true
		}
		a.roles = append(a.roles, b)
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(b)
		return true
	case r.Method == http.MethodPost && r.URL.Path == crbPath:
		var b map[string]any
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return true
		}
		for _, old := range a.bindings {
			if old["metadata"].(map[string]any)["name"] == b["metadata"].(map[string]any)["name"] {
				http.Error(w, `{"kind":"Status","reason":"AlreadyExists"}`, http.StatusConflict)
				return true
			}
		}
		a.bindings = append(a.bindings, b)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(b)
		return true
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, crbPath+"/"):
		for _, b := range a.bindings {
			if b["metadata"].(map[string]any)["name"] == strings.TrimPrefix(r.URL.Path, crbPath+"/") {
				w.Header().Set("Content-Type", "application/json")
				json.NewEncoder(w).Encode(b)
				return true
			}
		}
		http.Error(w, `{"kind":"Status","reason":"NotFound"}`, http.StatusNotFound)
		return true
	}
	return false
}

func (a *apiServer) created2() ([]map[string]any, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]map[string]any(nil), a.bindings...), append([]string(nil), a.requests...)
}

func (a *apiServer) deletions() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.deleted...)
}

func startAPIServer(t *testing.T, ln net.Listener, ca *pki.CA) *apiServer {
	t.Helper()
	keyPEM, err := ca.PrivateKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(keyPEM)
	var caKey crypto.Signer
	if k, err := x509.ParseECPrivateKey(block.Bytes); err == nil {
		caKey = k
	} else if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		caKey = k
	} else {
		t.Fatal("cannot parse CA key")
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Certificate(), key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	a := &apiServer{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if pc := r.TLS.PeerCertificates; len(pc) > 0 {
			a.mu.Lock()
			a.requests = append(a.requests, r.Method+" "+r.URL.Path+" "+pc[0].Subject.CommonName+"/"+strings.Join(pc[0].Subject.Organization, ","))
			a.mu.Unlock()
		}
		if a.serveRBAC(w, r) {
			return
		}
		if name, ok := strings.CutPrefix(r.URL.Path, "/api/v1/namespaces/kube-system/secrets/"); ok && r.Method == http.MethodDelete {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.deleted = append(a.deleted, name)
			w.WriteHeader(http.StatusOK)
			return
		}
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/namespaces/kube-system/secrets" {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		var s map[string]any
		if err := json.NewDecoder(r.Body).Decode(&s); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c := r.TLS.PeerCertificates[0]
		a.mu.Lock()
		defer a.mu.Unlock()
		name := s["metadata"].(map[string]any)["name"]
		for _, old := range a.secrets {
			if old["metadata"].(map[string]any)["name"] == name {
				http.Error(w, `{"reason":"AlreadyExists"}`, http.StatusConflict)
				return
			}
		}
		a.secrets = append(a.secrets, s)
		a.users = append(a.users, c.Subject.CommonName+"/"+strings.Join(c.Subject.Organization, ","))
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(s)
	}))
	srv.Listener = ln
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return a
}

func (a *apiServer) created() ([]map[string]any, []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]map[string]any(nil), a.secrets...), append([]string(nil), a.users...)
}

// TestK3sAgentTokensAreCreatedInTheCluster: every k3s agent gets a
// K10<hash>::<id>.<secret> token pinned to the cluster CA, and ztpd creates
// that bootstrap token in the server before handing it out.
func TestK3sAgentTokensAreCreatedInTheCluster(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := e.cluster(clusterSpec{Name: "edge", Size: 2, JoinMethod: MethodK3s, KubernetesVersion: "1.30.4",
		Endpoint: "https://" + ln.Addr().String() + "/"})
	keys := e.svc.mustKeys(t, c.ID)
	if keys.ca.Algorithm() != pki.ECDSAP256 {
		t.Fatalf("k3s cluster CA %s", keys.ca.Algorithm())
	}
	api := startAPIServer(t, ln, keys.ca)

	b := e.must(e.join("edge", 1))
	if b.Method != MethodK3s || b.K3s == nil || b.Role != RoleWorker {
		t.Fatalf("bundle %v", b)
	}
	d := b.Deliver()
	var tokenLine string
	for _, line := range strings.Split(d.Files[0].Content, "\n") {
		if v, ok := strings.CutPrefix(line, "token: "); ok {
			tokenLine = v
		}
	}
	kt, err := tokens.ParseK3sToken(tokenLine)
	if err != nil || !kt.IsBootstrap() {
		t.Fatalf("agent token %q: %v", tokenLine, err)
	}
	if err := kt.ValidateCA(keys.ca.CertPEM()); err != nil {
		t.Fatalf("agent token does not pin the cluster CA: %v", err)
	}
	secrets, users := api.created()
	if len(secrets) != 1 {
		t.Fatalf("%d secrets created", len(secrets))
	}
	s := secrets[0]
	data := s["stringData"].(map[string]any)
	want := kt.Bootstrap().Reveal()
	if s["type"] != "bootstrap.kubernetes.io/token" || s["metadata"].(map[string]any)["name"] != "bootstrap-token-"+kt.Bootstrap().ID() ||
		data["token-id"].(string)+"."+data["token-secret"].(string) != want ||
		data["usage-bootstrap-authentication"] != "true" || data["auth-extra-groups"] != tokens.DefaultNodeGroup {
		t.Fatalf("secret %v", s)
	}
	if _, err := time.Parse(time.RFC3339, data["expiration"].(string)); err != nil {
		t.Fatalf("expiration %v", data["expiration"])
	}
	if users[0] != "kubernetes-admin/system:masters" {
		t.Fatalf("authenticated as %s", users[0])
	}
}

// TestScaleUpAfterInitPublishesNewTokens: the first control plane's init
// created the planned tokens; a worker beyond them (after a scale-up) gets a
// token ztpd creates in the running cluster.
func TestScaleUpAfterInitPublishesNewTokens(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ := net.SplitHostPort(ln.Addr().String())
	c := e.cluster(clusterSpec{Name: "prod", Size: 1, Endpoint: "https://" + ln.Addr().String() + "/"})
	api := startAPIServer(t, ln, e.svc.mustKeys(t, c.ID).ca)
	_ = host
	e.must(e.join("prod", 1)) // first control plane: init creates 1 token
	w1 := e.must(e.join("prod", 2))
	if s, _ := api.created(); len(s) != 0 {
		t.Fatal("a token kubeadm init creates was published")
	}
	j, err := e.cl.ScaleCluster(bg, clusters.LocalAdmin, "prod", 2, "")
	if err != nil {
		t.Fatal(err)
	}
	e.waitJob(j)
	w2 := e.must(e.join("prod", 3))
	secrets, _ := api.created()
	if len(secrets) != 1 {
		t.Fatalf("%d tokens published after scale-up, want 1", len(secrets))
	}
	tok := tokenIn(t, cloudFiles(t, w2)["/etc/ztpd/kubeadm.yaml"])
	if secrets[0]["stringData"].(map[string]any)["token-id"] != tok.ID() {
		t.Fatal("published token is not the worker's")
	}
	if tokenIn(t, cloudFiles(t, w1)["/etc/ztpd/kubeadm.yaml"]).ID() == tok.ID() {
		t.Fatal("two workers share a token")
	}
}
