package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/desired"
	"github.com/ztpd/ztpd/internal/kubeops"
	"github.com/ztpd/ztpd/internal/rollout"
	"github.com/ztpd/ztpd/joiner"
	"github.com/ztpd/ztpd/joiner/agent"
	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/joiner/joinhttp"
)

// Day-2 operations: the device agents' channel (desired
// states, served on the API listener), the rollout engine, and the
// cluster operations that act on nodes through them.

// agentFiles renders the device agent's installation for the joiner: the
// agent polls the API listener over TLS, pinned to the certificate the
// API serves. Nil when devices could not reach or verify it (no TLS API
// listener, or no address a device can use).
func (a *App) agentFiles() func(credential string) ([]bundle.File, error) {
	addr, useTLS := a.Cfg.APIListener()
	if addr == "" || !useTLS {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	if adv := a.Endpoints.Advertise(); adv.IsValid() {
		host = adv.String()
	} else if ip, err := netip.ParseAddr(host); err != nil || ip.IsUnspecified() || ip.IsLoopback() {
		return nil
	}
	url := "https://" + net.JoinHostPort(host, port) + "/agent/v1"
	certFile := a.Cfg.API.TLS.CertFile
	if certFile == "" {
		certFile = filepath.Join(a.Cfg.DataDir, APITLSDir, "cert.pem")
	}
	var pinned changedFile
	return func(credential string) ([]bundle.File, error) {
		// Read again when it changed: the certificate is made when the
		// listener starts and may be replaced.
		ca, err := pinned.read(certFile)
		if err != nil {
			return nil, fmt.Errorf("the API certificate agents pin: %w", err)
		}
		files, err := agent.Files(agent.InstallConfig{URL: url, Credential: credential, CAPEM: ca})
		if err != nil {
			return nil, err
		}
		// The join plugin beside it: a switch rejoins (an image upgrade,
		// back from standalone) by running it from the agent.
		return append(files, bundle.File{Path: "/usr/local/bin/ztpd-join-plugin", Mode: 0o755, Content: joinhttp.Plugin()}), nil
	}
}

// changedFile is a small file's content, read again only when its size or
// modification time changed: the API certificate goes into every bundle,
// and reading it each time was 1.4 % of a boot storm's CPU.
type changedFile struct {
	mu     sync.Mutex
	loaded bool
	size   int64
	mod    time.Time
	data   string
}

func (f *changedFile) read(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.loaded && fi.Size() == f.size && fi.ModTime().Equal(f.mod) {
		return f.data, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	f.loaded, f.size, f.mod, f.data = true, fi.Size(), fi.ModTime(), string(b)
	return f.data, nil
}

// buildDayOps builds the desired-state owner and the rollout engine.
func (a *App) buildDayOps() {
	a.Desired = desired.New(a.Store, desired.Options{Auth: a.Joiner, Log: a.Log.With("part", "desired"),
		JoinSection: a.joinSection,
		Defaults:    a.desiredDefaults,
		ImageURL:    func(sha string) string { return a.Endpoints.Image(netip.Addr{}, sha) },
		// A running rollout's nodes poll fast; the engine is built after
		// this service (it is given it), so it is looked up at each poll.
		FastPoll: func(device string) bool { return a.Rollouts != nil && a.Rollouts.Involved(device) }})
	a.nodeOps = &clusterNodes{j: a.Joiner, clients: map[string]*nodeClient{}}
}

// joinSection is the join step's arguments for a device's agent: the
// same section SONiC ZTP gets in ztp.json (a fresh enrollment bound to the
// device), as strings.
func (a *App) joinSection(ctx context.Context, device, cluster string) (map[string]string, error) {
	var dev core.Device
	if err := a.Store.View(func(tx core.Tx) error {
		var err error
		dev, err = tx.Devices().Get(device)
		return err
	}); err != nil {
		return nil, err
	}
	sec, err := a.Joiner.ZTPSection(ctx, dev, cluster, dev.Hostname)
	if err != nil {
		return nil, err
	}
	if sec == nil {
		return nil, core.Errorf(core.KindState, "device %s may not join cluster %s now", device, cluster)
	}
	out := map[string]string{}
	for k, arg := range map[string]string{"enrollment": "enrollment", "join-url": "join_url", "mac": "mac", "serial": "serial", "hostname": "hostname"} {
		if v, ok := sec[k].(string); ok && v != "" {
			out[arg] = v
		}
	}
	return out, nil
}

// buildRollouts starts the engine (after the store is open: it marks
// rollouts a restart interrupted).
func (a *App) buildRollouts() error {
	eng, err := rollout.New(a.Store, rollout.Options{Appliance: a.applianceName(), Nodes: a.nodeOps, Agents: a.Desired, Members: a.Joiner,
		Binaries:     a.rolloutBinaries,
		DrainTimeout: a.Cfg.Rollout.DrainTimeout.D(), StepTimeout: a.Cfg.Rollout.StepTimeout.D(),
		Log: a.Log.With("part", "rollout")})
	if err != nil {
		return err
	}
	a.Rollouts = eng
	return nil
}

// rolloutBinaries is the rollout engine's Binaries: a version's kubeadm
// and kubelet from its ISO on the ZTP listener, with their sha256s; for a
// version ztpd holds no ISO of, none (the node's own kubeadm, as the
// engine warns).
func (a *App) rolloutBinaries(version string) (string, map[string]string, error) {
	set, err := a.Binaries.Sums(context.Background(), version)
	if core.KindOf(err) == core.KindNotFound {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	sums := set.SHA256()
	for _, name := range []string{"kubeadm", "kubelet"} {
		if sums[name] == "" {
			return "", nil, fmt.Errorf("the ISO of Kubernetes %s (%s) holds no k8s/%s", version, set.ISO.Name, name)
		}
	}
	return a.Endpoints.Binaries(version), sums, nil
}

// nodeMembership is the joiner as the clusters service's Membership, with
// the operations that change nodes carried out on them: an upgrade rolls
// the new version out node by node, a scale-down and a delete take their
// members out, a stop cordons the cluster's Nodes and a start uncordons
// them. Each job ends when its rollout does.
type nodeMembership struct {
	*joiner.Service
	a *App
}

var (
	_ clusters.Membership   = nodeMembership{}
	_ clusters.NamedRemover = nodeMembership{}
)

// afterRollout bounds what a job does once its rollout ended: the job's
// own deadline (clusters.Options.OpTimeout) bounds calls, not rollouts,
// which have per-node timeouts of their own.
func afterRollout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
}

func (m nodeMembership) SetVersion(ctx context.Context, c core.Cluster, v core.Version) error {
	r, err := m.a.Rollouts.Start(ctx, rollout.Spec{Cluster: c.ID, Kind: core.RolloutKubernetes, Target: "v" + v.SemVer,
		TargetID: v.ID, By: "upgradeKubernetesCluster"})
	if err != nil {
		return err
	}
	if err := m.wait(ctx, r.ID); err != nil {
		return err
	}
	ctx, cancel := afterRollout(ctx)
	defer cancel()
	return m.Service.SetVersion(ctx, c, v)
}

func (m nodeMembership) Resize(ctx context.Context, c core.Cluster) error {
	if err := m.Service.Resize(ctx, c); err != nil {
		return err
	}
	return m.removeMembers(ctx, c, core.StateLeaving, "scaleKubernetesCluster")
}

// RemoveMembers is a scale-down naming its members: they are marked
// leaving, then taken off their nodes like the newest are by Resize.
func (m nodeMembership) RemoveMembers(ctx context.Context, c core.Cluster, devices []string) error {
	if err := m.Service.RemoveMembers(ctx, c, devices); err != nil {
		return err
	}
	return m.removeMembers(ctx, c, core.StateLeaving, "scaleKubernetesCluster")
}

func (m nodeMembership) Destroy(ctx context.Context, c core.Cluster) error {
	if err := m.removeMembers(ctx, c, "", "deleteKubernetesCluster"); err != nil {
		return err
	}
	ctx, cancel := afterRollout(ctx)
	defer cancel()
	return m.Service.Destroy(ctx, c)
}

var _ clusters.ForceDestroyer = nodeMembership{}

// DestroyForce is Destroy for a forced delete: the remove rollout is
// tried as for Destroy (bounded by its drain and step timeouts), and the
// members it did not take out are abandoned: the cluster is destroyed all
// the same (the joiner's Destroy ends their memberships and revokes their
// agents' credentials with the cluster's other tokens), their Nodes and
// devices left as they are. It returns them with why.
func (m nodeMembership) DestroyForce(ctx context.Context, c core.Cluster) ([]core.AbandonedNode, error) {
	members, err := m.members(c, "")
	if err != nil {
		return nil, err
	}
	var abandoned []core.AbandonedNode
	if len(members) > 0 {
		abandoned, err = m.tryRemove(ctx, c, members)
		if err != nil {
			return nil, err
		}
	}
	ctx, cancel := afterRollout(ctx)
	defer cancel()
	if err := m.Service.Destroy(ctx, c); err != nil {
		return nil, err
	}
	if len(abandoned) > 0 {
		m.a.Log.Warn("cluster deleted with force; members abandoned on their nodes", "cluster", c.ID, "abandoned", len(abandoned))
	}
	return abandoned, nil
}

// tryRemove runs the remove rollout over members and returns those still
// in the cluster when it ended, with why: the node's failure, or that the
// rollout stopped before it (or never started).
func (m nodeMembership) tryRemove(ctx context.Context, c core.Cluster, members []core.Membership) ([]core.AbandonedNode, error) {
	why := map[string]string{}
	r, err := m.a.Rollouts.Start(ctx, rollout.Spec{Cluster: c.ID, Kind: core.RolloutRemove, Devices: devicesOf(members),
		By: "deleteKubernetesCluster --force", MaxUnavailable: len(members)})
	if err == nil {
		r, err = m.a.Rollouts.Wait(context.WithoutCancel(ctx), r.ID)
	}
	if err != nil {
		for _, ms := range members {
			why[ms.Device] = "the remove rollout did not run: " + err.Error()
		}
	} else {
		for _, n := range r.Nodes {
			switch n.Phase {
			case core.NodeDone, core.NodeSkipped:
			case core.NodeFailed, core.NodeWithdrawn:
				why[n.Device] = n.Reason
			default:
				why[n.Device] = fmt.Sprintf("not taken out (%s): rollout %s %s: %s", n.Phase, r.ID, r.State, r.Reason)
			}
		}
	}
	// Only members the cluster still has are abandoned (a node whose last
	// step failed after it left is not).
	still, err := m.members(c, "")
	if err != nil {
		return nil, err
	}
	var out []core.AbandonedNode
	for _, ms := range still {
		if reason, ok := why[ms.Device]; ok {
			out = append(out, core.AbandonedNode{Device: ms.Device, Node: ms.NodeName, Reason: reason})
		}
	}
	return out, nil
}

// removeMembers runs a remove rollout over the cluster's members in state
// (any state but left when ""), and waits for it.
func (m nodeMembership) removeMembers(ctx context.Context, c core.Cluster, state core.DeviceState, by string) error {
	members, err := m.members(c, state)
	if err != nil || len(members) == 0 {
		return err
	}
	r, err := m.a.Rollouts.Start(ctx, rollout.Spec{Cluster: c.ID, Kind: core.RolloutRemove, Devices: devicesOf(members), By: by,
		MaxUnavailable: len(members)})
	if err != nil {
		return err
	}
	return m.wait(ctx, r.ID)
}

// members are the cluster's memberships in state (any state but left
// when "").
func (m nodeMembership) members(c core.Cluster, state core.DeviceState) ([]core.Membership, error) {
	var out []core.Membership
	err := m.a.Store.View(func(tx core.Tx) error {
		return tx.Memberships().List("", func(ms core.Membership) (bool, error) {
			if ms.Cluster == c.ID && ms.State != core.StateLeft && (state == "" || ms.State == state) {
				out = append(out, ms)
			}
			return true, nil
		})
	})
	return out, err
}

func devicesOf(ms []core.Membership) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Device
	}
	return out
}

func (m nodeMembership) Stop(ctx context.Context, c core.Cluster) error {
	if err := m.Service.Stop(ctx, c); err != nil {
		return err
	}
	return m.eachNode(ctx, c, func(node string) error {
		_, err := m.a.nodeOps.Cordon(ctx, c.ID, node, "stop")
		return err
	})
}

func (m nodeMembership) Start(ctx context.Context, c core.Cluster) error {
	err := m.eachNode(ctx, c, func(node string) error {
		info, ok, err := m.a.nodeOps.Node(ctx, c.ID, node)
		if err != nil || !ok || !info.Unschedulable {
			return err
		}
		if owner, err := m.a.nodeOps.cordonOwner(ctx, c.ID, node); err != nil || owner != "stop" {
			return err
		}
		return m.a.nodeOps.Uncordon(ctx, c.ID, node)
	})
	if err != nil {
		return err
	}
	return m.Service.Start(ctx, c)
}

// eachNode calls fn for the Node of every member with one; a cluster
// without an API endpoint yet has nothing to do.
func (m nodeMembership) eachNode(ctx context.Context, c core.Cluster, fn func(node string) error) error {
	var nodes []string
	err := m.a.Store.View(func(tx core.Tx) error {
		return tx.Memberships().Roster(c.ID, func(device, _ string) (bool, error) {
			if ms, err := tx.Memberships().Get(device); err == nil && ms.Node != nil && !ms.Node.Deleted {
				nodes = append(nodes, ms.NodeName)
			}
			return true, nil
		})
	})
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if err := fn(n); err != nil {
			return fmt.Errorf("node %s: %w", n, err)
		}
	}
	return nil
}

// wait waits for a rollout the job started and turns its end into the
// job's outcome.
func (m nodeMembership) wait(ctx context.Context, id string) error {
	r, err := m.a.Rollouts.Wait(context.WithoutCancel(ctx), id)
	if err != nil {
		return err
	}
	switch r.State {
	case core.RolloutSucceeded:
		return nil
	case core.RolloutAborted:
		return fmt.Errorf("rollout %s aborted: %s", r.ID, r.Reason)
	}
	return fmt.Errorf("rollout %s failed: %s", r.ID, r.Reason)
}

// clusterNodes is rollout.NodeOps over each cluster's API server, as
// ztpd's operator identity (kubeops.RBAC, created in the cluster with the
// admin identity the first time).
type clusterNodes struct {
	j *joiner.Service

	mu      sync.Mutex
	clients map[string]*nodeClient
}

type nodeClient struct {
	cs      kubernetes.Interface
	op      *kubeops.Operator
	expires time.Time
}

// operatorCertValidity is how long the operator's client certificates
// are valid; a new one is issued at half of it.
const operatorCertValidity = 12 * time.Hour

// cordonedBy marks a Node cordoned by ztpd, with why (a rollout's ID, or
// "stop"): only those are uncordoned by ztpd.
const cordonedBy = "ztpd.io/cordoned-by"

func (n *clusterNodes) client(ctx context.Context, cluster string) (*nodeClient, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c := n.clients[cluster]; c != nil && time.Until(c.expires) > operatorCertValidity/2 {
		return c, nil
	}
	endpoint, ca, cert, key, err := n.j.ClientCredentials(cluster, kubeops.OperatorUser, []string{kubeops.OperatorGroup}, operatorCertValidity)
	if err != nil {
		return nil, err
	}
	if _, ok := n.clients[cluster]; !ok {
		if err := n.ensureRBAC(ctx, cluster); err != nil {
			return nil, err
		}
	}
	cfg := &rest.Config{Host: "https://" + endpoint, TLSClientConfig: rest.TLSClientConfig{CAData: ca, CertData: cert, KeyData: key},
		Timeout: 30 * time.Second, QPS: 50, Burst: 100, UserAgent: "ztpd-operator"}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	c := &nodeClient{cs: cs, op: kubeops.New(cs), expires: time.Now().Add(operatorCertValidity)}
	n.clients[cluster] = c
	return c, nil
}

// ensureRBAC creates the operator's ClusterRole and binding (409: there).
func (n *clusterNodes) ensureRBAC(ctx context.Context, cluster string) error {
	endpoint, ca, cert, key, err := n.j.ClientCredentials(cluster, "ztpd:rbac-setup", []string{clusters.KubeconfigGroup}, 10*time.Minute)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "https://" + endpoint,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca, CertData: cert, KeyData: key}, Timeout: 30 * time.Second})
	if err != nil {
		return err
	}
	role, binding := kubeops.RBAC()
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRole %s: %w", role.Name, err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRoleBinding %s: %w", binding.Name, err)
	}
	return nil
}

func (n *clusterNodes) Node(ctx context.Context, cluster, node string) (rollout.NodeInfo, bool, error) {
	c, err := n.client(ctx, cluster)
	if err != nil {
		return rollout.NodeInfo{}, false, err
	}
	obj, err := c.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return rollout.NodeInfo{}, false, nil
	}
	if err != nil {
		return rollout.NodeInfo{}, false, err
	}
	info := rollout.NodeInfo{KubeletVersion: obj.Status.NodeInfo.KubeletVersion, Unschedulable: obj.Spec.Unschedulable}
	for _, cond := range obj.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			info.Ready = cond.Status == corev1.ConditionTrue
		}
	}
	return info, true, nil
}

func (n *clusterNodes) cordonOwner(ctx context.Context, cluster, node string) (string, error) {
	c, err := n.client(ctx, cluster)
	if err != nil {
		return "", err
	}
	obj, err := c.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return obj.Annotations[cordonedBy], nil
}

func (n *clusterNodes) Cordon(ctx context.Context, cluster, node, owner string) (bool, error) {
	c, err := n.client(ctx, cluster)
	if err != nil {
		return false, err
	}
	obj, err := c.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	if obj.Spec.Unschedulable {
		// Cordoned already: ours only if ztpd did it (an earlier rollout
		// that failed on this node), not an operator's.
		return obj.Annotations[cordonedBy] != "", nil
	}
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{cordonedBy: owner}},
		"spec":     map[string]any{"unschedulable": true},
	})
	if _, err := c.cs.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return false, err
	}
	return true, nil
}

func (n *clusterNodes) Uncordon(ctx context.Context, cluster, node string) error {
	c, err := n.client(ctx, cluster)
	if err != nil {
		return err
	}
	patch := []byte(`{"metadata":{"annotations":{"` + cordonedBy + `":null}},"spec":{"unschedulable":null}}`)
	_, err = c.cs.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	return err
}

func (n *clusterNodes) Drain(ctx context.Context, cluster, node string, timeout time.Duration) error {
	c, err := n.client(ctx, cluster)
	if err != nil {
		return err
	}
	return c.op.Drain(ctx, node, kubeops.DrainOptions{Timeout: timeout})
}

func (n *clusterNodes) WaitReady(ctx context.Context, cluster, node, version string, timeout time.Duration) error {
	c, err := n.client(ctx, cluster)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	check := kubeops.NodeReadyAt(version)
	if version == "" {
		check = func(nd *corev1.Node) (bool, string) {
			if nd == nil {
				return false, "not found; want it Ready"
			}
			return kubeops.NodeReadyAt(nd.Status.NodeInfo.KubeletVersion)(nd)
		}
	}
	err = c.op.WaitNode(ctx, node, check)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("node %s not Ready at %s within %s: %w", node, version, timeout, err)
	}
	return err
}

func (n *clusterNodes) DeleteNode(ctx context.Context, cluster, node string) error {
	c, err := n.client(ctx, cluster)
	if err != nil {
		return err
	}
	return c.op.DeleteNode(ctx, node)
}
