package kubeletsim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testPod is a bare pod bound to node (there is no scheduler in the lab).
func testPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeName:       node,
			InitContainers: []corev1.Container{{Name: "init", Image: "registry.k8s.io/busybox:1.36"}},
			Containers:     []corev1.Container{{Name: "web", Image: "registry.k8s.io/nginx:1.27"}},
		},
	}
}

// waitDefaultServiceAccount waits for KCM's serviceaccount controller: the
// ServiceAccount admission plugin refuses pods until default/default exists.
func (c *cluster) waitDefaultServiceAccount(t *testing.T) {
	t.Helper()
	eventually(t, 30*time.Second, "ServiceAccount default/default", func() (bool, string) {
		_, err := c.admin.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(context.Background(), "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
}

// testPods: a kubelet with RunPods reports its pods Running and Ready and
// finishes their deletion; a pod bound to a node without a kubelet stays
// Pending, and Terminating once deleted.
func (c *cluster) testPods(t *testing.T) {
	ctx := context.Background()
	k := c.start(t, Config{NodeName: "pods-1", BootstrapKubeconfig: c.bootstrap, InternalIP: "10.99.215.31", RunPods: true})
	waitRegistered(t, k)
	c.waitDefaultServiceAccount(t)
	pods := c.admin.CoreV1().Pods(metav1.NamespaceDefault)
	for _, p := range []*corev1.Pod{testPod("web-1", "pods-1"), testPod("orphan-1", "no-kubelet-1")} {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var web *corev1.Pod
	eventually(t, 10*time.Second, "web-1 Running and Ready", func() (bool, string) {
		var err error
		if web, err = pods.Get(ctx, "web-1", metav1.GetOptions{}); err != nil {
			return false, err.Error()
		}
		ready := false
		for _, cnd := range web.Status.Conditions {
			ready = ready || cnd.Type == corev1.PodReady && cnd.Status == corev1.ConditionTrue
		}
		return web.Status.Phase == corev1.PodRunning && ready, fmt.Sprintf("phase %s, conditions %+v", web.Status.Phase, web.Status.Conditions)
	})
	if cs := web.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Running == nil || !cs[0].Ready {
		t.Errorf("container statuses %+v", cs)
	}
	if ic := web.Status.InitContainerStatuses; len(ic) != 1 || ic[0].State.Terminated == nil {
		t.Errorf("init container statuses %+v", ic)
	}
	if web.Status.HostIP != "10.99.215.31" {
		t.Errorf("hostIP %q", web.Status.HostIP)
	}

	// Deleted with the default grace period (30 s): gone as soon as the
	// simulated containers stopped.
	deleted := time.Now()
	if err := pods.Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "web-1 removed", func() (bool, string) {
		_, err := pods.Get(ctx, "web-1", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	t.Logf("web-1 removed %v after its deletion", time.Since(deleted).Round(time.Millisecond))
	if st := k.Stats(); st.PodsStarted != 1 || st.PodsRemoved != 1 {
		t.Errorf("stats %+v, want 1 pod started and 1 removed", st)
	}

	// Without a kubelet nothing moves.
	if err := pods.Delete(ctx, "orphan-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	orphan, err := pods.Get(ctx, "orphan-1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("orphan-1: %v (removed without a kubelet?)", err)
	}
	if orphan.Status.Phase != corev1.PodPending || orphan.DeletionTimestamp == nil {
		t.Errorf("orphan-1: phase %s, deletionTimestamp %v; want Pending and Terminating", orphan.Status.Phase, orphan.DeletionTimestamp)
	}
	if err := pods.Delete(ctx, "orphan-1", metav1.DeleteOptions{GracePeriodSeconds: ptrTo(int64(0))}); err != nil {
		t.Fatal(err)
	}

	// A pod created while the kubelet is stopped runs once it restarted.
	k.Stop()
	if _, err := pods.Create(ctx, testPod("web-2", "pods-1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if p, err := pods.Get(ctx, "web-2", metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodPending {
		t.Fatalf("web-2 with the kubelet stopped: %v %v", err, p.Status.Phase)
	}
	if err := k.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "web-2 Running after the restart", func() (bool, string) {
		p, err := pods.Get(ctx, "web-2", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning, string(p.Status.Phase)
	})
	if err := pods.Delete(ctx, "web-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "web-2 removed", func() (bool, string) {
		_, err := pods.Get(ctx, "web-2", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// testVersion: the kubelet version changes at run time, through SetVersion
// (posted at once, not at the next 30 s status period) and through the
// version file an upgrade writes, picked up by a restart.
func (c *cluster) testVersion(t *testing.T) {
	file := filepath.Join(t.TempDir(), "kubelet-version")
	k := c.start(t, Config{
		NodeName: "ver-1", BootstrapKubeconfig: c.bootstrap, KubeletVersion: "v1.36.3",
		VersionFile: file, StatusEvery: 30 * time.Second,
	})
	waitRegistered(t, k)
	version := func() string { return c.node(t, "ver-1").Status.NodeInfo.KubeletVersion }
	if v := version(); v != "v1.36.3" {
		t.Fatalf("kubeletVersion %q, want v1.36.3", v)
	}

	set := time.Now()
	k.SetVersion("v1.37.0")
	eventually(t, 5*time.Second, "SetVersion on the Node", func() (bool, string) {
		v := version()
		return v == "v1.37.0", v
	})
	t.Logf("SetVersion shown %v later", time.Since(set).Round(time.Millisecond))

	// The file wins while it exists; a restart posts the status at once.
	if err := os.WriteFile(file, []byte("v1.37.2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := k.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the version file's version on the Node", func() (bool, string) {
		v := version()
		return v == "v1.37.2", v
	})
	if r := condition(c.node(t, "ver-1"), corev1.NodeReady); r == nil || r.Status != corev1.ConditionTrue {
		t.Errorf("Ready after the restart: %+v", r)
	}
	// Without the file, SetVersion's version is back at the next update.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	k.SetVersion("v1.37.0")
	eventually(t, 5*time.Second, "SetVersion's version once the file is gone", func() (bool, string) {
		v := version()
		return v == "v1.37.0", v
	})
}
