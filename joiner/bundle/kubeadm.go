package bundle

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ztpd/ztpd/joiner/pki"
	"github.com/ztpd/ztpd/joiner/tokens"
)

// KubeadmConfigPath is where the rendered kubeadm configuration goes on a node.
const KubeadmConfigPath = "/etc/ztpd/kubeadm.yaml"

// Token is a bootstrap token to create at kubeadm init.
type Token struct {
	Token       tokens.BootstrapToken
	TTL         time.Duration // 0: never expires
	Usages      []string      // nil: signing, authentication
	Groups      []string      // nil: system:bootstrappers:kubeadm:default-node-token
	Description string
}

// InitParams describe the first control plane of a cluster.
type InitParams struct {
	Version Version
	// ControlPlaneEndpoint is the stable host:port every node joins
	// (CloudStack: the first control node's or the load balancer's IP, :6443).
	ControlPlaneEndpoint string
	AdvertiseAddress     string   // optional: this node's API address
	NodeName             string   // optional: defaults to the hostname
	CertSANs             []string // extra API server certificate names
	// Tokens are created at init; the first usually belongs to this node's
	// peers that join first. At least one is required.
	Tokens         []Token
	CertificateKey tokens.CertificateKey // for --upload-certs (HA control planes)
	// EncryptionAlgorithm is the CA's key type. With v1beta4 it is also
	// written as encryptionAlgorithm so kubeadm's own keys match it.
	EncryptionAlgorithm pki.Algorithm
	// NodeLabels are set by the kubelet when it registers the Node
	// (kubeletExtraArgs node-labels; see NodeLabelsArg).
	NodeLabels map[string]string
	// NodeIP is the kubelet's --node-ip (kubeletExtraArgs), unbracketed;
	// "" lets the kubelet pick, which on a dual-stack host is IPv4.
	NodeIP        string
	PodSubnet     string // optional, e.g. for the CNI in network.yaml
	ServiceSubnet string // optional
	ClusterName   string // optional, kubeadm default "kubernetes"
	// ExternalEtcd, when set, makes the API server use etcd on the
	// cluster's etcd nodes (kubeadm's external etcd topology) instead of a
	// member kubeadm runs on each control plane.
	ExternalEtcd *ExternalEtcd
}

// ExternalEtcd is the etcd of a cluster built with etcd nodes.
type ExternalEtcd struct {
	// Endpoints are the etcd members' client host:port (IPv6 bracketed).
	Endpoints []string
}

// The files of an external etcd's client, where kubeadm looks for them
// (and from where --upload-certs hands them to the other control planes).
const (
	EtcdCAFile           = "/etc/kubernetes/pki/etcd/ca.crt"
	EtcdAPIServerCert    = "/etc/kubernetes/pki/apiserver-etcd-client.crt"
	EtcdAPIServerKey     = "/etc/kubernetes/pki/apiserver-etcd-client.key"
	EtcdClientPort       = 2379
	EtcdPeerPort         = 2380
	etcdEndpointsMaximum = 7
)

// JoinParams describe a node joining an existing cluster.
type JoinParams struct {
	Version           Version
	APIServerEndpoint string // host:port
	Token             tokens.BootstrapToken
	CACertHashes      []string // "sha256:<hex>"; at least one: ztpd never skips CA verification
	NodeName          string
	// ControlPlane makes the node an extra control plane; it then needs the
	// certificate key the first control plane uploaded its certificates with.
	ControlPlane     bool
	AdvertiseAddress string
	CertificateKey   tokens.CertificateKey
	// NodeLabels are set by the kubelet when it registers the Node.
	NodeLabels map[string]string
	NodeIP     string // as InitParams.NodeIP
}

// KubeadmPlan is how a node runs kubeadm: a configuration file (nil in
// flags mode) and the commands, in order. Commands carry no secrets unless
// the release needs flags (1.11–1.14).
type KubeadmPlan struct {
	API      KubeadmAPI
	Config   []byte
	Commands [][]string
}

// PlanInit renders the first control plane's kubeadm configuration.
func PlanInit(p InitParams) (KubeadmPlan, error) {
	api, err := KubeadmAPIFor(p.Version)
	if err != nil {
		return KubeadmPlan{}, err
	}
	if err := validateEndpoint("control plane endpoint", p.ControlPlaneEndpoint); err != nil {
		return KubeadmPlan{}, err
	}
	if len(p.Tokens) == 0 {
		return KubeadmPlan{}, errors.New("kubeadm init: at least one bootstrap token is required")
	}
	for i, t := range p.Tokens {
		if t.Token.IsZero() {
			return KubeadmPlan{}, fmt.Errorf("kubeadm init: token %d is empty", i)
		}
		if t.TTL < 0 || t.TTL%time.Second != 0 {
			return KubeadmPlan{}, fmt.Errorf("kubeadm init: token %s TTL %v must be whole seconds >= 0", t.Token, t.TTL)
		}
		if err := tokens.ValidateUsages(t.usages()); err != nil {
			return KubeadmPlan{}, err
		}
		if err := tokens.ValidateGroups(t.groups()); err != nil {
			return KubeadmPlan{}, err
		}
	}
	if p.EncryptionAlgorithm == "" {
		p.EncryptionAlgorithm = pki.RSA2048
	}
	if p.EncryptionAlgorithm != pki.RSA2048 && !p.Version.AtLeast(1, 31) {
		// Before v1beta4 kubeadm has no encryptionAlgorithm and RSA is the
		// only CA key type every release loads.
		return KubeadmPlan{}, fmt.Errorf("kubeadm init: a %s CA needs Kubernetes 1.31+ (have %s)", p.EncryptionAlgorithm, p.Version.Tag())
	}
	if p.ServiceSubnet == "" && apiServerOnIPv6(p) {
		// kube-apiserver refuses a service range of the other family than
		// its advertise address ("service IP family must match public
		// address family"), and kubeadm's default range is IPv4.
		p.ServiceSubnet = DefaultIPv6ServiceSubnet
	}
	if p.ExternalEtcd != nil {
		if api == KubeadmFlags {
			return KubeadmPlan{}, fmt.Errorf("kubeadm init: external etcd needs a kubeadm configuration file (Kubernetes 1.15+, have %s)", p.Version.Tag())
		}
		if err := validateEtcdEndpoints(p.ExternalEtcd.Endpoints); err != nil {
			return KubeadmPlan{}, err
		}
	}
	sans := certSANs(p.ControlPlaneEndpoint, p.AdvertiseAddress, p.CertSANs)
	if api == KubeadmFlags {
		return planInitFlags(p, sans), nil
	}
	initCfg := initConfiguration{
		typeMeta: typeMeta{APIVersion: string(api), Kind: "InitConfiguration"},
		NodeRegistration: nodeRegistration{Name: p.NodeName, CRISocket: criSocket(p.Version),
			NodeLabels: NodeLabelsArg(p.NodeLabels), NodeIP: p.NodeIP, ArgList: api == KubeadmV1Beta4},
		CertificateKey: p.CertificateKey.Reveal(),
	}
	if p.AdvertiseAddress != "" {
		initCfg.LocalAPIEndpoint = &apiEndpoint{AdvertiseAddress: p.AdvertiseAddress, BindPort: 6443}
	}
	for _, t := range p.Tokens {
		initCfg.BootstrapTokens = append(initCfg.BootstrapTokens, bootstrapToken{
			Token:       t.Token.Reveal(),
			Description: t.Description,
			TTL:         t.TTL.String(),
			Usages:      t.usages(),
			Groups:      t.groups(),
		})
	}
	clusterCfg := clusterConfiguration{
		typeMeta:             typeMeta{APIVersion: string(api), Kind: "ClusterConfiguration"},
		KubernetesVersion:    p.Version.Tag(),
		ControlPlaneEndpoint: p.ControlPlaneEndpoint,
		APIServer:            apiServer{CertSANs: sans},
		ClusterName:          p.ClusterName,
		CertificatesDir:      "/etc/kubernetes/pki",
	}
	if p.PodSubnet != "" || p.ServiceSubnet != "" {
		clusterCfg.Networking = &networking{PodSubnet: p.PodSubnet, ServiceSubnet: p.ServiceSubnet}
	}
	if api == KubeadmV1Beta4 {
		clusterCfg.EncryptionAlgorithm = string(p.EncryptionAlgorithm)
	}
	if p.ExternalEtcd != nil {
		clusterCfg.Etcd = &externalEtcd{CAFile: EtcdCAFile, CertFile: EtcdAPIServerCert, KeyFile: EtcdAPIServerKey}
		for _, hp := range p.ExternalEtcd.Endpoints {
			clusterCfg.Etcd.Endpoints = append(clusterCfg.Etcd.Endpoints, "https://"+hp)
		}
	}
	cfg, err := marshalDocs(initCfg, clusterCfg)
	if err != nil {
		return KubeadmPlan{}, err
	}
	cmd := []string{"kubeadm", "init", "--config", KubeadmConfigPath}
	if !p.CertificateKey.IsZero() {
		cmd = append(cmd, "--upload-certs")
	}
	return KubeadmPlan{API: api, Config: cfg, Commands: [][]string{cmd}}, nil
}

// planInitFlags drives kubeadm 1.11–1.14, which predates the config fields
// ztpd needs: one token on the command line, the others created after init.
func planInitFlags(p InitParams, sans []string) KubeadmPlan {
	first := p.Tokens[0]
	cmd := []string{"kubeadm", "init",
		"--token", first.Token.Reveal(),
		"--token-ttl", first.TTL.String(),
		"--kubernetes-version", p.Version.Tag(),
		"--cri-socket", criSocket(p.Version),
		"--apiserver-cert-extra-sans", strings.Join(sans, ","),
	}
	if p.AdvertiseAddress != "" {
		cmd = append(cmd, "--apiserver-advertise-address", p.AdvertiseAddress)
	}
	if p.NodeName != "" {
		cmd = append(cmd, "--node-name", p.NodeName)
	}
	if p.PodSubnet != "" {
		cmd = append(cmd, "--pod-network-cidr", p.PodSubnet)
	}
	if p.ServiceSubnet != "" {
		cmd = append(cmd, "--service-cidr", p.ServiceSubnet)
	}
	cmds := [][]string{cmd}
	for _, t := range p.Tokens[1:] {
		c := []string{"kubeadm", "token", "create", t.Token.Reveal(),
			"--kubeconfig", "/etc/kubernetes/admin.conf",
			"--ttl", t.TTL.String(),
			"--usages", strings.Join(t.usages(), ","),
			"--groups", strings.Join(t.groups(), ","),
		}
		if t.Description != "" {
			c = append(c, "--description", t.Description)
		}
		cmds = append(cmds, c)
	}
	return KubeadmPlan{API: KubeadmFlags, Commands: cmds}
}

// PlanJoin renders a worker's or an extra control plane's kubeadm join.
func PlanJoin(p JoinParams) (KubeadmPlan, error) {
	api, err := KubeadmAPIFor(p.Version)
	if err != nil {
		return KubeadmPlan{}, err
	}
	if err := validateEndpoint("API server endpoint", p.APIServerEndpoint); err != nil {
		return KubeadmPlan{}, err
	}
	if p.Token.IsZero() {
		return KubeadmPlan{}, errors.New("kubeadm join: no bootstrap token")
	}
	if len(p.CACertHashes) == 0 {
		return KubeadmPlan{}, errors.New("kubeadm join: no CA certificate hash (ztpd never joins with unsafe-skip-ca-verification)")
	}
	for _, h := range p.CACertHashes {
		if !validCAHash(h) {
			return KubeadmPlan{}, fmt.Errorf("kubeadm join: CA hash %q is not sha256:<64 hex>", h)
		}
	}
	if p.ControlPlane {
		if !p.Version.AtLeast(1, 16) {
			return KubeadmPlan{}, fmt.Errorf("kubeadm join: extra control planes need Kubernetes 1.16+ (have %s)", p.Version.Tag())
		}
		if p.CertificateKey.IsZero() {
			return KubeadmPlan{}, errors.New("kubeadm join: an extra control plane needs the certificate key")
		}
	}
	if api == KubeadmFlags {
		cmd := []string{"kubeadm", "join", p.APIServerEndpoint,
			"--token", p.Token.Reveal(),
			"--cri-socket", criSocket(p.Version)}
		for _, h := range p.CACertHashes {
			cmd = append(cmd, "--discovery-token-ca-cert-hash", h)
		}
		if p.NodeName != "" {
			cmd = append(cmd, "--node-name", p.NodeName)
		}
		return KubeadmPlan{API: api, Commands: [][]string{cmd}}, nil
	}
	jc := joinConfiguration{
		typeMeta: typeMeta{APIVersion: string(api), Kind: "JoinConfiguration"},
		NodeRegistration: nodeRegistration{Name: p.NodeName, CRISocket: criSocket(p.Version),
			NodeLabels: NodeLabelsArg(p.NodeLabels), NodeIP: p.NodeIP, ArgList: api == KubeadmV1Beta4},
		Discovery: discovery{BootstrapToken: &bootstrapTokenDiscovery{
			Token:             p.Token.Reveal(),
			APIServerEndpoint: p.APIServerEndpoint,
			CACertHashes:      slices.Clone(p.CACertHashes),
		}},
	}
	if p.ControlPlane {
		jc.ControlPlane = &joinControlPlane{CertificateKey: p.CertificateKey.Reveal()}
		if p.AdvertiseAddress != "" {
			jc.ControlPlane.LocalAPIEndpoint = &apiEndpoint{AdvertiseAddress: p.AdvertiseAddress, BindPort: 6443}
		}
	}
	cfg, err := marshalDocs(jc)
	if err != nil {
		return KubeadmPlan{}, err
	}
	return KubeadmPlan{API: api, Config: cfg, Commands: [][]string{{"kubeadm", "join", "--config", KubeadmConfigPath}}}, nil
}

func (t Token) usages() []string {
	if t.Usages == nil {
		return tokens.DefaultUsages()
	}
	return t.Usages
}

func (t Token) groups() []string {
	if t.Groups == nil {
		return tokens.DefaultGroups()
	}
	return t.Groups
}

// certSANs lists the API server certificate names: the endpoint host, the
// advertise address and the extras, deduplicated in order.
// DefaultIPv6ServiceSubnet is the Service range of a cluster whose API
// server is on IPv6 and whose configuration names none (kubeadm's default,
// 10.96.0.0/12, is IPv4): a /112, inside kubeadm's limit of 20 bits of
// Service addresses, in the unique local range kind uses too.
const DefaultIPv6ServiceSubnet = "fd00:10:96::/112"

// apiServerOnIPv6 says whether the first control plane's API server
// advertises an IPv6 address: its advertise address, else the control
// plane endpoint's host (the joiner leaves the advertise address out when it
// is the endpoint's address, kubeadm then finds it on the node). A DNS name
// says nothing, and keeps kubeadm's default.
func apiServerOnIPv6(p InitParams) bool {
	host := p.AdvertiseAddress
	if host == "" {
		host, _, _ = net.SplitHostPort(p.ControlPlaneEndpoint)
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Is6() && !a.Is4In6()
}

func certSANs(endpoint, advertise string, extra []string) []string {
	host, _, _ := net.SplitHostPort(endpoint)
	var out []string
	for _, s := range append([]string{host, advertise}, extra...) {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func validateEndpoint(what, hp string) error {
	host, port, err := net.SplitHostPort(hp)
	if err != nil || host == "" {
		return fmt.Errorf("%s %q must be host:port", what, hp)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%s %q: bad port", what, hp)
	}
	if strings.ContainsAny(host, " \t\r\n\"'`$\\") {
		return fmt.Errorf("%s %q: bad host", what, hp)
	}
	return nil
}

// validateEtcdEndpoints checks an external etcd's client endpoints: one
// to seven host:port, each once.
func validateEtcdEndpoints(eps []string) error {
	if len(eps) == 0 || len(eps) > etcdEndpointsMaximum {
		return fmt.Errorf("kubeadm init: external etcd needs 1 to %d endpoints, not %d", etcdEndpointsMaximum, len(eps))
	}
	for i, hp := range eps {
		if err := validateEndpoint("etcd endpoint", hp); err != nil {
			return err
		}
		if slices.Contains(eps[:i], hp) {
			return fmt.Errorf("kubeadm init: etcd endpoint %s is given twice", hp)
		}
	}
	return nil
}

// EtcdEndpoint is the client host:port of an etcd member at addr.
func EtcdEndpoint(addr string) string { return net.JoinHostPort(addr, strconv.Itoa(EtcdClientPort)) }

func validCAHash(h string) bool {
	hexPart, ok := strings.CutPrefix(h, "sha256:")
	if !ok || len(hexPart) != 64 {
		return false
	}
	for _, c := range hexPart {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// yamlDoc is a document the kubeadm configuration file holds.
type yamlDoc interface{ writeYAML(w *yamlWriter) }

// marshalDocs renders YAML documents separated by "---", the way kubeadm
// reads a multi-document config file. Keys are in alphabetical order, as
// kubeadm's own "config print" writes them.
func marshalDocs(docs ...yamlDoc) ([]byte, error) {
	var w yamlWriter
	for i, d := range docs {
		if i > 0 {
			w.b.WriteString("---\n")
		}
		d.writeYAML(&w)
	}
	return []byte(w.String()), nil
}

func (c initConfiguration) writeYAML(w *yamlWriter) {
	w.kv(0, "apiVersion", c.APIVersion)
	if len(c.BootstrapTokens) > 0 {
		w.key(0, "bootstrapTokens")
		for _, t := range c.BootstrapTokens {
			first := true
			field := func() int {
				if first {
					first = false
					w.b.WriteString("- ")
					return 0
				}
				return 2
			}
			if t.Description != "" {
				w.kv(field(), "description", t.Description)
			}
			if len(t.Groups) > 0 {
				w.key(field(), "groups")
				for _, g := range t.Groups {
					w.item(2, g)
				}
			}
			w.kv(field(), "token", t.Token)
			w.kv(field(), "ttl", t.TTL)
			if len(t.Usages) > 0 {
				w.key(field(), "usages")
				for _, u := range t.Usages {
					w.item(2, u)
				}
			}
		}
	}
	if c.CertificateKey != "" {
		w.kv(0, "certificateKey", c.CertificateKey)
	}
	w.kv(0, "kind", c.Kind)
	if c.LocalAPIEndpoint != nil {
		w.key(0, "localAPIEndpoint")
		c.LocalAPIEndpoint.writeYAML(w, 2)
	}
	c.NodeRegistration.writeYAML(w, 0)
}

func (e apiEndpoint) writeYAML(w *yamlWriter, ind int) {
	if e.AdvertiseAddress != "" {
		w.kv(ind, "advertiseAddress", e.AdvertiseAddress)
	}
	if e.BindPort != 0 {
		w.kvRaw(ind, "bindPort", strconv.Itoa(int(e.BindPort)))
	}
}

func (n nodeRegistration) writeYAML(w *yamlWriter, ind int) {
	if n.CRISocket == "" && n.Name == "" && n.NodeLabels == "" && n.NodeIP == "" {
		w.kvRaw(ind, "nodeRegistration", "{}")
		return
	}
	w.key(ind, "nodeRegistration")
	if n.CRISocket != "" {
		w.kv(ind+2, "criSocket", n.CRISocket)
	}
	if n.NodeLabels != "" || n.NodeIP != "" {
		w.key(ind+2, "kubeletExtraArgs")
		for _, a := range [][2]string{{"node-ip", n.NodeIP}, {"node-labels", n.NodeLabels}} {
			if a[1] == "" {
				continue
			}
			// v1beta4 made extraArgs a list of name/value pairs.
			if n.ArgList {
				w.indent(ind + 2)
				w.b.WriteString("- name: " + a[0] + "\n")
				w.kv(ind+4, "value", a[1])
			} else {
				w.kv(ind+4, a[0], a[1])
			}
		}
	}
	if n.Name != "" {
		w.kv(ind+2, "name", n.Name)
	}
}

// NodeLabelsArg renders labels as the kubelet's --node-labels value
// (key=value pairs, comma separated, in key order); "" for none. The
// labels must already be valid Kubernetes label keys and values, which
// contain no comma or equals sign.
func NodeLabelsArg(labels map[string]string) string {
	var b strings.Builder
	for _, k := range sortedKeys(labels) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(labels[k])
	}
	return b.String()
}

func (c clusterConfiguration) writeYAML(w *yamlWriter) {
	if len(c.APIServer.CertSANs) == 0 {
		w.kvRaw(0, "apiServer", "{}")
	} else {
		w.key(0, "apiServer")
		w.key(2, "certSANs")
		for _, s := range c.APIServer.CertSANs {
			w.item(2, s)
		}
	}
	w.kv(0, "apiVersion", c.APIVersion)
	if c.CertificatesDir != "" {
		w.kv(0, "certificatesDir", c.CertificatesDir)
	}
	if c.ClusterName != "" {
		w.kv(0, "clusterName", c.ClusterName)
	}
	w.kv(0, "controlPlaneEndpoint", c.ControlPlaneEndpoint)
	if c.EncryptionAlgorithm != "" {
		w.kv(0, "encryptionAlgorithm", c.EncryptionAlgorithm)
	}
	if e := c.Etcd; e != nil {
		w.key(0, "etcd")
		w.key(2, "external")
		w.kv(4, "caFile", e.CAFile)
		w.kv(4, "certFile", e.CertFile)
		w.key(4, "endpoints")
		for _, ep := range e.Endpoints {
			w.item(4, ep)
		}
		w.kv(4, "keyFile", e.KeyFile)
	}
	w.kv(0, "kind", c.Kind)
	w.kv(0, "kubernetesVersion", c.KubernetesVersion)
	if c.Networking != nil {
		w.key(0, "networking")
		if c.Networking.PodSubnet != "" {
			w.kv(2, "podSubnet", c.Networking.PodSubnet)
		}
		if c.Networking.ServiceSubnet != "" {
			w.kv(2, "serviceSubnet", c.Networking.ServiceSubnet)
		}
	}
}

func (c joinConfiguration) writeYAML(w *yamlWriter) {
	w.kv(0, "apiVersion", c.APIVersion)
	if cp := c.ControlPlane; cp != nil {
		w.key(0, "controlPlane")
		w.kv(2, "certificateKey", cp.CertificateKey)
		if cp.LocalAPIEndpoint != nil {
			w.key(2, "localAPIEndpoint")
			cp.LocalAPIEndpoint.writeYAML(w, 4)
		}
	}
	w.key(0, "discovery")
	if bt := c.Discovery.BootstrapToken; bt != nil {
		w.key(2, "bootstrapToken")
		w.kv(4, "apiServerEndpoint", bt.APIServerEndpoint)
		w.key(4, "caCertHashes")
		for _, h := range bt.CACertHashes {
			w.item(4, h)
		}
		w.kv(4, "token", bt.Token)
	}
	w.kv(0, "kind", c.Kind)
	c.NodeRegistration.writeYAML(w, 0)
}

// The kubeadm configuration types below carry only the fields ztpd sets;
// their JSON names follow kubeadm's v1beta2/v1beta3/v1beta4 types.

type typeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

type initConfiguration struct {
	typeMeta         `json:",inline"`
	BootstrapTokens  []bootstrapToken `json:"bootstrapTokens,omitempty"`
	NodeRegistration nodeRegistration `json:"nodeRegistration"`
	LocalAPIEndpoint *apiEndpoint     `json:"localAPIEndpoint,omitempty"`
	CertificateKey   string           `json:"certificateKey,omitempty"`
}

type bootstrapToken struct {
	Token       string   `json:"token"`
	Description string   `json:"description,omitempty"`
	TTL         string   `json:"ttl"`
	Usages      []string `json:"usages,omitempty"`
	Groups      []string `json:"groups,omitempty"`
}

type nodeRegistration struct {
	Name       string `json:"name,omitempty"`
	CRISocket  string `json:"criSocket,omitempty"`
	NodeLabels string `json:"-"` // kubeletExtraArgs node-labels
	NodeIP     string `json:"-"` // kubeletExtraArgs node-ip
	ArgList    bool   `json:"-"` // v1beta4: extraArgs as a name/value list
}

type apiEndpoint struct {
	AdvertiseAddress string `json:"advertiseAddress,omitempty"`
	BindPort         int32  `json:"bindPort,omitempty"`
}

type clusterConfiguration struct {
	typeMeta             `json:",inline"`
	Networking           *networking   `json:"networking,omitempty"`
	KubernetesVersion    string        `json:"kubernetesVersion"`
	ControlPlaneEndpoint string        `json:"controlPlaneEndpoint"`
	APIServer            apiServer     `json:"apiServer"`
	CertificatesDir      string        `json:"certificatesDir,omitempty"`
	ClusterName          string        `json:"clusterName,omitempty"`
	EncryptionAlgorithm  string        `json:"encryptionAlgorithm,omitempty"`
	Etcd                 *externalEtcd `json:"-"` // etcd.external
}

// externalEtcd is kubeadm's ExternalEtcd.
type externalEtcd struct {
	Endpoints []string `json:"endpoints"`
	CAFile    string   `json:"caFile"`
	CertFile  string   `json:"certFile"`
	KeyFile   string   `json:"keyFile"`
}

type networking struct {
	ServiceSubnet string `json:"serviceSubnet,omitempty"`
	PodSubnet     string `json:"podSubnet,omitempty"`
}

type apiServer struct {
	CertSANs []string `json:"certSANs,omitempty"`
}

type joinConfiguration struct {
	typeMeta         `json:",inline"`
	NodeRegistration nodeRegistration  `json:"nodeRegistration"`
	Discovery        discovery         `json:"discovery"`
	ControlPlane     *joinControlPlane `json:"controlPlane,omitempty"`
}

type discovery struct {
	BootstrapToken *bootstrapTokenDiscovery `json:"bootstrapToken,omitempty"`
}

type bootstrapTokenDiscovery struct {
	Token             string   `json:"token"`
	APIServerEndpoint string   `json:"apiServerEndpoint"`
	CACertHashes      []string `json:"caCertHashes"`
}

type joinControlPlane struct {
	LocalAPIEndpoint *apiEndpoint `json:"localAPIEndpoint,omitempty"`
	CertificateKey   string       `json:"certificateKey"`
}
