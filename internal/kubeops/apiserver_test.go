package kubeops_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/ztpd/ztpd/internal/kubeops"
	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/joiner/pki"
	"github.com/ztpd/ztpd/joiner/tokens"
	"github.com/ztpd/ztpd/testenv/controlplane"
	"github.com/ztpd/ztpd/testenv/kubeletsim"
)

// The control plane's addresses in the test's own network namespace.
const (
	endpointIP  = "10.99.218.10"
	advertiseIP = "10.99.218.11"
)

// lab is a real control plane (no scheduler: pods are created bound) with
// simulated kubelets that run their pods (kubeletsim RunPods), the admin,
// and the operator identity with RBAC() only.
type lab struct {
	admin    kubernetes.Interface
	ops      *kubeops.Operator
	operator kubernetes.Interface
	kubelets map[string]*kubeletsim.Kubelet
}

func newLab(t *testing.T) *lab {
	t.Helper()
	tok, err := tokens.GenerateBootstrapToken()
	if err != nil {
		t.Fatal(err)
	}
	tp := controlplane.StartForTest(t, controlplane.TestOptions{
		Namespace: fmt.Sprintf("ko-%x", os.Getpid()), EndpointIP: endpointIP, AdvertiseIP: advertiseIP,
		Tokens: []bundle.Token{{Token: tok, TTL: time.Hour, Description: "kubeops test: workers"}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dial := controlplane.NetnsDial(tp.NS)

	adminCfg, err := clientcmd.BuildConfigFromFlags("", tp.AdminKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	adminCfg.Dial = dial
	l := &lab{admin: kubernetes.NewForConfigOrDie(adminCfg), kubelets: map[string]*kubeletsim.Kubelet{}}

	role, binding := kubeops.RBAC()
	if _, err := l.admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kp, err := tp.CA.IssueClient(pki.ClientCertRequest{CommonName: kubeops.OperatorUser, Organizations: []string{kubeops.OperatorGroup}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, err := kp.PrivateKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	l.operator = kubernetes.NewForConfigOrDie(&rest.Config{
		Host: tp.URL(), Dial: dial,
		TLSClientConfig: rest.TLSClientConfig{CAData: tp.CA.CertPEM(), CertData: kp.CertPEM(), KeyData: key},
	})
	l.ops = kubeops.New(l.operator)

	// The workers' bootstrap kubeconfig, as kubeadm join writes it.
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kubernetes"] = &clientcmdapi.Cluster{Server: tp.URL(), CertificateAuthorityData: tp.CA.CertPEM()}
	kc.AuthInfos["tls-bootstrap-token-user"] = &clientcmdapi.AuthInfo{Token: tok.Reveal()}
	kc.Contexts["default"] = &clientcmdapi.Context{Cluster: "kubernetes", AuthInfo: "tls-bootstrap-token-user"}
	kc.CurrentContext = "default"
	bootstrap, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	pool := kubeletsim.NewPool(kubeletsim.PoolOptions{Dial: kubeletsim.DialFunc(dial)})
	quiet := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for _, n := range []string{"n-1", "n-2"} {
		k, err := pool.Start(context.Background(), kubeletsim.Config{
			NodeName: n, BootstrapKubeconfig: bootstrap, KubeletVersion: "v1.36.3", RunPods: true,
			Labels: map[string]string{"ztpd.io/agent": "yes"}, StatusEvery: 2 * time.Second, Logger: quiet,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(k.Stop)
		if err := k.WaitRegistered(ctx); err != nil {
			t.Fatal(err)
		}
		l.kubelets[n] = k
	}
	waitFor(t, 30*time.Second, "ServiceAccount default/default (pods are refused before)", func() (bool, string) {
		_, err := l.admin.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	return l
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s (last: %s)", d, what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runPod creates a bare pod bound to node and waits for its kubelet to
// report it Running.
func (l *lab) runPod(t *testing.T, name, node, app string, annotations map[string]string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": app}, Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeName: node, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	if _, err := l.admin.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	waitFor(t, 10*time.Second, name+" Running", func() (bool, string) {
		var err error
		if p, err = l.admin.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase)
	})
	return p
}

// podsOn lists the names of the pods bound to node.
func (l *lab) podsOn(t *testing.T, node string) []string {
	t.Helper()
	list, err := l.admin.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return names
}

// TestRealAPIServer runs the operations as the operator identity against a
// real kube-apiserver and kube-controller-manager (the disruption,
// DaemonSet and garbage collection controllers are real), with simulated
// kubelets that run and remove their pods.
func TestRealAPIServer(t *testing.T) {
	l := newLab(t)
	t.Run("RBAC", l.testRBAC)
	t.Run("Cordon", l.testCordon)
	t.Run("Drain", l.testDrain)
	t.Run("DrainBlocked", l.testDrainBlocked)
	t.Run("WaitNode", l.testWaitNode)
	t.Run("DeleteNode", l.testDeleteNode)
}

// testRBAC: the role allows the operations and nothing around them.
func (l *lab) testRBAC(t *testing.T) {
	ctx := context.Background()
	if _, err := l.operator.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("operator cannot list Nodes: %v", err)
	}
	if _, err := l.operator.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("operator listing Secrets: %v, want 403", err)
	}
	// Pods leave only through evictions, which PodDisruptionBudgets govern.
	if err := l.operator.CoreV1().Pods("default").Delete(ctx, "any", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("operator deleting a pod: %v, want 403", err)
	}
	if _, err := l.operator.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("operator creating a pod: %v, want 403", err)
	}
}

func (l *lab) testCordon(t *testing.T) {
	ctx := context.Background()
	unschedulable := func() bool {
		n, err := l.admin.CoreV1().Nodes().Get(ctx, "n-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Spec.Unschedulable
	}
	for i, step := range []struct{ cordon, changed bool }{{true, true}, {true, false}, {false, true}, {false, false}} {
		op := l.ops.Uncordon
		if step.cordon {
			op = l.ops.Cordon
		}
		changed, err := op(ctx, "n-1")
		if err != nil || changed != step.changed {
			t.Fatalf("step %d (cordon %v): changed %v, err %v; want changed %v", i, step.cordon, changed, err, step.changed)
		}
		if got := unschedulable(); got != step.cordon {
			t.Fatalf("step %d: spec.unschedulable %v", i, got)
		}
	}
	if _, err := l.ops.Cordon(ctx, "no-such-node"); !apierrors.IsNotFound(err) {
		t.Errorf("cordon of a missing node: %v", err)
	}
}

// testDrain: ordinary pods are evicted and gone; the DaemonSet's pod, a
// mirror pod and a finished pod stay, and so does every pod of the other
// node.
func (l *lab) testDrain(t *testing.T) {
	ctx := context.Background()
	l.runPod(t, "web-1", "n-1", "web", nil)
	l.runPod(t, "web-2", "n-1", "web", nil)
	l.runPod(t, "static-1", "n-1", "static", map[string]string{corev1.MirrorPodAnnotationKey: "0123456789abcdef"})
	l.runPod(t, "other-1", "n-2", "web", nil)

	// A finished pod: its container exited 0.
	job := l.runPod(t, "job-1", "n-1", "job", nil)
	job.Status.Phase = corev1.PodSucceeded
	for i := range job.Status.ContainerStatuses {
		job.Status.ContainerStatuses[i].Ready = false
		job.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 0, Reason: "Completed", StartedAt: job.Status.StartTime.Rfc3339Copy(), FinishedAt: metav1.Now()}}
	}
	for i := range job.Status.Conditions {
		if job.Status.Conditions[i].Type == corev1.PodReady || job.Status.Conditions[i].Type == corev1.ContainersReady {
			job.Status.Conditions[i].Status = corev1.ConditionFalse
		}
	}
	if _, err := l.admin.CoreV1().Pods("default").UpdateStatus(ctx, job, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("marking job-1 Succeeded: %v", err)
	}

	// The DaemonSet adopts the agent pod already running on n-1 (its
	// selector matches), so the pod is the DaemonSet's as any other.
	l.runPod(t, "agent-1", "n-1", "agent", nil)
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"kubernetes.io/hostname": "n-1"},
					Containers:   []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
				},
			},
		},
	}
	if _, err := l.admin.AppsV1().DaemonSets("default").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "agent-1 adopted by DaemonSet agent", func() (bool, string) {
		p, err := l.admin.CoreV1().Pods("default").Get(ctx, "agent-1", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := metav1.GetControllerOf(p)
		return c != nil && c.Kind == "DaemonSet" && c.Name == "agent", fmt.Sprintf("owners %+v", p.OwnerReferences)
	})

	if _, err := l.ops.Cordon(ctx, "n-1"); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	if err := l.ops.Drain(ctx, "n-1", kubeops.DrainOptions{Timeout: 30 * time.Second, Poll: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	t.Logf("n-1 drained in %v", time.Since(begin).Round(time.Millisecond))
	if got, want := l.podsOn(t, "n-1"), []string{"agent-1", "job-1", "static-1"}; !slices.Equal(got, want) {
		t.Errorf("pods left on n-1: %v, want %v", got, want)
	}
	if got := l.podsOn(t, "n-2"); !slices.Equal(got, []string{"other-1"}) {
		t.Errorf("pods on n-2: %v, want other-1 untouched", got)
	}
	// Draining an empty node again is a no-op.
	if err := l.ops.Drain(ctx, "n-1", kubeops.DrainOptions{Timeout: 5 * time.Second}); err != nil {
		t.Errorf("second drain: %v", err)
	}
}

// testDrainBlocked: a PodDisruptionBudget that allows no disruption blocks
// the drain with a *DrainBlocked naming it; the other pods are evicted
// meanwhile; once the budget is deleted the drain completes.
func (l *lab) testDrainBlocked(t *testing.T) {
	ctx := context.Background()
	l.runPod(t, "db-1", "n-2", "db", nil)
	l.runPod(t, "db-2", "n-2", "db", nil)
	two := intstr.FromInt32(2)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "db-pdb", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: &two, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
		},
	}
	if _, err := l.admin.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the disruption controller counts db-1 and db-2 healthy", func() (bool, string) {
		p, err := l.admin.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "db-pdb", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.ObservedGeneration == p.Generation && p.Status.CurrentHealthy == 2, fmt.Sprintf("%+v", p.Status)
	})

	// The plan's prediction, read without evicting anything: both db pods
	// on n-2 blocked by db-pdb, nothing on n-1.
	predicted, err := l.ops.DrainBlockers(ctx, []string{"n-1", "n-2"})
	if err != nil {
		t.Fatal(err)
	}
	if bs := predicted["n-2"]; len(bs) != 2 || bs[0].Pod != "default/db-1" || bs[1].Pod != "default/db-2" || bs[0].Budget != "db-pdb" ||
		len(predicted["n-1"]) != 0 {
		t.Fatalf("predicted drain blocks: %+v", predicted)
	}
	if got := l.podsOn(t, "n-2"); len(got) != 3 {
		t.Fatalf("the prediction evicted pods: %v", got)
	}

	if _, err := l.ops.Cordon(ctx, "n-2"); err != nil {
		t.Fatal(err)
	}
	err = l.ops.Drain(ctx, "n-2", kubeops.DrainOptions{Timeout: 3 * time.Second, Poll: 200 * time.Millisecond})
	var blocked *kubeops.DrainBlocked
	if !errors.As(err, &blocked) {
		t.Fatalf("drain with a budget allowing no disruption: %v, want a *DrainBlocked", err)
	}
	t.Logf("blocked: %v (API server: %s)", err, blocked.Message)
	// The drain met the block the prediction named.
	if blocked.Budget != predicted["n-2"][0].Budget || blocked.Pod != predicted["n-2"][0].Pod {
		t.Errorf("the drain met %s/%s, the prediction said %+v", blocked.Pod, blocked.Budget, predicted["n-2"])
	}
	if blocked.Budget != "db-pdb" || blocked.AllowedDisruptions != 0 || blocked.Node != "n-2" ||
		!slices.Equal(blocked.Pending, []string{"default/db-1", "default/db-2"}) {
		t.Errorf("blocked = %+v", blocked)
	}
	want := "drain of node n-2: eviction of pod default/db-1 blocked by PodDisruptionBudget db-pdb (allowed disruptions 0) for 3s (and 1 more pod(s) not evicted)"
	if err.Error() != want {
		t.Errorf("error\n %s\nwant\n %s", err, want)
	}
	// other-1 was evicted meanwhile (a blocked drain does not wait for it).
	waitFor(t, 5*time.Second, "other-1 gone, the db pods kept", func() (bool, string) {
		got := l.podsOn(t, "n-2")
		return slices.Equal(got, []string{"db-1", "db-2"}), fmt.Sprint(got)
	})

	// The budget lifted, the retried drain goes through.
	if err := l.admin.PolicyV1().PodDisruptionBudgets("default").Delete(ctx, "db-pdb", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := l.ops.Drain(ctx, "n-2", kubeops.DrainOptions{Timeout: 30 * time.Second, Poll: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if got := l.podsOn(t, "n-2"); len(got) != 0 {
		t.Errorf("pods on n-2 after the drain: %v", got)
	}
}

// testWaitNode: the upgraded kubelet's version and readiness, then the
// uncordon.
func (l *lab) testWaitNode(t *testing.T) {
	ctx := context.Background()
	short, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	err := l.ops.WaitNode(short, "n-1", kubeops.NodeReadyAt("v1.37.2"))
	if err == nil || !strings.HasPrefix(err.Error(), "node n-1: kubelet v1.36.3, Ready=True; want v1.37.2 Ready (after ") ||
		!errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting for a kubelet that is not upgraded: %v", err)
	}
	t.Logf("timeout: %v", err)

	l.kubelets["n-1"].SetVersion("v1.37.2") // the agent's upgrade
	long, cancel2 := context.WithTimeout(ctx, 20*time.Second)
	defer cancel2()
	if err := l.ops.WaitNode(long, "n-1", kubeops.NodeReadyAt("v1.37.2")); err != nil {
		t.Fatal(err)
	}
	if changed, err := l.ops.Uncordon(ctx, "n-1"); err != nil || !changed {
		t.Fatalf("uncordon: changed %v, err %v", changed, err)
	}
}

func (l *lab) testDeleteNode(t *testing.T) {
	ctx := context.Background()
	l.kubelets["n-2"].Stop() // a running kubelet would not re-create it, but its status updates would fail
	if err := l.ops.DeleteNode(ctx, "n-2"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := l.ops.WaitNodeGone(wctx, "n-2"); err != nil {
		t.Fatal(err)
	}
	if err := l.ops.DeleteNode(ctx, "n-2"); err != nil {
		t.Errorf("deleting a node already gone: %v", err)
	}
	short, cancel2 := context.WithTimeout(ctx, time.Second)
	defer cancel2()
	if err := l.ops.WaitNodeGone(short, "n-1"); err == nil || !strings.HasPrefix(err.Error(), "node n-1: still present (after ") {
		t.Errorf("waiting for a node that stays: %v", err)
	}
}
