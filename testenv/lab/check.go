package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
)

// NodeState is a Node as the cluster's real API server shows it
// (kubectl get nodes -o json with the kubeconfig ztpd hands out).
type NodeState struct {
	Name         string            `json:"name"`
	Ready        string            `json:"ready"` // the Ready condition: True, False, Unknown
	ControlPlane bool              `json:"control_plane"`
	Labels       map[string]string `json:"labels"`
	// KubeletVersion is status.nodeInfo.kubeletVersion.
	KubeletVersion string `json:"kubelet_version"`
}

// MemberState is a member as ztpd's REST API shows it
// (/api/v1/clusters/{id}): its state comes from its Node.
type MemberState struct {
	Device    string `json:"device"` // ztpd's device id
	Role      string `json:"role"`
	State     string `json:"state"`
	NodeName  string `json:"node_name"`
	NodeReady string `json:"node_ready,omitempty"` // the Node as ztpd last saw it
	Reported  string `json:"reported,omitempty"`   // the device's hint
}

// ClusterState is a cluster as ztpd and its real API server show it.
type ClusterState struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	State   string `json:"state"`
	Size    int    `json:"size"`
	Control int    `json:"control_nodes"`
	Joined  int    `json:"joined"` // members ztpd shows joined
	// EtcdNodes are the cluster's etcd nodes (external etcd): members
	// with no Node, joined when ztpd reaches their etcd.
	EtcdNodes int    `json:"etcd_nodes"`
	Endpoint  string `json:"endpoint,omitempty"`
	// ControlPlaneDevice is the lab device running the real control plane.
	ControlPlaneDevice string        `json:"control_plane_device,omitempty"`
	Members            []MemberState `json:"members"`
	Nodes              []NodeState   `json:"nodes"`
	// NodesError is why the Nodes could not be read (no kubeconfig yet
	// while the cluster is Starting, kubectl failed).
	NodesError string `json:"nodes_error,omitempty"`
}

// clusterReader reads clusters from ztpd's APIs and their Nodes from the
// real API servers: the kubeconfig from CloudStack's
// getKubernetesClusterConfig (answered once the cluster is Running), then
// kubectl in the appliance's namespace, which routes to every subnet.
type clusterReader struct {
	app  *Appliance
	topo *Topology
	kube *Kube

	mu          sync.Mutex
	kubeconfigs map[string]string // cluster id -> kubeconfig path
}

func newClusterReader(app *Appliance, topo *Topology, kube *Kube) *clusterReader {
	return &clusterReader{app: app, topo: topo, kube: kube, kubeconfigs: map[string]string{}}
}

// read returns every cluster with its members and Nodes.
func (r *clusterReader) read(ctx context.Context) ([]ClusterState, error) {
	cs, err := clusterStates(ctx, r.app)
	if err != nil {
		return nil, err
	}
	for i := range cs {
		c := &cs[i]
		if p := r.kube.Plane(c.Name); p != nil {
			c.ControlPlaneDevice = p.Device
		}
		var rc struct {
			Endpoint string `json:"endpoint"`
			Members  []struct {
				Device   string `json:"device"`
				Role     string `json:"role"`
				State    string `json:"state"`
				NodeName string `json:"node_name"`
				Node     *struct {
					Ready string `json:"ready"`
				} `json:"node"`
				Reported string `json:"reported"`
			} `json:"members"`
		}
		if err := r.app.REST(ctx, "/api/v1/clusters/"+url.PathEscape(c.ID), nil, &rc); err != nil {
			return cs, err
		}
		c.Endpoint = rc.Endpoint
		for _, m := range rc.Members {
			ms := MemberState{Device: m.Device, Role: m.Role, State: m.State, NodeName: m.NodeName, Reported: m.Reported}
			if m.Node != nil {
				ms.NodeReady = m.Node.Ready
			}
			c.Members = append(c.Members, ms)
		}
		c.Nodes, err = r.nodes(ctx, c.ID)
		if err != nil {
			c.NodesError = err.Error()
		}
	}
	return cs, nil
}

// Kubeconfig returns the path of the cluster's kubeconfig from
// getKubernetesClusterConfig, fetching it once; ztpd answers it only once
// the cluster is Running.
func (r *clusterReader) Kubeconfig(ctx context.Context, id string) (string, error) {
	r.mu.Lock()
	path, ok := r.kubeconfigs[id]
	r.mu.Unlock()
	if ok {
		return path, nil
	}
	inner, err := r.app.CloudStack(ctx, "getKubernetesClusterConfig", url.Values{"id": {id}})
	if err != nil {
		return "", err
	}
	var cc client.CSClusterConfig
	if err := json.Unmarshal(inner["clusterconfig"], &cc); err != nil || cc.ConfigData == "" {
		return "", fmt.Errorf("getKubernetesClusterConfig %s: no configdata (%v)", id, err)
	}
	path = filepath.Join(r.topo.WorkDir, "kubeconfig-"+id)
	if err := os.WriteFile(path, []byte(cc.ConfigData), 0o600); err != nil {
		return "", err
	}
	r.mu.Lock()
	r.kubeconfigs[id] = path
	r.mu.Unlock()
	return path, nil
}

// Kubectl runs kubectl with the cluster's kubeconfig in the appliance's
// namespace and returns its standard output.
func (r *clusterReader) Kubectl(ctx context.Context, id string, args ...string) ([]byte, error) {
	path, err := r.Kubeconfig(ctx, id)
	if err != nil {
		return nil, err
	}
	cmd := r.topo.App.Command(ctx, "kubectl", append([]string{"--kubeconfig", path, "--request-timeout=10s"}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func (r *clusterReader) nodes(ctx context.Context, id string) ([]NodeState, error) {
	out, err := r.Kubectl(ctx, id, "get", "nodes", "-o", "json")
	if err != nil {
		return nil, err
	}
	return ParseNodes(out)
}

// ParseNodes reads `kubectl get nodes -o json`: each Node's name, labels,
// Ready condition (Unknown when it has none), control-plane role and
// kubelet version, in name order.
func ParseNodes(kubectlJSON []byte) ([]NodeState, error) {
	var list struct {
		Items []struct {
			Metadata struct {
				Name   string            `json:"name"`
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			Status struct {
				Conditions []struct {
					Type   string `json:"type"`
					Status string `json:"status"`
				} `json:"conditions"`
				NodeInfo struct {
					KubeletVersion string `json:"kubeletVersion"`
				} `json:"nodeInfo"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal(kubectlJSON, &list); err != nil {
		return nil, fmt.Errorf("kubectl get nodes: %w", err)
	}
	var ns []NodeState
	for _, it := range list.Items {
		n := NodeState{Name: it.Metadata.Name, Ready: "Unknown", Labels: it.Metadata.Labels, KubeletVersion: it.Status.NodeInfo.KubeletVersion}
		_, n.ControlPlane = it.Metadata.Labels["node-role.kubernetes.io/control-plane"]
		for _, c := range it.Status.Conditions {
			if c.Type == "Ready" {
				n.Ready = c.Status
			}
		}
		ns = append(ns, n)
	}
	sort.Slice(ns, func(i, j int) bool { return ns[i].Name < ns[j].Name })
	return ns, nil
}

// clusterStates lists the clusters through CloudStack's
// listKubernetesClusters.
func clusterStates(ctx context.Context, app *Appliance) ([]ClusterState, error) {
	inner, err := app.CloudStack(ctx, "listKubernetesClusters", nil)
	if err != nil {
		return nil, err
	}
	var list []struct {
		ID              string `json:"id"`
		Name            string `json:"name"`
		State           string `json:"state"`
		Size            int    `json:"size"`
		ControlNodes    int    `json:"controlnodes"`
		EtcdNodes       int    `json:"etcdnodes"`
		VirtualMachines []struct {
			State string `json:"ztpdstate"`
		} `json:"virtualmachines"`
	}
	json.Unmarshal(inner["kubernetescluster"], &list)
	var out []ClusterState
	for _, c := range list {
		cs := ClusterState{ID: c.ID, Name: c.Name, State: c.State, Size: c.Size, Control: c.ControlNodes, EtcdNodes: c.EtcdNodes}
		for _, vm := range c.VirtualMachines {
			if vm.State == string(core.StateJoined) {
				cs.Joined++
			}
		}
		out = append(out, cs)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Check verifies the end state against the real API servers and ztpd:
// every cluster is Running; every planned device is a registered, Ready
// Node of its cluster with the labels ztpd gave it (ztpd.io/role, profile,
// mac; serial and hwsku for switches) and, on its control plane, kubeadm's
// control-plane label; ztpd shows it joined with that Node Ready; and no
// cluster has a Node or member the lab did not plan.
func (r *Result) Check(devs []Device) error {
	byMAC := map[string]core.Device{}
	for _, d := range r.Devices {
		byMAC[strings.ToLower(d.MAC)] = d
	}
	clusters := map[string]ClusterState{}
	for _, c := range r.Clusters {
		clusters[c.Name] = c
	}
	var bad []string
	planned, etcdNodes := map[string]int{}, map[string]int{}
	for _, d := range devs {
		planned[d.Cluster]++
		dev, ok := byMAC[strings.ToLower(d.MAC)]
		if !ok {
			bad = append(bad, fmt.Sprintf("%s (%s): ztpd has no device record", d.Name, d.MAC))
			continue
		}
		c, ok := clusters[d.Cluster]
		if !ok {
			bad = append(bad, fmt.Sprintf("%s: cluster %s not listed", d.Name, d.Cluster))
			continue
		}
		var m *MemberState
		for i := range c.Members {
			if c.Members[i].Device == dev.ID {
				m = &c.Members[i]
			}
		}
		if m == nil {
			bad = append(bad, fmt.Sprintf("%s: not a member of %s in ztpd", d.Name, d.Cluster))
			continue
		}
		if d.Role == "etcd" {
			// No Node: ztpd shows it joined when its etcd answers ztpd.
			if m.State != string(core.StateJoined) || m.Role != "etcd" {
				bad = append(bad, fmt.Sprintf("%s: ztpd shows etcd member state %q, role %q (want joined, etcd)", d.Name, m.State, m.Role))
			}
			etcdNodes[d.Cluster]++
			continue
		}
		if m.State != string(core.StateJoined) || m.NodeReady != "True" {
			bad = append(bad, fmt.Sprintf("%s: ztpd shows member state %q, Node Ready %q (want joined, True)", d.Name, m.State, m.NodeReady))
		}
		var n *NodeState
		for i := range c.Nodes {
			if c.Nodes[i].Name == m.NodeName {
				n = &c.Nodes[i]
			}
		}
		if n == nil {
			bad = append(bad, fmt.Sprintf("%s: no Node %q in %s's API server (%s)", d.Name, m.NodeName, d.Cluster, dashIfEmpty(c.NodesError)))
			continue
		}
		if n.Ready != "True" {
			bad = append(bad, fmt.Sprintf("%s: Node %s Ready is %q", d.Name, n.Name, n.Ready))
		}
		want := map[string]string{"ztpd.io/role": m.Role, "ztpd.io/profile": d.profile(),
			"ztpd.io/mac": strings.ReplaceAll(strings.ToLower(d.MAC), ":", "-")}
		if d.Kind != "vm" {
			want["ztpd.io/serial"], want["ztpd.io/hwsku"] = d.Serial, d.Product
		}
		for _, key := range sortedKeys(want) {
			if got := n.Labels[key]; got != want[key] {
				bad = append(bad, fmt.Sprintf("%s: Node %s label %s=%q, want %q", d.Name, n.Name, key, got, want[key]))
			}
		}
		if cp := d.Name == c.ControlPlaneDevice; cp != n.ControlPlane {
			bad = append(bad, fmt.Sprintf("%s: Node %s control-plane label %v, want %v", d.Name, n.Name, n.ControlPlane, cp))
		}
	}
	for _, c := range r.Clusters {
		if c.State != string(core.ClusterRunning) {
			bad = append(bad, fmt.Sprintf("cluster %s is %s, not Running", c.Name, c.State))
		}
		if len(c.Nodes) != planned[c.Name]-etcdNodes[c.Name] || len(c.Members) != planned[c.Name] || c.Joined != planned[c.Name] {
			bad = append(bad, fmt.Sprintf("cluster %s: %d Nodes, %d members (%d joined), want %d (%d of them etcd nodes, without a Node)",
				c.Name, len(c.Nodes), len(c.Members), c.Joined, planned[c.Name], etcdNodes[c.Name]))
		}
		if c.Joined != c.Size+c.Control+c.EtcdNodes || c.EtcdNodes != etcdNodes[c.Name] {
			bad = append(bad, fmt.Sprintf("cluster %s has %d joined members, wants %d control + %d workers + %d etcd nodes (%d planned)",
				c.Name, c.Joined, c.Control, c.Size, c.EtcdNodes, etcdNodes[c.Name]))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("end state wrong:\n  %s", strings.Join(bad, "\n  "))
	}
	return nil
}

// settle reads the clusters until Check passes or the budget is spent:
// Nodes register before ztpd's watch sees them and before the clusters
// turn Running.
func (r *clusterReader) settle(ctx context.Context, res *Result, devs []Device, budget time.Duration) error {
	deadline := time.Now().Add(budget)
	for {
		var err error
		if res.Devices, err = listDevices(ctx, r.app); err == nil {
			res.Clusters, err = r.read(ctx)
		}
		if err == nil {
			if err = res.Check(devs); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(time.Second):
		}
	}
}
