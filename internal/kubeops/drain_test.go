package kubeops

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The fake clientset stands in where the real API server cannot be made to
// answer so: an eviction answered 404, a pod replaced under its name, an
// eviction refused with 403. The real server's behaviour is in
// apiserver_test.go.

func pod(name string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{NodeName: "n-1"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

var podsResource = corev1.SchemeGroupVersion.WithResource("pods")

// onEviction makes the fake answer evictions with answer(name).
func onEviction(c *fake.Clientset, answer func(name string) error) *[]string {
	var evicted []string
	c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		evicted = append(evicted, ev.Name)
		return true, nil, answer(ev.Name)
	})
	return &evicted
}

func TestDrainSkipsAndGone(t *testing.T) {
	isDS := true
	c := fake.NewClientset(
		pod("web-1"),
		pod("gone-1"),
		pod("agent-1", func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "ds", Controller: &isDS}}
		}),
		pod("static-1", func(p *corev1.Pod) { p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "abc"} }),
		pod("job-1", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
		pod("failed-1", func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }),
	)
	tracker := c.Tracker()
	evicted := onEviction(c, func(name string) error {
		switch name {
		case "web-1": // evicted, and a controller's replacement took the name
			if err := tracker.Delete(podsResource, "default", name); err != nil {
				return err
			}
			return tracker.Create(podsResource, pod(name, func(p *corev1.Pod) { p.UID = "uid-web-1-new" }), "default")
		case "gone-1": // gone before its eviction: 404
			if err := tracker.Delete(podsResource, "default", name); err != nil {
				return err
			}
			return apierrors.NewNotFound(podsResource.GroupResource(), name)
		}
		t.Errorf("evicted %s", name)
		return nil
	})
	if err := New(c).Drain(context.Background(), "n-1", DrainOptions{Timeout: 5 * time.Second, Poll: 10 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(*evicted, ","); got != "gone-1,web-1" && got != "web-1,gone-1" {
		t.Errorf("evicted %s, want web-1 and gone-1 only", got)
	}
}

func TestDrainOtherErrorFailsAtOnce(t *testing.T) {
	c := fake.NewClientset(pod("locked-1"))
	onEviction(c, func(name string) error {
		return apierrors.NewForbidden(podsResource.GroupResource(), name, errors.New("not allowed"))
	})
	begin := time.Now()
	err := New(c).Drain(context.Background(), "n-1", DrainOptions{Timeout: time.Minute})
	if err == nil || !apierrors.IsForbidden(err) || !strings.HasPrefix(err.Error(), "drain of node n-1: evicting pod default/locked-1: ") {
		t.Fatalf("err = %v, want the 403 with its context", err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("a 403 was retried for %v", d)
	}
}

func TestDrainBlockedNamesTheBudget(t *testing.T) {
	one := intstr.FromInt32(1)
	pdb := func(name string, sel *metav1.LabelSelector, allowed int32) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: sel},
			Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed},
		}
	}
	c := fake.NewClientset(
		pod("web-1", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "web"} }),
		pod("web-2", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "web"} }),
		pdb("web-pdb", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, 0),
		pdb("db-pdb", &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, 0),
		pdb("null-pdb", nil, 0), // selects nothing in policy/v1
	)
	onEviction(c, func(string) error {
		return apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
	})
	err := New(c).Drain(context.Background(), "n-1", DrainOptions{Timeout: 300 * time.Millisecond, Poll: 20 * time.Millisecond})
	var blocked *DrainBlocked
	if !errors.As(err, &blocked) {
		t.Fatalf("err = %v, want a *DrainBlocked", err)
	}
	if blocked.Budget != "web-pdb" || blocked.AllowedDisruptions != 0 || blocked.Node != "n-1" || len(blocked.Pending) != 2 ||
		!strings.Contains(blocked.Message, "disruption budget") {
		t.Errorf("blocked = %+v", blocked)
	}
	want := "drain of node n-1: eviction of pod " + blocked.Pod + " blocked by PodDisruptionBudget web-pdb (allowed disruptions 0) for 300ms (and 1 more pod(s) not evicted)"
	if err.Error() != want {
		t.Errorf("error\n %s\nwant\n %s", err, want)
	}

	// Without a matching budget the error says what the API server said.
	nobudget := &DrainBlocked{Node: "n-1", Pod: "default/x-1", Message: "too many requests", Waited: time.Minute, Pending: []string{"default/x-1"}}
	if got := nobudget.Error(); got != "drain of node n-1: eviction of pod default/x-1 refused for 1m0s: too many requests" {
		t.Errorf("error %q", got)
	}
}

func TestNodeReadyAt(t *testing.T) {
	node := func(version string, ready corev1.ConditionStatus) *corev1.Node {
		n := &corev1.Node{}
		n.Status.NodeInfo.KubeletVersion = version
		if ready != "" {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
		}
		return n
	}
	check := NodeReadyAt("v1.37.2")
	for _, tc := range []struct {
		n     *corev1.Node
		ok    bool
		shows string
	}{
		{node("v1.37.2", corev1.ConditionTrue), true, "kubelet v1.37.2, Ready=True; want v1.37.2 Ready"},
		{node("v1.36.3", corev1.ConditionTrue), false, "kubelet v1.36.3, Ready=True; want v1.37.2 Ready"},
		{node("v1.37.2", corev1.ConditionUnknown), false, "kubelet v1.37.2, Ready=Unknown; want v1.37.2 Ready"},
		{node("v1.37.2", ""), false, "kubelet v1.37.2, no Ready condition; want v1.37.2 Ready"},
		{nil, false, "not found; want v1.37.2 Ready"},
	} {
		if ok, shows := check(tc.n); ok != tc.ok || shows != tc.shows {
			t.Errorf("check = %v %q, want %v %q", ok, shows, tc.ok, tc.shows)
		}
	}
}

func TestCordonUncordonFake(t *testing.T) {
	c := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n-1"}})
	ops := New(c)
	ctx := context.Background()
	for i, step := range []struct {
		cordon, changed bool
	}{{true, true}, {true, false}, {false, true}, {false, false}} {
		op := ops.Uncordon
		if step.cordon {
			op = ops.Cordon
		}
		changed, err := op(ctx, "n-1")
		if err != nil || changed != step.changed {
			t.Fatalf("step %d: changed %v, err %v; want changed %v", i, changed, err, step.changed)
		}
	}
	if _, err := ops.Cordon(ctx, "missing"); !apierrors.IsNotFound(err) || !strings.HasPrefix(err.Error(), "cordon node missing: ") {
		t.Errorf("cordon of a missing node: %v", err)
	}
}
