// Package kubeletsim simulates kubelets against a real kube-apiserver: the
// API traffic of a kubelet's TLS bootstrap (an ECDSA P-256 key and a
// kubernetes.io/kube-apiserver-client-kubelet CSR, watched until KCM
// approves and signs it), Node registration, node status updates and the
// node Lease in kube-node-lease, each as the kubelet v1.37 does it
// (pkg/kubelet/certificate/bootstrap, kubelet_node_status.go,
// nodestatus/setters.go, component-helpers' lease controller).
//
// There is no container runtime on the lab machines, so a real kubelet
// cannot run; this is the only simulated part of the lab's Kubernetes.
// Nothing here answers on :10250 or watches services. With Config.RunPods a
// kubelet plays its part in a pod's life without running anything: the
// pods bound to its Node are reported Running and removed once deleted.
//
// One process runs hundreds of kubelets (the bench runs 500): bootstraps
// that share credentials share one client-go transport (its transport cache
// keys on the TLS material; a bootstrap token is a per-request header), a
// Pool bounds how many bootstraps run at once, and each node gets one
// HTTP/2 connection of its own (its client certificate is per connection)
// with the kubelet's jittered heartbeats.
package kubeletsim

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
)

// Kubelet defaults (KubeletConfiguration v1beta1 defaults and kubelet
// constants).
const (
	DefaultKubeletVersion      = "v1.37.2"
	DefaultStatusEvery         = 10 * time.Second // nodeStatusUpdateFrequency
	DefaultStatusReportEvery   = 5 * time.Minute  // nodeStatusReportFrequency when nodeStatusUpdateFrequency is not set
	DefaultLeaseDuration       = 40 * time.Second // nodeLeaseDurationSeconds
	DefaultBootstrapTimeout    = 5 * time.Minute
	DefaultRegisterTimeout     = 2 * time.Minute
	DefaultBootstrapConcurrent = 16
	// leaseRenewFraction is the kubelet's nodeLeaseRenewIntervalFraction.
	leaseRenewFraction = 0.25
	// heartbeatJitter is the kubelet's JitterUntil factor for status and lease.
	heartbeatJitter = 0.04
	// statusUpdateRetries is the kubelet's nodeStatusUpdateRetry.
	statusUpdateRetries = 5
	// leaseUpdateRetries is the lease controller's maxUpdateRetries.
	leaseUpdateRetries = 5
	// maxBackoff is the kubelet's cap for registration and lease backoff.
	maxBackoff = 7 * time.Second
)

// Config describes one simulated kubelet.
type Config struct {
	// NodeName is the Node's name (--hostname-override); lower case DNS-1123.
	NodeName string
	// Hostname is the kubernetes.io/hostname label and Hostname address;
	// empty: NodeName.
	Hostname string

	// BootstrapKubeconfig is a bootstrap kubeconfig (kubeadm join's
	// bootstrap-kubelet.conf: a bootstrap token user, or a client
	// certificate). Either it or ClientCertPEM/ClientKeyPEM is required.
	BootstrapKubeconfig []byte
	// ClientCertPEM and ClientKeyPEM are a bootstrap client certificate
	// (a SONiC switch's bundle certificate) used instead of a kubeconfig.
	ClientCertPEM, ClientKeyPEM []byte
	// APIServer (https://host:port) and CACertPEM override the
	// kubeconfig's server and CA; with a client certificate they are
	// required.
	APIServer string
	CACertPEM []byte

	// Labels are added to the kubelet's own labels (--node-labels); the
	// NodeRestriction admission plugin refuses most kubernetes.io and
	// k8s.io labels (node-role.kubernetes.io/...), as it does for kubelets.
	Labels map[string]string
	// Taints are --register-with-taints.
	Taints []corev1.Taint
	// InternalIP is reported as the InternalIP address (--node-ip).
	InternalIP string
	// KubeletVersion is nodeInfo.kubeletVersion; empty: DefaultKubeletVersion.
	// Kubelet.SetVersion changes it at run time.
	KubeletVersion string
	// VersionFile, when set, is read at every status update: while the
	// file exists, its trimmed contents are the version reported, so a
	// test's fake kubeadm or kubelet package "installs" a new kubelet by
	// writing it (see also Kubelet.SetVersion and Restart).
	VersionFile string
	// ContainerRuntimeVersion is nodeInfo.containerRuntimeVersion;
	// empty: "containerd://2.1.4".
	ContainerRuntimeVersion string

	// StatusEvery is nodeStatusUpdateFrequency: how often the status is
	// computed; zero: 10 s. StatusReportEvery is nodeStatusReportFrequency:
	// an unchanged status is patched only this often. As in the kubelet,
	// it defaults to StatusEvery when StatusEvery is set and to 5 min
	// otherwise.
	StatusEvery       time.Duration
	StatusReportEvery time.Duration
	// LeaseDuration is nodeLeaseDurationSeconds (40 s); LeaseEvery the
	// renew interval, a quarter of it unless set.
	LeaseDuration time.Duration
	LeaseEvery    time.Duration

	// RunPods makes the kubelet act on the pods bound to its Node, through
	// one watch of them selected by spec.nodeName as a kubelet's: a new pod
	// is reported Running and Ready, and a pod being deleted is removed
	// (grace period 0) after min(its grace period, 200 ms), as a kubelet
	// does once its containers stopped. Without it bound pods stay Pending
	// and deleted ones Terminating, as on a node without a kubelet.
	RunPods bool

	// BootstrapTimeout bounds waiting for the CSR to be approved and
	// signed; RegisterTimeout bounds registration retries (a real kubelet
	// retries forever).
	BootstrapTimeout time.Duration
	RegisterTimeout  time.Duration

	// Logger gets the info-level story of this kubelet; nil: slog.Default.
	Logger *slog.Logger
}

// Pool shares what many simulated kubelets in one process can share: a
// bound on concurrent bootstraps, parsed CA pools, the bootstrap transports
// (one per set of bootstrap credentials: hundreds of token bootstraps ride
// one HTTP/2 connection) and the way to dial the API server.
type Pool struct {
	bootstrapSlots chan struct{}
	dial           DialFunc
	mu             sync.Mutex
	caPools        map[string]*x509.CertPool
	bootstrapRTs   map[[32]byte]*sharedTransport
}

// DialFunc dials the API server, e.g. from inside a network namespace.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// PoolOptions configure a Pool.
type PoolOptions struct {
	// BootstrapConcurrency is how many TLS bootstraps (CSR create and
	// watch) run at once; <= 0: 16.
	BootstrapConcurrency int
	// Dial dials the API server; nil: a net.Dialer.
	Dial DialFunc
}

// NewPool returns a Pool.
func NewPool(o PoolOptions) *Pool {
	if o.BootstrapConcurrency <= 0 {
		o.BootstrapConcurrency = DefaultBootstrapConcurrent
	}
	if o.Dial == nil {
		o.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	return &Pool{
		bootstrapSlots: make(chan struct{}, o.BootstrapConcurrency),
		dial:           o.Dial,
		caPools:        map[string]*x509.CertPool{},
		bootstrapRTs:   map[[32]byte]*sharedTransport{},
	}
}

var defaultPool = NewPool(PoolOptions{})

// Start starts one simulated kubelet in the package's default Pool.
func Start(ctx context.Context, cfg Config) (*Kubelet, error) {
	return defaultPool.Start(ctx, cfg)
}

func (p *Pool) caPool(pemData []byte) (*x509.CertPool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cp, ok := p.caPools[string(pemData)]; ok {
		return cp, nil
	}
	cp := x509.NewCertPool()
	if !cp.AppendCertsFromPEM(pemData) {
		return nil, errors.New("cluster CA holds no PEM certificate")
	}
	p.caPools[string(pemData)] = cp
	return cp, nil
}

// Kubelet is one simulated kubelet.
type Kubelet struct {
	cfg    Config
	pool   *Pool
	log    *slog.Logger
	ctx    context.Context // Start's context: cancelling it stops everything
	cancel context.CancelFunc

	registered chan struct{} // closed once the Node is registered
	failed     chan struct{} // closed when bootstrap or registration fails for good
	err        error         // set before failed is closed

	ready atomic.Bool
	// version is SetVersion's kubelet version (nil: Config's);
	// statusKick asks the status loop for an update now.
	version    atomic.Pointer[string]
	statusKick chan struct{}

	// Set by the bootstrap, then read-only.
	identity  nodeIdentity
	transport *http.Transport
	client    kubernetes.Interface // the kubelet's main client (QPS 50)
	heartbeat kubernetes.Interface // the heartbeat client (no rate limit, timeout)
	csrName   string
	certPEM   []byte

	bootstrapTook time.Duration
	registerTook  time.Duration

	statusPatches  atomic.Int64
	leaseRenewals  atomic.Int64
	heartbeatFails atomic.Int64
	nodeDeleted    atomic.Bool
	podsStarted    atomic.Int64
	podsRemoved    atomic.Int64

	mu       sync.Mutex
	runStop  context.CancelFunc // stops the node loops of the current run
	runWG    sync.WaitGroup
	factory  informers.SharedInformerFactory
	stopped  bool
	nodeLoop *nodeLoop
}

// Start validates cfg and starts the kubelet: bootstrap, registration,
// then status and lease heartbeats until Stop or ctx ends. WaitRegistered
// reports the outcome of the first two.
func (p *Pool) Start(ctx context.Context, cfg Config) (*Kubelet, error) {
	if err := cfg.fillDefaults(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	kctx, cancel := context.WithCancel(ctx)
	k := &Kubelet{
		cfg:        cfg,
		pool:       p,
		log:        logger.With("node", cfg.NodeName),
		ctx:        kctx,
		cancel:     cancel,
		registered: make(chan struct{}),
		failed:     make(chan struct{}),
		identity:   newNodeIdentity(cfg.NodeName),
		statusKick: make(chan struct{}, 1),
	}
	k.ready.Store(true)
	go k.run()
	return k, nil
}

func (c *Config) fillDefaults() error {
	if !validNodeName(c.NodeName) {
		return fmt.Errorf("kubeletsim: node name %q is not a lower-case DNS-1123 subdomain", c.NodeName)
	}
	haveCert := len(c.ClientCertPEM) > 0 || len(c.ClientKeyPEM) > 0
	switch {
	case len(c.BootstrapKubeconfig) > 0 && haveCert:
		return errors.New("kubeletsim: give a bootstrap kubeconfig or a client certificate, not both")
	case len(c.BootstrapKubeconfig) == 0 && !haveCert:
		return errors.New("kubeletsim: no bootstrap credentials: give a bootstrap kubeconfig or a client certificate and key")
	case haveCert && (len(c.ClientCertPEM) == 0 || len(c.ClientKeyPEM) == 0):
		return errors.New("kubeletsim: a bootstrap client certificate needs both the certificate and its key")
	case haveCert && (c.APIServer == "" || len(c.CACertPEM) == 0):
		return errors.New("kubeletsim: bootstrapping with a client certificate needs the API server URL and the cluster CA")
	}
	if c.Hostname == "" {
		c.Hostname = c.NodeName
	}
	if c.KubeletVersion == "" {
		c.KubeletVersion = DefaultKubeletVersion
	}
	if c.ContainerRuntimeVersion == "" {
		c.ContainerRuntimeVersion = "containerd://2.1.4"
	}
	if c.StatusReportEvery <= 0 {
		if c.StatusEvery > 0 {
			c.StatusReportEvery = c.StatusEvery
		} else {
			c.StatusReportEvery = DefaultStatusReportEvery
		}
	}
	if c.StatusEvery <= 0 {
		c.StatusEvery = DefaultStatusEvery
	}
	if c.LeaseDuration <= 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.LeaseDuration < time.Second {
		return fmt.Errorf("kubeletsim: lease duration %s is under a second", c.LeaseDuration)
	}
	if c.LeaseEvery <= 0 {
		c.LeaseEvery = time.Duration(float64(c.LeaseDuration) * leaseRenewFraction)
	}
	if c.BootstrapTimeout <= 0 {
		c.BootstrapTimeout = DefaultBootstrapTimeout
	}
	if c.RegisterTimeout <= 0 {
		c.RegisterTimeout = DefaultRegisterTimeout
	}
	return nil
}

func (k *Kubelet) run() {
	if err := k.bootstrap(k.ctx); err != nil {
		k.fail(err)
		return
	}
	if err := k.startNode(); err != nil {
		k.fail(err)
	}
}

func (k *Kubelet) fail(err error) {
	k.mu.Lock()
	stopped := k.stopped
	k.mu.Unlock()
	if stopped {
		k.log.Info("kubelet stopped before it registered", "err", err)
	} else {
		k.log.Error("kubelet failed", "err", err)
	}
	k.err = err
	close(k.failed)
	k.mu.Lock()
	cancel := k.cancel
	k.mu.Unlock()
	cancel()
}

// NodeName is the Node's name.
func (k *Kubelet) NodeName() string { return k.cfg.NodeName }

// WaitRegistered blocks until the Node is registered (nil), the bootstrap
// or registration failed (that error), or ctx ends.
func (k *Kubelet) WaitRegistered(ctx context.Context) error {
	select {
	case <-k.registered:
		return nil
	case <-k.failed:
		return k.err
	case <-ctx.Done():
		return fmt.Errorf("node %s not registered: %w", k.cfg.NodeName, ctx.Err())
	}
}

// Err is the bootstrap or registration failure, if any.
func (k *Kubelet) Err() error {
	select {
	case <-k.failed:
		return k.err
	default:
		return nil
	}
}

// SetReady makes the kubelet report Ready=True (KubeletReady) or
// Ready=False (KubeletNotReady, as a kubelet whose runtime or network is
// down). It shows on the Node at the next status update.
func (k *Kubelet) SetReady(ready bool) {
	if k.ready.Swap(ready) != ready {
		k.log.Info("kubelet readiness changed", "ready", ready)
	}
}

// SetVersion changes the kubelet version the Node reports
// (status.nodeInfo.kubeletVersion), as a kubelet upgraded in place would
// after its restart; the status is updated at once, not at the next
// period. A Config.VersionFile that exists takes precedence.
func (k *Kubelet) SetVersion(v string) {
	old := k.cfg.KubeletVersion
	if p := k.version.Swap(&v); p != nil {
		old = *p
	}
	if old != v {
		k.log.Info("kubelet version changed", "from", old, "to", v)
	}
	k.kickStatus()
}

// kubeletVersion is the version to report now: Config.VersionFile's
// contents while that file exists, else SetVersion's or Config's.
func (k *Kubelet) kubeletVersion() string {
	if k.cfg.VersionFile != "" {
		if b, err := os.ReadFile(k.cfg.VersionFile); err == nil {
			if v := strings.TrimSpace(string(b)); v != "" {
				return v
			}
		}
	}
	if v := k.version.Load(); v != nil {
		return *v
	}
	return k.cfg.KubeletVersion
}

// kickStatus asks the status loop to run now; one pending kick is enough.
func (k *Kubelet) kickStatus() {
	select {
	case k.statusKick <- struct{}{}:
	default:
	}
}

// Stop stops the status updates and lease renewals and closes the node's
// connection; the Node and its Lease stay, as after a kubelet crash, and
// the node controller marks it Unknown after its grace period. Stop waits
// for in-flight requests to end and may be called more than once.
func (k *Kubelet) Stop() {
	k.mu.Lock()
	k.stopped = true
	cancel := k.cancel
	k.mu.Unlock()
	cancel()
	k.stopNode()
}

// Restart stops the heartbeats and starts the kubelet again with the
// certificate it already has, as `systemctl restart kubelet` does: it
// registers the Node again (re-creating it if it was deleted) and resumes
// heartbeats. parent replaces Start's context.
func (k *Kubelet) Restart(parent context.Context) error {
	select {
	case <-k.registered:
	default:
		return fmt.Errorf("node %s: restart before the first registration", k.cfg.NodeName)
	}
	k.stopNode()
	k.mu.Lock()
	k.stopped = false
	k.ctx, k.cancel = context.WithCancel(parent)
	k.mu.Unlock()
	k.nodeDeleted.Store(false)
	k.log.Info("kubelet restarting")
	return k.startNode()
}

// Stats are a kubelet's counters.
type Stats struct {
	Node           string        `json:"node"`
	CSR            string        `json:"csr,omitempty"`
	Bootstrap      time.Duration `json:"bootstrap_ns"`
	Register       time.Duration `json:"register_ns"`
	Registered     bool          `json:"registered"`
	StatusPatches  int64         `json:"status_patches"`
	LeaseRenewals  int64         `json:"lease_renewals"`
	HeartbeatFails int64         `json:"heartbeat_failures"`
	NodeDeleted    bool          `json:"node_deleted,omitempty"`
	PodsStarted    int64         `json:"pods_started,omitempty"` // reported Running (RunPods)
	PodsRemoved    int64         `json:"pods_removed,omitempty"` // deletions finished (RunPods)
	Error          string        `json:"error,omitempty"`
}

// Stats returns the kubelet's counters so far.
func (k *Kubelet) Stats() Stats {
	s := Stats{
		Node:           k.cfg.NodeName,
		StatusPatches:  k.statusPatches.Load(),
		LeaseRenewals:  k.leaseRenewals.Load(),
		HeartbeatFails: k.heartbeatFails.Load(),
		NodeDeleted:    k.nodeDeleted.Load(),
		PodsStarted:    k.podsStarted.Load(),
		PodsRemoved:    k.podsRemoved.Load(),
	}
	select {
	case <-k.registered:
		s.Registered = true
		s.CSR, s.Bootstrap, s.Register = k.csrName, k.bootstrapTook, k.registerTook
	default:
	}
	if err := k.Err(); err != nil {
		s.Error = err.Error()
	}
	return s
}

// CertificatePEM is the node client certificate KCM issued (nil before).
func (k *Kubelet) CertificatePEM() []byte {
	select {
	case <-k.registered:
		return k.certPEM
	default:
		return nil
	}
}

// jitter returns d stretched by up to factor (wait.Jitter).
func jitter(d time.Duration, factor float64) time.Duration {
	return d + time.Duration(rand.Float64()*factor*float64(d))
}
