package kubewatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// recorder is a Sink that keeps everything it is told.
type recorder struct {
	mu      sync.Mutex
	seen    []seenNode
	gone    []string // cluster/name
	health  map[string]Health
	healths int
	csrs    []CSR
}

// CSRSeen makes the recorder a CSRSink too.
func (r *recorder) CSRSeen(_ string, c CSR) {
	r.mu.Lock()
	r.csrs = append(r.csrs, c)
	r.mu.Unlock()
}

func (r *recorder) csrsSeen() []CSR {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]CSR(nil), r.csrs...)
}

type seenNode struct {
	cluster string
	node    Node
}

func newRecorder() *recorder { return &recorder{health: map[string]Health{}} }

func (r *recorder) NodeSeen(c string, n Node) {
	r.mu.Lock()
	r.seen = append(r.seen, seenNode{c, n})
	r.mu.Unlock()
}

func (r *recorder) NodeGone(c, name string) {
	r.mu.Lock()
	r.gone = append(r.gone, c+"/"+name)
	r.mu.Unlock()
}

func (r *recorder) ClusterSeen(c string, h Health) {
	r.mu.Lock()
	r.health[c] = h
	r.healths++
	r.mu.Unlock()
}

// last returns the last NodeSeen of a node, and how many there were.
func (r *recorder) last(cluster, name string) (Node, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n Node
	count := 0
	for _, s := range r.seen {
		if s.cluster == cluster && s.node.Name == name {
			n = s.node
			count++
		}
	}
	return n, count
}

func (r *recorder) isGone(cluster, name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.gone {
		if g == cluster+"/"+name {
			return true
		}
	}
	return false
}

func (r *recorder) goneCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.gone)
}

func (r *recorder) healthOf(c string) (Health, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.health[c]
	return h, ok
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type staticTargets struct {
	mu  sync.Mutex
	ts  []Target
	err error
}

func (s *staticTargets) WatchTargets() ([]Target, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Target(nil), s.ts...), s.err
}

func (s *staticTargets) set(ts ...Target) {
	s.mu.Lock()
	s.ts = ts
	s.mu.Unlock()
}

type mapLabeler struct {
	mu sync.Mutex
	m  map[string]map[string]string // node -> labels
}

func (l *mapLabeler) DesiredLabels(_, node string) (map[string]string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.m[node]
	return maps.Clone(d), ok
}

func (l *mapLabeler) set(node string, labels map[string]string) {
	l.mu.Lock()
	l.m[node] = labels
	l.mu.Unlock()
}

// fakeClusters connects targets to fake clientsets by endpoint, with a
// probe whose answer the test sets.
type fakeClusters struct {
	mu       sync.Mutex
	sets     map[string]*fake.Clientset
	probeErr map[string]error
	dials    atomic.Int32
}

func (f *fakeClusters) connect(t Target) (*conn, error) {
	f.mu.Lock()
	cs := f.sets[t.Endpoint]
	f.mu.Unlock()
	if cs == nil {
		return nil, fmt.Errorf("no cluster at %s", t.Endpoint)
	}
	f.dials.Add(1)
	return &conn{
		client: cs,
		probe: func(context.Context) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.probeErr[t.Endpoint]
		},
		close: func() {},
	}, nil
}

func (f *fakeClusters) setProbe(endpoint string, err error) {
	f.mu.Lock()
	f.probeErr[endpoint] = err
	f.mu.Unlock()
}

func node(name string, ready corev1.ConditionStatus, labels map[string]string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, CreationTimestamp: metav1.NewTime(time.Unix(1700000000, 0))},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: ready, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.NewTime(time.Unix(1700000100, 0)),
		}}},
	}
}

type harness struct {
	m       *Manager
	sink    *recorder
	targets *staticTargets
	fakes   *fakeClusters
	labeler *mapLabeler
	stop    func()
}

func start(t *testing.T, withLabeler bool, clusters map[string]*fake.Clientset) *harness {
	t.Helper()
	var labels map[string]map[string]string
	if withLabeler {
		labels = map[string]map[string]string{}
	}
	return startLabelled(t, labels, clusters)
}

// startLabelled starts a manager whose Labeler starts with labels (nil: no
// Labeler).
func startLabelled(t *testing.T, labels map[string]map[string]string, clusters map[string]*fake.Clientset) *harness {
	t.Helper()
	withLabeler := labels != nil
	h := &harness{
		sink:    newRecorder(),
		targets: &staticTargets{},
		fakes:   &fakeClusters{sets: map[string]*fake.Clientset{}, probeErr: map[string]error{}},
		labeler: &mapLabeler{m: labels},
	}
	for id, cs := range clusters {
		ep := id + ".example:6443"
		h.fakes.sets[ep] = cs
		h.targets.ts = append(h.targets.ts, Target{ClusterID: id, Name: "name-" + id, Endpoint: ep})
	}
	opt := Options{
		Targets:       h.targets,
		Sink:          h.sink,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		ProbeInterval: 50 * time.Millisecond,
		Coalesce:      10 * time.Millisecond,
	}
	if testing.Verbose() {
		opt.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if withLabeler {
		opt.Labeler = h.labeler
	}
	m, err := New(opt)
	if err != nil {
		t.Fatal(err)
	}
	m.connect = h.fakes.connect
	h.m = m
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var once sync.Once
	h.stop = func() { once.Do(func() { stopRun(t, cancel, done) }) }
	t.Cleanup(h.stop)
	return h
}

func stopRun(t *testing.T, cancel context.CancelFunc, done chan error) {
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("Run did not return after its context ended")
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func (h *harness) waitSynced(t *testing.T, cluster string) {
	t.Helper()
	eventually(t, cluster+" synced", func() bool {
		hl, ok := h.sink.healthOf(cluster)
		return ok && hl.Synced
	})
}

func setReady(t *testing.T, cs *fake.Clientset, name string, status corev1.ConditionStatus, reason string, beat time.Time) {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions[0].Status = status
	n.Status.Conditions[0].Reason = reason
	n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(beat)
	if _, err := cs.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestNodeEventsReachTheSink(t *testing.T) {
	cp := node("cp1", corev1.ConditionTrue, map[string]string{ControlPlaneLabel: "", "kubernetes.io/hostname": "cp1"})
	cs := fake.NewClientset(cp)
	h := start(t, false, map[string]*fake.Clientset{"c1": cs})
	h.waitSynced(t, "c1")

	n, count := h.sink.last("c1", "cp1")
	if count != 1 || n.Ready != ReadyTrue || !n.ControlPlane || n.Reason != "KubeletReady" ||
		!n.LastHeartbeat.Equal(time.Unix(1700000100, 0)) || !n.Created.Equal(time.Unix(1700000000, 0)) ||
		n.Labels["kubernetes.io/hostname"] != "cp1" {
		t.Fatalf("cp1 seen %d times as %+v", count, n)
	}
	eventually(t, "health with cp1", func() bool {
		hl, _ := h.sink.healthOf("c1")
		return hl.APIReachable && hl.Nodes == 1 && hl.ReadyNodes == 1 && hl.ControlPlanes == 1 && hl.ReadyControlPlanes == 1 && hl.Err == ""
	})

	// A worker registers NotReady, then becomes Ready.
	ctx := context.Background()
	w := node("w1", corev1.ConditionFalse, map[string]string{"kubernetes.io/hostname": "w1"})
	w.Status.Conditions[0].Reason = "KubeletNotReady"
	if _, err := cs.CoreV1().Nodes().Create(ctx, w, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "w1 seen not ready", func() bool {
		n, _ := h.sink.last("c1", "w1")
		return n.Ready == ReadyFalse && !n.ControlPlane && n.Reason == "KubeletNotReady"
	})
	eventually(t, "health counts w1", func() bool {
		hl, _ := h.sink.healthOf("c1")
		return hl.Nodes == 2 && hl.ReadyNodes == 1
	})
	setReady(t, cs, "w1", corev1.ConditionTrue, "KubeletReady", time.Unix(1700000200, 0))
	eventually(t, "w1 seen ready", func() bool {
		n, _ := h.sink.last("c1", "w1")
		return n.Ready == ReadyTrue
	})
	_, before := h.sink.last("c1", "w1")

	// A heartbeat alone is not reported; the next real change is.
	setReady(t, cs, "w1", corev1.ConditionTrue, "KubeletReady", time.Unix(1700000300, 0))
	setReady(t, cs, "w1", corev1.ConditionUnknown, "NodeStatusUnknown", time.Unix(1700000300, 0))
	eventually(t, "w1 seen unknown", func() bool {
		n, _ := h.sink.last("c1", "w1")
		return n.Ready == ReadyUnknown && n.Reason == "NodeStatusUnknown"
	})
	if _, after := h.sink.last("c1", "w1"); after != before+1 {
		t.Errorf("NodeSeen calls for w1: %d after a heartbeat and a change, want %d", after, before+1)
	}

	// Delete: NodeGone, and the counts follow.
	if err := cs.CoreV1().Nodes().Delete(ctx, "w1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "w1 gone", func() bool { return h.sink.isGone("c1", "w1") })
	eventually(t, "health without w1", func() bool {
		hl, _ := h.sink.healthOf("c1")
		return hl.Nodes == 1 && hl.ReadyNodes == 1
	})
}

func TestProbeDecidesReachability(t *testing.T) {
	cs := fake.NewClientset()
	h := start(t, false, map[string]*fake.Clientset{"c1": cs})
	h.waitSynced(t, "c1")
	eventually(t, "reachable", func() bool { hl, _ := h.sink.healthOf("c1"); return hl.APIReachable })

	h.fakes.setProbe("c1.example:6443", errors.New("connection refused"))
	eventually(t, "unreachable", func() bool {
		hl, _ := h.sink.healthOf("c1")
		return !hl.APIReachable && hl.Err == "readyz: connection refused"
	})
	h.fakes.setProbe("c1.example:6443", nil)
	eventually(t, "reachable again", func() bool {
		hl, _ := h.sink.healthOf("c1")
		return hl.APIReachable && hl.Err == ""
	})
}

func TestConnectFailureIsReported(t *testing.T) {
	h := start(t, false, nil)
	h.targets.set(Target{ClusterID: "c9", Endpoint: "nowhere:6443"})
	h.m.Refresh()
	eventually(t, "connect error reported", func() bool {
		hl, ok := h.sink.healthOf("c9")
		return ok && !hl.APIReachable && hl.Err == "no cluster at nowhere:6443"
	})
	// The cluster appears: the watcher connects on its next attempt.
	cs := fake.NewClientset(node("n1", corev1.ConditionTrue, nil))
	h.fakes.mu.Lock()
	h.fakes.sets["nowhere:6443"] = cs
	h.fakes.mu.Unlock()
	eventually(t, "n1 seen", func() bool { _, c := h.sink.last("c9", "n1"); return c > 0 })
}

func TestWatchErrorIsVisible(t *testing.T) {
	cs := fake.NewClientset()
	var fail atomic.Bool
	cs.PrependWatchReactor("nodes", func(k8stesting.Action) (bool, watch.Interface, error) {
		if fail.Load() {
			return true, nil, errors.New("watch refused by test")
		}
		return false, nil, nil
	})
	fail.Store(true)
	h := start(t, false, map[string]*fake.Clientset{"c1": cs})
	eventually(t, "watch error in health", func() bool {
		hl, _ := h.sink.healthOf("c1")
		return hl.Err != "" && hl.APIReachable
	})
	fail.Store(false)
	eventually(t, "watch recovered", func() bool {
		hl, _ := h.sink.healthOf("c1")
		return hl.Err == "" && hl.Synced
	})
}

func TestLabelsReconciled(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(
		node("sw1", corev1.ConditionTrue, map[string]string{
			"kubernetes.io/hostname": "sw1",    // Kubernetes': kept
			"example.com/rack":       "r1",     // an operator's: kept
			"ztpd.io/hwsku":          "old",    // ours, changed
			"ztpd.io/gone":           "x",      // ours, no longer desired: removed
			"sonic.ztpd.io/version":  "202305", // ours (subdomain), no longer desired: removed
			"notztpd.io/keep":        "y",      // not a subdomain of ztpd.io: kept
		}),
		node("other", corev1.ConditionTrue, map[string]string{"ztpd.io/stale": "1"}), // not ztpd's device: untouched
	)
	h := startLabelled(t, map[string]map[string]string{"sw1": {
		"ztpd.io/hwsku":  "Accton-AS7326-56X",
		"ztpd.io/serial": "SN123",
		"example.com/x":  "refused", // outside the prefix: never set
		"ztpd.io/bad":    "not a valid value!",
	}}, map[string]*fake.Clientset{"c1": cs})
	h.waitSynced(t, "c1")

	want := map[string]string{
		"kubernetes.io/hostname": "sw1",
		"example.com/rack":       "r1",
		"ztpd.io/hwsku":          "Accton-AS7326-56X",
		"ztpd.io/serial":         "SN123",
		"notztpd.io/keep":        "y",
	}
	get := func(name string) map[string]string {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Labels
	}
	eventually(t, "sw1 labels reconciled", func() bool { return maps.Equal(get("sw1"), want) })
	if got := get("other"); !maps.Equal(got, map[string]string{"ztpd.io/stale": "1"}) {
		t.Errorf("labels of a node ztpd does not know changed: %v", got)
	}
	patches := func() (n int, last k8stesting.PatchAction) {
		for _, a := range cs.Actions() {
			if p, ok := a.(k8stesting.PatchAction); ok {
				n++
				last = p
			}
		}
		return n, last
	}
	n, last := patches()
	if n != 1 || last.GetPatchType() != types.MergePatchType || last.GetName() != "sw1" {
		t.Fatalf("%d patches, last %s %s, want one merge patch of sw1", n, last.GetPatchType(), last.GetName())
	}

	// The device changes: Resync applies it.
	h.labeler.set("sw1", map[string]string{"ztpd.io/hwsku": "Accton-AS7326-56X", "ztpd.io/role": "leaf"})
	if !h.m.Resync("c1") {
		t.Fatal("Resync: c1 not watched")
	}
	want["ztpd.io/role"] = "leaf"
	delete(want, "ztpd.io/serial")
	eventually(t, "sw1 labels after resync", func() bool { return maps.Equal(get("sw1"), want) })

	// Someone removes our label: it is put back without being asked.
	n0, _ := patches()
	sw1, _ := cs.CoreV1().Nodes().Get(ctx, "sw1", metav1.GetOptions{})
	delete(sw1.Labels, "ztpd.io/role")
	if _, err := cs.CoreV1().Nodes().Update(ctx, sw1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "ztpd.io/role restored", func() bool { return get("sw1")["ztpd.io/role"] == "leaf" })

	// In sync: a resync patches nothing.
	time.Sleep(100 * time.Millisecond)
	n1, _ := patches()
	h.m.Resync("c1")
	time.Sleep(200 * time.Millisecond)
	if n2, _ := patches(); n2 != n1 || n1 != n0+1 {
		t.Errorf("patches: %d before the removal, %d after restoring, %d after an idle resync", n0, n1, n2)
	}
}

func TestTargetsAddedRemovedAndMoved(t *testing.T) {
	cs1 := fake.NewClientset(node("a", corev1.ConditionTrue, nil), node("b", corev1.ConditionTrue, nil))
	h := start(t, false, map[string]*fake.Clientset{"c1": cs1})
	h.waitSynced(t, "c1")

	cs2 := fake.NewClientset(node("x", corev1.ConditionTrue, nil))
	h.fakes.mu.Lock()
	h.fakes.sets["c2.example:6443"] = cs2
	h.fakes.mu.Unlock()
	t1 := Target{ClusterID: "c1", Name: "name-c1", Endpoint: "c1.example:6443"}
	t2 := Target{ClusterID: "c2", Endpoint: "c2.example:6443"}
	h.targets.set(t1, t2)
	h.m.Refresh()
	eventually(t, "c2 watched", func() bool { _, c := h.sink.last("c2", "x"); return c == 1 })

	// c1 no longer listed: its watch stops, and its Nodes are not "gone".
	h.targets.set(t2)
	h.m.Refresh()
	eventually(t, "c1 unwatched", func() bool { return len(h.m.Watching()) == 1 })
	if h.m.Resync("c1") {
		t.Error("Resync of an unwatched cluster reported it watched")
	}
	if err := cs1.CoreV1().Nodes().Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if h.sink.goneCount() != 0 {
		t.Errorf("NodeGone after the watch stopped: %v", h.sink.gone)
	}

	// c2 moves to a new endpoint whose cluster lost x and has y: the new
	// watcher reports x gone once it has listed.
	cs3 := fake.NewClientset(node("y", corev1.ConditionTrue, nil))
	h.fakes.mu.Lock()
	h.fakes.sets["c2-new.example:6443"] = cs3
	h.fakes.mu.Unlock()
	h.targets.set(Target{ClusterID: "c2", Endpoint: "c2-new.example:6443"})
	h.m.Refresh()
	eventually(t, "x gone after the move", func() bool { return h.sink.isGone("c2", "x") })
	eventually(t, "y seen after the move", func() bool { _, c := h.sink.last("c2", "y"); return c == 1 })

	// A failed read of the targets keeps the watches.
	h.targets.mu.Lock()
	h.targets.err = errors.New("store closed")
	h.targets.mu.Unlock()
	h.m.Refresh()
	time.Sleep(100 * time.Millisecond)
	if got := h.m.Watching(); len(got) != 1 || got[0] != "c2" {
		t.Errorf("watching %v after a failed read of the targets, want [c2]", got)
	}
}

func TestOwned(t *testing.T) {
	p := []string{LabelPrefix}
	for key, want := range map[string]bool{
		"ztpd.io/hwsku":            true,
		"sonic.ztpd.io/version":    true,
		"a.b.ztpd.io/x":            true,
		"notztpd.io/x":             false,
		"ztpd.io.evil.com/x":       false,
		"ztpd.io":                  false,
		"hwsku":                    false,
		"kubernetes.io/hostname":   false,
		"node-role.kubernetes.io/": false,
	} {
		if got := Owned(key, p); got != want {
			t.Errorf("Owned(%q) = %v, want %v", key, got, want)
		}
	}
	for _, bad := range []string{"kubernetes.io", "node.k8s.io", "Not_DNS", ""} {
		if _, err := New(Options{Targets: &staticTargets{}, Sink: newRecorder(), Prefixes: []string{bad}}); err == nil {
			t.Errorf("prefix %q accepted", bad)
		}
	}
}

func TestLabelChanges(t *testing.T) {
	cur := map[string]string{"ztpd.io/a": "1", "ztpd.io/b": "2", "x.io/c": "3"}
	changes, skipped := labelChanges(cur, map[string]string{"ztpd.io/a": "1", "ztpd.io/d": "4", "x.io/c": "9"}, []string{LabelPrefix})
	if len(changes) != 2 || changes["ztpd.io/b"] != nil || *changes["ztpd.io/d"] != "4" {
		t.Errorf("changes %v", changes)
	}
	if len(skipped) != 1 {
		t.Errorf("skipped %v, want x.io/c", skipped)
	}
	body, err := labelPatch(changes)
	if err != nil || string(body) != `{"metadata":{"labels":{"ztpd.io/b":null,"ztpd.io/d":"4"}}}` {
		t.Errorf("patch %s, %v", body, err)
	}
}

func TestProbeErrorKeepsFailedChecks(t *testing.T) {
	err := errors.New(`an error on the server ("[+]ping ok\n[+]etcd ok\n[-]shutdown failed: reason withheld\n[-]etcd-readiness failed: reason withheld\nreadyz check failed") has prevented the request from succeeding`)
	if got, want := probeError(err), "readyz: not ready: shutdown failed: reason withheld; etcd-readiness failed: reason withheld"; got != want {
		t.Errorf("probeError = %q, want %q", got, want)
	}
	if got := probeError(errors.New("dial tcp: connection refused")); got != "readyz: dial tcp: connection refused" {
		t.Errorf("probeError = %q", got)
	}
}

// TestStopLeavesNoGoroutines: Run returns after its context ends with
// every watcher's informer, worker, probe and renewal stopped.
func TestStopLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	cs1 := fake.NewClientset(node("a", corev1.ConditionTrue, nil))
	cs2 := fake.NewClientset(node("b", corev1.ConditionFalse, nil))
	h := startLabelled(t, map[string]map[string]string{"a": {"ztpd.io/x": "1"}}, map[string]*fake.Clientset{"c1": cs1, "c2": cs2})
	h.targets.mu.Lock()
	h.targets.ts = append(h.targets.ts, Target{ClusterID: "c3", Endpoint: "unreachable:6443"}) // never connects
	h.targets.mu.Unlock()
	h.m.Refresh()
	h.waitSynced(t, "c1")
	h.waitSynced(t, "c2")
	eventually(t, "c3 reported", func() bool { _, ok := h.sink.healthOf("c3"); return ok })
	h.stop()
	eventually(t, "goroutines back to where they were", func() bool { return runtime.NumGoroutine() <= before })
	if got := h.m.Watching(); len(got) != 0 {
		t.Errorf("still watching %v after Run returned", got)
	}
}

func TestRBACIsLeastPrivilege(t *testing.T) {
	role, binding := RBAC()
	if role.Name != RBACName || binding.Name != RBACName || binding.RoleRef.Name != RBACName {
		t.Errorf("names %s %s -> %s", role.Name, binding.Name, binding.RoleRef.Name)
	}
	want := []string{"[] [nodes] [get list watch patch]", "[certificates.k8s.io] [certificatesigningrequests] [get list watch]"}
	if len(role.Rules) != len(want) {
		t.Fatalf("rules %+v, want nodes get/list/watch/patch and CSRs get/list/watch only", role.Rules)
	}
	for i, r := range role.Rules {
		if fmt.Sprint(r.APIGroups, r.Resources, r.Verbs) != want[i] || len(r.ResourceNames) != 0 || len(r.NonResourceURLs) != 0 {
			t.Errorf("rule %d %+v, want %s", i, r, want[i])
		}
	}
	if len(binding.Subjects) != 1 || binding.Subjects[0].Kind != "Group" || binding.Subjects[0].Name != ObserverGroup {
		t.Errorf("subjects %+v, want the group %s", binding.Subjects, ObserverGroup)
	}
	y := string(RBACManifest())
	for _, want := range []string{"kind: ClusterRole\n", "---\n", "kind: ClusterRoleBinding\n", "name: ztpd:observers\n", "- patch\n"} {
		if !strings.Contains(y, want) {
			t.Errorf("manifest lacks %q:\n%s", want, y)
		}
	}
}

// TestManyNodes: a cluster of 600 Nodes is listed, counted and reported
// once each.
func TestManyNodes(t *testing.T) {
	var objs []kruntime.Object
	for i := range 600 {
		st := corev1.ConditionTrue
		if i%10 == 0 {
			st = corev1.ConditionFalse
		}
		objs = append(objs, node(fmt.Sprintf("n%03d", i), st, map[string]string{"kubernetes.io/hostname": fmt.Sprintf("n%03d", i)}))
	}
	h := start(t, false, map[string]*fake.Clientset{"c1": fake.NewClientset(objs...)})
	eventually(t, "600 nodes counted", func() bool {
		hl, _ := h.sink.healthOf("c1")
		return hl.Synced && hl.Nodes == 600 && hl.ReadyNodes == 540
	})
	// The informer counts a Node before its handler has run: wait for
	// the handlers, then check none ran twice.
	seen := func() int {
		h.sink.mu.Lock()
		defer h.sink.mu.Unlock()
		return len(h.sink.seen)
	}
	eventually(t, "NodeSeen for all 600", func() bool { return seen() >= 600 })
	time.Sleep(100 * time.Millisecond)
	if n := seen(); n != 600 {
		t.Errorf("NodeSeen %d times for 600 Nodes", n)
	}
}
