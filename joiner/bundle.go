package joiner

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/jsontext"
	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/joiner/pki"
	"github.com/ztpd/ztpd/joiner/tokens"
)

// Bundle is what one device receives to join its cluster. It holds
// secrets: String and MarshalJSON are redacted; Deliver renders the full
// document for the device.
type Bundle struct {
	Cluster           string
	ClusterName       string
	Device            string
	Role              string // control-plane, worker or sonic
	Init              bool   // this node runs kubeadm init (the first control plane)
	Method            string
	KubernetesVersion string
	APIEndpoint       string // host:port
	CAHash            string // sha256:<hex>
	// NodeName is the Node the member registers as; NodeLabels are the
	// labels its kubelet sets at registration (--node-labels). The
	// kubeadm and k3s configurations carry both already.
	NodeName   string
	NodeLabels map[string]string

	// Exactly one of these is set, by method.
	CloudConfig []byte             // kubeadm VMs: "#cloud-config" user-data
	SONiC       *bundle.SonicJoin  // SONiC switches
	K3s         *bundle.K3sAgent   // k3s agents
	Plan        bundle.KubeadmPlan // the kubeadm plan inside CloudConfig
	// Node is what CloudConfig writes and runs, for the join waiter
	// (NodeDelivery); set with CloudConfig.
	Node *bundle.Node

	ReportURL string
	// ReportPin is what the reporting client pins ReportURL to (curl
	// --pinnedpubkey), "" over plain HTTP.
	ReportPin   string
	reportToken string
	// agentFiles install the device agent (Options.AgentFiles); the
	// kubeadm cloud-config carries them itself.
	agentFiles []bundle.File
}

// ReportToken is the node's credential for Report.
func (b *Bundle) ReportToken() string { return b.reportToken }

// String describes the bundle without secrets.
func (b *Bundle) String() string {
	return fmt.Sprintf("bundle(%s %s %s in %s, %s)", b.Device, b.Method, b.Role, b.ClusterName, b.KubernetesVersion)
}

// LogValue keeps slog from printing secrets.
func (b *Bundle) LogValue() slog.Value { return slog.StringValue(b.String()) }

// MarshalJSON is the redacted summary (for logs and admin listings).
func (b *Bundle) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]string{
		"cluster": b.Cluster, "cluster_name": b.ClusterName, "device": b.Device, "role": b.Role,
		"method": b.Method, "kubernetes_version": b.KubernetesVersion, "api_endpoint": b.APIEndpoint, "ca_hash": b.CAHash,
	})
}

// DeliveredFile is one file in the device's document.
type DeliveredFile struct {
	Path    string `json:"path"`
	Mode    string `json:"mode"`
	Content string `json:"content"`
	// Encoding is how Content is encoded ("" : as it is; FileEncodingGzip:
	// gzip then base64, cloud-init write_files' "gzip+base64").
	Encoding string `json:"encoding,omitempty"`
	// secret: the content is a credential or key (bundle.File.Secret);
	// its encoding is never kept (staticContent) and it is never compressed.
	secret bool
}

// FileEncodingGzip is the one content encoding a device may accept:
// the join plugin asks for it in its request.
const FileEncodingGzip = "gzip+base64"

// Decoded is the file's content as the device writes it: Content decoded
// as Encoding says (the join plugin's file_content, in Go).
func (f DeliveredFile) Decoded() ([]byte, error) {
	switch f.Encoding {
	case "":
		return []byte(f.Content), nil
	case FileEncodingGzip:
		zr, err := gzip.NewReader(base64.NewDecoder(base64.StdEncoding, strings.NewReader(f.Content)))
		if err != nil {
			return nil, fmt.Errorf("joiner: %s: %w", f.Path, err)
		}
		return io.ReadAll(zr)
	}
	return nil, fmt.Errorf("joiner: %s: unknown encoding %q", f.Path, f.Encoding)
}

// CompressFiles gzips the large non-secret files (the device agent's
// script), for a device that accepts FileEncodingGzip: the SONiC bundle
// goes from ~42 KB to ~19 KB, which was a tenth of ztpd's CPU in a boot
// storm, writing it to the socket. The compressed forms are
// kept, like their JSON encodings; secrets are never compressed or kept.
func (d *Delivery) CompressFiles() error {
	for i, f := range d.Files {
		if f.secret || f.Encoding != "" || len(f.Content) < staticContentMin {
			continue
		}
		enc, err := compressedContent.get(f.Content, gzipBase64)
		if err != nil {
			return err
		}
		d.Files[i].Content, d.Files[i].Encoding = enc, FileEncodingGzip
	}
	return nil
}

// Delivery is the full document a device receives (secrets included).
type Delivery struct {
	Cluster           string            `json:"cluster"`
	ClusterName       string            `json:"cluster_name"`
	Device            string            `json:"device"`
	Role              string            `json:"role"`
	Init              bool              `json:"init,omitempty"`
	Method            string            `json:"method"`
	KubernetesVersion string            `json:"kubernetes_version"`
	APIEndpoint       string            `json:"api_endpoint"`
	CAHash            string            `json:"ca_hash"`
	NodeName          string            `json:"node_name,omitempty"`
	NodeLabels        map[string]string `json:"node_labels,omitempty"`
	CloudConfig       string            `json:"cloud_config,omitempty"`
	ConfigDB          json.RawMessage   `json:"config_db,omitempty"`
	Files             []DeliveredFile   `json:"files,omitempty"`
	ReportURL         string            `json:"report_url,omitempty"`
	ReportToken       string            `json:"report_token,omitempty"`
	ReportPin         string            `json:"report_pin,omitempty"`
	// Agent: Files install the device agent; the join plugin enables its
	// timer.
	Agent bool `json:"agent,omitempty"`
	// Commands run in order once Files are written (NodeDelivery: what
	// the cloud-config's runcmd would run).
	Commands []string `json:"commands,omitempty"`
}

// NodeDelivery is a kubeadm VM's join data, the same files and commands
// as its cloud-config, as the join waiter fetches them over pinned TLS;
// ok is false for a bundle that joins otherwise. The report credential
// is among the files (report.env), not beside them.
func (b *Bundle) NodeDelivery() (d Delivery, ok bool) {
	if b.Node == nil {
		return Delivery{}, false
	}
	d = Delivery{Cluster: b.Cluster, ClusterName: b.ClusterName, Device: b.Device, Role: b.Role, Init: b.Init, Method: b.Method,
		KubernetesVersion: b.KubernetesVersion, APIEndpoint: b.APIEndpoint, CAHash: b.CAHash,
		NodeName: b.NodeName, NodeLabels: b.NodeLabels, Commands: b.Node.Commands()}
	for _, f := range b.Node.Files() {
		d.Files = append(d.Files, DeliveredFile{Path: f.Path, Mode: f.Mode, Content: f.Content, secret: f.Secret})
	}
	return d, true
}

// Deliver renders the device's document, secrets included. Call it only to
// answer the device the bundle was issued to.
func (b *Bundle) Deliver() Delivery {
	d := Delivery{Cluster: b.Cluster, ClusterName: b.ClusterName, Device: b.Device, Role: b.Role, Init: b.Init, Method: b.Method,
		KubernetesVersion: b.KubernetesVersion, APIEndpoint: b.APIEndpoint, CAHash: b.CAHash,
		NodeName: b.NodeName, NodeLabels: b.NodeLabels,
		CloudConfig: string(b.CloudConfig), ReportURL: b.ReportURL, ReportToken: b.reportToken, ReportPin: b.ReportPin}
	add := func(f bundle.File) {
		d.Files = append(d.Files, DeliveredFile{Path: f.Path, Mode: fmt.Sprintf("%04o", f.Mode), Content: string(f.Content), secret: f.Secret})
	}
	if b.SONiC != nil {
		d.ConfigDB = b.SONiC.ConfigDB
		for _, f := range b.SONiC.Files {
			add(f)
		}
	}
	if b.K3s != nil {
		add(b.K3s.Config)
		add(b.K3s.Env)
	}
	if len(b.agentFiles) > 0 && b.CloudConfig == nil {
		for _, f := range b.agentFiles {
			add(f)
		}
		d.Agent = true
	}
	return d
}

// AppendJSON appends d as encoding/json writes it (the device's plugin
// reads either), without reflection, and with the encoding of large
// non-secret file contents (the agent script, the join plugin) kept:
// escaping them for every bundle was 5 % of a boot storm's CPU.
func (d *Delivery) AppendJSON(dst []byte) ([]byte, error) {
	str := func(name, v string, omitEmpty bool) {
		if omitEmpty && v == "" {
			return
		}
		dst = append(dst, ',', '"')
		dst = append(dst, name...)
		dst = append(dst, '"', ':')
		dst = jsontext.AppendString(dst, v)
	}
	dst = append(dst, `{"cluster":`...)
	dst = jsontext.AppendString(dst, d.Cluster)
	str("cluster_name", d.ClusterName, false)
	str("device", d.Device, false)
	str("role", d.Role, false)
	if d.Init {
		dst = append(dst, `,"init":true`...)
	}
	str("method", d.Method, false)
	str("kubernetes_version", d.KubernetesVersion, false)
	str("api_endpoint", d.APIEndpoint, false)
	str("ca_hash", d.CAHash, false)
	str("node_name", d.NodeName, true)
	if len(d.NodeLabels) > 0 {
		dst = append(dst, `,"node_labels":`...)
		dst = jsontext.AppendStringMap(dst, d.NodeLabels)
	}
	str("cloud_config", d.CloudConfig, true)
	if len(d.ConfigDB) > 0 {
		raw, err := json.Marshal(d.ConfigDB) // compacted and escaped, as a field of d would be
		if err != nil {
			return nil, err
		}
		dst = append(dst, `,"config_db":`...)
		dst = append(dst, raw...)
	}
	if len(d.Files) > 0 {
		dst = append(dst, `,"files":[`...)
		for i, f := range d.Files {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"path":`...)
			dst = jsontext.AppendString(dst, f.Path)
			dst = append(dst, `,"mode":`...)
			dst = jsontext.AppendString(dst, f.Mode)
			dst = append(dst, `,"content":`...)
			if f.secret || len(f.Content) < staticContentMin {
				dst = jsontext.AppendString(dst, f.Content)
			} else {
				enc, _ := staticContent.get(f.Content, jsonString) // jsonString cannot fail
				dst = append(dst, enc...)
			}
			if f.Encoding != "" {
				dst = append(dst, `,"encoding":`...)
				dst = jsontext.AppendString(dst, f.Encoding)
			}
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	str("report_url", d.ReportURL, true)
	str("report_token", d.ReportToken, true)
	str("report_pin", d.ReportPin, true)
	if d.Agent {
		dst = append(dst, `,"agent":true`...)
	}
	if len(d.Commands) > 0 {
		dst = append(dst, `,"commands":[`...)
		for i, c := range d.Commands {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = jsontext.AppendString(dst, c)
		}
		dst = append(dst, ']')
	}
	return append(dst, '}'), nil
}

// staticContentMin is the size from which a non-secret file's encoding is
// kept: the agent script and the join plugin, the same in every bundle.
const staticContentMin = 4096

// staticContent keeps the JSON encoding of large non-secret file contents,
// keyed by the content itself (so a hit is always the right encoding), a
// few of them: the agent's files change only with ztpd.
var staticContent = &contentCache[[]byte]{max: 16}

// compressedContent keeps their gzip+base64 form the same way.
var compressedContent = &contentCache[string]{max: 16}

// contentCache keeps what is derived from a few large contents, keyed by
// the content; once full it starts again.
type contentCache[V any] struct {
	mu  sync.Mutex
	max int
	m   map[string]V
}

func (c *contentCache[V]) get(s string, derive func(string) (V, error)) (V, error) {
	c.mu.Lock()
	v, ok := c.m[s]
	c.mu.Unlock()
	if ok {
		return v, nil
	}
	v, err := derive(s)
	if err != nil {
		return v, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) >= c.max {
		c.m = map[string]V{}
	}
	c.m[s] = v
	c.mu.Unlock()
	return v, nil
}

func jsonString(s string) ([]byte, error) { return jsontext.AppendString(nil, s), nil }

func gzipBase64(s string) (string, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return "", err
	}
	if _, err := io.WriteString(zw, s); err != nil {
		return "", err
	}
	if err := zw.Close(); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

// render builds the bundle from the committed admission result. It runs
// outside the store transaction: signing and YAML rendering do not hold up
// other joins' commits.
func (s *Service) render(ctx context.Context, res *joinResult, now time.Time) (*Bundle, error) {
	keys, err := s.keysFor(res.cluster.ID)
	if err != nil {
		return nil, err
	}
	v, err := bundle.ParseVersion(res.rt.KubernetesVersion)
	if err != nil {
		return nil, err
	}
	b := &Bundle{
		Cluster: res.cluster.ID, ClusterName: res.cluster.Name, Device: res.device.ID, Role: res.role, Init: res.first,
		Method: res.method, KubernetesVersion: v.Tag(), APIEndpoint: res.rt.APIEndpoint, CAHash: keys.caHash(),
	}
	var report *bundle.Report
	if url, pin := s.reportTarget(ctx); url != "" {
		b.ReportURL, b.ReportPin, b.reportToken = url, pin, res.report.Reveal()
		report = &bundle.Report{URL: url, Token: b.reportToken, Pin: pin}
	}
	if s.opts.AgentFiles != nil {
		if b.agentFiles, err = s.opts.AgentFiles(res.agent.Reveal()); err != nil {
			return nil, fmt.Errorf("device agent: %w", err)
		}
	}
	nodeName := res.nodeName
	labels := NodeLabels(res.device, res.role, s.profileLabels(res.device.Profile))
	b.NodeName, b.NodeLabels = nodeName, labels
	var nodeTok tokens.BootstrapToken
	if res.tokenID != "" {
		if nodeTok, err = tokens.DeriveBootstrapToken(keys.seed, res.tokenID); err != nil {
			return nil, err
		}
		if res.publish && keys.ext != nil {
			if err := s.publishExternalToken(ctx, res, keys, nodeTok); err != nil {
				return nil, fmt.Errorf("create the node's bootstrap token in the external cluster: %w", err)
			}
		} else if res.publish {
			if err := s.publishToken(ctx, res, keys, nodeTok); err != nil {
				return nil, fmt.Errorf("create the node's bootstrap token in the cluster: %w", err)
			}
		}
	}
	switch res.method {
	case MethodKubeadm:
		if res.role == RoleEtcd {
			if b.Node, err = renderEtcdMember(res, keys, now, report, b.agentFiles); err != nil {
				return nil, err
			}
			b.CloudConfig = b.Node.CloudConfig()
			break
		}
		var plan bundle.KubeadmPlan
		cc := bundle.CloudConfigParams{Report: report, Agent: b.agentFiles}
		switch {
		case res.first && keys.ext != nil:
			return nil, errNoCAKey("a first control plane")
		case res.first:
			var toks []bundle.Token
			for _, t := range res.initTokens {
				bt, err := tokens.DeriveBootstrapToken(keys.seed, t.ID)
				if err != nil {
					return nil, err
				}
				ttl := time.Duration(0)
				if !t.Expires.IsZero() {
					ttl = t.Expires.Sub(now).Truncate(time.Second)
					if ttl < time.Second {
						continue
					}
				}
				toks = append(toks, bundle.Token{Token: bt, TTL: ttl, Description: "ztpd join token"})
			}
			if len(toks) == 0 {
				// A one-node cluster still needs a token for kubeadm init.
				bt, err := tokens.GenerateBootstrapToken()
				if err != nil {
					return nil, err
				}
				toks = append(toks, bundle.Token{Token: bt, TTL: time.Hour, Description: "ztpd init (unused)"})
			}
			host, _, _ := net.SplitHostPort(res.rt.APIEndpoint)
			sans := []string{}
			if res.cluster.ExternalLBIP != "" {
				sans = append(sans, res.cluster.ExternalLBIP)
			}
			ip := res.ip
			if ip == host {
				ip = ""
			}
			params := bundle.InitParams{
				Version: v, ControlPlaneEndpoint: res.rt.APIEndpoint, AdvertiseAddress: ip, NodeName: nodeName,
				CertSANs: sans, Tokens: toks, EncryptionAlgorithm: pki.Algorithm(res.rt.Algorithm), NodeLabels: labels,
				NodeIP: nodeIP(res.ip),
			}
			if res.cluster.ControlNodes > 1 {
				params.CertificateKey = keys.certKey
			}
			if res.cluster.EtcdNodes > 0 {
				var eps []string
				if cc.EtcdClient, eps, err = etcdClientFiles(res, keys, now); err != nil {
					return nil, err
				}
				params.ExternalEtcd = &bundle.ExternalEtcd{Endpoints: eps}
			}
			if plan, err = bundle.PlanInit(params); err != nil {
				return nil, err
			}
			keyPEM, err := keys.ca.PrivateKeyPEM()
			if err != nil {
				return nil, err
			}
			cc.Role, cc.CACertPEM, cc.CAKeyPEM = bundle.RoleFirstControlPlane, keys.ca.CertPEM(), keyPEM
			cc.ExtraManifests = map[string][]byte{"sonic-rbac.yaml": []byte(bundle.SonicRBAC),
				"ztpd-cluster-admins.yaml": []byte(bundle.ClusterAdminsRBAC)}
		default:
			jp := bundle.JoinParams{Version: v, APIServerEndpoint: res.rt.APIEndpoint, Token: nodeTok,
				CACertHashes: []string{keys.caHash()}, NodeName: nodeName, NodeLabels: labels, NodeIP: nodeIP(res.ip)}
			cc.Role = bundle.RoleWorker
			if res.role == RoleControlPlane && keys.ext != nil {
				return nil, errNoCAKey("a control-plane join")
			}
			if res.role == RoleControlPlane {
				jp.ControlPlane, jp.CertificateKey, jp.AdvertiseAddress = true, keys.certKey, res.ip
				cc.Role = bundle.RoleControlPlane
			}
			if plan, err = bundle.PlanJoin(jp); err != nil {
				return nil, err
			}
		}
		cc.Plan = plan
		if b.Node, err = bundle.BuildNode(cc); err != nil {
			return nil, err
		}
		b.CloudConfig = b.Node.CloudConfig()
		b.Plan = plan
	case MethodSONiC:
		if keys.ext != nil {
			if b.SONiC, err = renderExternalSonic(res, keys, nodeTok); err != nil {
				return nil, err
			}
			break
		}
		host, port, _ := net.SplitHostPort(res.rt.APIEndpoint)
		p := 6443
		fmt.Sscan(port, &p)
		sj, err := bundle.RenderSonic(bundle.SonicParams{ClusterID: res.cluster.ID, ServerHost: host, ServerPort: p, SwitchName: nodeName,
			CSR: res.csr.csr}, keys.ca, now)
		if err != nil {
			return nil, err
		}
		b.SONiC = &sj
	case MethodK3s:
		if keys.ext != nil {
			return nil, errNoCAKey("a k3s agent's token")
		}
		kt, err := tokens.K3sTokenFor(keys.ca.CertPEM(), nodeTok)
		if err != nil {
			return nil, err
		}
		ag, err := bundle.RenderK3sAgent(bundle.K3sAgentParams{ServerURL: "https://" + res.rt.APIEndpoint, Token: kt, NodeName: nodeName,
			NodeLabels: strings.Split(bundle.NodeLabelsArg(labels), ",")})
		if err != nil {
			return nil, err
		}
		b.K3s = &ag
	default:
		return nil, fmt.Errorf("unknown join method %q", res.method)
	}
	return b, nil
}

// memberNodeName is the Kubernetes node name ztpd puts in a member's
// bundle and later matches the cluster's Node by: the lower-cased hostname
// when it is a valid node name, else one made from the MAC address
// (sonic-<mac> for switches, node-<mac> otherwise), so every member has an
// exact name even without a usable hostname.
func memberNodeName(dev core.Device, method string) string {
	if n := nodeName(dev.Hostname); n != "" && (method != MethodSONiC || n != "sonic") {
		return n
	}
	prefix := "node-"
	if method == MethodSONiC {
		prefix = "sonic-"
	}
	return prefix + strings.ReplaceAll(dev.ID, ":", "")
}

// nodeName is the lower-cased hostname when it is a valid node name.
func nodeName(hostname string) string {
	h := strings.ToLower(strings.TrimSpace(hostname))
	if h == "" || len(h) > 63 {
		return ""
	}
	for i, c := range h {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && (c != '-' || i == 0 || i == len(h)-1) {
			return ""
		}
	}
	return h
}

// nodeIP is the kubelet's node IP for a node that joined from addr: its
// IPv6 address, since a kubelet left to choose on a dual-stack host takes
// its IPv4 one and the Node would not be reachable where it asked from;
// "" for IPv4, where the kubelet's own choice has always been kept.
func nodeIP(addr string) string {
	if a, err := netip.ParseAddr(addr); err == nil && a.Is6() && !a.Is4In6() {
		return a.WithZone("").String()
	}
	return ""
}
