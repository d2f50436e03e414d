package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/kubeops"
)

// Credentials issues client certificates of ztpd's own identities in a
// cluster (the joiner, which holds the clusters' CAs).
type Credentials interface {
	ClientCredentials(cluster, user string, groups []string, validity time.Duration) (endpoint string, caPEM, certPEM, keyPEM []byte, err error)
}

// KubeNodes is NodeOps over each cluster's API server, as ztpd's operator
// identity (kubeops.RBAC, created in the cluster with the admin identity
// the first time).
type KubeNodes struct {
	j Credentials

	mu      sync.Mutex
	clients map[string]*nodeClient
}

var _ StopCordons = (*KubeNodes)(nil)

// NewKubeNodes reaches each cluster's API server with credentials from j.
func NewKubeNodes(j Credentials) *KubeNodes {
	return &KubeNodes{j: j, clients: map[string]*nodeClient{}}
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

func (n *KubeNodes) client(ctx context.Context, cluster string) (*nodeClient, error) {
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
func (n *KubeNodes) ensureRBAC(ctx context.Context, cluster string) error {
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

func (n *KubeNodes) Node(ctx context.Context, cluster, node string) (NodeInfo, bool, error) {
	c, err := n.client(ctx, cluster)
	if err != nil {
		return NodeInfo{}, false, err
	}
	obj, err := c.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return NodeInfo{}, false, nil
	}
	if err != nil {
		return NodeInfo{}, false, err
	}
	info := NodeInfo{KubeletVersion: obj.Status.NodeInfo.KubeletVersion, Unschedulable: obj.Spec.Unschedulable}
	for _, cond := range obj.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			info.Ready = cond.Status == corev1.ConditionTrue
		}
	}
	return info, true, nil
}

func (n *KubeNodes) CordonOwner(ctx context.Context, cluster, node string) (string, error) {
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

func (n *KubeNodes) Cordon(ctx context.Context, cluster, node, owner string) (bool, error) {
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

func (n *KubeNodes) Uncordon(ctx context.Context, cluster, node string) error {
	c, err := n.client(ctx, cluster)
	if err != nil {
		return err
	}
	patch := []byte(`{"metadata":{"annotations":{"` + cordonedBy + `":null}},"spec":{"unschedulable":null}}`)
	_, err = c.cs.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	return err
}

func (n *KubeNodes) Drain(ctx context.Context, cluster, node string, timeout time.Duration) error {
	c, err := n.client(ctx, cluster)
	if err != nil {
		return err
	}
	return c.op.Drain(ctx, node, kubeops.DrainOptions{Timeout: timeout})
}

func (n *KubeNodes) WaitReady(ctx context.Context, cluster, node, version string, timeout time.Duration) error {
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

func (n *KubeNodes) DeleteNode(ctx context.Context, cluster, node string) error {
	c, err := n.client(ctx, cluster)
	if err != nil {
		return err
	}
	return c.op.DeleteNode(ctx, node)
}

func (n *KubeNodes) DrainBlockers(ctx context.Context, cluster string, nodes []string) (map[string][]DrainBlock, error) {
	c, err := n.client(ctx, cluster)
	if err != nil {
		return nil, err
	}
	got, err := c.op.DrainBlockers(ctx, nodes)
	if err != nil {
		return nil, err
	}
	out := map[string][]DrainBlock{}
	for node, bs := range got {
		for _, b := range bs {
			out[node] = append(out[node], DrainBlock{Pod: b.Pod, Budget: b.Budget, Allowed: b.Allowed})
		}
	}
	return out, nil
}

func (n *KubeNodes) CrashLooping(ctx context.Context, cluster, node string) ([]string, error) {
	c, err := n.client(ctx, cluster)
	if err != nil {
		return nil, err
	}
	return c.op.CrashLooping(ctx, node)
}

var (
	_ DrainPredictor = (*KubeNodes)(nil)
	_ PodHealth      = (*KubeNodes)(nil)
)
