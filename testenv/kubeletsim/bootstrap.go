package kubeletsim

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/client-go/util/keyutil"
)

var nodeNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

func validNodeName(s string) bool { return len(s) <= 253 && nodeNameRE.MatchString(s) }

// userAgent names the simulation in the API server's audit log while
// keeping the kubelet's form.
func (k *Kubelet) userAgent() string {
	return fmt.Sprintf("kubelet/%s (linux/amd64) kubernetes/kubeletsim", k.cfg.KubeletVersion)
}

// bootstrapRESTConfig is the client the kubelet builds from
// --bootstrap-kubeconfig (or, for a switch, from its bundle certificate).
func (k *Kubelet) bootstrapRESTConfig() (*rest.Config, error) {
	var rc *rest.Config
	if len(k.cfg.BootstrapKubeconfig) > 0 {
		var err error
		rc, err = clientcmd.RESTConfigFromKubeConfig(k.cfg.BootstrapKubeconfig)
		if err != nil {
			return nil, fmt.Errorf("unable to load bootstrap kubeconfig: %w", err)
		}
	} else {
		rc = &rest.Config{TLSClientConfig: rest.TLSClientConfig{
			CertData: k.cfg.ClientCertPEM,
			KeyData:  k.cfg.ClientKeyPEM,
		}}
	}
	if k.cfg.APIServer != "" {
		rc.Host = k.cfg.APIServer
	}
	if len(k.cfg.CACertPEM) > 0 {
		rc.TLSClientConfig.CAData = k.cfg.CACertPEM
		rc.TLSClientConfig.CAFile = ""
	}
	if rc.Host == "" {
		return nil, errors.New("bootstrap kubeconfig names no API server")
	}
	if rc.TLSClientConfig.Insecure || (len(rc.TLSClientConfig.CAData) == 0 && rc.TLSClientConfig.CAFile == "") {
		return nil, errors.New("bootstrap kubeconfig has no cluster CA (an insecure bootstrap is refused)")
	}
	if rc.TLSClientConfig.CAFile != "" {
		ca, err := os.ReadFile(rc.TLSClientConfig.CAFile)
		if err != nil {
			return nil, fmt.Errorf("bootstrap kubeconfig's cluster CA: %w", err)
		}
		rc.TLSClientConfig.CAData, rc.TLSClientConfig.CAFile = ca, ""
	}
	rc.UserAgent = k.userAgent()
	return rc, nil
}

// bootstrap is the kubelet's LoadClientCert without files: a fresh P-256
// key, a node client CSR named by its digest, a watch until it is issued;
// then the node clients built on the issued certificate.
func (k *Kubelet) bootstrap(ctx context.Context) error {
	rc, err := k.bootstrapRESTConfig()
	if err != nil {
		return fmt.Errorf("node %s: %w", k.cfg.NodeName, err)
	}
	client, release, err := k.pool.bootstrapClient(rc)
	if err != nil {
		return fmt.Errorf("node %s: bootstrap client: %w", k.cfg.NodeName, err)
	}
	defer release()

	select {
	case k.pool.bootstrapSlots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("node %s: stopped waiting for a bootstrap slot: %w", k.cfg.NodeName, ctx.Err())
	}
	defer func() { <-k.pool.bootstrapSlots }()

	start := time.Now()
	k.log.Info("TLS bootstrap: requesting a node client certificate", "server", rc.Host)
	waitForServer(ctx, client, time.Minute, k)

	keyPEM, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		return fmt.Errorf("node %s: generating the node key: %w", k.cfg.NodeName, err)
	}
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return fmt.Errorf("node %s: %w", k.cfg.NodeName, err)
	}
	subject := &pkix.Name{
		Organization: []string{"system:nodes"},
		CommonName:   "system:node:" + k.cfg.NodeName,
	}
	csrPEM, err := certutil.MakeCSR(key, subject, nil, nil)
	if err != nil {
		return fmt.Errorf("node %s: building the CSR: %w", k.cfg.NodeName, err)
	}
	// ECDSA key: no key encipherment (the kubelet adds it for RSA only).
	usages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	name, err := digestedName(key.(crypto.Signer).Public(), subject, usages)
	if err != nil {
		return fmt.Errorf("node %s: %w", k.cfg.NodeName, err)
	}
	reqName, reqUID, err := csr.RequestCertificateWithContext(ctx, client, csrPEM, name,
		certificatesv1.KubeAPIServerClientKubeletSignerName, nil, usages, key)
	if err != nil {
		return fmt.Errorf("node %s: %w", k.cfg.NodeName, explainBootstrapError(err))
	}
	k.csrName = reqName
	k.log.Info("TLS bootstrap: CSR created, waiting for approval and signing", "csr", reqName)

	wctx, cancel := context.WithTimeout(ctx, k.cfg.BootstrapTimeout)
	certPEM, err := csr.WaitForCertificate(wctx, client, reqName, reqUID)
	timedOut := wctx.Err() != nil
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("node %s: stopped waiting for CSR %s: %w", k.cfg.NodeName, reqName, ctx.Err())
		}
		if timedOut || wait.Interrupted(err) {
			return fmt.Errorf("node %s: CSR %s was not issued within %s (%s): is kube-controller-manager running its csrapproving and csrsigning controllers with the cluster CA key, and may this bootstrap identity auto-approve node CSRs?",
				k.cfg.NodeName, reqName, k.cfg.BootstrapTimeout, csrState(ctx, client, reqName))
		}
		return fmt.Errorf("node %s: CSR %s: %w", k.cfg.NodeName, reqName, explainBootstrapError(err))
	}
	if err := k.useCertificate(rc, certPEM, keyPEM); err != nil {
		return fmt.Errorf("node %s: certificate issued for CSR %s: %w", k.cfg.NodeName, reqName, err)
	}
	k.bootstrapTook = time.Since(start)
	k.log.Info("TLS bootstrap: node client certificate issued", "csr", reqName, "took", k.bootstrapTook.Round(time.Millisecond))
	return nil
}

// waitForServer polls /healthz as the kubelet does before bootstrapping;
// like the kubelet it goes on after the deadline and lets the CSR fail.
// Unlike the kubelet it stops at any answer of the API server, so a
// refused credential (401 on /healthz too) fails at once with the CSR's
// clear error instead of after a minute of retries.
func waitForServer(ctx context.Context, client kubernetes.Interface, deadline time.Duration, k *Kubelet) {
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	for {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		_, err := client.Discovery().RESTClient().Get().AbsPath("/healthz").DoRaw(rctx)
		rcancel()
		var answered apierrors.APIStatus
		if err == nil || errors.As(err, &answered) {
			return
		}
		k.log.Info("TLS bootstrap: API server not answering yet", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(jitter(2*time.Second, 0.2)):
		}
	}
}

// explainBootstrapError keeps the API error (errors.As still finds it) and
// says what the operator should look at.
func explainBootstrapError(err error) error {
	switch {
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("the API server refused the bootstrap credentials (401 Unauthorized): the bootstrap token is unknown, expired or deleted, or the client certificate is not signed by the cluster CA: %w", err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("the bootstrap identity may not request node certificates (403 Forbidden): it must be in group system:bootstrappers:kubeadm:default-node-token (or another group bound to system:node-bootstrapper): %w", err)
	}
	return err
}

// csrState says where a CSR that was not issued in time got stuck.
func csrState(ctx context.Context, client kubernetes.Interface, name string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	req, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "its state is unknown: " + err.Error()
	}
	for _, c := range req.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved && c.Status == "True" {
			return "approved but not signed"
		}
	}
	return "never approved"
}

// digestedName is the kubelet's CSR name: a digest of the public key,
// subject and usages, so a retried bootstrap with the same key reuses it.
func digestedName(publicKey any, subject *pkix.Name, usages []certificatesv1.KeyUsage) (string, error) {
	hash := sha512.New512_256()
	const delimiter = '|'
	encode := base64.RawURLEncoding.EncodeToString
	write := func(data []byte) {
		hash.Write([]byte(encode(data)))
		hash.Write([]byte{delimiter})
	}
	publicKeyData, err := x509.MarshalPKIXPublicKey(publicKey)
	if err != nil {
		return "", err
	}
	write(publicKeyData)
	write([]byte(subject.CommonName))
	for _, v := range subject.Organization {
		write([]byte(v))
	}
	for _, v := range usages {
		write([]byte(v))
	}
	return "node-csr-" + encode(hash.Sum(nil)), nil
}

// useCertificate checks the issued certificate and builds the node's
// clients: one HTTP/2 transport of its own (a client certificate belongs to
// the connection, so nodes cannot share one), a main client and a heartbeat
// client as the kubelet has.
func (k *Kubelet) useCertificate(rc *rest.Config, certPEM, keyPEM []byte) error {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("does not match the node key: %w", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return err
	}
	if want := "system:node:" + k.cfg.NodeName; leaf.Subject.CommonName != want {
		return fmt.Errorf("subject CN %q, want %q", leaf.Subject.CommonName, want)
	}
	if _, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok {
		return fmt.Errorf("unexpected public key type %T", leaf.PublicKey)
	}
	roots, err := k.pool.caPool(rc.TLSClientConfig.CAData)
	if err != nil {
		return err
	}
	tr := k.pool.newTransport(&tls.Config{
		RootCAs:      roots,
		Certificates: []tls.Certificate{pair},
		ServerName:   rc.TLSClientConfig.ServerName,
		MinVersion:   tls.VersionTLS12,
	})
	base := rest.Config{
		Host:      rc.Host,
		APIPath:   rc.APIPath,
		Transport: tr,
		UserAgent: k.userAgent(),
		// The kubelet's kubeAPIContentType and kubeAPIQPS/Burst defaults.
		ContentConfig: rest.ContentConfig{
			ContentType:        "application/vnd.kubernetes.protobuf",
			AcceptContentTypes: "application/vnd.kubernetes.protobuf,application/json",
		},
		QPS:   50,
		Burst: 100,
	}
	main := base
	if k.client, err = kubernetes.NewForConfig(&main); err != nil {
		return err
	}
	// The kubelet's heartbeat client: no client-side rate limit, and a
	// request timeout of the status period capped at the lease duration.
	hb := base
	hb.QPS = -1
	hb.Timeout = min(k.cfg.StatusEvery, k.cfg.LeaseDuration)
	if k.heartbeat, err = kubernetes.NewForConfig(&hb); err != nil {
		return err
	}
	k.certPEM = bytes.Clone(certPEM)
	k.mu.Lock()
	k.transport = tr
	k.mu.Unlock()
	return nil
}

// newTransport is client-go's transport (HTTP/2, its timeouts) dialing
// through the pool.
func (p *Pool) newTransport(tlsConfig *tls.Config) *http.Transport {
	return utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         p.dial,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 25,
		TLSClientConfig:     tlsConfig,
	})
}

// bootstrapClient is the bootstrap client on the pool's transport for
// these TLS credentials: kubelets bootstrapping with the same token (a
// per-request header) or the same certificate share one connection. release
// drops the transport, and its connection, when its last user is done.
func (p *Pool) bootstrapClient(rc *rest.Config) (kubernetes.Interface, func(), error) {
	tc := rc.TLSClientConfig
	h := sha256.New()
	for _, part := range [][]byte{[]byte(rc.Host), tc.CAData, tc.CertData, tc.KeyData, []byte(tc.ServerName), []byte(tc.CertFile), []byte(tc.KeyFile)} {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	var key [32]byte
	h.Sum(key[:0])

	p.mu.Lock()
	defer p.mu.Unlock()
	sh, ok := p.bootstrapRTs[key]
	if !ok {
		tlsConfig, err := rest.TLSConfigFor(rc)
		if err != nil {
			return nil, nil, fmt.Errorf("bootstrap TLS configuration: %w", err)
		}
		sh = &sharedTransport{rt: p.newTransport(tlsConfig)}
		p.bootstrapRTs[key] = sh
	}
	shared := rest.CopyConfig(rc)
	shared.TLSClientConfig = rest.TLSClientConfig{}
	shared.Transport = sh.rt
	client, err := kubernetes.NewForConfig(shared)
	if err != nil {
		if sh.users == 0 {
			delete(p.bootstrapRTs, key)
		}
		return nil, nil, err
	}
	sh.users++
	release := func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if sh.users--; sh.users == 0 {
			delete(p.bootstrapRTs, key)
			sh.rt.CloseIdleConnections()
		}
	}
	return client, release, nil
}

type sharedTransport struct {
	rt    *http.Transport
	users int
}
