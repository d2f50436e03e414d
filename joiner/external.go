package joiner

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/joiner/kubeconfig"
	"github.com/ztpd/ztpd/joiner/pki"
	"github.com/ztpd/ztpd/joiner/tokens"
)

// External clusters: ztpd did not build them and holds no CA key for
// them. It reaches their API server with the kubeconfig an operator
// registered (stored sealed, never shown again), mints each device's
// bootstrap token there as a kube-system Secret, and pins the CA that the
// cluster's own cluster-info publishes; devices join by the kubelet's TLS
// bootstrap, their certificates signed by the cluster's controller.

// ExternalTokenTTL is how long a bootstrap token minted in an external
// cluster lives: long enough for a device to install and join, short
// because ztpd's role there cannot delete it early (the cluster's token
// cleaner removes it once expired).
const ExternalTokenTTL = time.Hour

// externalSecrets is an external cluster's key material: no CA key.
type externalSecrets struct {
	Kubeconfig []byte `json:"kubeconfig"` // sealed: the registered kubeconfig
	CACertPEM  []byte `json:"ca_cert"`    // public: the CA pinned from cluster-info
	TokenSeed  []byte `json:"token_seed"` // sealed 32 random bytes
}

// externalKeys is externalSecrets opened.
type externalKeys struct {
	access kubeconfig.Access
	caPEM  []byte
	ca     *x509.Certificate
}

// caHash is the cluster CA's kubeadm discovery hash.
func (k *clusterKeys) caHash() string {
	if k.ext != nil {
		return pki.DiscoveryHash(k.ext.ca)
	}
	return k.ca.DiscoveryHash()
}

// caCertPEM is the cluster CA certificate.
func (k *clusterKeys) caCertPEM() []byte {
	if k.ext != nil {
		return k.ext.caPEM
	}
	return k.ca.CertPEM()
}

// errNoCAKey refuses what needs a CA key ztpd does not hold.
func errNoCAKey(what string) error {
	return fmt.Errorf("%w: %s needs the cluster's CA key, which ztpd does not hold for an ExternalManaged cluster", ErrInvalid, what)
}

// The rights ztpd's onboarding role must grant (docs/examples/ztpd-onboarder-rbac.yaml).
var externalRights = []struct{ verb, group, resource, namespace, name, what string }{
	{"create", "", "secrets", "kube-system", "", "create Secrets in kube-system (bootstrap tokens)"},
	{"get", "", "configmaps", "kube-public", "cluster-info", "get ConfigMap kube-public/cluster-info"},
	{"get", "", "nodes", "", "", "get nodes"},
	{"list", "", "nodes", "", "", "list nodes"},
	{"watch", "", "nodes", "", "", "watch nodes"},
	{"patch", "", "nodes", "", "", "patch nodes (ztpd's labels)"},
	{"list", "certificates.k8s.io", "certificatesigningrequests", "", "", "list certificatesigningrequests"},
	{"watch", "certificates.k8s.io", "certificatesigningrequests", "", "", "watch certificatesigningrequests"},
}

// PrepareExternal checks a kubeconfig for an existing cluster (see
// clusters.ExternalRegistrar): the API server answers with the
// kubeconfig's CA and credential, its cluster-info publishes a CA that
// verifies it too (that CA is pinned), and the credential holds every
// right of the onboarding role. Nothing is stored until Record runs.
func (s *Service) PrepareExternal(ctx context.Context, c core.Cluster, raw []byte) (clusters.PreparedExternal, error) {
	invalid := func(format string, a ...any) error { return core.Errorf(core.KindInvalid, format, a...) }
	a, err := kubeconfig.ParseAccess(raw)
	if err != nil {
		return clusters.PreparedExternal{}, invalid("%v", err)
	}
	u, _ := url.Parse(a.Server)
	port := u.Port()
	if port == "" {
		port = "443"
	}
	hostPort := net.JoinHostPort(u.Hostname(), port)
	trusted := x509.NewCertPool()
	if !trusted.AppendCertsFromPEM(a.CAPEM) {
		return clusters.PreparedExternal{}, invalid("kubeconfig: certificate-authority-data holds no PEM certificate")
	}
	var ver struct {
		GitVersion string `json:"gitVersion"`
	}
	body, err := externalCall(ctx, a, trusted, http.MethodGet, "/version", nil, http.StatusOK)
	if err != nil {
		return clusters.PreparedExternal{}, core.Errorf(core.KindUnavailable, "the cluster's API server %s did not answer with the kubeconfig's CA and credential: %v", a.Server, err)
	}
	if err := json.Unmarshal(body, &ver); err != nil || ver.GitVersion == "" {
		return clusters.PreparedExternal{}, invalid("the API server %s answered /version without a gitVersion", a.Server)
	}
	var missing []string
	for _, r := range externalRights {
		ok, err := selfAllowed(ctx, a, trusted, r.verb, r.group, r.resource, r.namespace, r.name)
		if err != nil {
			return clusters.PreparedExternal{}, core.Errorf(core.KindUnavailable, "asking the API server what the kubeconfig's identity may do: %v", err)
		}
		if !ok {
			missing = append(missing, r.what)
		}
	}
	if len(missing) > 0 {
		return clusters.PreparedExternal{}, invalid("the kubeconfig's identity may not %s: bind it to ztpd's onboarding role (docs/examples/ztpd-onboarder-rbac.yaml)", strings.Join(missing, ", "))
	}
	caPEM, ca, err := clusterInfoCA(ctx, a, trusted)
	if err != nil {
		return clusters.PreparedExternal{}, invalid("%v", err)
	}
	pinned := x509.NewCertPool()
	pinned.AddCert(ca)
	if _, err := externalCall(ctx, a, pinned, http.MethodGet, "/version", nil, http.StatusOK); err != nil {
		return clusters.PreparedExternal{}, invalid("the CA cluster-info publishes (%s) does not verify the API server %s, which devices would then not trust: %v", pki.DiscoveryHash(ca), a.Server, err)
	}
	hash := pki.DiscoveryHash(ca)
	sealedRaw := slices.Clone(raw)
	return clusters.PreparedExternal{
		Endpoint: "https://" + hostPort + "/", Version: ver.GitVersion, CAHash: hash,
		Record: func(tx core.Tx, c core.Cluster) error { return s.recordExternal(tx, c, sealedRaw, caPEM, hostPort) },
	}, nil
}

// recordExternal stores an external cluster's sealed kubeconfig, pinned CA
// and token seed, and its join state: already initialised, and with no
// RBAC for ztpd to create there.
func (s *Service) recordExternal(tx core.Tx, c core.Cluster, raw, caPEM []byte, hostPort string) error {
	v, err := tx.Versions().Get(c.VersionID)
	if err != nil {
		return err
	}
	bv, err := bundle.ParseVersion(v.SemVer)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if _, err := bundle.KubeadmAPIFor(bv); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	seed := make([]byte, 32)
	if _, err := rand.Read(seed); err != nil {
		return err
	}
	owner := secretsOwner(c.ID)
	ext := externalSecrets{CACertPEM: caPEM}
	if ext.Kubeconfig, err = s.keys.Seal(raw, []byte(owner+"/kubeconfig")); err != nil {
		return err
	}
	if ext.TokenSeed, err = s.keys.Seal(seed, []byte(owner+"/token-seed")); err != nil {
		return err
	}
	b, err := json.Marshal(clusterSecrets{External: &ext})
	if err != nil {
		return err
	}
	if err := tx.Secrets().Put(owner, b); err != nil {
		return err
	}
	s.forget(c.ID)
	return tx.Clusters().PutJoinState(c.ID, core.JoinState{KubernetesVersion: bv.Tag(), APIEndpoint: hostPort,
		Initialized: true, AdminBinding: true})
}

// openExternal opens an external cluster's stored material.
func (s *Service) openExternal(clusterID string, sec *externalSecrets) (*clusterKeys, error) {
	owner := secretsOwner(clusterID)
	raw, err := s.keys.Open(sec.Kubeconfig, []byte(owner+"/kubeconfig"))
	if err != nil {
		return nil, fmt.Errorf("cluster %s kubeconfig: %w", clusterID, err)
	}
	a, err := kubeconfig.ParseAccess(raw)
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", clusterID, err)
	}
	ca, err := pki.ParseCertPEM(sec.CACertPEM)
	if err != nil {
		return nil, fmt.Errorf("cluster %s pinned CA: %w", clusterID, err)
	}
	seed, err := s.keys.Open(sec.TokenSeed, []byte(owner+"/token-seed"))
	if err != nil {
		return nil, fmt.Errorf("cluster %s token seed: %w", clusterID, err)
	}
	return &clusterKeys{seed: seed, ext: &externalKeys{access: a, caPEM: sec.CACertPEM, ca: ca}}, nil
}

// ExternalWatchCredentials is how ztpd's watch reaches an external cluster:
// the registered kubeconfig's credential (a client certificate and key, or
// a token). ok is false for a cluster ztpd built.
func (s *Service) ExternalWatchCredentials(clusterID string) (certPEM, keyPEM []byte, token string, ok bool, err error) {
	k, err := s.keysFor(clusterID)
	if err != nil || k.ext == nil {
		return nil, nil, "", false, err
	}
	a := k.ext.access
	return a.ClientCertPEM, a.ClientKeyPEM, a.Token, true, nil
}

// publishExternalToken creates a device's bootstrap token in an external
// cluster with the registered kubeconfig, pinning the cluster's CA.
func (s *Service) publishExternalToken(ctx context.Context, res *joinResult, keys *clusterKeys, bt tokens.BootstrapToken) error {
	body, err := json.Marshal(bootstrapTokenSecret(bt, res.tokenExp, "ztpd join token for "+res.device.ID))
	if err != nil {
		return err
	}
	pinned := x509.NewCertPool()
	pinned.AddCert(keys.ext.ca)
	_, err = externalCall(ctx, keys.ext.access, pinned, http.MethodPost, "/api/v1/namespaces/kube-system/secrets", body,
		http.StatusCreated, http.StatusOK, http.StatusConflict)
	if err == nil {
		s.log.Info("bootstrap token created in external cluster", "cluster", res.cluster.Name, "token", bt, "device", res.device.ID,
			"expires", res.tokenExp)
	}
	return err
}

// renderExternalSonic is a switch's join material for an external
// cluster: a bootstrap kubeconfig for its kubelet (a token, not a
// certificate ztpd would sign), the pinned CA, and KUBERNETES_MASTER.
func renderExternalSonic(res *joinResult, keys *clusterKeys, tok tokens.BootstrapToken) (*bundle.SonicJoin, error) {
	host, port, err := net.SplitHostPort(res.rt.APIEndpoint)
	if err != nil {
		return nil, err
	}
	p := 6443
	fmt.Sscan(port, &p)
	cfg, err := bundle.SonicConfigDB(host, p)
	if err != nil {
		return nil, err
	}
	kc, err := kubeconfig.BootstrapKubeconfig("https://"+res.rt.APIEndpoint, keys.ext.caPEM, tok.Reveal())
	if err != nil {
		return nil, err
	}
	return &bundle.SonicJoin{ConfigDB: cfg, UserName: "system:bootstrap:" + tok.ID(), Files: []bundle.File{
		{Path: bundle.SonicBootstrapKubeconfigPath, Mode: 0o600, Content: kc, Secret: true},
		{Path: bundle.SonicKubeletCAPath, Mode: 0o644, Content: keys.ext.caPEM},
		{Path: fmt.Sprintf(bundle.SonicCAPathPattern, res.cluster.ID), Mode: 0o644, Content: keys.ext.caPEM},
	}}, nil
}

// clusterInfoCA reads the CA the cluster publishes in kube-public's
// cluster-info ConfigMap (what kubeadm join discovers).
func clusterInfoCA(ctx context.Context, a kubeconfig.Access, roots *x509.CertPool) ([]byte, *x509.Certificate, error) {
	body, err := externalCall(ctx, a, roots, http.MethodGet, "/api/v1/namespaces/kube-public/configmaps/cluster-info", nil, http.StatusOK)
	if err != nil {
		return nil, nil, fmt.Errorf("reading kube-public/cluster-info: %v", err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := json.Unmarshal(body, &cm); err != nil || cm.Data["kubeconfig"] == "" {
		return nil, nil, errors.New("kube-public/cluster-info has no kubeconfig (is this a kubeadm cluster?)")
	}
	cfg, err := clientcmd.Load([]byte(cm.Data["kubeconfig"]))
	if err != nil || len(cfg.Clusters) != 1 {
		return nil, nil, errors.New("kube-public/cluster-info's kubeconfig does not name exactly one cluster")
	}
	var caData []byte
	for _, cl := range cfg.Clusters {
		caData = cl.CertificateAuthorityData
	}
	block, _ := pem.Decode(caData)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, nil, errors.New("kube-public/cluster-info has no CA certificate")
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil || !ca.IsCA {
		return nil, nil, errors.New("kube-public/cluster-info's certificate is not a CA")
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}), ca, nil
}

// selfAllowed asks the API server whether the kubeconfig's identity may do
// one thing (a SelfSubjectAccessReview, which every authenticated user may
// create).
func selfAllowed(ctx context.Context, a kubeconfig.Access, roots *x509.CertPool, verb, group, resource, namespace, name string) (bool, error) {
	review := map[string]any{
		"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
		"spec": map[string]any{"resourceAttributes": map[string]string{
			"verb": verb, "group": group, "resource": resource, "namespace": namespace, "name": name}},
	}
	body, _ := json.Marshal(review)
	out, err := externalCall(ctx, a, roots, http.MethodPost, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body, http.StatusCreated, http.StatusOK)
	if err != nil {
		return false, err
	}
	var res struct {
		Status struct {
			Allowed bool `json:"allowed"`
		} `json:"status"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return false, fmt.Errorf("SelfSubjectAccessReview answer: %v", err)
	}
	return res.Status.Allowed, nil
}

// externalCall makes one call to an external cluster's API server as the
// registered identity, verifying the server with roots. Any status outside
// ok is an error carrying the server's answer (never the credential).
func externalCall(ctx context.Context, a kubeconfig.Access, roots *x509.CertPool, method, path string, body []byte, ok ...int) ([]byte, error) {
	tc := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if len(a.ClientCertPEM) > 0 {
		pair, err := tls.X509KeyPair(a.ClientCertPEM, a.ClientKeyPEM)
		if err != nil {
			return nil, errors.New("the kubeconfig's client certificate and key are not a pair")
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, Proxy: nil}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, method, a.Server+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if a.Token != "" {
		req.Header.Set("Authorization", "Bearer "+a.Token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if slices.Contains(ok, resp.StatusCode) {
		return msg, nil
	}
	return nil, fmt.Errorf("API server answered %s: %s", resp.Status, strings.TrimSpace(string(msg[:min(len(msg), 512)])))
}
