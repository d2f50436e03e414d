package kubewatch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// ControlPlaneLabel marks a control-plane Node (kubeadm sets it).
const ControlPlaneLabel = "node-role.kubernetes.io/control-plane"

// watcher watches one cluster: it connects, runs the Node informer, the
// label worker, the probe and the certificate renewal, and stops them all
// when its context ends.
type watcher struct {
	m         *Manager
	clusterID string
	prevNames []string // Nodes a previous watcher of this cluster knew

	tmu sync.Mutex
	tgt Target

	cancel    context.CancelFunc
	done      chan struct{}
	lastNames []string // the cache's Node names when it stopped; read after done

	queue workqueue.TypedRateLimitingInterface[string]
	dirty chan struct{}

	imu      sync.Mutex
	informer cache.SharedIndexInformer

	// stale: the API server came back after an outage; the manager
	// replaces this watcher (an immediate relist) rather than wait out
	// client-go's backoff, up to 30 s.
	stale atomic.Bool

	emu      sync.Mutex
	watchErr string
	credErr  string

	// owned by the health loop
	reachable    bool
	wasReachable bool // reachable at some probe before
	probeErr     string
	connectErr   string
	published    nodeCounts
	gaugeState   string
}

func newWatcher(m *Manager, t Target, prev []string) *watcher {
	return &watcher{
		m:         m,
		clusterID: t.ClusterID,
		prevNames: prev,
		tgt:       t,
		done:      make(chan struct{}),
		queue:     workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		dirty:     make(chan struct{}, 1),
	}
}

func (w *watcher) target() Target {
	w.tmu.Lock()
	defer w.tmu.Unlock()
	return w.tgt
}

func (w *watcher) setTarget(t Target) {
	w.tmu.Lock()
	w.tgt = t
	w.tmu.Unlock()
}

// sameTarget: the connection stays valid (same endpoint and CA).
func (w *watcher) sameTarget(t Target) bool {
	cur := w.target()
	return cur.Endpoint == t.Endpoint && bytes.Equal(cur.CACertPEM, t.CACertPEM)
}

func (w *watcher) start(ctx context.Context) {
	ctx, w.cancel = context.WithCancel(ctx)
	go w.run(ctx)
}

func (w *watcher) stop() {
	w.cancel()
	<-w.done
}

func (w *watcher) log() *slog.Logger {
	t := w.target()
	return w.m.log.With("cluster", w.clusterID, "name", t.Name)
}

func (w *watcher) run(ctx context.Context) {
	defer close(w.done)
	w.setGauge("unreachable")
	defer func() {
		w.m.metrics.clustersWatched.WithLabelValues(w.gaugeState).Dec()
		nodeCounts{}.publish(w.published, w.m.metrics.nodesObserved)
	}()
	defer w.queue.ShutDown()

	c := w.connect(ctx)
	if c == nil {
		w.lastNames = w.prevNames // never listed: what was known still is
		return
	}
	defer c.close()
	inf := w.newInformer(c)
	w.imu.Lock()
	w.informer = inf
	w.imu.Unlock()

	var wg sync.WaitGroup
	wg.Go(func() { inf.RunWithContext(ctx) })
	if _, ok := w.m.opt.Sink.(CSRSink); ok {
		csrs := w.newCSRInformer(c)
		wg.Go(func() { csrs.RunWithContext(ctx) })
	}
	wg.Go(func() { w.renew(ctx, c) })
	if w.m.opt.Labeler != nil {
		wg.Go(func() { w.labelWorker(ctx, c) })
	}
	if len(w.prevNames) > 0 {
		wg.Go(func() { w.reportGone(ctx, inf) })
	}
	w.health(ctx, c, inf)
	w.queue.ShutDown()
	wg.Wait()
	w.lastNames = inf.GetStore().ListKeys()
}

// connect retries until the target yields a client; meanwhile every probe
// interval reports the cluster unreachable with the reason.
func (w *watcher) connect(ctx context.Context) *conn {
	for {
		c, err := w.m.connect(w.target())
		if err == nil {
			w.connectErr = ""
			return c
		}
		w.m.metrics.errorsTotal.WithLabelValues("connect").Inc()
		if msg := errString(err); msg != w.connectErr {
			w.connectErr = msg
			w.log().Error("cannot connect to the cluster's API; retrying", "err", err)
		}
		w.m.opt.Sink.ClusterSeen(w.clusterID, Health{Err: w.connectErr, ObservedAt: w.m.opt.Now()})
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(w.m.opt.ProbeInterval):
		}
	}
}

func (w *watcher) newInformer(c *conn) cache.SharedIndexInformer {
	nodes := c.client.CoreV1().Nodes()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			l, err := nodes.List(ctx, o)
			if err == nil {
				w.watchOK()
			}
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			wi, err := nodes.Watch(ctx, o)
			if err == nil {
				w.watchOK()
			}
			return wi, err
		},
	}
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, c.client),
		&corev1.Node{}, w.m.opt.ResyncPeriod, cache.Indexers{})
	// The cache is the only copy of the Nodes: keep it small. Managed
	// fields and the image list are most of a Node and never read here.
	_ = inf.SetTransform(func(obj any) (any, error) {
		if n, ok := obj.(*corev1.Node); ok {
			n.ManagedFields = nil
			n.Status.Images = nil
		}
		return obj, nil
	})
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(ctx, r, err)
		w.watchFailed(err)
	})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    w.onAdd,
		UpdateFunc: w.onUpdate,
		DeleteFunc: w.onDelete,
	})
	return inf
}

func (w *watcher) watchOK() {
	w.emu.Lock()
	was := w.watchErr
	w.watchErr = ""
	w.emu.Unlock()
	if was != "" {
		w.log().Info("cluster watch re-established")
		w.markDirty()
	}
}

// watchFailed records why the informer lost its watch, for Health.Err.
// An expired resource version and a watch the server closed are the
// reflector's normal course, not failures.
func (w *watcher) watchFailed(err error) {
	if errors.Is(err, io.EOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return
	}
	w.m.metrics.errorsTotal.WithLabelValues("watch").Inc()
	msg := "watch: " + errString(err)
	w.emu.Lock()
	was := w.watchErr
	w.watchErr = msg
	w.emu.Unlock()
	if was == "" {
		w.log().Warn("cluster watch failed; retrying", "err", err)
		w.markDirty()
	}
}

func (w *watcher) markDirty() {
	select {
	case w.dirty <- struct{}{}:
	default:
	}
}

func (w *watcher) enqueue(name string) {
	if w.m.opt.Labeler != nil {
		w.queue.Add(name)
	}
}

func (w *watcher) resyncLabels() {
	w.imu.Lock()
	inf := w.informer
	w.imu.Unlock()
	if inf == nil {
		return // not connected: the initial list enqueues every Node
	}
	for _, name := range inf.GetStore().ListKeys() {
		w.enqueue(name)
	}
}

// readyCondition returns the Node's Ready condition, or nil.
func readyCondition(n *corev1.Node) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

func readiness(c *corev1.NodeCondition) Readiness {
	if c == nil {
		return ReadyUnknown
	}
	switch c.Status {
	case corev1.ConditionTrue:
		return ReadyTrue
	case corev1.ConditionFalse:
		return ReadyFalse
	}
	return ReadyUnknown
}

func nodeOf(n *corev1.Node) Node {
	out := Node{
		Name:    n.Name,
		Labels:  maps.Clone(n.Labels),
		Created: n.CreationTimestamp.Time,
	}
	_, out.ControlPlane = n.Labels[ControlPlaneLabel]
	c := readyCondition(n)
	out.Ready = readiness(c)
	if c != nil {
		out.Reason = c.Reason
		out.LastHeartbeat = c.LastHeartbeatTime.Time
	}
	return out
}

func (w *watcher) onAdd(obj any, initial bool) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	node := nodeOf(n)
	if initial {
		w.m.log.Debug("node listed", "cluster", w.clusterID, "node", n.Name, "ready", node.Ready)
	} else {
		w.m.log.Info("node registered", "cluster", w.clusterID, "node", n.Name, "ready", node.Ready, "control_plane", node.ControlPlane)
	}
	w.m.opt.Sink.NodeSeen(w.clusterID, node)
	w.enqueue(n.Name)
	w.markDirty()
}

func (w *watcher) onUpdate(oldObj, newObj any) {
	old, ok1 := oldObj.(*corev1.Node)
	n, ok2 := newObj.(*corev1.Node)
	if !ok1 || !ok2 {
		return
	}
	if old == n || (n.ResourceVersion != "" && old.ResourceVersion == n.ResourceVersion) {
		// The informer's periodic resync (the cached object again, or the
		// same version relisted): report and check labels again.
		w.m.opt.Sink.NodeSeen(w.clusterID, nodeOf(n))
		w.enqueue(n.Name)
		return
	}
	oc, nc := readyCondition(old), readyCondition(n)
	oldReady, newReady := readiness(oc), readiness(nc)
	var oldReason, newReason string
	if oc != nil {
		oldReason = oc.Reason
	}
	if nc != nil {
		newReason = nc.Reason
	}
	labelsChanged := !maps.Equal(old.Labels, n.Labels)
	if oldReady == newReady && oldReason == newReason && !labelsChanged {
		return // a heartbeat or a status detail the domain does not use
	}
	if oldReady != newReady {
		if newReady == ReadyTrue {
			w.m.log.Info("node ready", "cluster", w.clusterID, "node", n.Name, "was", oldReady)
		} else {
			var msg string
			if nc != nil {
				msg = nc.Message
			}
			w.m.log.Info("node not ready", "cluster", w.clusterID, "node", n.Name, "ready", newReady, "reason", newReason, "message", msg)
		}
	}
	w.m.opt.Sink.NodeSeen(w.clusterID, nodeOf(n))
	if labelsChanged {
		w.enqueue(n.Name) // someone may have changed ours
	}
	w.markDirty()
}

func (w *watcher) onDelete(obj any) {
	var name string
	switch o := obj.(type) {
	case *corev1.Node:
		name = o.Name
	case cache.DeletedFinalStateUnknown:
		name = o.Key
	default:
		return
	}
	w.m.log.Info("node deleted", "cluster", w.clusterID, "node", name)
	w.m.opt.Sink.NodeGone(w.clusterID, name)
	w.markDirty()
}

// reportGone reports the Nodes a previous watcher of this cluster knew
// that are not there any more, once the new cache has listed.
func (w *watcher) reportGone(ctx context.Context, inf cache.SharedIndexInformer) {
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return
	}
	for _, name := range w.prevNames {
		if _, exists, _ := inf.GetStore().GetByKey(name); !exists {
			w.m.log.Info("node deleted", "cluster", w.clusterID, "node", name)
			w.m.opt.Sink.NodeGone(w.clusterID, name)
		}
	}
	w.markDirty()
}

// labelWorker applies the Labeler's labels, one Node at a time, retrying
// failures with backoff.
func (w *watcher) labelWorker(ctx context.Context, c *conn) {
	for {
		name, shutdown := w.queue.Get()
		if shutdown {
			return
		}
		if err := w.reconcileLabels(ctx, c, name); err != nil && ctx.Err() == nil {
			w.m.metrics.errorsTotal.WithLabelValues("patch").Inc()
			if w.queue.NumRequeues(name) == 0 {
				w.m.log.Warn("cannot update node labels; retrying", "cluster", w.clusterID, "node", name, "err", err)
			}
			w.queue.AddRateLimited(name)
		} else {
			w.queue.Forget(name)
		}
		w.queue.Done(name)
	}
}

func (w *watcher) reconcileLabels(ctx context.Context, c *conn, name string) error {
	w.imu.Lock()
	inf := w.informer
	w.imu.Unlock()
	obj, exists, err := inf.GetStore().GetByKey(name)
	if err != nil || !exists {
		return err
	}
	n := obj.(*corev1.Node)
	desired, ok := w.m.opt.Labeler.DesiredLabels(w.clusterID, name)
	if !ok {
		return nil
	}
	changes, skipped := labelChanges(n.Labels, desired, w.m.opt.Prefixes)
	if len(skipped) > 0 {
		w.m.metrics.errorsTotal.WithLabelValues("label").Add(float64(len(skipped)))
		w.m.log.Warn("desired node labels not set", "cluster", w.clusterID, "node", name, "skipped", skipped)
	}
	if len(changes) == 0 {
		return nil
	}
	body, err := labelPatch(changes)
	if err != nil {
		return err
	}
	_, err = c.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: "ztpd"})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	w.m.metrics.labelPatches.Inc()
	set, removed := changeSummary(changes)
	w.m.log.Info("node labels updated", "cluster", w.clusterID, "node", name, "set", set, "removed", removed)
	return nil
}

// renew installs fresh client credentials at half their validity.
func (w *watcher) renew(ctx context.Context, c *conn) {
	if c.renew == nil {
		return
	}
	at := c.renewAt
	for {
		t := time.NewTimer(max(at.Sub(w.m.opt.Now()), 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		now := w.m.opt.Now()
		next, err := c.renew(w.target(), now)
		w.emu.Lock()
		w.credErr = errString(err)
		w.emu.Unlock()
		if err != nil {
			w.m.metrics.errorsTotal.WithLabelValues("credentials").Inc()
			w.log().Error("cannot renew the client certificate; retrying", "err", err)
			at = now.Add(min(30*time.Second, max(w.m.opt.ProbeInterval, time.Second)))
			continue
		}
		w.log().Info("client certificate renewed", "renew_at", next.UTC().Format(time.RFC3339))
		at = next
	}
}

// health probes /readyz every ProbeInterval and reports the cluster after
// each probe and, coalesced, after Node changes.
func (w *watcher) health(ctx context.Context, c *conn, inf cache.SharedIndexInformer) {
	tick := time.NewTicker(w.m.opt.ProbeInterval)
	defer tick.Stop()
	var coalesce <-chan time.Time
	w.probe(ctx, c)
	w.report(inf)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			w.probe(ctx, c)
			w.report(inf)
			coalesce = nil
		case <-w.dirty:
			if coalesce == nil {
				coalesce = time.After(w.m.opt.Coalesce)
			}
		case <-coalesce:
			coalesce = nil
			w.report(inf)
		}
	}
}

func (w *watcher) probe(ctx context.Context, c *conn) {
	pctx, cancel := context.WithTimeout(ctx, min(max(w.m.opt.ProbeInterval, time.Second), 10*time.Second))
	err := c.probe(pctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	reachable := err == nil
	if err != nil {
		w.m.metrics.errorsTotal.WithLabelValues("probe").Inc()
	}
	w.probeErr = ""
	if err != nil {
		w.probeErr = probeError(err)
	}
	if reachable != w.reachable {
		if reachable {
			w.log().Info("cluster API reachable", "endpoint", w.target().Endpoint)
			w.setGauge("reachable")
			// Back after an outage: the informer's watch broke with it and
			// client-go would retry on its own backoff (up to 30 s).
			if w.wasReachable && !w.stale.Swap(true) {
				w.log().Info("API server back after an outage: watching anew now")
				w.m.Refresh()
			}
			w.wasReachable = true
		} else {
			w.log().Info("cluster API unreachable", "endpoint", w.target().Endpoint, "err", w.probeErr)
			w.setGauge("unreachable")
		}
	}
	w.reachable = reachable
}

func (w *watcher) setGauge(state string) {
	if w.gaugeState == state {
		return
	}
	if w.gaugeState != "" {
		w.m.metrics.clustersWatched.WithLabelValues(w.gaugeState).Dec()
	}
	w.m.metrics.clustersWatched.WithLabelValues(state).Inc()
	w.gaugeState = state
}

func (w *watcher) report(inf cache.SharedIndexInformer) {
	h := Health{APIReachable: w.reachable, Synced: inf.HasSynced(), ObservedAt: w.m.opt.Now()}
	w.emu.Lock()
	h.Err = w.probeErr
	if h.Err == "" {
		h.Err = w.credErr
	}
	if h.Err == "" {
		h.Err = w.watchErr
	}
	w.emu.Unlock()
	var counts nodeCounts
	for _, obj := range inf.GetStore().List() {
		n, ok := obj.(*corev1.Node)
		if !ok {
			continue
		}
		h.Nodes++
		if _, cp := n.Labels[ControlPlaneLabel]; cp {
			h.ControlPlanes++
		}
		switch readiness(readyCondition(n)) {
		case ReadyTrue:
			h.ReadyNodes++
			counts.ready++
			if _, cp := n.Labels[ControlPlaneLabel]; cp {
				h.ReadyControlPlanes++
			}
		case ReadyFalse:
			counts.notReady++
		default:
			counts.unknown++
		}
	}
	counts.publish(w.published, w.m.metrics.nodesObserved)
	w.published = counts
	w.m.opt.Sink.ClusterSeen(w.clusterID, h)
}

// probeError says why /readyz failed. An API server that answers but is
// not ready lists every check; only the failed ones ("[-]name failed:
// reason") are kept.
func probeError(err error) string {
	msg := err.Error()
	if !strings.Contains(msg, "[-]") {
		return "readyz: " + errString(err)
	}
	var failed []string
	for _, line := range strings.Split(strings.ReplaceAll(msg, `\n`, "\n"), "\n") {
		if rest, ok := strings.CutPrefix(line, "[-]"); ok {
			failed = append(failed, rest)
		}
	}
	return errString(errors.New("readyz: not ready: " + strings.Join(failed, "; ")))
}
