package bundle

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ztpd/ztpd/joiner/pki"
	"github.com/ztpd/ztpd/joiner/tokens"
)

// Where sonic-ctrmgrd reads its join credential (kube_commands.py AME_CRT,
// AME_KEY): the client certificate it presents to the API server and
// embeds in /etc/sonic/kube_admin.conf for `kubeadm join --discovery-file`.
const (
	SonicClientCertPath = "/etc/sonic/credentials/restapiserver.crt"
	SonicClientKeyPath  = "/etc/sonic/credentials/restapiserver.key"
	// SonicCAPath puts the cluster CA in Debian's local trust store, which
	// ctrmgrd's HTTPS client needs with insecure "false" (run
	// update-ca-certificates after writing it).
	SonicCAPathPattern = "/usr/local/share/ca-certificates/ztpd-%s.crt"
	// SonicGroup is an extra group in every switch certificate, bound by
	// SonicRBAC to what ctrmgrd does beyond joining (reading
	// kube-root-ca.crt, labelling its node).
	SonicGroup = "ztpd:sonic-switches"
	// SonicUserPrefix makes a switch's user name read as a bootstrap identity.
	SonicUserPrefix = "system:bootstrap:"
)

// File is one file to place on a device. Secret files print redacted.
type File struct {
	Path    string
	Mode    os.FileMode
	Content []byte
	Secret  bool
}

// String never shows secret content.
func (f File) String() string {
	if f.Secret {
		return fmt.Sprintf("%s (%04o, %d bytes, <redacted>)", f.Path, f.Mode, len(f.Content))
	}
	return fmt.Sprintf("%s (%04o, %d bytes)", f.Path, f.Mode, len(f.Content))
}

// GoString keeps %#v from printing secret content.
func (f File) GoString() string { return f.String() }

// MarshalJSON emits secret files without their content.
func (f File) MarshalJSON() ([]byte, error) {
	type public struct {
		Path    string `json:"path"`
		Mode    string `json:"mode"`
		Content string `json:"content,omitempty"`
		Secret  bool   `json:"secret,omitempty"`
	}
	p := public{Path: f.Path, Mode: fmt.Sprintf("%04o", f.Mode), Secret: f.Secret}
	if !f.Secret {
		p.Content = string(f.Content)
	}
	return json.Marshal(p)
}

// SonicParams describe one switch's join to a kubeadm cluster.
type SonicParams struct {
	ClusterID string // names the CA file in the switch's trust store
	// ServerHost is the API server address or DNS name the switch uses
	// (KUBERNETES_MASTER|SERVER ip); it must be in the API server
	// certificate's SANs.
	ServerHost string
	ServerPort int    // 0: 6443
	SwitchName string // the switch's node name (its hostname, lower case)
	Validity   time.Duration
	// CSR is the switch's checked certificate signing request: its key
	// was made on the switch and never leaves it.
	CSR *pki.CSR
}

// SonicJoin is a switch's join material.
type SonicJoin struct {
	// ConfigDB is the config_db.json fragment with KUBERNETES_MASTER|SERVER.
	ConfigDB []byte
	// Files are the client certificate ctrmgrd presents (its key is the
	// one the switch made for its request) and the cluster CA for the
	// switch's trust store.
	Files []File
	// UserName is the Kubernetes user the certificate authenticates as.
	UserName string
}

// SonicCertRequest is the client certificate a switch with node name
// switchName gets: user SonicUserPrefix+switchName in groups
// system:bootstrappers:kubeadm:default-node-token, system:bootstrappers and
// SonicGroup. A switch's request may name no more than this.
func SonicCertRequest(switchName string, validity time.Duration) pki.ClientCertRequest {
	return pki.ClientCertRequest{
		CommonName:    SonicUserPrefix + strings.ToLower(switchName),
		Organizations: []string{tokens.DefaultNodeGroup, "system:bootstrappers", SonicGroup},
		Validity:      validity,
	}
}

// RenderSonic signs the switch's client certificate for the key of its
// request (SonicCertRequest) and builds its KUBERNETES_MASTER|SERVER
// configuration.
func RenderSonic(p SonicParams, ca *pki.CA, now time.Time) (SonicJoin, error) {
	if p.ServerPort == 0 {
		p.ServerPort = 6443
	}
	if err := validateEndpoint("SONiC API server", net.JoinHostPort(p.ServerHost, strconv.Itoa(p.ServerPort))); err != nil {
		return SonicJoin{}, err
	}
	name := strings.ToLower(p.SwitchName)
	if !validNodeName(name) {
		return SonicJoin{}, fmt.Errorf("SONiC switch name %q is not a valid node name", p.SwitchName)
	}
	if !validNodeName(p.ClusterID) {
		return SonicJoin{}, fmt.Errorf("cluster id %q cannot name a CA file", p.ClusterID)
	}
	if p.CSR == nil {
		return SonicJoin{}, fmt.Errorf("SONiC switch %s sent no certificate signing request", name)
	}
	cfg, err := SonicConfigDB(p.ServerHost, p.ServerPort)
	if err != nil {
		return SonicJoin{}, err
	}
	req := SonicCertRequest(name, p.Validity)
	cert, err := ca.SignCSR(req, p.CSR, now)
	if err != nil {
		return SonicJoin{}, err
	}
	return SonicJoin{
		ConfigDB: cfg,
		UserName: req.CommonName,
		Files: []File{
			{Path: SonicClientCertPath, Mode: 0o644, Content: cert.CertPEM()},
			{Path: fmt.Sprintf(SonicCAPathPattern, p.ClusterID), Mode: 0o644, Content: ca.CertPEM()},
		},
	}, nil
}

// SonicConfigDB renders the config_db.json fragment. Every value is a
// string, as config_db stores them.
func SonicConfigDB(host string, port int) ([]byte, error) {
	if err := validateEndpoint("SONiC API server", net.JoinHostPort(host, strconv.Itoa(port))); err != nil {
		return nil, err
	}
	doc := map[string]map[string]map[string]string{
		"KUBERNETES_MASTER": {
			"SERVER": {
				"ip":       SonicServerIP(host),
				"port":     strconv.Itoa(port),
				"insecure": "false",
				"disable":  "false",
			},
		},
	}
	return json.MarshalIndent(doc, "", "    ")
}

// SonicServerIP is host as KUBERNETES_MASTER|SERVER's ip holds it: an IPv6
// address bracketed, because sonic-ctrmgrd writes its API server URLs as
// https://<ip>:<port> (its kubeconfig's server, the kube-root-ca.crt URL).
func SonicServerIP(host string) string {
	if a, err := netip.ParseAddr(host); err == nil && a.Is6() && !a.Is4In6() {
		return "[" + a.WithZone("").String() + "]"
	}
	return host
}

// SonicRBAC is applied on the first control plane of a cluster with SONiC
// members. kubeadm's own RBAC already lets the default-node-token group
// create and auto-approve node CSRs, read kubeadm-config and get nodes; this
// adds what sonic-ctrmgrd needs on top: reading the kube-root-ca.crt
// ConfigMap in "default" (its first request) and labelling its node.
// Trade-off: any switch certificate may label any node.
const SonicRBAC = `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: ztpd:sonic-read-kube-root-ca
  namespace: default
rules:
- apiGroups: [""]
  resources: ["configmaps"]
  resourceNames: ["kube-root-ca.crt"]
  verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: ztpd:sonic-read-kube-root-ca
  namespace: default
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: ztpd:sonic-read-kube-root-ca
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: ` + SonicGroup + `
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: ztpd:sonic-node-labeler
rules:
- apiGroups: [""]
  resources: ["nodes"]
  verbs: ["get", "list", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: ztpd:sonic-node-labeler
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: ztpd:sonic-node-labeler
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: ` + SonicGroup + `
`

// validNodeName is an RFC 1123 label, the common case for node names
// (ctrmgrd uses the lower-cased hostname).
func validNodeName(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}
