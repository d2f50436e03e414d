// Package kubewatch is ztpd's view into the Kubernetes clusters it
// provisions: per cluster, one client-go Node informer, a /readyz probe and
// a label reconciler, under a dedicated least-privilege identity
// (ObserverUser in ObserverGroup, bound by RBAC to nodes get, list, watch
// and patch).
//
// It is a transport-side adapter with narrow inputs and outputs, so the
// domain decides what a Node means for a member and a cluster:
//   - Targets says which clusters to watch and how to reach them;
//   - Sink receives what is seen: NodeSeen, NodeGone and ClusterSeen;
//   - Labeler says which labels ztpd wants on each Node.
//
// The informer's cache is the only copy of the Nodes; the manager keeps no
// other per-node state, so a cluster of a few hundred Nodes costs one cache.
// Client certificates are rotated in place at half their validity: the
// transport presents the new certificate and closes its connections, and the
// informer re-establishes its watch from where it was, without a relist.
package kubewatch

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Readiness is the status of a Node's Ready condition.
type Readiness string

const (
	ReadyTrue    Readiness = "True"
	ReadyFalse   Readiness = "False"
	ReadyUnknown Readiness = "Unknown" // also: no Ready condition yet
)

// Node is what ztpd needs to know about one Kubernetes Node.
type Node struct {
	Name          string
	Ready         Readiness
	Reason        string            // the Ready condition's reason (e.g. KubeletReady, NodeStatusUnknown)
	Labels        map[string]string // a copy; the receiver may keep it
	ControlPlane  bool              // has the node-role.kubernetes.io/control-plane label
	LastHeartbeat time.Time         // the Ready condition's lastHeartbeatTime
	Created       time.Time
}

// Health is one observation of a cluster.
type Health struct {
	APIReachable       bool   // the last /readyz probe answered ok
	Err                string // why not, or the informer's last watch error; empty when healthy
	Synced             bool   // the Node informer has listed the cluster at least once
	Nodes              int
	ReadyNodes         int
	ControlPlanes      int // Nodes with the control-plane role label
	ReadyControlPlanes int
	ObservedAt         time.Time
}

// Target is one cluster to watch.
type Target struct {
	ClusterID string
	Name      string // for logs
	Endpoint  string // the API server, host:port
	CACertPEM []byte // the cluster CA the API server's certificate must chain to
	// Credentials mints a client certificate (and its key) for ObserverUser
	// in ObserverGroup. It is called again at half the certificate's
	// validity; the material is never logged.
	Credentials func(now time.Time) (certPEM, keyPEM []byte, err error)
	// BearerToken, when set, authenticates instead of Credentials (a
	// cluster ztpd did not build, registered with a token kubeconfig). It
	// is never logged.
	BearerToken string
}

// Targets says which clusters to watch.
type Targets interface {
	WatchTargets() ([]Target, error)
}

// Sink receives what the watchers see. Calls for one cluster come from a
// few goroutines (Node events from the informer's, ClusterSeen from the
// probe's), and different clusters call concurrently: it must be safe for
// concurrent use and should not block for long.
type Sink interface {
	// NodeSeen: a Node was registered, changed (readiness, reason,
	// labels, role), or is reported again at each informer resync.
	// Heartbeat-only updates are not reported.
	NodeSeen(clusterID string, n Node)
	// NodeGone: the Node was deleted.
	NodeGone(clusterID, name string)
	// ClusterSeen: after every probe, and (coalesced) after Node changes.
	ClusterSeen(clusterID string, h Health)
}

// Labeler says which labels ztpd wants on a Node. ok is false for a Node
// ztpd does not know: its labels are then left alone entirely. For a known
// Node, labels under the manager's prefixes that are not in desired are
// removed; labels outside the prefixes are never touched.
type Labeler interface {
	DesiredLabels(clusterID, nodeName string) (desired map[string]string, ok bool)
}

// Options configures a Manager. Targets and Sink are required.
type Options struct {
	Targets Targets
	Sink    Sink
	Labeler Labeler // nil: labels are not managed

	// Prefixes are the label key prefixes ztpd owns (see Owned);
	// default []string{LabelPrefix}.
	Prefixes []string

	Logger *slog.Logger

	ProbeInterval   time.Duration // /readyz probe; default 5s
	RefreshInterval time.Duration // re-read Targets; default 30s
	ResyncPeriod    time.Duration // informer resync: NodeSeen and label check for every Node; default 10m
	Coalesce        time.Duration // ClusterSeen after Node changes is delayed this long to batch them; default 200ms
	QPS             float32       // client rate limit per cluster; default 50
	Burst           int           // default 100

	// Dial opens connections to the API servers (e.g. from a network
	// namespace or VRF of the lab's); nil: a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)

	Now func() time.Time
	// Registerer takes the watch's metrics (nil: kept, not exported).
	Registerer prometheus.Registerer
}

// Manager runs one watcher per target cluster.
type Manager struct {
	opt     Options
	log     *slog.Logger
	metrics *metrics
	connect connector

	refresh chan struct{}

	mu       sync.Mutex
	watchers map[string]*watcher
	running  bool
}

// New checks the options and returns a Manager; Run starts it.
func New(opt Options) (*Manager, error) {
	if opt.Targets == nil || opt.Sink == nil {
		return nil, errors.New("kubewatch: Targets and Sink are required")
	}
	if len(opt.Prefixes) == 0 {
		opt.Prefixes = []string{LabelPrefix}
	}
	for _, p := range opt.Prefixes {
		if err := checkPrefix(p); err != nil {
			return nil, err
		}
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if opt.ProbeInterval <= 0 {
		opt.ProbeInterval = 5 * time.Second
	}
	if opt.RefreshInterval <= 0 {
		opt.RefreshInterval = 30 * time.Second
	}
	if opt.ResyncPeriod <= 0 {
		opt.ResyncPeriod = 10 * time.Minute
	}
	if opt.Coalesce <= 0 {
		opt.Coalesce = 200 * time.Millisecond
	}
	if opt.QPS <= 0 {
		opt.QPS = 50
	}
	if opt.Burst <= 0 {
		opt.Burst = 100
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	m := &Manager{
		opt:      opt,
		log:      opt.Logger.With("component", "kubewatch"),
		metrics:  newMetrics(opt.Registerer),
		refresh:  make(chan struct{}, 1),
		watchers: map[string]*watcher{},
	}
	m.connect = m.dial
	return m, nil
}

// Run watches the targets until ctx ends, then stops every watcher and
// returns once all their goroutines have. It re-reads Targets every
// RefreshInterval and on Refresh.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.running {
		m.mu.Unlock()
		return errors.New("kubewatch: already running")
	}
	m.running = true
	m.mu.Unlock()
	defer func() { // runs again for a later leadership term (several appliances)
		m.mu.Lock()
		m.running = false
		m.mu.Unlock()
	}()

	tick := time.NewTicker(m.opt.RefreshInterval)
	defer tick.Stop()
	m.sync(ctx)
	for {
		select {
		case <-ctx.Done():
			m.stopAll()
			return nil
		case <-tick.C:
		case <-m.refresh:
		}
		m.sync(ctx)
	}
}

// Refresh asks Run to re-read Targets now (for a cluster created,
// deleted or given a new endpoint or CA).
func (m *Manager) Refresh() {
	select {
	case m.refresh <- struct{}{}:
	default:
	}
}

// Resync asks for the labels of every Node of a cluster to be checked
// against the Labeler now (a device's facts changed). It reports whether
// the cluster is being watched.
func (m *Manager) Resync(clusterID string) bool {
	m.mu.Lock()
	w := m.watchers[clusterID]
	m.mu.Unlock()
	if w == nil {
		return false
	}
	w.resyncLabels()
	return true
}

// ResyncNode asks for one Node's labels to be checked now.
func (m *Manager) ResyncNode(clusterID, nodeName string) bool {
	m.mu.Lock()
	w := m.watchers[clusterID]
	m.mu.Unlock()
	if w == nil {
		return false
	}
	w.enqueue(nodeName)
	return true
}

// Watching lists the cluster IDs being watched.
func (m *Manager) Watching() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := make([]string, 0, len(m.watchers))
	for id := range m.watchers {
		ids = append(ids, id)
	}
	return ids
}

// sync starts watchers for new targets, restarts those whose endpoint or CA
// changed and stops those no longer listed. A failed read of Targets keeps
// what runs.
func (m *Manager) sync(ctx context.Context) {
	targets, err := m.opt.Targets.WatchTargets()
	if err != nil {
		m.metrics.errorsTotal.WithLabelValues("targets").Inc()
		m.log.Error("cannot read the clusters to watch; keeping the current watches", "err", err)
		return
	}
	want := make(map[string]Target, len(targets))
	for _, t := range targets {
		if t.ClusterID == "" {
			m.metrics.errorsTotal.WithLabelValues("targets").Inc()
			m.log.Error("watch target without a cluster ID ignored", "name", t.Name, "endpoint", t.Endpoint)
			continue
		}
		if _, dup := want[t.ClusterID]; dup {
			m.metrics.errorsTotal.WithLabelValues("targets").Inc()
			m.log.Error("watch target listed twice; the first is kept", "cluster", t.ClusterID)
			continue
		}
		want[t.ClusterID] = t
	}

	m.mu.Lock()
	var stop []*watcher
	for id, w := range m.watchers {
		t, ok := want[id]
		if ok && w.sameTarget(t) && !w.stale.Load() {
			w.setTarget(t) // new Credentials func or name: used at the next rotation
			delete(want, id)
			continue
		}
		stop = append(stop, w)
		delete(m.watchers, id)
	}
	m.mu.Unlock()

	carried := map[string][]string{}
	for _, w := range stop {
		w.stop()
		if _, again := want[w.clusterID]; again {
			// Restarted (a new endpoint or CA, or a watch that lost its
			// API server): the new watcher reports the Nodes deleted
			// meanwhile once it has listed.
			carried[w.clusterID] = w.lastNames
			if w.stale.Load() {
				m.log.Info("cluster watch restarted after its API server came back", "cluster", w.clusterID)
			} else {
				m.log.Info("cluster endpoint or CA changed; watching it anew", "cluster", w.clusterID)
			}
		} else {
			m.log.Info("cluster no longer watched", "cluster", w.clusterID, "name", w.target().Name)
		}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	for id, t := range want {
		w := newWatcher(m, t, carried[id])
		m.watchers[id] = w
		w.start(ctx)
		if _, again := carried[id]; !again {
			m.log.Info("watching cluster", "cluster", id, "name", t.Name, "endpoint", t.Endpoint)
		}
	}
}

func (m *Manager) stopAll() {
	m.mu.Lock()
	ws := make([]*watcher, 0, len(m.watchers))
	for id, w := range m.watchers {
		ws = append(ws, w)
		delete(m.watchers, id)
	}
	m.running = false
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() { defer wg.Done(); w.stop() }()
	}
	wg.Wait()
}

// errString shortens an error for Health.Err: API server answers can carry
// whole check lists.
func errString(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
