package kubeconfig

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Access is how ztpd reaches a cluster it did not build: the API server,
// the CA its kubeconfig trusts, and one credential (a client certificate
// and key, or a bearer token).
type Access struct {
	Server        string // https://host:port
	CAPEM         []byte
	ClientCertPEM []byte
	ClientKeyPEM  []byte
	Token         string
}

// String never shows the credential.
func (a Access) String() string { return fmt.Sprintf("access(%s, credential=<redacted>)", a.Server) }

// GoString keeps %#v from printing the credential.
func (a Access) GoString() string { return a.String() }

// maxAccessSize bounds a kubeconfig given to ztpd: one cluster's is a few
// kilobytes.
const maxAccessSize = 256 << 10

// ParseAccess reads the current context of an operator's kubeconfig. Only
// inline material is accepted: a path (certificate-authority,
// client-certificate, client-key, tokenFile) would make ztpd read files of
// its own host, and an exec or auth-provider plugin would make it run
// programs; insecure-skip-tls-verify and a proxy are refused too, because
// ztpd pins the cluster's CA. Errors never carry the credential.
func ParseAccess(b []byte) (Access, error) {
	if len(b) > maxAccessSize {
		return Access{}, fmt.Errorf("kubeconfig: larger than %d bytes", maxAccessSize)
	}
	cfg, err := clientcmd.Load(b)
	if err != nil {
		return Access{}, errors.New("kubeconfig: not a kubeconfig (YAML or JSON, kind Config)")
	}
	name := cfg.CurrentContext
	if name == "" && len(cfg.Contexts) == 1 {
		for n := range cfg.Contexts {
			name = n
		}
	}
	kctx := cfg.Contexts[name]
	if kctx == nil {
		return Access{}, errors.New("kubeconfig: no current-context (or one context) to use")
	}
	cl := cfg.Clusters[kctx.Cluster]
	user := cfg.AuthInfos[kctx.AuthInfo]
	if cl == nil || user == nil {
		return Access{}, fmt.Errorf("kubeconfig: context %q names a cluster or user it does not define", name)
	}
	if err := checkCluster(cl); err != nil {
		return Access{}, err
	}
	a := Access{Server: strings.TrimSuffix(cl.Server, "/"), CAPEM: cl.CertificateAuthorityData}
	if err := checkUser(user); err != nil {
		return Access{}, err
	}
	a.ClientCertPEM, a.ClientKeyPEM, a.Token = user.ClientCertificateData, user.ClientKeyData, user.Token
	if len(a.ClientCertPEM) > 0 {
		if _, err := tls.X509KeyPair(a.ClientCertPEM, a.ClientKeyPEM); err != nil {
			return Access{}, errors.New("kubeconfig: client-certificate-data and client-key-data are not a certificate and its key")
		}
	}
	return a, nil
}

func checkCluster(cl *clientcmdapi.Cluster) error {
	u, err := url.Parse(cl.Server)
	switch {
	case err != nil || u.Scheme != "https" || u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.User != nil || u.RawQuery != "":
		return errors.New("kubeconfig: the cluster's server must be https://host[:port]")
	case cl.InsecureSkipTLSVerify:
		return errors.New("kubeconfig: insecure-skip-tls-verify is refused: ztpd pins the cluster's CA")
	case cl.CertificateAuthority != "":
		return errors.New("kubeconfig: certificate-authority names a file; give certificate-authority-data")
	case len(cl.CertificateAuthorityData) == 0:
		return errors.New("kubeconfig: the cluster needs certificate-authority-data (the CA ztpd first trusts)")
	case cl.ProxyURL != "":
		return errors.New("kubeconfig: proxy-url is not supported")
	case cl.TLSServerName != "":
		return errors.New("kubeconfig: tls-server-name is not supported: devices dial the server's own name")
	}
	return nil
}

func checkUser(u *clientcmdapi.AuthInfo) error {
	switch {
	case u.ClientCertificate != "" || u.ClientKey != "" || u.TokenFile != "":
		return errors.New("kubeconfig: the user names files; give client-certificate-data and client-key-data, or token")
	case u.Exec != nil || u.AuthProvider != nil:
		return errors.New("kubeconfig: exec and auth-provider plugins are refused: ztpd runs no programs for a credential")
	case u.Username != "" || u.Password != "":
		return errors.New("kubeconfig: basic authentication is not supported")
	case u.Impersonate != "" || len(u.ImpersonateGroups) > 0 || len(u.ImpersonateUserExtra) > 0 || u.ImpersonateUID != "":
		return errors.New("kubeconfig: impersonation is not supported")
	}
	hasCert := len(u.ClientCertificateData) > 0 || len(u.ClientKeyData) > 0
	switch {
	case hasCert && u.Token != "":
		return errors.New("kubeconfig: give one credential: a client certificate or a token")
	case !hasCert && u.Token == "":
		return errors.New("kubeconfig: the user has no credential (client-certificate-data and client-key-data, or token)")
	case strings.ContainsAny(u.Token, "\r\n\x00"):
		return errors.New("kubeconfig: the token is not one line")
	}
	return nil
}

// BootstrapKubeconfig is a kubelet's --bootstrap-kubeconfig: the API
// server, its CA and a bootstrap token, as kubeadm join writes
// bootstrap-kubelet.conf.
func BootstrapKubeconfig(server string, caPEM []byte, token string) ([]byte, error) {
	u, err := url.Parse(server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("kubeconfig: server %q must be an https:// URL with a host", server)
	}
	if len(caPEM) == 0 || token == "" {
		return nil, errors.New("kubeconfig: a bootstrap kubeconfig needs the CA and a token")
	}
	cfg := clientcmdapi.NewConfig()
	cluster := clientcmdapi.NewCluster()
	cluster.Server = server
	cluster.CertificateAuthorityData = caPEM
	cfg.Clusters["kubernetes"] = cluster
	user := clientcmdapi.NewAuthInfo()
	user.Token = token
	cfg.AuthInfos["tls-bootstrap-token-user"] = user
	kctx := clientcmdapi.NewContext()
	kctx.Cluster, kctx.AuthInfo = "kubernetes", "tls-bootstrap-token-user"
	cfg.Contexts["tls-bootstrap-token-user@kubernetes"] = kctx
	cfg.CurrentContext = "tls-bootstrap-token-user@kubernetes"
	if err := clientcmd.Validate(*cfg); err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return clientcmd.Write(*cfg)
}
