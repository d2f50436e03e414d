package kubeops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// Drain defaults.
const (
	DefaultDrainTimeout = 5 * time.Minute
	DefaultDrainPoll    = time.Second
	// maxEvictionBackoff caps the pause between eviction rounds a
	// PodDisruptionBudget refused (kubectl drain retries every 5 s).
	maxEvictionBackoff = 5 * time.Second
)

// DrainOptions shape a Drain.
type DrainOptions struct {
	// Timeout bounds the whole drain: evictions a PodDisruptionBudget
	// refuses are retried until then, and the evicted pods must be gone by
	// then. 0: DefaultDrainTimeout.
	Timeout time.Duration
	// GracePeriod is each evicted pod's termination grace period; 0: the
	// pod's own (spec.terminationGracePeriodSeconds). There is no forced,
	// immediate deletion: a drain lets pods stop.
	GracePeriod time.Duration
	// Poll is the first pause between eviction rounds (doubling up to 5 s)
	// and the interval of the checks that evicted pods are gone; 0:
	// DefaultDrainPoll.
	Poll time.Duration
}

// DrainBlocked is the error of a drain whose evictions were still refused
// (429 Too Many Requests, in practice a PodDisruptionBudget) when its
// Timeout passed. The pods not named were evicted.
type DrainBlocked struct {
	Node string
	Pod  string // namespace/name of the first pod still refused
	// Budget names the PodDisruptionBudgets in the pod's namespace whose
	// selector matches it (comma-separated); empty when none was found.
	Budget string
	// AllowedDisruptions is the lowest status.disruptionsAllowed of those
	// budgets.
	AllowedDisruptions int32
	Message            string        // the API server's last refusal, with its causes
	Waited             time.Duration // how long the evictions were retried
	Pending            []string      // every pod still refused, Pod first
}

func (e *DrainBlocked) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "drain of node %s: eviction of pod %s ", e.Node, e.Pod)
	if e.Budget != "" {
		fmt.Fprintf(&b, "blocked by PodDisruptionBudget %s (allowed disruptions %d) for %s", e.Budget, e.AllowedDisruptions, e.Waited)
	} else {
		fmt.Fprintf(&b, "refused for %s: %s", e.Waited, e.Message)
	}
	if n := len(e.Pending) - 1; n > 0 {
		fmt.Fprintf(&b, " (and %d more pod(s) not evicted)", n)
	}
	return b.String()
}

// Drain evicts the pods bound to the Node, as kubectl drain does, and
// waits for them to be gone: DaemonSet pods (their controller would put
// them back), mirror pods of static pods (the kubelet owns them) and pods
// that already terminated stay. Each eviction goes through the policy/v1
// Eviction API, so PodDisruptionBudgets hold: a refusal (429) is retried
// with backoff until the Timeout, then the drain fails with a
// *DrainBlocked; any other error fails it at once; a pod already gone
// (404) counts as evicted. A pod is gone when it no longer exists or a
// pod of another UID took its name. Drain does not cordon: cordon first,
// or a scheduler may bind new pods to the Node meanwhile.
func (o *Operator) Drain(ctx context.Context, node string, opts DrainOptions) error {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultDrainTimeout
	}
	if opts.Poll <= 0 {
		opts.Poll = DefaultDrainPoll
	}
	begin := time.Now()
	deadline := begin.Add(opts.Timeout)
	fail := func(what string, err error) error {
		return fmt.Errorf("drain of node %s: %s: %w", node, what, err)
	}

	list, err := o.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return fail("listing its pods", err)
	}
	var pending []corev1.Pod
	for _, p := range list.Items {
		if evictable(&p) {
			pending = append(pending, p)
		}
	}

	evicted := map[types.NamespacedName]types.UID{}
	refusals := map[types.NamespacedName]error{}
	pause := opts.Poll
	for {
		var refused []corev1.Pod
		for _, p := range pending {
			key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
			err := o.evict(ctx, &p, opts.GracePeriod)
			switch {
			case err == nil || apierrors.IsNotFound(err):
				evicted[key] = p.UID
			case apierrors.IsTooManyRequests(err):
				refused = append(refused, p)
				refusals[key] = err
			default:
				return fail("evicting pod "+key.String(), err)
			}
		}
		pending = refused
		if len(pending) == 0 {
			break
		}
		if !time.Now().Before(deadline) {
			return o.blocked(ctx, node, pending, refusals, opts.Timeout)
		}
		if err := sleep(ctx, min(pause, time.Until(deadline))); err != nil {
			return fail("evicting its pods", err)
		}
		pause = min(2*pause, max(opts.Poll, maxEvictionBackoff))
	}

	// Evicted pods terminate (their kubelet stops them) before they are
	// gone; wait for that, so the node is really empty.
	for {
		var left []string
		var lastErr error
		for key, uid := range evicted {
			p, err := o.client.CoreV1().Pods(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err) || err == nil && p.UID != uid:
				delete(evicted, key)
			case err != nil:
				lastErr = err
				left = append(left, key.String())
			default:
				left = append(left, key.String())
			}
		}
		if len(left) == 0 {
			return nil
		}
		if !time.Now().Before(deadline) {
			slices.Sort(left)
			msg := fmt.Sprintf("drain of node %s: %d evicted pod(s) not gone after %s: %s", node, len(left), opts.Timeout, strings.Join(left, ", "))
			if lastErr != nil {
				msg += fmt.Sprintf(" (last error reading them: %v)", lastErr)
			}
			return errors.New(msg)
		}
		if err := sleep(ctx, min(opts.Poll, time.Until(deadline))); err != nil {
			return fail("waiting for evicted pods to go", err)
		}
	}
}

// evictable says whether a drain evicts the pod.
func evictable(p *corev1.Pod) bool {
	if c := metav1.GetControllerOf(p); c != nil && c.Kind == "DaemonSet" {
		return false
	}
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

func (o *Operator) evict(ctx context.Context, p *corev1.Pod, grace time.Duration) error {
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
	if grace > 0 {
		secs := max(int64(grace/time.Second), 1)
		ev.DeleteOptions = &metav1.DeleteOptions{GracePeriodSeconds: &secs}
	}
	return o.client.CoreV1().Pods(p.Namespace).EvictV1(ctx, ev)
}

// blocked builds the DrainBlocked error, naming the budgets that match the
// first refused pod.
func (o *Operator) blocked(ctx context.Context, node string, pending []corev1.Pod, refusals map[types.NamespacedName]error, waited time.Duration) error {
	first := pending[0]
	key := types.NamespacedName{Namespace: first.Namespace, Name: first.Name}
	e := &DrainBlocked{Node: node, Pod: key.String(), Waited: waited}
	if err := refusals[key]; err != nil {
		e.Message = strings.TrimSuffix(err.Error(), ".")
		// The causes say what the budget needs and has.
		var status apierrors.APIStatus
		if errors.As(err, &status) && status.Status().Details != nil {
			for _, c := range status.Status().Details.Causes {
				e.Message += "; " + c.Message
			}
		}
	}
	for _, p := range pending {
		e.Pending = append(e.Pending, p.Namespace+"/"+p.Name)
	}
	pdbs, err := o.client.PolicyV1().PodDisruptionBudgets(first.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		e.Message += fmt.Sprintf(" (listing PodDisruptionBudgets: %v)", err)
		return e
	}
	var names []string
	for _, pdb := range pdbs.Items {
		if pdb.Spec.Selector == nil { // policy/v1: a null selector selects nothing
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(first.Labels)) {
			continue
		}
		if len(names) == 0 || pdb.Status.DisruptionsAllowed < e.AllowedDisruptions {
			e.AllowedDisruptions = pdb.Status.DisruptionsAllowed
		}
		names = append(names, pdb.Name)
	}
	slices.Sort(names)
	e.Budget = strings.Join(names, ", ")
	return e
}

// sleep pauses for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
