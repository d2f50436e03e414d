package sdktest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/ztpd/ztpd/internal/app"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/rollout"
	"github.com/ztpd/ztpd/joiner"
	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/testenv/controlplane"
	"github.com/ztpd/ztpd/testenv/freeport"
	"github.com/ztpd/ztpd/testenv/inproc"
	"github.com/ztpd/ztpd/testenv/kubebin"
	"github.com/ztpd/ztpd/testenv/kubeletsim"
	"github.com/ztpd/ztpd/testenv/netns"
)

// Day-2 addresses: node i lives in its own namespace on 10.99.218.4i/30,
// the host end .4i+1, the node .4i+2.
func d2Host(i int) string { return fmt.Sprintf("10.99.218.%d", 4*i+1) }
func d2Node(i int) string { return fmt.Sprintf("10.99.218.%d", 4*i+2) }

// TestDayTwoRealControlPlane: a three-node cluster (one control
// plane, two workers) on the real kube-apiserver, kube-controller-manager
// and etcd, with simulated kubelets and the real device agent (python3,
// installed from the bundle's cloud-config, polling ztpd over TLS from each
// node's own namespace and address). upgradeKubernetesCluster rolls
// v1.36.3 -> v1.37.2 out node by node: a PodDisruptionBudget that forbids
// the eviction stops it with the budget's name and moves the cluster to
// Alert; lifted, the upgrade runs again, skips what is done, and every
// Node ends Ready at v1.37.2 with never more than one cordoned at a time.
// Scale-down 3 -> 2 drains, resets and deletes the newest worker, and its
// agent's credential is refused from then on. What is simulated: the
// kubelet (kubeletsim reports the version the agent's kubeadm installed)
// and the node's kubeadm and systemctl (recording fakes).
func TestDayTwoRealControlPlane(t *testing.T) {
	if err := controlplane.Check(); err != nil {
		t.Skip("skipping:", err)
	}
	if err := netns.Check(); err != nil {
		t.Skip("skipping:", err)
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("skipping: python3 is not installed (the device agent)")
	}
	const oldV, newV = "v1.36.3", "v1.37.2"
	bins := kubebin.Require(t, oldV)
	etcd := kubebin.RequireEtcd(t)

	var nss [3]*netns.NS
	var macs [3]string
	for i := range nss {
		nss[i], macs[i] = d2Namespace(t, i)
	}
	var plane *controlplane.ControlPlane
	t.Cleanup(func() {
		if plane != nil {
			if err := plane.Stop(); err != nil {
				t.Error(err)
			}
		}
	})
	deviceBase, _, apiPort, ztpd := serveDayTwo(t, 0, 6*time.Second)
	eventually(t, 10*time.Second, func() error {
		c, err := net.Dial("tcp", "127.0.0.1:"+apiPort)
		if err == nil {
			c.Close()
		}
		return err
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	admin := clusters.LocalAdmin
	v1, err := ztpd.Clusters.AddVersion(ctx, admin, clusters.VersionSpec{SemVer: strings.TrimPrefix(oldV, "v"), URL: deviceBase + "/isos/" + oldV + ".iso"})
	if err != nil {
		t.Fatal(err)
	}
	v2, err := ztpd.Clusters.AddVersion(ctx, admin, clusters.VersionSpec{SemVer: strings.TrimPrefix(newV, "v"), URL: deviceBase + "/isos/" + newV + ".iso"})
	if err != nil {
		t.Fatal(err)
	}
	cl, j, err := ztpd.Clusters.CreateCluster(ctx, admin, clusters.ClusterSpec{Name: "day2", ZoneID: ztpd.Clusters.Zone().ID, VersionID: v1.ID,
		ServiceOfferingID: clusters.Offerings[0].ID, Size: 2, ControlNodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, ztpd.Clusters, j, core.JobSucceeded)

	dir := t.TempDir()
	roots := [3]string{}
	join := func(i int) joiner.Delivery {
		t.Helper()
		now := time.Now().UTC()
		if err := ztpd.Store.Update(func(tx core.Tx) error {
			return tx.Leases().Put(core.Lease{IP: d2Node(i), MAC: macs[i], State: core.LeaseActive, Start: now, Expiry: now.Add(time.Hour)})
		}); err != nil {
			t.Fatal(err)
		}
		sec, err := ztpd.Joiner.Enroll(ctx, joiner.EnrollRequest{Cluster: cl.ID, MAC: macs[i]})
		if err != nil {
			t.Fatal(err)
		}
		hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: controlplane.NetnsDial(nss[i])}}
		body, _ := json.Marshal(map[string]string{"enrollment": sec.Reveal(), "mac": macs[i], "hostname": fmt.Sprintf("day2-n%d", i), "kind": "vm"})
		resp, err := hc.Post(deviceBase+"/join", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var d joiner.Delivery
		err = json.NewDecoder(resp.Body).Decode(&d)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("POST /join of node %d: %d %v", i, resp.StatusCode, err)
		}
		roots[i] = filepath.Join(dir, fmt.Sprintf("n%d", i))
		d2WriteFiles(t, []byte(d.CloudConfig), roots[i])
		if err := os.WriteFile(filepath.Join(roots[i], "kubelet-version"), []byte(oldV+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}

	// The control plane, from the first bundle, and its kubelet.
	d0 := join(0)
	kubeadmConfig, caCert, caKey, manifests, err := controlplane.InputsFromRoot(roots[0])
	if err != nil {
		t.Fatal(err)
	}
	plane, err = controlplane.Start(ctx, controlplane.Config{Kubernetes: bins, Etcd: etcd, KubeadmConfig: kubeadmConfig,
		CACert: caCert, CAKey: caKey, Manifests: manifests, Dir: filepath.Join(dir, "cp"),
		Run: controlplane.NetnsRun(nss[0]), Dial: controlplane.NetnsDial(nss[0])})
	if err != nil {
		t.Fatal(err)
	}
	pool := kubeletsim.NewPool(kubeletsim.PoolOptions{Dial: kubeletsim.DialFunc(controlplane.NetnsDial(nss[0]))})
	log := slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var kubelets [3]*kubeletsim.Kubelet
	startKubelet := func(i int, d joiner.Delivery, bootstrap []byte) {
		t.Helper()
		k, err := pool.Start(context.Background(), kubeletsim.Config{NodeName: d.NodeName, BootstrapKubeconfig: bootstrap,
			Labels: d.NodeLabels, InternalIP: d2Node(i), VersionFile: filepath.Join(roots[i], "kubelet-version"),
			RunPods: true, StatusEvery: time.Second, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(k.Stop)
		if err := k.WaitRegistered(ctx); err != nil {
			t.Fatal(err)
		}
		kubelets[i] = k
	}
	kubeletConf, err := os.ReadFile(filepath.Join(plane.KubernetesDir(), "kubelet.conf"))
	if err != nil {
		t.Fatal(err)
	}
	startKubelet(0, d0, kubeletConf)
	if err := plane.MarkControlPlane(ctx); err != nil {
		t.Fatal(err)
	}
	clusterState := func() core.Cluster {
		c, err := ztpd.Clusters.GetCluster(ctx, admin, cl.ID)
		if err != nil {
			t.Fatal(err)
		}
		return c.Cluster
	}
	eventually(t, 2*time.Minute, func() error {
		if c := clusterState(); c.State != core.ClusterRunning {
			return fmt.Errorf("cluster %s", c.State)
		}
		return nil
	})
	// Two workers: the real kubeadm join discovery from their bundles.
	ds := [3]joiner.Delivery{d0}
	for i := 1; i <= 2; i++ {
		ds[i] = join(i)
		cfg, err := os.ReadFile(filepath.Join(roots[i], bundle.KubeadmConfigPath))
		if err != nil {
			t.Fatal(err)
		}
		jd, err := controlplane.JoinDiscovery(ctx, controlplane.JoinConfig{Kubeadm: bins.Kubeadm, Config: cfg,
			Dir: filepath.Join(dir, fmt.Sprintf("w%d", i)), Run: controlplane.NetnsRun(nss[0])})
		if err != nil {
			t.Fatal(err)
		}
		boot, err := os.ReadFile(jd.BootstrapKubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		startKubelet(i, ds[i], boot)
	}
	eventually(t, 2*time.Minute, func() error {
		ms, err := ztpd.Joiner.Members(ctx, cl.ID)
		if err != nil {
			return err
		}
		joined := 0
		for _, m := range ms {
			if m.State == core.StateJoined {
				joined++
			}
		}
		if joined != 3 {
			return fmt.Errorf("%d of 3 members joined", joined)
		}
		return nil
	})

	// The agents: the script and configuration the cloud-config wrote,
	// run as their timer would, from each node's namespace.
	var agents [3]*d2Agent
	for i := range agents {
		agents[i] = startD2Agent(t, ctx, python, nss[i], roots[i], newV)
	}
	// kubeadm upgrade apply on the first control plane moves the real
	// control plane to v1.37.2 (kube-apiserver and kube-controller-manager
	// restarted on the new binaries under ztpd's, the kubelets' and the
	// controllers' open watches) before the fake kubeadm finishes; kubeadm
	// reset stops the node's kubelet, as a real reset does. The goroutine
	// ends before the test does (it may report an error).
	type planeUpgrade struct {
		err  error
		took time.Duration
	}
	upgraded := make(chan planeUpgrade, 1)
	harnessDone := make(chan struct{})
	defer func() { cancel(); <-harnessDone }()
	go func() {
		defer close(harnessDone)
		for ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond)
			for i, r := range roots {
				if d2Exists(filepath.Join(r, "apply-requested")) && !d2Exists(filepath.Join(r, "apply-done")) {
					begin := time.Now()
					err := plane.UpgradeTo(ctx, newV)
					if err != nil && ctx.Err() == nil {
						t.Errorf("kubeadm upgrade apply on node %d: %v", i, err)
					}
					select {
					case upgraded <- planeUpgrade{err, time.Since(begin)}:
					default:
					}
					os.WriteFile(filepath.Join(r, "apply-done"), nil, 0o644)
				}
				if d2Exists(filepath.Join(r, "reset-requested")) && !d2Exists(filepath.Join(r, "reset-done")) {
					kubelets[i].Stop()
					os.WriteFile(filepath.Join(r, "reset-done"), nil, 0o644)
				}
			}
		}
	}()

	rc, err := clientcmd.BuildConfigFromFlags("", plane.AdminKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	rc.Dial = controlplane.NetnsDial(nss[0])
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	// The Nodes' unschedulable history, from the API server.
	var hist struct {
		sync.Mutex
		maxCordoned int
		cordoned    map[string]bool
	}
	hist.cordoned = map[string]bool{}
	go func() {
		for ctx.Err() == nil {
			nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err == nil {
				n := 0
				hist.Lock()
				for _, nd := range nodes.Items {
					if nd.Spec.Unschedulable {
						n++
						hist.cordoned[nd.Name] = true
					}
				}
				hist.maxCordoned = max(hist.maxCordoned, n)
				hist.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()

	// A workload on worker 1 and a budget that forbids evicting it.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "default", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: ds[1].NodeName, Containers: []corev1.Container{{Name: "web", Image: "registry.k8s.io/pause:3.10"}}}}
	if _, err := kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	zero := intstr.FromInt32(0)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &zero, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	if _, err := kube.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, func() error {
		p, err := kube.CoreV1().Pods("default").Get(ctx, "web-1", metav1.GetOptions{})
		if err != nil || p.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pod web-1: %v %v", err, p.Status.Phase)
		}
		return nil
	})

	// 0. The plan, read before the upgrade: the budget blocks the drain of
	// worker 1's Node right now; the upgrade below meets that block.
	plan, err := ztpd.Rollouts.Plan(ctx, rollout.Spec{Cluster: cl.ID, Kind: core.RolloutKubernetes, Target: newV})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the plan before the upgrade:\n%s", planText(plan))
	var predicted []string
	for _, b := range plan.Batches {
		for _, n := range b.Nodes {
			for _, bl := range n.Blocks {
				predicted = append(predicted, n.NodeName+": "+bl.Pod+" by "+bl.Budget)
			}
		}
	}
	if want := ds[1].NodeName + ": default/web-1 by web"; len(predicted) != 1 || predicted[0] != want {
		t.Fatalf("the plan's drain blocks: %v, want [%s]", predicted, want)
	}

	// 1. The upgrade stops at the budget, with its name, in Alert.
	j, err = ztpd.Clusters.UpgradeCluster(ctx, admin, cl.ID, v2.ID)
	if err != nil {
		t.Fatal(err)
	}
	done := waitJob(t, ctx, ztpd.Clusters, j, core.JobFailed)
	if !strings.Contains(done.Error, "PodDisruptionBudget web") || !strings.Contains(done.Error, "default/web-1") {
		t.Fatalf("upgrade blocked by the budget: %q", done.Error)
	}
	if c := clusterState(); c.State != core.ClusterAlert || c.VersionID != v1.ID {
		t.Fatalf("cluster after the blocked upgrade: %s version %s", c.State, c.VersionID)
	}
	t.Logf("blocked: %s", done.Error)
	// The rollout followed the plan: its order, the nodes before the
	// blocked one done, the blocked one failed at its drain.
	var ran core.Rollout
	if err := ztpd.Rollouts.List(func(r core.Rollout) bool { ran = r; return false }); err != nil {
		t.Fatal(err)
	}
	var planned, went []string
	for _, b := range plan.Batches {
		for _, n := range b.Nodes {
			planned = append(planned, n.NodeName)
		}
	}
	for _, n := range ran.Nodes {
		went = append(went, n.NodeName+" "+n.Phase)
	}
	// Every node the plan put before the blocked one done, the blocked one
	// failed, the rest not started.
	var want []string
	phase := "done"
	for _, n := range planned {
		switch {
		case n == ds[1].NodeName:
			want, phase = append(want, n+" failed"), "pending"
		default:
			want = append(want, n+" "+phase)
		}
	}
	if len(planned) != 3 || strings.Join(went, ", ") != strings.Join(want, ", ") {
		t.Fatalf("the rollout went %v; the plan was %v, so %v", went, planned, want)
	}

	// 2. Lifted: recover, upgrade again; it continues where it stopped.
	if err := kube.PolicyV1().PodDisruptionBudgets("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	j, err = ztpd.Clusters.StartCluster(ctx, admin, cl.ID)
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, ztpd.Clusters, j, core.JobSucceeded)
	eventually(t, time.Minute, func() error {
		if c := clusterState(); c.State != core.ClusterRunning {
			return fmt.Errorf("cluster %s", c.State)
		}
		return nil
	})
	j, err = ztpd.Clusters.UpgradeCluster(ctx, admin, cl.ID, v2.ID)
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, ztpd.Clusters, j, core.JobSucceeded)
	if c := clusterState(); c.State != core.ClusterRunning || c.VersionID != v2.ID {
		t.Fatalf("cluster after the upgrade: %s version %s", c.State, c.VersionID)
	}
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range nodes.Items {
		if nd.Status.NodeInfo.KubeletVersion != newV || nd.Spec.Unschedulable || !d2Ready(&nd) {
			t.Fatalf("Node %s after the upgrade: kubelet %s unschedulable %v ready %v", nd.Name, nd.Status.NodeInfo.KubeletVersion,
				nd.Spec.Unschedulable, d2Ready(&nd))
		}
	}
	hist.Lock()
	if hist.maxCordoned != 1 || len(hist.cordoned) != 3 {
		t.Fatalf("cordoned: %d at once (want 1), nodes %v", hist.maxCordoned, hist.cordoned)
	}
	hist.Unlock()
	if _, err := kube.CoreV1().Pods("default").Get(ctx, "web-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("pod web-1 after its node's drain: %v", err)
	}
	// The control plane itself was upgraded, by the first node's apply.
	select {
	case u := <-upgraded:
		if u.err != nil {
			t.Fatalf("control plane upgrade: %v", u.err)
		}
		t.Logf("control plane %s -> %s in %v", oldV, newV, u.took.Round(time.Millisecond))
	default:
		t.Fatal("kubeadm upgrade apply never asked for the control plane's upgrade")
	}
	if v, err := plane.ServerVersion(ctx); err != nil || v != newV {
		t.Fatalf("/version after the upgrade: %q, %v; want %s", v, err, newV)
	}
	if b := plane.Binaries(); b.Version != newV {
		t.Fatalf("the control plane runs the %s binaries, want %s", b.Version, newV)
	}
	for i, a := range agents {
		calls := a.calls()
		want := "kubeadm upgrade node"
		if i == 0 {
			want = "kubeadm upgrade apply -y " + newV
		}
		if !strings.Contains(calls, want) || !strings.Contains(calls, "systemctl restart kubelet") {
			t.Fatalf("node %d's agent ran:\n%s", i, calls)
		}
	}

	// 3. Scale down 3 -> 2: the newest worker is drained, reset by its
	// agent, its Node deleted; its agent is refused from then on.
	j, err = ztpd.Clusters.ScaleCluster(ctx, admin, cl.ID, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, ztpd.Clusters, j, core.JobSucceeded)
	if _, err := kube.CoreV1().Nodes().Get(ctx, ds[2].NodeName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("Node of the removed worker: %v", err)
	}
	if nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil || len(nodes.Items) != 2 {
		t.Fatalf("Nodes after scale-down: %v %d", err, len(nodes.Items))
	}
	if !strings.Contains(agents[2].calls(), "kubeadm reset -f") {
		t.Fatalf("the removed worker's agent ran:\n%s", agents[2].calls())
	}
	m, err := ztpd.Joiner.Membership(ctx, macs[2])
	if err != nil || m.State != core.StateLeft {
		t.Fatalf("membership of the removed worker: %v %+v", err, m.State)
	}
	eventually(t, 30*time.Second, func() error {
		if code := agents[2].lastExit(); code != 4 {
			return fmt.Errorf("the removed worker's agent last exited %d, want 4 (refused)", code)
		}
		return nil
	})
	if code := agents[1].lastExit(); code != 0 {
		t.Fatalf("a remaining worker's agent exits %d", code)
	}

	// 4. Stop cordons every Node (joins suspended); start uncordons them.
	schedulable := func() map[string]bool {
		nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, nd := range nodes.Items {
			out[nd.Name] = !nd.Spec.Unschedulable
		}
		return out
	}
	j, err = ztpd.Clusters.StopCluster(ctx, admin, cl.ID)
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, ztpd.Clusters, j, core.JobSucceeded)
	if got := schedulable(); len(got) != 2 || got[ds[0].NodeName] || got[ds[1].NodeName] {
		t.Fatalf("Nodes schedulable after stop: %v", got)
	}
	if c := clusterState(); c.State != core.ClusterStopped {
		t.Fatalf("cluster after stop: %s", c.State)
	}
	j, err = ztpd.Clusters.StartCluster(ctx, admin, cl.ID)
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, ztpd.Clusters, j, core.JobSucceeded)
	if got := schedulable(); !got[ds[0].NodeName] || !got[ds[1].NodeName] {
		t.Fatalf("Nodes schedulable after start: %v", got)
	}
	// A started cluster is Starting until the watch sees it healthy.
	eventually(t, time.Minute, func() error {
		if c := clusterState(); c.State != core.ClusterRunning {
			return fmt.Errorf("cluster %s after start", c.State)
		}
		return nil
	})

	// 5. Delete takes every member out (its Node deleted, its agent
	// refused) before the cluster and its CA are gone.
	j, err = ztpd.Clusters.DeleteCluster(ctx, admin, cl.ID, clusters.DeleteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, ctx, ztpd.Clusters, j, core.JobSucceeded)
	if nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil || len(nodes.Items) != 0 {
		t.Fatalf("Nodes after delete: %v %d", err, len(nodes.Items))
	}
	if _, err := ztpd.Clusters.GetCluster(ctx, admin, cl.ID); core.KindOf(err) != core.KindNotFound {
		t.Fatalf("the deleted cluster: %v", err)
	}
	for i := 0; i < 2; i++ {
		if !strings.Contains(agents[i].calls(), "kubeadm reset -f") {
			t.Fatalf("node %d's agent did not reset it:\n%s", i, agents[i].calls())
		}
		m, err := ztpd.Joiner.Membership(ctx, macs[i])
		if err != nil || m.State != core.StateLeft {
			t.Fatalf("membership of node %d after delete: %v %s", i, err, m.State)
		}
	}
	eventually(t, 90*time.Second, func() error {
		if code := agents[0].lastExit(); code != 4 {
			return fmt.Errorf("the deleted cluster's control plane agent last exited %d, want 4 (refused)", code)
		}
		return nil
	})
}

// serveDayTwo runs ztpd in-process for the day-2 tests: devices served on
// the host end of namespace cpI's link (the advertised address), the API
// with TLS on every address (agents poll it from their namespaces), every
// device of 10.99.218.0/24 auto-approved, rollouts with the given drain
// timeout. Register the control plane's cleanup before it, so the plane
// stops after ztpd.
func serveDayTwo(t *testing.T, cpI int, drain time.Duration) (deviceBase string, cfg config.Config, apiPort string, a *app.App) {
	t.Helper()
	deviceAddr := freeport.On(t, d2Host(cpI))
	_, apiPort, _ = net.SplitHostPort(freeport.On(t, "0.0.0.0"))
	deviceBase, cfg, a = inproc.ServeApp(t, func(c *config.Config) {
		c.HTTP.Addr = deviceAddr
		c.AdvertiseAddr = d2Host(cpI)
		c.API.Addr, c.API.TLS.Enabled = "0.0.0.0:"+apiPort, true
		c.API.ClusterProbeInterval = config.Duration(500 * time.Millisecond)
		c.Joiner.AutoApprove = []config.Rule{{Subnets: []string{"10.99.218.0/24"}, Roles: []string{"control-plane", "worker"}}}
		c.Rollout.DrainTimeout = config.Duration(drain)
		c.Rollout.StepTimeout = config.Duration(2 * time.Minute)
	})
	return deviceBase, cfg, apiPort, a
}

// d2Agent runs a node's installed agent every 300 ms, as its timer would.
type d2Agent struct {
	root string
	mu   sync.Mutex
	exit int
}

func (a *d2Agent) lastExit() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.exit
}

func (a *d2Agent) calls() string {
	b, _ := os.ReadFile(filepath.Join(a.root, "calls.log"))
	return string(b)
}

// startD2Agent installs the node's fake kubeadm and systemctl (they record
// their calls; upgrade apply and reset wait for the harness) and runs the
// agent.
func startD2Agent(t *testing.T, ctx context.Context, python string, ns *netns.NS, root, version string) *d2Agent {
	t.Helper()
	bin := filepath.Join(root, "fakebin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	scripts := map[string]string{
		"kubeadm": `#!/bin/sh
echo "kubeadm $*" >> "$ZTPD_ROOT/calls.log"
case "$1 $2" in
"upgrade apply")
	touch "$ZTPD_ROOT/apply-requested"
	while [ ! -e "$ZTPD_ROOT/apply-done" ]; do sleep 0.2; done
	echo ` + version + ` > "$ZTPD_ROOT/kubeadm-version" ;;
"upgrade node") echo ` + version + ` > "$ZTPD_ROOT/kubeadm-version" ;;
"reset -f")
	touch "$ZTPD_ROOT/reset-requested"
	while [ ! -e "$ZTPD_ROOT/reset-done" ]; do sleep 0.2; done ;;
esac
exit 0
`,
		"systemctl": `#!/bin/sh
echo "systemctl $*" >> "$ZTPD_ROOT/calls.log"
if [ "$1 $2" = "restart kubelet" ] && [ -e "$ZTPD_ROOT/kubeadm-version" ]; then
	cp "$ZTPD_ROOT/kubeadm-version" "$ZTPD_ROOT/kubelet-version"
fi
exit 0
`,
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	a := &d2Agent{root: root, exit: -1}
	script := filepath.Join(root, "usr/local/bin/ztpd-agent")
	if !d2Exists(script) || !d2Exists(filepath.Join(root, "etc/ztpd/agent.json")) {
		t.Fatalf("the bundle installed no agent under %s", root)
	}
	var mu sync.Mutex
	var out bytes.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			t.Logf("agent %s:\n%s", root, out.String())
			mu.Unlock()
		}
	})
	go func() {
		for ctx.Err() == nil {
			cmd := ns.Command(ctx, python, script, "once")
			cmd.Env = append(os.Environ(), "ZTPD_ROOT="+root, "PATH="+bin+":"+os.Getenv("PATH"))
			b, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				code = -2
			}
			a.mu.Lock()
			a.exit = code
			a.mu.Unlock()
			mu.Lock()
			if len(b) > 0 {
				out.WriteString("exit " + strconv.Itoa(code) + ": " + string(b))
			}
			mu.Unlock()
			time.Sleep(300 * time.Millisecond)
		}
	}()
	return a
}

func d2Exists(p string) bool { _, err := os.Stat(p); return err == nil }

func d2Ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitJob waits for a job and checks how it ended.
func waitJob(t *testing.T, ctx context.Context, cs *clusters.Service, j core.Job, want core.JobStatus) core.Job {
	t.Helper()
	done, err := cs.WaitJob(ctx, j.ID)
	if err != nil || done.Status != want {
		t.Fatalf("%s: status %d (want %d): %v %s", j.Command, done.Status, want, err, done.Error)
	}
	return done
}

// d2WriteFiles writes a cloud-config's write_files under root.
func d2WriteFiles(t *testing.T, cc []byte, root string) {
	t.Helper()
	var doc struct {
		WriteFiles []struct {
			Path        string `json:"path"`
			Content     string `json:"content"`
			Permissions string `json:"permissions"`
		} `json:"write_files"`
	}
	if err := yaml.Unmarshal(cc, &doc); err != nil {
		t.Fatal(err)
	}
	for _, f := range doc.WriteFiles {
		dst := filepath.Join(root, filepath.Clean("/"+f.Path))
		mode, err := strconv.ParseUint(f.Permissions, 8, 32)
		if err != nil {
			mode = 0o600
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, []byte(f.Content), os.FileMode(mode)); err != nil {
			t.Fatal(err)
		}
	}
}

// d2Namespace makes node i's namespace and its veth to this host.
func d2Namespace(t *testing.T, i int) (*netns.NS, string) {
	t.Helper()
	ns, err := netns.Add(fmt.Sprintf("d2n%d-%x", i, os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	hostIf := fmt.Sprintf("zd2%d%x", i, os.Getpid())
	if len(hostIf) > 15 {
		hostIf = hostIf[:15]
	}
	_ = exec.Command("ip", "link", "del", hostIf).Run()
	for _, args := range [][]string{
		{"link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", ns.Name},
		{"addr", "add", d2Host(i) + "/30", "dev", hostIf},
		{"link", "set", hostIf, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() { exec.Command("ip", "link", "del", hostIf).Run() })
	for _, args := range [][]string{
		{"addr", "add", d2Node(i) + "/30", "dev", "eth0"},
		{"link", "set", "eth0", "up"},
		{"link", "set", "lo", "up"},
		{"route", "add", "default", "via", d2Host(i)},
	} {
		if err := ns.IP(args...); err != nil {
			t.Fatal(err)
		}
	}
	mac, err := ns.MAC("eth0")
	if err != nil {
		t.Fatal(err)
	}
	return ns, mac
}

// planText is a plan as lines: the batches in order, each node current ->
// target with its steps and the budgets blocking its drain, the skipped
// nodes and why, the estimate and the fingerprint.
func planText(p rollout.Plan) string {
	var b strings.Builder
	for i, bt := range p.Batches {
		for _, n := range bt.Nodes {
			fmt.Fprintf(&b, "  batch %d  %s  %s  %s -> %s  %s\n", i+1, n.NodeName, n.Role, n.Current, n.Target, strings.Join(n.Steps, ", "))
			for _, bl := range n.Blocks {
				fmt.Fprintf(&b, "           ! drain blocked now: pod %s by PodDisruptionBudget %s\n", bl.Pod, bl.Budget)
			}
		}
	}
	for _, n := range p.Skipped {
		fmt.Fprintf(&b, "  skipped  %s  %s  %s\n", n.NodeName, n.Current, n.Skip)
	}
	fmt.Fprintf(&b, "  estimate %s (%s); fingerprint %s", p.Estimate, p.EstimateBasis, p.Fingerprint)
	return b.String()
}
