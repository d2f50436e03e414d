package kubeops

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
)

// EvictionBlock is a pod a drain would have to evict whose eviction the
// PodDisruptionBudgets selecting it refuse right now.
type EvictionBlock struct {
	Pod     string // namespace/name
	Budget  string // the budgets allowing no disruption, comma-separated
	Allowed int32
}

// DrainBlockers tells, by node, which of the pods a drain of each of
// nodes would evict a PodDisruptionBudget refuses right now (its
// status.disruptionsAllowed is 0), without evicting anything. A budget
// allowing one disruption with two of its pods on the node is no block:
// the second eviction waits for the first pod's replacement, which the
// drain's timeout bounds. Two reads: every pod and every budget.
func (o *Operator) DrainBlockers(ctx context.Context, nodes []string) (map[string][]EvictionBlock, error) {
	want := map[string]bool{}
	for _, n := range nodes {
		want[n] = true
	}
	pods, err := o.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	pdbs, err := o.client.PolicyV1().PodDisruptionBudgets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing PodDisruptionBudgets: %w", err)
	}
	type budget struct {
		ns, name string
		sel      labels.Selector
		allowed  int32
	}
	var closed []budget
	for _, p := range pdbs.Items {
		if p.Spec.Selector == nil || p.Status.DisruptionsAllowed > 0 {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil {
			continue
		}
		closed = append(closed, budget{p.Namespace, p.Name, sel, p.Status.DisruptionsAllowed})
	}
	out := map[string][]EvictionBlock{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if !want[p.Spec.NodeName] || !evictable(p) {
			continue
		}
		var names []string
		for _, b := range closed {
			if b.ns == p.Namespace && b.sel.Matches(labels.Set(p.Labels)) {
				names = append(names, b.name)
			}
		}
		if len(names) == 0 {
			continue
		}
		slices.Sort(names)
		out[p.Spec.NodeName] = append(out[p.Spec.NodeName], EvictionBlock{Pod: p.Namespace + "/" + p.Name, Budget: strings.Join(names, ", ")})
	}
	for _, bs := range out {
		slices.SortFunc(bs, func(a, b EvictionBlock) int { return strings.Compare(a.Pod, b.Pod) })
	}
	return out, nil
}

// CrashLooping lists the pods on node (namespace/name) with a container
// waiting in CrashLoopBackOff.
func (o *Operator) CrashLooping(ctx context.Context, node string) ([]string, error) {
	pods, err := o.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("listing the pods of %s: %w", node, err)
	}
	var out []string
	for _, p := range pods.Items {
		if crashLooping(p.Status.InitContainerStatuses) || crashLooping(p.Status.ContainerStatuses) {
			out = append(out, p.Namespace+"/"+p.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

func crashLooping(cs []corev1.ContainerStatus) bool {
	for _, c := range cs {
		if c.State.Waiting != nil && c.State.Waiting.Reason == "CrashLoopBackOff" {
			return true
		}
	}
	return false
}
