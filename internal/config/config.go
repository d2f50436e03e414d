// Package config loads and validates ztpd's YAML configuration. Every
// validation error names the field path and the problem, e.g.
// "dhcp.subnets[0].pools[1]: start 10.99.1.9 is after end 10.99.1.1".
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ztpd/ztpd/internal/httpserve"
)

// Config is the whole appliance configuration.
type Config struct {
	DataDir       string `yaml:"data_dir"`
	AdvertiseAddr string `yaml:"advertise_addr"` // address put into URLs handed to devices
	// AdvertiseAddr6 is the IPv6 address put into URLs handed to devices
	// that ask over IPv6, beside an IPv4 advertise_addr (dual stack). One
	// field per family rather than a list: each URL needs exactly one
	// address of the device's family, and configurations written before
	// IPv6 stay valid as they are.
	AdvertiseAddr6 string   `yaml:"advertise_addr6"`
	KeyFile        string   `yaml:"key_file"` // at-rest key; default <data_dir>/secret.key
	Log            Log      `yaml:"log"`
	HTTP           HTTP     `yaml:"http"`
	API            API      `yaml:"api"`
	TFTP           TFTP     `yaml:"tftp"`
	DHCP           DHCP     `yaml:"dhcp"`
	ZTP            ZTP      `yaml:"ztp"`
	Events         Events   `yaml:"events"`
	Devices        Devices  `yaml:"devices"`
	Joiner         Joiner   `yaml:"joiner"`
	Rollout        Rollout  `yaml:"rollout"`
	Store          Store    `yaml:"store"`
	Profiles       []string `yaml:"profiles"`  // profile YAML files or directories
	Positions      []string `yaml:"positions"` // cabling plan files or directories (*.yaml, *.yml, *.csv)
	Debug          Debug    `yaml:"debug"`
}

// Rollout bounds each node's steps in rollouts (upgrades,
// scale-down, delete, mode switches).
type Rollout struct {
	// DrainTimeout is how long a Node's drain may wait for evictions a
	// PodDisruptionBudget refuses before the rollout stops.
	DrainTimeout Duration `yaml:"drain_timeout"`
	// StepTimeout bounds each agent step and the Node's return to Ready.
	StepTimeout Duration `yaml:"step_timeout"`
	// GateScripts is the directory of the scripts a rollout's gate may
	// run as its operator check (by file name); empty: none may.
	GateScripts string `yaml:"gate_scripts"`
}

// Store is where ztpd keeps its state: one bbolt file in the
// data directory (backend bolt, the one-box default), an external etcd
// cluster (etcd), or an etcd member embedded in each appliance
// (etcd-embedded: three appliances and nothing else).
type Store struct {
	Backend string `yaml:"backend"` // bolt | etcd | etcd-embedded
	// Prefix of ztpd's keys in etcd (default /ztpd/).
	Prefix string `yaml:"prefix"`
	// Endpoints of the external etcd cluster (https://host:2379).
	Endpoints []string `yaml:"endpoints"`
	// TLS: the appliance's certificate and key, and the CA that signed the
	// etcd servers' (external) or every appliance's (embedded: peers and
	// clients present certificates it signed, mutual TLS).
	TLS StoreTLS `yaml:"tls"`
	// MaxTxnOps is the etcd cluster's --max-txn-ops (external default 128,
	// embedded 16384): past half of it a transaction's reads are compared
	// per bucket.
	MaxTxnOps int `yaml:"max_txn_ops"`
	// Name is this appliance's name: its etcd member's (embedded) and the
	// one its state changes are marked with.
	Name string `yaml:"name"`
	// Peers are every appliance's etcd member, this one's included
	// (embedded): name and peer URL (https://<address>:2380).
	Peers []StorePeer `yaml:"peers"`
	// ClientURL is where the embedded member also serves etcd's client API
	// (etcdctl, an external backup); default https://127.0.0.1:2379.
	ClientURL string `yaml:"client_url"`
	// Appliances names every appliance sharing an external etcd store
	// (backend etcd), this one's (name) included; with etcd-embedded they
	// are the peers. Two or more make the appliances split DHCP by client
	// hash and run the singletons on one of them.
	Appliances []string `yaml:"appliances"`
	// SessionTTL bounds how long a dead appliance's DHCP clients go
	// unanswered before the others take them over (default 5s).
	SessionTTL Duration `yaml:"session_ttl"`
	// PeerAddr is where this appliance serves image blobs to the others,
	// with mutual TLS (store.tls); default <advertise_addr>:8444.
	PeerAddr string `yaml:"peer_addr"`
}

// Group is every appliance sharing the store, in configured order, when
// there are two or more; nil on one box.
func (s Store) Group() []string {
	var names []string
	switch s.Backend {
	case "etcd-embedded":
		for _, p := range s.Peers {
			names = append(names, p.Name)
		}
	case "etcd":
		names = s.Appliances
	}
	if len(names) < 2 {
		return nil
	}
	return names
}

// StoreTLS names the files of the store's TLS.
type StoreTLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	CAFile   string `yaml:"ca_file"`
}

// Enabled reports whether any file is named.
func (t StoreTLS) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" || t.CAFile != "" }

// StorePeer is one appliance's embedded etcd member.
type StorePeer struct {
	Name string `yaml:"name"`
	URL  string `yaml:"url"`
}

// Debug holds diagnostics that are off by default.
type Debug struct {
	// PprofAddr serves net/http/pprof (CPU and heap profiles) on its own
	// listener; keep it on loopback.
	PprofAddr string `yaml:"pprof_addr"`
}

// Log selects the slog handler.
type Log struct {
	Level  string `yaml:"level"`  // debug | info | warn | error
	Format string `yaml:"format"` // text | json
}

// HTTP is the ZTP content listener (ztp.json, configs, images, join, metrics).
type HTTP struct {
	Addr string `yaml:"addr"`
	// MetadataAddr serves the CloudStack/cloud-init metadata service
	// (/latest/meta-data/...). CloudStack VMs look for it on port 80 of their DHCP
	// server; empty disables the extra listener (the paths stay on Addr).
	MetadataAddr string `yaml:"metadata_addr"`
	// ONIELinkLocal names the interfaces on whose IPv6 link-local
	// address(es) ONIE's discovery without DHCP is answered: port 80, the
	// installer waterfall names only (ONIE asks each neighbour that
	// answers its ping of ff02::1). Empty (the default): none, so an
	// appliance answers ONIE on a link only where its operator says
	// switches install from, not on every uplink it has.
	ONIELinkLocal []string `yaml:"onie_link_local"`

	// Limits of every HTTP listener (this one, metadata_addr, api.addr and
	// debug.pprof_addr): see internal/httpserve.Limits.
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"` // request line and headers
	ReadBodyTimeout   Duration `yaml:"read_body_timeout"`   // a request body
	WriteTimeout      Duration `yaml:"write_timeout"`       // no progress sending an answer
	IdleTimeout       Duration `yaml:"idle_timeout"`        // a kept-alive connection between requests
	MaxHeaderBytes    int      `yaml:"max_header_bytes"`    // request line and headers
	MaxConns          int      `yaml:"max_conns"`           // connections served at once, per listener
	// MaxConnsPerSource is what one client address may hold of a
	// listener; 0: 256 or half of max_conns, whichever is smaller.
	MaxConnsPerSource int `yaml:"max_conns_per_source"`
	// Request bodies held in memory at once (a request reserves its
	// Content-Length, or its cap when chunked, before any of it is read;
	// one that does not fit is refused unread): by every listener
	// together, and by one client address's requests.
	MaxBodyBytesInFlight  int64 `yaml:"max_body_bytes_in_flight"`
	MaxBodyBytesPerSource int64 `yaml:"max_body_bytes_per_source"`

	// TLS is the device-facing HTTPS listener: the same device routes
	// (content, /join, the agent door) over TLS, its certificate's pin
	// named in the documents devices fetch in clear.
	TLS DeviceTLS `yaml:"tls"`
}

// DeviceTLS configures the device-facing HTTPS listener.
type DeviceTLS struct {
	// Enabled serves it (the default): ztp.json's join-url and the report
	// URL switches get are https, pinned to its certificate. Off, the join
	// answer (certificates, agent and report credentials) and the reports
	// cross the network in clear; ztpd warns at every start.
	Enabled bool `yaml:"enabled"`
	// Addr is its address; default <http.addr host>:443, or a free port
	// on a loopback http.addr (trying ztpd out, no root, no device can
	// reach it anyway). Port 0 takes a free port; documents name the port
	// actually bound.
	Addr string `yaml:"addr"`
	// CertFile and KeyFile are the operator's certificate; without them a
	// key pair is generated once and kept sealed in the store, so every
	// appliance of a group presents the same one.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// RotationGrace is how long documents name both pins before the
	// listener switches to a rotated key pair, and the old pin after
	// (24h).
	RotationGrace Duration `yaml:"rotation_grace"`
}

// DeviceTLSDefaultPort is the device HTTPS listener's port when
// http.tls.addr is not set and http.addr is not loopback.
const DeviceTLSDefaultPort = "443"

// DeviceTLSListener is the device HTTPS listener's address, "" when it is
// off.
func (c *Config) DeviceTLSListener() string {
	if !c.HTTP.TLS.Enabled {
		return ""
	}
	if c.HTTP.TLS.Addr != "" {
		return c.HTTP.TLS.Addr
	}
	host, _, _ := net.SplitHostPort(c.HTTP.Addr)
	if httpserve.IsLoopback(c.HTTP.Addr) && host != "" {
		// Port 443 needs root or CAP_NET_BIND_SERVICE, which a trial run
		// of `ztpd serve` has not; a free port serves it as well.
		return net.JoinHostPort(host, "0")
	}
	return net.JoinHostPort(host, DeviceTLSDefaultPort)
}

// DeviceTLSOffWarning is logged at each start, and shown among the
// console's warnings, while the device HTTPS listener is off.
const DeviceTLSOffWarning = "the device HTTPS listener is off (http.tls.enabled: false): switches fetch their join answer " +
	"(certificates, agent and report credentials) and send their reports over plain HTTP, and VMs' user-data carries their join secrets " +
	"(bootstrap tokens, the first control plane's cluster CA key, agent and report credentials), where anyone on the management network can read them"

func (c *Config) validateDeviceTLS(errs *Errors) {
	t := c.HTTP.TLS
	checkHostPort(errs, "http.tls.addr", t.Addr, false)
	if t.CertFile != "" && t.KeyFile == "" || t.CertFile == "" && t.KeyFile != "" {
		errs.add("http.tls", "cert_file and key_file must be given together")
	}
	if d := t.RotationGrace.D(); d < time.Minute || d > 30*24*time.Hour {
		errs.add("http.tls.rotation_grace", "%s is outside 1m..720h (30 days)", d)
	}
	addr := c.DeviceTLSListener()
	if addr == "" {
		return
	}
	for _, other := range []struct{ field, addr string }{{"http.addr", c.HTTP.Addr}, {"http.metadata_addr", c.HTTP.MetadataAddr}} {
		if other.addr != "" && sameListener(addr, other.addr) {
			errs.add("http.tls.addr", "%s is the address of %s; give the device HTTPS listener its own port", addr, other.field)
		}
	}
	if api, _ := c.APIListener(); api != "" && sameListener(addr, api) {
		errs.add("http.tls.addr", "%s is the API's address; give the device HTTPS listener its own port", addr)
	}
}

// sameListener reports whether two host:port addresses would bind the
// same port on a shared address.
func sameListener(a, b string) bool {
	ha, pa, err1 := net.SplitHostPort(a)
	hb, pb, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || pa != pb || pa == "0" { // 0: each gets a free port
		return false
	}
	wild := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || wild(ha) || wild(hb)
}

// BodyBudget is the bound of request bodies in flight the listeners share,
// counted in m.
func (h HTTP) BodyBudget(m *httpserve.Metrics) *httpserve.BodyBudget {
	return httpserve.NewBodyBudget(h.MaxBodyBytesInFlight, h.MaxBodyBytesPerSource, m)
}

// Limits are the listener limits as internal/httpserve takes them.
func (h HTTP) Limits() httpserve.Limits {
	return httpserve.Limits{ReadHeaderTimeout: h.ReadHeaderTimeout.D(), ReadBodyTimeout: h.ReadBodyTimeout.D(),
		WriteTimeout: h.WriteTimeout.D(), IdleTimeout: h.IdleTimeout.D(), MaxHeaderBytes: h.MaxHeaderBytes, MaxConns: h.MaxConns,
		MaxConnsPerSource: h.MaxConnsPerSource}
}

// API is the REST and CloudStack-compatible API listener.
type API struct {
	// Addr is the API's own listener. Empty serves the API on http.addr when
	// that is a loopback address (or insecure_plain_http is set), else on
	// <http.addr host>:8443 with TLS (see Config.APIListener).
	Addr string `yaml:"addr"`
	// TLS applies to the API's own listener.
	TLS TLS `yaml:"tls"`
	// InsecurePlainHTTP allows the API in plain HTTP on an address other
	// than loopback: signed requests, kubeconfigs and join bundles then
	// cross the network readable by anyone on it. ztpd warns at start.
	InsecurePlainHTTP bool `yaml:"insecure_plain_http"`
	// AuthFailuresPerMinute bounds failed authentications per client address.
	AuthFailuresPerMinute int `yaml:"auth_failures_per_minute"`
	// RequireExpiryREST refuses REST signatures without expires (which
	// never expire). On by default.
	RequireExpiryREST bool `yaml:"require_expiry_rest"`
	// RequireExpiryCloudStack refuses CloudStack signatures without
	// signatureversion=3 and expires. Off by default: CloudStack accepts
	// them, and so must a drop-in replacement.
	RequireExpiryCloudStack bool `yaml:"require_expiry_cloudstack"`
	// CloudStackUnversionedWrites is "refuse" (the default) or "allow":
	// whether CloudStack writes signed without signatureversion=3 and
	// expires are accepted. Such a signature never expires; when allowed,
	// each is remembered in the store for good and accepted once.
	CloudStackUnversionedWrites string `yaml:"cloudstack_unversioned_writes"`
	// MaxSignatureLifetime is the furthest ahead a signature's expires may
	// lie (the cloudstack-go SDK signs for 15 minutes).
	MaxSignatureLifetime Duration `yaml:"max_signature_lifetime"`
	// KubeconfigTTL is how long an issued kubeconfig's certificate is valid.
	KubeconfigTTL Duration `yaml:"kubeconfig_ttl"`
	// ClusterAlertAfter is how long a Running cluster may be unhealthy (its
	// API server not answering ztpd, fewer Ready Nodes than desired)
	// before it moves to Alert.
	ClusterAlertAfter Duration `yaml:"cluster_alert_after"`
	// ClusterStartTimeout is how long a cluster may stay Starting (no
	// control plane Running yet) before it moves to Alert, from where it
	// can be deleted: CloudStack's cloud.kubernetes.cluster.start.timeout.
	ClusterStartTimeout Duration `yaml:"cluster_start_timeout"`
	// ClusterProbeInterval is how often ztpd probes each cluster's API
	// server (/readyz) besides watching its Nodes.
	ClusterProbeInterval Duration `yaml:"cluster_probe_interval"`
	// AdminKeyFile receives the first admin API key and secret (created
	// exclusively, mode 0600) instead of standard output.
	AdminKeyFile string `yaml:"admin_key_file"`
}

// TLS configures a listener's certificate; with no files a self-signed
// certificate is generated into the data directory.
type TLS struct {
	Enabled  bool   `yaml:"enabled"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// TFTP serves the same ZTP content read-only over TFTP.
type TFTP struct {
	Enabled    bool   `yaml:"enabled"`
	Addr       string `yaml:"addr"`
	SinglePort bool   `yaml:"single_port"`
	// MaxBlockSize caps negotiated blksize; 0 derives MTU-32 from the
	// interface a request arrives on.
	MaxBlockSize int `yaml:"max_block_size"`
	// Window is the largest windowsize (RFC 7440) granted to a client that
	// asks for one; the OACK grants min(asked, Window). 0 or 1 never
	// negotiates a window. Clients that do not ask always get lock-step
	// (RFC 1350): one block, then its ACK.
	Window int `yaml:"window"`
	// RetransmitTimeout is the retransmit timeout before a client's round
	// trip is measured and the ceiling it backs off to; once measured, the
	// timeout follows the round trip (not below 200 ms).
	RetransmitTimeout Duration `yaml:"retransmit_timeout"`
	// MaxRetransmits is how many times a block (or the OACK) is sent again
	// without progress before the transfer is abandoned.
	MaxRetransmits int `yaml:"max_retransmits"`
	// MaxTransfers bounds concurrent transfers; MaxTransfersPerSource bounds
	// them per client address. The next request gets a TFTP ERROR and the
	// device retries. Defaults 256 and 4: a device fetches one file at a
	// time (a boot ROM's tsize probe and its real request overlap briefly),
	// so 4 leaves room for that and a few devices behind one address; each
	// transfer holds a socket, a thread while it waits and one block
	// buffer, and 256 is far more than a LAN's worth of concurrent ONIE
	// downloads needs while keeping that bounded.
	MaxTransfers          int `yaml:"max_transfers"`
	MaxTransfersPerSource int `yaml:"max_transfers_per_source"`
}

// ZTP tunes content serving.
type ZTP struct {
	// DefaultProfile is given to devices no profile matches; empty means such a
	// device gets a 404 with a JSON reason.
	DefaultProfile string `yaml:"default_profile"`
}

// Events bounds the event log: device events (DHCP, ZTP fetches, refusals)
// and the audit trail (operator actions, credential issues) are kept apart,
// each with its own bound.
type Events struct {
	Keep      int `yaml:"keep"`       // newest device events kept; older ones are pruned
	AuditKeep int `yaml:"audit_keep"` // newest audit events kept
}

// Devices bounds the records of devices that never got past a released or
// expired lease (never served content, never approved): made-up hardware
// addresses must not grow the store without bound.
type Devices struct {
	// UnleasedExpiry: such a record is deleted once unseen for this long
	// (0 keeps them).
	UnleasedExpiry Duration `yaml:"unleased_expiry"`
	// MaxUnleased caps how many such records are kept, the oldest deleted
	// first (0: no cap).
	MaxUnleased int `yaml:"max_unleased"`
}

// Joiner tunes credential issue.
type Joiner struct {
	// EnrollmentTTL is how long the one-time enrollment secret of a
	// device's document lives (45m).
	EnrollmentTTL Duration `yaml:"enrollment_ttl"`
	TokenTTL      Duration `yaml:"token_ttl"`
	// ReissueWindow: how long after its first issue a member's join bundle
	// may be issued again to retry a join that has not succeeded.
	ReissueWindow Duration `yaml:"reissue_window"`
	AutoApprove   []Rule   `yaml:"auto_approve"`
}

// Rule matches devices for auto-approval; an empty field matches anything, a
// device must match every non-empty field. The plain fields are what the
// network proves about a device; what it says about itself is matched only
// under asserted, explicitly. A rule approves worker roles (VM workers,
// SONiC switches, k3s agents); control planes only when roles names
// control-plane.
type Rule struct {
	Subnets    []string `yaml:"subnets"`     // CIDRs holding the device's address
	MACs       []string `yaml:"macs"`        // hardware address the device leased with
	CircuitIDs []string `yaml:"circuit_ids"` // relay agent circuit id (option 82.1) of its requests
	RemoteIDs  []string `yaml:"remote_ids"`  // relay agent remote id (option 82.2)
	Reserved   bool     `yaml:"reserved"`    // its address is a reservation
	Asserted   Asserted `yaml:"asserted"`    // facts the device states itself
	Roles      []string `yaml:"roles"`       // worker (default) | control-plane
	Cluster    string   `yaml:"cluster"`

	// Serials and Products at the top level are refused with a pointer to
	// asserted: a serial is the device's word, not the network's.
	Serials  []string `yaml:"serials"`
	Products []string `yaml:"products"`
}

// Asserted are self-described facts a rule may match on, by explicit choice.
type Asserted struct {
	Serials  []string `yaml:"serials"`
	Products []string `yaml:"products"`
}

// Duration is a time.Duration written as "90s", "10m" or "1h" in YAML.
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration like 90s, 10m or 1h", n.Line, s)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration back as a string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Default returns the embedded default: everything on loopback, no DHCP/TFTP.
func Default() Config {
	return Config{
		DataDir: "ztpd-data",
		Log:     Log{Level: "info", Format: "text"},
		HTTP: HTTP{Addr: "127.0.0.1:8080",
			ReadHeaderTimeout:     Duration(httpserve.DefaultReadHeaderTimeout),
			ReadBodyTimeout:       Duration(httpserve.DefaultReadBodyTimeout),
			WriteTimeout:          Duration(httpserve.DefaultWriteTimeout),
			IdleTimeout:           Duration(httpserve.DefaultIdleTimeout),
			MaxHeaderBytes:        httpserve.DefaultMaxHeaderBytes,
			MaxConns:              httpserve.DefaultMaxConns,
			MaxBodyBytesInFlight:  httpserve.DefaultMaxBodyBytesInFlight,
			MaxBodyBytesPerSource: httpserve.DefaultMaxBodyBytesPerSource,
			// The device HTTPS listener's rotation overlap: see
			// devicetls.DefaultGrace for why a day.
			TLS: DeviceTLS{Enabled: true, RotationGrace: Duration(24 * time.Hour)}},
		API: defaultAPI(), // TLS on the API's own listener by default
		TFTP: TFTP{Addr: ":69", Window: 8, RetransmitTimeout: Duration(time.Second), MaxRetransmits: 5,
			MaxTransfers: 256, MaxTransfersPerSource: 4},
		DHCP: DHCP{
			LeaseTime:         Duration(time.Hour),
			OfferHold:         Duration(30 * time.Second),
			DeclineQuarantine: Duration(10 * time.Minute),
			// CloudStack gives guest NICs 1e:<mac.identifier>:..., the
			// identifier 0 unless an operator set it; 1e is locally
			// administered, so no vendor's burnt-in MAC starts with it, and
			// SONiC's user class and ONIE's vendor class still win.
			VM: VMMatch{MACPrefixes: []string{"1e:00"}},
		},
		Events:  Events{Keep: 200000, AuditKeep: 1000000},
		Devices: Devices{UnleasedExpiry: Duration(24 * time.Hour), MaxUnleased: 10000},
		// enrollment_ttl: one ZTP run, from the ztp.json that carries the
		// secret to the join plugin's last try (joiner.DefaultEnrollmentTTL).
		Joiner:  Joiner{EnrollmentTTL: Duration(45 * time.Minute), TokenTTL: Duration(24 * time.Hour)},
		Rollout: Rollout{DrainTimeout: Duration(5 * time.Minute), StepTimeout: Duration(15 * time.Minute)},
	}
}

// defaultAPI: TLS on the API's own listener, REST signatures must expire,
// signatures last at most 20 minutes, kubeconfigs 24 hours.
func defaultAPI() API {
	return API{AuthFailuresPerMinute: 20, TLS: TLS{Enabled: true}, RequireExpiryREST: true, CloudStackUnversionedWrites: "refuse",
		MaxSignatureLifetime: Duration(20 * time.Minute), KubeconfigTTL: Duration(24 * time.Hour),
		ClusterAlertAfter: Duration(5 * time.Minute), ClusterStartTimeout: Duration(time.Hour), ClusterProbeInterval: Duration(5 * time.Second)}
}

// Load reads path (if not empty) over the defaults. Unknown fields are errors,
// so a typo never silently falls back to a default.
func Load(path string) (Config, error) {
	cfg := Default()
	if path == "" {
		return cfg, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

func (s *Store) validate(errs *Errors) {
	if s.TLS.Enabled() && (s.TLS.CertFile == "" || s.TLS.KeyFile == "" || s.TLS.CAFile == "") {
		errs.add("store.tls", "cert_file, key_file and ca_file must be given together")
	}
	if s.MaxTxnOps < 0 {
		errs.add("store.max_txn_ops", "must not be negative")
	}
	if d := s.SessionTTL.D(); d != 0 && (d < 2*time.Second || d > time.Minute) {
		errs.add("store.session_ttl", "%s is outside 2s..1m", d)
	}
	if s.PeerAddr != "" {
		checkHostPort(errs, "store.peer_addr", s.PeerAddr, true)
	}
	if g := s.Group(); len(g) > 8 {
		errs.add("store", "%d appliances: at most 8 share one store", len(g))
	}
	if len(s.Appliances) > 0 {
		if s.Backend != "etcd" {
			errs.add("store.appliances", "for backend etcd only (etcd-embedded appliances are its peers)")
		}
		if !slices.Contains(s.Appliances, s.Name) {
			errs.add("store.appliances", "this appliance (store.name %q) is not among them", s.Name)
		}
	}
	if s.Prefix != "" && !strings.HasPrefix(s.Prefix, "/") {
		errs.add("store.prefix", "%q must start with /", s.Prefix)
	}
	switch s.Backend {
	case "", "bolt":
		s.Backend = "bolt"
		if len(s.Endpoints) > 0 || len(s.Peers) > 0 {
			errs.add("store.backend", "endpoints and peers need backend etcd or etcd-embedded")
		}
	case "etcd":
		if len(s.Endpoints) == 0 {
			errs.add("store.endpoints", "backend etcd needs the etcd cluster's client URLs")
		}
		for i, e := range s.Endpoints {
			u, err := url.Parse(e)
			if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
				errs.add(fmt.Sprintf("store.endpoints[%d]", i), "%q is not an http(s)://host:port URL", e)
			} else if u.Scheme == "https" != s.TLS.Enabled() {
				errs.add(fmt.Sprintf("store.endpoints[%d]", i), "%q: https:// exactly when store.tls is set", e)
			}
		}
	case "etcd-embedded":
		if s.Name == "" {
			errs.add("store.name", "backend etcd-embedded needs this appliance's member name")
		}
		seen := map[string]bool{}
		mine := false
		for i, p := range s.Peers {
			f := fmt.Sprintf("store.peers[%d]", i)
			if p.Name == "" || seen[p.Name] {
				errs.add(f+".name", "%q is empty or repeated", p.Name)
			}
			seen[p.Name] = true
			mine = mine || p.Name == s.Name
			u, err := url.Parse(p.URL)
			if err != nil || u.Hostname() == "" || u.Port() == "" || (u.Scheme != "http" && u.Scheme != "https") {
				errs.add(f+".url", "%q is not an http(s)://address:port URL", p.URL)
				continue
			}
			if u.Scheme == "https" != s.TLS.Enabled() {
				errs.add(f+".url", "%q: https:// exactly when store.tls is set", p.URL)
			}
			if ip, err := netip.ParseAddr(u.Hostname()); err == nil && ip.Zone() != "" {
				errs.add(f+".url", "%q: a zone names an interface of one machine, and every appliance dials this URL; use a global or ULA address", p.URL)
			}
			if ip, err := netip.ParseAddr(u.Hostname()); u.Scheme == "http" && (err != nil || !ip.IsLoopback()) {
				errs.add(f+".url", "%q: appliances talk over the network with mutual TLS: use https and store.tls (plain http is for loopback only)", p.URL)
			}
		}
		if s.Name != "" && len(s.Peers) > 0 && !mine {
			errs.add("store.peers", "this appliance (store.name %q) is not among the peers", s.Name)
		}
		if len(s.Peers) == 0 {
			errs.add("store.peers", "backend etcd-embedded needs every appliance's member (usually three)")
		}
		if len(s.Endpoints) > 0 {
			errs.add("store.endpoints", "backend etcd-embedded runs its own member; endpoints are for backend etcd")
		}
	default:
		errs.add("store.backend", "%q is not one of bolt, etcd, etcd-embedded", s.Backend)
	}
}

// FieldError is a validation problem at a field path.
type FieldError struct {
	Field   string
	Problem string
}

func (e FieldError) Error() string { return e.Field + ": " + e.Problem }

// Errors collects every problem found, so an operator fixes them in one pass.
type Errors []FieldError

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return "invalid configuration:\n  " + strings.Join(parts, "\n  ")
}

func (es *Errors) add(field, format string, args ...any) {
	*es = append(*es, FieldError{Field: field, Problem: fmt.Sprintf(format, args...)})
}

// Validate checks the whole configuration and fills derived values (parsed
// ranges, the advertise address). It returns Errors listing every problem.
func (c *Config) Validate() error {
	var errs Errors
	if c.DataDir == "" {
		errs.add("data_dir", "must not be empty")
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		errs.add("log.level", "%q is not one of debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "text", "json":
	default:
		errs.add("log.format", "%q is not one of text, json", c.Log.Format)
	}
	checkHostPort(&errs, "http.addr", c.HTTP.Addr, true)
	checkHostPort(&errs, "http.metadata_addr", c.HTTP.MetadataAddr, false)
	checkHostPort(&errs, "api.addr", c.API.Addr, false)
	checkHostPort(&errs, "debug.pprof_addr", c.Debug.PprofAddr, false)
	if c.API.TLS.CertFile != "" && c.API.TLS.KeyFile == "" || c.API.TLS.CertFile == "" && c.API.TLS.KeyFile != "" {
		errs.add("api.tls", "cert_file and key_file must be given together")
	}
	if w := c.API.CloudStackUnversionedWrites; w != "refuse" && w != "allow" {
		errs.add("api.cloudstack_unversioned_writes", "%q is neither refuse nor allow", w)
	}
	if d := c.API.MaxSignatureLifetime.D(); d < time.Minute || d > 24*time.Hour {
		errs.add("api.max_signature_lifetime", "%s is outside 1m..24h", d)
	}
	if d := c.API.KubeconfigTTL.D(); d < 5*time.Minute || d > 365*24*time.Hour {
		errs.add("api.kubeconfig_ttl", "%s is outside 5m..8760h (one year)", d)
	}
	if d := c.Rollout.DrainTimeout.D(); d < time.Second || d > 24*time.Hour {
		errs.add("rollout.drain_timeout", "%s is outside 1s..24h", d)
	}
	if d := c.Rollout.StepTimeout.D(); d < time.Second || d > 24*time.Hour {
		errs.add("rollout.step_timeout", "%s is outside 1s..24h", d)
	}
	if g := c.Rollout.GateScripts; g != "" && !strings.HasPrefix(g, "/") {
		errs.add("rollout.gate_scripts", "%q is not an absolute path", g)
	}
	if d := c.API.ClusterAlertAfter.D(); d < time.Second || d > 24*time.Hour {
		errs.add("api.cluster_alert_after", "%s is outside 1s..24h", d)
	}
	if d := c.API.ClusterStartTimeout.D(); d < time.Second || d > 7*24*time.Hour {
		errs.add("api.cluster_start_timeout", "%s is outside 1s..168h", d)
	}
	if d := c.API.ClusterProbeInterval.D(); d < 100*time.Millisecond || d > 10*time.Minute {
		errs.add("api.cluster_probe_interval", "%s is outside 100ms..10m", d)
	}
	if c.API.AdminKeyFile != "" && strings.HasSuffix(c.API.AdminKeyFile, "/") {
		errs.add("api.admin_key_file", "%q names a directory; give a file path", c.API.AdminKeyFile)
	}
	c.HTTP.validateLimits(&errs)
	c.HTTP.validateLinkLocal(&errs)
	c.validateAPIListener(&errs)
	c.validateDeviceTLS(&errs)
	c.Store.validate(&errs)
	if c.TFTP.Enabled {
		checkHostPort(&errs, "tftp.addr", c.TFTP.Addr, true)
	}
	if c.TFTP.Window < 0 || c.TFTP.Window > 64 {
		errs.add("tftp.window", "%d is outside 0..64 (largest windowsize granted; 0 or 1 = never negotiate)", c.TFTP.Window)
	}
	if d := c.TFTP.RetransmitTimeout.D(); d < 100*time.Millisecond || d > 30*time.Second {
		errs.add("tftp.retransmit_timeout", "%v is outside 100ms..30s", d)
	}
	if c.TFTP.MaxRetransmits < 1 || c.TFTP.MaxRetransmits > 20 {
		errs.add("tftp.max_retransmits", "%d is outside 1..20", c.TFTP.MaxRetransmits)
	}
	if c.TFTP.MaxTransfers < 1 || c.TFTP.MaxTransfers > 10000 {
		errs.add("tftp.max_transfers", "%d is outside 1..10000", c.TFTP.MaxTransfers)
	}
	if c.TFTP.MaxTransfersPerSource < 1 || c.TFTP.MaxTransfersPerSource > max(1, c.TFTP.MaxTransfers) {
		errs.add("tftp.max_transfers_per_source", "%d is outside 1..%d (tftp.max_transfers)", c.TFTP.MaxTransfersPerSource, max(1, c.TFTP.MaxTransfers))
	}
	if c.TFTP.MaxBlockSize != 0 && (c.TFTP.MaxBlockSize < 8 || c.TFTP.MaxBlockSize > 65464) {
		errs.add("tftp.max_block_size", "%d is outside 8..65464 (RFC 2348)", c.TFTP.MaxBlockSize)
	}
	c.AdvertiseAddr = checkAdvertise(&errs, "advertise_addr", c.AdvertiseAddr, false)
	c.AdvertiseAddr6 = checkAdvertise(&errs, "advertise_addr6", c.AdvertiseAddr6, true)
	if c.AdvertiseAddr6 != "" && strings.Contains(c.AdvertiseAddr, ":") && c.AdvertiseAddr != c.AdvertiseAddr6 {
		errs.add("advertise_addr6", "%s and advertise_addr %s are both IPv6: name one IPv6 address (advertise_addr6 is for an appliance whose advertise_addr is IPv4)", c.AdvertiseAddr6, c.AdvertiseAddr)
	}
	if c.Events.Keep < 0 {
		errs.add("events.keep", "must not be negative")
	}
	if c.Events.AuditKeep < 0 {
		errs.add("events.audit_keep", "must not be negative")
	}
	if c.Devices.UnleasedExpiry < 0 {
		errs.add("devices.unleased_expiry", "must not be negative")
	} else if c.Devices.UnleasedExpiry > 0 && time.Duration(c.Devices.UnleasedExpiry) < 10*time.Minute {
		errs.add("devices.unleased_expiry", "%s is shorter than 10m: a device between its lease and its first fetch would lose its record", time.Duration(c.Devices.UnleasedExpiry))
	}
	if c.Devices.MaxUnleased < 0 {
		errs.add("devices.max_unleased", "must not be negative")
	}
	for i, r := range c.Joiner.AutoApprove {
		for j, s := range r.Subnets {
			if _, err := netip.ParsePrefix(s); err != nil {
				errs.add(fmt.Sprintf("joiner.auto_approve[%d].subnets[%d]", i, j), "%q is not a CIDR", s)
			}
		}
		for j, m := range r.MACs {
			if _, err := net.ParseMAC(m); err != nil {
				errs.add(fmt.Sprintf("joiner.auto_approve[%d].macs[%d]", i, j), "%q is not a MAC address", m)
			}
		}
		if len(r.Serials) > 0 {
			errs.add(fmt.Sprintf("joiner.auto_approve[%d].serials", i), "a serial number is what a device says about itself; to approve on it, write it under asserted.serials")
		}
		if len(r.Products) > 0 {
			errs.add(fmt.Sprintf("joiner.auto_approve[%d].products", i), "a product name is what a device says about itself; to approve on it, write it under asserted.products")
		}
		for j, role := range r.Roles {
			if role != "worker" && role != "control-plane" {
				errs.add(fmt.Sprintf("joiner.auto_approve[%d].roles[%d]", i, j), "%q is not a role (worker or control-plane)", role)
			}
		}
	}
	if c.Joiner.ReissueWindow < 0 {
		errs.add("joiner.reissue_window", "must not be negative")
	}
	ifacesExist := c.DHCP.validate(&errs)
	if c.AdvertiseAddr == "" && len(c.DHCP.Interfaces) > 0 {
		if ip, err := InterfaceIPv4(c.DHCP.Interfaces[0]); err == nil {
			c.AdvertiseAddr = ip.Addr().String()
		}
	}
	if c.AdvertiseAddr == "" && c.DHCP.Enabled() && ifacesExist {
		errs.add("advertise_addr", "not set and the first DHCP interface has no IPv4 address to default to")
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

func (h HTTP) validateLinkLocal(errs *Errors) {
	seen := map[string]bool{}
	for i, name := range h.ONIELinkLocal {
		if name == "" || seen[name] || strings.ContainsAny(name, "/ %") {
			errs.add(fmt.Sprintf("http.onie_link_local[%d]", i), "%q is empty, repeated or not an interface name", name)
		}
		seen[name] = true
	}
	if len(h.ONIELinkLocal) == 0 {
		return
	}
	// A wildcard listener on port 80 holds every link-local address's
	// port 80 already (Linux refuses the more specific bind; Go listens
	// dual-stack on 0.0.0.0 too), and would answer ONIE without naming
	// the neighbour.
	for _, l := range []struct{ field, addr string }{{"http.addr", h.Addr}, {"http.metadata_addr", h.MetadataAddr}} {
		host, port, err := net.SplitHostPort(l.addr)
		if err != nil || port != "80" {
			continue
		}
		if a, err := netip.ParseAddr(host); host == "" || err == nil && a.IsUnspecified() {
			errs.add("http.onie_link_local", "%s %s listens on port 80 of every address, link-local ones included: give it an address, or leave onie_link_local empty", l.field, l.addr)
		}
	}
}

func (h HTTP) validateLimits(errs *Errors) {
	for _, d := range []struct {
		field string
		v     Duration
	}{{"http.read_header_timeout", h.ReadHeaderTimeout}, {"http.read_body_timeout", h.ReadBodyTimeout},
		{"http.write_timeout", h.WriteTimeout}, {"http.idle_timeout", h.IdleTimeout}} {
		if d.v.D() < 100*time.Millisecond || d.v.D() > 24*time.Hour {
			errs.add(d.field, "%s is outside 100ms..24h", d.v.D())
		}
	}
	if h.MaxHeaderBytes < 4096 || h.MaxHeaderBytes > 16<<20 {
		errs.add("http.max_header_bytes", "%d is outside 4096..16777216", h.MaxHeaderBytes)
	}
	if h.MaxConns < 1 || h.MaxConns > 1<<20 {
		errs.add("http.max_conns", "%d is outside 1..1048576", h.MaxConns)
	}
	if h.MaxConnsPerSource < 0 || h.MaxConnsPerSource > 1<<20 {
		errs.add("http.max_conns_per_source", "%d is outside 0..1048576 (0: the smaller of 256 and half of http.max_conns)", h.MaxConnsPerSource)
	}
	// Below the API's body cap, an API request with a full body could
	// never be served.
	if h.MaxBodyBytesInFlight < httpserve.APIMaxBody || h.MaxBodyBytesInFlight > 64<<30 {
		errs.add("http.max_body_bytes_in_flight", "%d is outside %d..%d (1 MiB, the API's body cap, to 64 GiB)", h.MaxBodyBytesInFlight, httpserve.APIMaxBody, int64(64<<30))
	}
	if h.MaxBodyBytesPerSource < httpserve.APIMaxBody || h.MaxBodyBytesPerSource > max(httpserve.APIMaxBody, h.MaxBodyBytesInFlight) {
		errs.add("http.max_body_bytes_per_source", "%d is outside %d..%d (1 MiB to http.max_body_bytes_in_flight)", h.MaxBodyBytesPerSource, httpserve.APIMaxBody, max(httpserve.APIMaxBody, h.MaxBodyBytesInFlight))
	}
}

// APIDefaultPort is the API's port when it moves off a non-loopback
// http.addr to a TLS listener of its own.
const APIDefaultPort = "8443"

// APIListener says where the API is served: addr empty means on the main
// HTTP listener (http.addr, plain HTTP); otherwise its own listener at addr,
// with TLS when useTLS. The API is in plain HTTP off loopback only when
// api.insecure_plain_http says so.
func (c *Config) APIListener() (addr string, useTLS bool) {
	if c.API.Addr != "" {
		return c.API.Addr, c.API.TLS.Enabled || c.API.TLS.CertFile != ""
	}
	if c.API.InsecurePlainHTTP || httpserve.IsLoopback(c.HTTP.Addr) {
		return "", false
	}
	host, _, _ := net.SplitHostPort(c.HTTP.Addr)
	return net.JoinHostPort(host, APIDefaultPort), true
}

// APIPlainOffLoopback reports whether the API is served in plain HTTP on
// an address other than loopback (allowed only by api.insecure_plain_http).
func (c *Config) APIPlainOffLoopback() bool {
	addr, useTLS := c.APIListener()
	if addr == "" {
		return !httpserve.IsLoopback(c.HTTP.Addr)
	}
	return !useTLS && !httpserve.IsLoopback(addr)
}

func (c *Config) validateAPIListener(errs *Errors) {
	addr, useTLS := c.APIListener()
	if c.API.Addr == "" && addr != "" {
		if _, port, err := net.SplitHostPort(c.HTTP.Addr); err == nil && port == APIDefaultPort {
			errs.add("api.addr", "not set, so the API would move to port %s of http.addr %s (not loopback), which http.addr uses; set api.addr", APIDefaultPort, c.HTTP.Addr)
		}
		if !c.API.TLS.Enabled && c.API.TLS.CertFile == "" {
			errs.add("api.tls.enabled", "false, but http.addr %s is not loopback, so the API moves to %s with TLS; enable TLS, or set api.insecure_plain_http: true to serve it in plain HTTP on http.addr", c.HTTP.Addr, addr)
		}
	}
	if c.API.Addr != "" && !useTLS && !c.API.InsecurePlainHTTP && !httpserve.IsLoopback(addr) {
		errs.add("api.tls.enabled", "false would serve the API in plain HTTP on %s, which is not loopback; enable TLS, or set api.insecure_plain_http: true", addr)
	}
}

func checkHostPort(errs *Errors, field, v string, required bool) {
	if v == "" {
		if required {
			errs.add(field, "must not be empty")
		}
		return
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		// fd99::1:8080 is ambiguous (the port could be the address's
		// last group), so only the bracketed form is taken.
		if i := strings.LastIndex(v, ":"); i > 0 && !strings.HasPrefix(v, "[") {
			if _, perr := netip.ParseAddr(v[:i]); perr == nil {
				errs.add(field, "%q: an IPv6 host is written in brackets, as [%s]%s", v, v[:i], v[i:])
				return
			}
		}
		errs.add(field, "%q is not host:port (%v)", v, err)
		return
	}
	if host != "" {
		if a, err := netip.ParseAddr(host); err != nil {
			errs.add(field, "host %q is not an IP address", host)
		} else if a.Zone() != "" && !a.IsLinkLocalUnicast() {
			errs.add(field, "host %q: a zone names the interface of a link-local address (fe80::/10), and %s is not one", host, a.WithZone(""))
		}
	}
	var p int
	if _, err := fmt.Sscanf(port, "%d", &p); err != nil || p < 0 || p > 65535 {
		errs.add(field, "port %q is not 0..65535", port)
	}
}

// checkAdvertise checks an address devices are told to use and returns it
// as URLs write it: brackets and an IPv4-mapped form are accepted as an
// operator might write them; a zone or a link-local address is refused,
// a URL handed to a device carrying neither (the zone is an interface of
// this appliance, meaningless on the device).
func checkAdvertise(errs *Errors, field, v string, want6 bool) string {
	if v == "" {
		return ""
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(v, "["), "]"))
	switch {
	case err != nil:
		errs.add(field, "%q is not an IP address", v)
	case a.Zone() != "":
		errs.add(field, "%q: a zone means nothing in a URL a device is handed; write the address without %%%s", v, a.Zone())
	case a.Unmap().IsLinkLocalUnicast():
		errs.add(field, "%q is link-local: a device cannot reach it without a zone, which a URL does not carry; advertise a global or ULA address", v)
	case a.IsUnspecified() || a.IsMulticast():
		errs.add(field, "%q is not a unicast address", v)
	case want6 && !(a.Is6() && !a.Is4In6()):
		errs.add(field, "%q is not an IPv6 address", v)
	default:
		return a.Unmap().String()
	}
	return v
}

// InterfaceIPv4 returns the first IPv4 address of the named interface, with
// its prefix.
func InterfaceIPv4(name string) (netip.Prefix, error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		if missing := InterfaceExists(name); missing != nil {
			return netip.Prefix{}, missing
		}
		return netip.Prefix{}, fmt.Errorf("interface %s: %w", name, err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return netip.Prefix{}, err
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			ip, _ := netip.AddrFromSlice(ipn.IP.To4())
			ones, _ := ipn.Mask.Size()
			return netip.PrefixFrom(ip, ones), nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("interface %s has no IPv4 address", name)
}

// InterfaceExists says, when the named network interface does not exist on
// this host, so in the error, which ones do (Go's own error is "route
// ip+net: no such network interface", which names neither).
func InterfaceExists(name string) error {
	ifs, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("interface %s: %w", name, err)
	}
	names := make([]string, 0, len(ifs))
	for _, ifc := range ifs {
		if ifc.Name == name {
			return nil
		}
		names = append(names, ifc.Name)
	}
	return fmt.Errorf("interface %q does not exist on this host (it has: %s)", name, strings.Join(names, ", "))
}
