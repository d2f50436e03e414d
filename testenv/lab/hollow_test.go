package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/testenv/controlplane"
	"github.com/ztpd/ztpd/testenv/kubebin"
)

// The workload the hollow-node upgrade must move: 4 replicas, a budget of
// at least 3 available, and pods that take preStopSeconds to terminate (a
// preStop sleep, which the kubelet itself runs: the fake runtime stops its
// containers at once) within their grace period.
const (
	webReplicas    = 4
	webMinAvailab  = 3
	preStopSeconds = 3
	webGrace       = 10
)

// TestHollowDrainKeepsBudget is the lab's upgrade with pods that really
// have to move: 4 VMs join one real cluster at the Kubernetes version
// before the newest, every kubelet is kubemark's hollow node (the real
// kubelet over a fake container runtime) and kube-scheduler runs beside
// the control plane. A Deployment of 4 replicas with a PodDisruptionBudget
// (minAvailable 3) and a 3 s preStop runs on the 3 workers; then
// upgradeKubernetesCluster rolls the newest out node by node through
// ztpd's rollout engine (cordon, drain by the eviction API, the device's
// real agent with simulated kubeadm, the hollow node restarted at the new
// version, Ready, uncordon). Watched from the API server's pod statuses
// and events: pods are evicted from each drained worker, rescheduled and
// Ready on other nodes, the Deployment's Ready replicas never drop below
// the budget's 3, every evicted pod took its preStop time to terminate,
// and every drain waited until its pods were gone before the kubelet
// restarted.
func TestHollowDrainKeepsBudget(t *testing.T) {
	from, to, err := UpgradeVersions()
	if err != nil {
		t.Skip(err)
	}
	bin, ksim := requireLabFleetAt(t, from)
	kubebin.Require(t, to)
	kubebin.RequireHollow(t, from)
	kubebin.RequireHollow(t, to)
	work := t.TempDir()
	var progress strings.Builder
	var w *podWatch
	l, err := Open(context.Background(), Scenario{VMs: 4, Clusters: 1, Upgrade: true},
		Options{Prefix: "zhd", Octet: 166, WorkDir: work, Bin: bin, Kubeletsim: ksim, Out: &progress, Timeout: 12 * time.Minute,
			Hollow: true,
			BeforeUpgrade: func(l *Lab) error {
				var err error
				w, err = startWorkload(t, l)
				return err
			}})
	if w != nil {
		defer w.stop()
	}
	if l != nil {
		defer l.Close()
	}
	t.Log("progress:\n" + tail(progress.String(), 4000))
	if err != nil {
		for _, f := range []string{"ztpd.out", "agent-vm1.out", "kubelet-vm1.out", "kubelet-vm1.1.out"} {
			if b, rerr := os.ReadFile(filepath.Join(work, f)); rerr == nil {
				t.Logf("%s (tail):\n%s", f, tail(string(b), 3000))
			}
		}
		if w != nil {
			w.stop()
			t.Logf("pods seen:\n%s", w.transcript())
		}
		t.Fatal(err)
	}
	res := l.Result
	if len(res.Rollouts) != 1 || res.Rollouts[0].State != string(core.RolloutSucceeded) {
		t.Fatalf("rollouts %+v", res.Rollouts)
	}
	// The scheduler moved with the control plane (never newer or older
	// than its API server).
	if h, err := kubebin.Hollow(to); err != nil {
		t.Error(err)
	} else if p := l.Kube.Plane("lab-0"); !slices.Contains(p.CP.Running(), controlplane.Scheduler) || p.CP.Command(controlplane.Scheduler)[0] != h.Scheduler {
		t.Errorf("kube-scheduler: running %v, command %v; want %s's running", p.CP.Running(), p.CP.Command(controlplane.Scheduler), h.Scheduler)
	}
	ctx := context.Background()
	cs := w.cs
	// The moved pods settle: every replica Ready again (the last node's
	// replacements may still be starting when the rollout ends).
	waitUntil(t, time.Minute, "the Deployment's 4 replicas available again", func() (bool, string) {
		d, err := cs.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return d.Status.AvailableReplicas == webReplicas && d.Status.UpdatedReplicas == webReplicas,
			fmt.Sprintf("%+v", d.Status)
	})
	w.stop()
	t.Logf("rollout %s: %s in %s, nodes %+v", res.Rollouts[0].ID, res.Rollouts[0].State, res.Rollouts[0].Elapsed.Round(100*time.Millisecond), res.Rollouts[0].Nodes)
	t.Logf("the Deployment's pods as the API server showed them (Ready = Ready and not terminating):\n%s", w.transcript())

	w.mu.Lock()
	defer w.mu.Unlock()
	if w.watchErrs > 0 {
		t.Logf("the pod watch was re-listed %d times (the API server restarted during the control plane's upgrade)", w.watchErrs)
	}
	if w.minReady < webMinAvailab {
		t.Errorf("Ready replicas dropped to %d, below the budget's minAvailable %d", w.minReady, webMinAvailab)
	}
	if w.minReady > webMinAvailab {
		t.Errorf("Ready replicas never dropped below %d: no pod was disrupted", w.minReady)
	}
	// Per worker: the pods evicted from it, each gone only after its
	// preStop, each before the node's kubelet restarted at the new
	// version (the drain waited for it), and replaced by a pod Ready on
	// another node.
	workers := map[string]*Kubelet{}
	for _, d := range l.Plan {
		if d.Role == "worker" {
			workers[l.Kube.Kubelet(d.Name).NodeName] = l.Kube.Kubelet(d.Name)
		}
	}
	evictedFrom := map[string]int{}
	for _, p := range w.pods {
		if p.deleting.IsZero() {
			continue
		}
		evictedFrom[p.node]++
		if p.gone.IsZero() {
			t.Errorf("pod %s on %s: deleted at %s, never gone", p.name, p.node, p.deleting.Format(time.TimeOnly))
			continue
		}
		if took := p.gone.Sub(p.deleting); took < preStopSeconds*time.Second-500*time.Millisecond {
			t.Errorf("pod %s on %s terminated in %s, less than its %d s preStop: the kubelet did not wait", p.name, p.node, took, preStopSeconds)
		}
		kl := workers[p.node]
		if kl == nil {
			t.Errorf("pod %s was evicted from %s, not a worker", p.name, p.node)
			continue
		}
		if up := kl.UpgradedAt(); up.IsZero() || !p.gone.Before(up) {
			t.Errorf("pod %s on %s gone at %s, its node's kubelet restarted at %s: the drain did not wait for it",
				p.name, p.node, p.gone.Format(time.TimeOnly), up.Format(time.TimeOnly))
		}
		if !slices.ContainsFunc(w.podList(), func(q *podLife) bool {
			return q.node != p.node && !q.ready.IsZero() && q.created.After(p.deleting.Add(-time.Second))
		}) {
			t.Errorf("no pod became Ready on another node after %s was evicted from %s", p.name, p.node)
		}
	}
	moved := 0
	for node, n := range evictedFrom {
		moved += n
		t.Logf("%d pod(s) evicted from %s", n, node)
	}
	if len(evictedFrom) < 2 || moved < 3 {
		t.Errorf("pods evicted from %d node(s), %d in all: want pods moved off at least 2 workers", len(evictedFrom), moved)
	}
	for name, kl := range workers {
		if kl.UpgradedAt().IsZero() || kl.Version != to {
			t.Errorf("worker %s: hollow node at %s, restarted %v; want restarted at %s", name, kl.Version, kl.UpgradedAt(), to)
		}
	}
	// The events say the same: the ReplicaSet controller created every
	// replacement, the scheduler assigned every pod to the node the watch
	// saw it on. (The hollow kubelet posts no events: kubemark gives it no
	// event client; its side is in the pod statuses above.)
	evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created, scheduledTo := map[string]bool{}, map[string]string{}
	for _, e := range evs.Items {
		switch {
		case e.Reason == "SuccessfulCreate" && e.InvolvedObject.Kind == "ReplicaSet":
			if _, pod, ok := strings.Cut(e.Message, "Created pod: "); ok {
				created[pod] = true
			}
		case e.Reason == "Scheduled" && e.InvolvedObject.Kind == "Pod":
			if _, node, ok := strings.Cut(e.Message, " to "); ok {
				scheduledTo[e.InvolvedObject.Name] = node
			}
		}
	}
	for _, p := range w.pods {
		if !created[p.name] {
			t.Errorf("no SuccessfulCreate event of the ReplicaSet for pod %s", p.name)
		}
		if scheduledTo[p.name] != p.node {
			t.Errorf("pod %s: the scheduler's event assigns it to %q, the watch saw it on %s", p.name, scheduledTo[p.name], p.node)
		}
	}
	t.Logf("events: %d pods created by the ReplicaSet, %d scheduled; the budget's disruptionsAllowed went %v", len(created), len(scheduledTo), w.allowed)
}

// startWorkload creates the Deployment and its budget, waits for every
// replica Ready and the budget's status, and starts watching the pods.
func startWorkload(t *testing.T, l *Lab) (*podWatch, error) {
	p := l.Kube.Plane("lab-0")
	if p == nil {
		return nil, fmt.Errorf("no control plane for lab-0")
	}
	cs, err := p.Client()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	labels := map[string]string{"app": "web"}
	grace := int64(webGrace)
	replicas := int32(webReplicas)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					Containers: []corev1.Container{{
						Name: "web", Image: "registry.k8s.io/pause:3.10",
						Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: preStopSeconds}}},
					}},
				},
			},
		},
	}
	minAvail := intstr.FromInt32(webMinAvailab)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvail, Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}
	// The ServiceAccount admission plugin refuses pods until KCM made
	// default/default; the ReplicaSet controller retries, but the wait
	// below would then measure that.
	if err := poll(ctx, func() (bool, string) {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	}); err != nil {
		return nil, fmt.Errorf("ServiceAccount default/default: %w", err)
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := cs.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	begin := time.Now()
	if err := poll(ctx, func() (bool, string) {
		b, err := cs.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return b.Status.ObservedGeneration == b.Generation && b.Status.CurrentHealthy == webReplicas && b.Status.DisruptionsAllowed == 1,
			fmt.Sprintf("budget %+v", b.Status)
	}); err != nil {
		pods, _ := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		var st []string
		for _, p := range pods.Items {
			st = append(st, fmt.Sprintf("%s on %q: %s %+v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Conditions))
		}
		return nil, fmt.Errorf("the Deployment's 4 replicas Ready on the hollow nodes: %w\n  %s", err, strings.Join(st, "\n  "))
	}
	t.Logf("web: %d replicas Ready on the hollow nodes %s after its creation", webReplicas, time.Since(begin).Round(100*time.Millisecond))
	return watchPods(cs, "app=web"), nil
}

// poll checks cond every 250 ms until it holds or ctx ends.
func poll(ctx context.Context, cond func() (bool, string)) error {
	for {
		ok, last := cond()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %s)", ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := poll(ctx, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// podLife is one pod's way as the watch saw it.
type podLife struct {
	name, node                     string
	created, ready, deleting, gone time.Time
	isReady                        bool
}

// podWatch follows the pods of a selector from the API server: a list,
// then a watch from its resourceVersion, listed again when the watch ends
// (the API server restarts when the control plane is upgraded; nothing is
// evicted meanwhile). At every change it counts the Ready replicas (Ready
// and not terminating, as the disruption controller counts them healthy).
type podWatch struct {
	cs     kubernetes.Interface
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	pods      map[types.UID]*podLife
	lines     []string // the transcript
	ready     int
	minReady  int
	watchErrs int
	allowed   []int32 // the budget's disruptionsAllowed, each change
	began     time.Time
}

func watchPods(cs kubernetes.Interface, selector string) *podWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &podWatch{cs: cs, cancel: cancel, done: make(chan struct{}), pods: map[types.UID]*podLife{}, minReady: 1 << 30, began: time.Now()}
	go func() {
		defer close(w.done)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); w.followBudget(ctx) }()
		pods := cs.CoreV1().Pods("default")
		for ctx.Err() == nil {
			list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				sleepCtx(ctx, 500*time.Millisecond)
				continue
			}
			w.sync(list.Items)
			wi, err := pods.Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: list.ResourceVersion})
			if err != nil {
				sleepCtx(ctx, 500*time.Millisecond)
				continue
			}
			for ev := range wi.ResultChan() {
				p, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				switch ev.Type {
				case watch.Added, watch.Modified:
					w.update(p, time.Now())
				case watch.Deleted:
					w.remove(p.UID, time.Now())
				}
			}
			wi.Stop()
			if ctx.Err() == nil {
				w.mu.Lock()
				w.watchErrs++
				w.mu.Unlock()
			}
		}
		wg.Wait()
	}()
	return w
}

// followBudget records the budget's disruptionsAllowed as it changes.
func (w *podWatch) followBudget(ctx context.Context) {
	last := int32(-1)
	for ctx.Err() == nil {
		if b, err := w.cs.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "web", metav1.GetOptions{}); err == nil && b.Status.DisruptionsAllowed != last {
			last = b.Status.DisruptionsAllowed
			w.mu.Lock()
			w.allowed = append(w.allowed, last)
			w.logLocked(time.Now(), fmt.Sprintf("budget: healthy %d, desired %d, disruptions allowed %d", b.Status.CurrentHealthy, b.Status.DesiredHealthy, last))
			w.mu.Unlock()
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// sync applies a fresh list: pods missing from it are gone.
func (w *podWatch) sync(items []corev1.Pod) {
	now := time.Now()
	seen := map[types.UID]bool{}
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range items {
		seen[items[i].UID] = true
		w.updateLocked(&items[i], now)
	}
	for uid, p := range w.pods {
		if !seen[uid] && p.gone.IsZero() {
			w.removeLocked(uid, now)
		}
	}
	// Counted once the list is applied, not pod by pod.
	w.recountLocked(now)
}

func (w *podWatch) update(p *corev1.Pod, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.updateLocked(p, now)
	w.recountLocked(now)
}

func (w *podWatch) updateLocked(p *corev1.Pod, now time.Time) {
	l := w.pods[p.UID]
	if l == nil {
		l = &podLife{name: p.Name, created: now}
		w.pods[p.UID] = l
		w.logLocked(now, "created "+p.Name)
	}
	if l.node == "" && p.Spec.NodeName != "" {
		l.node = p.Spec.NodeName
		w.logLocked(now, fmt.Sprintf("%s scheduled to %s", p.Name, l.node))
	}
	if p.DeletionTimestamp != nil && l.deleting.IsZero() {
		l.deleting = now
		w.logLocked(now, fmt.Sprintf("%s terminating on %s (grace %ds)", p.Name, l.node, ptrVal(p.DeletionGracePeriodSeconds)))
	}
	if r := podReady(p); r != l.isReady {
		l.isReady = r
		if r && l.ready.IsZero() {
			l.ready = now
		}
		w.logLocked(now, fmt.Sprintf("%s Ready=%v on %s", p.Name, r, l.node))
	}
}

func (w *podWatch) remove(uid types.UID, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.removeLocked(uid, now)
	w.recountLocked(now)
}

func (w *podWatch) removeLocked(uid types.UID, now time.Time) {
	l := w.pods[uid]
	if l == nil || !l.gone.IsZero() {
		return
	}
	l.gone = now
	took := ""
	if !l.deleting.IsZero() {
		took = fmt.Sprintf(", %s after its deletion", now.Sub(l.deleting).Round(100*time.Millisecond))
	}
	w.logLocked(now, fmt.Sprintf("%s gone from %s%s", l.name, l.node, took))
}

// recountLocked counts the Ready replicas; w.mu is held.
func (w *podWatch) recountLocked(now time.Time) {
	n := 0
	for _, p := range w.pods {
		if p.isReady && p.deleting.IsZero() && p.gone.IsZero() {
			n++
		}
	}
	if n != w.ready || len(w.lines) == 0 {
		w.ready = n
		w.logLocked(now, fmt.Sprintf("Ready replicas: %d", n))
	}
	w.minReady = min(w.minReady, n)
}

func (w *podWatch) logLocked(at time.Time, s string) {
	w.lines = append(w.lines, fmt.Sprintf("%7.2fs  %s", at.Sub(w.began).Seconds(), s))
}

func (w *podWatch) podList() []*podLife {
	out := make([]*podLife, 0, len(w.pods))
	for _, p := range w.pods {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].created.Before(out[j].created) })
	return out
}

func (w *podWatch) transcript() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.lines, "\n")
}

func (w *podWatch) stop() {
	w.cancel()
	<-w.done
}

func ptrVal[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
