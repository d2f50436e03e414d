package cloudstack

import (
	"fmt"
	"strings"

	"github.com/ztpd/ztpd/internal/clusters"
)

// nodeCommands add and remove cluster nodes by name: CloudStack 4.19's
// addVirtualMachinesToKubernetesCluster / removeVirtualMachinesFromKubernetesCluster
// (synchronous: they answer once the change is accepted) and 4.21's
// addNodesToKubernetesCluster / removeNodesFromKubernetesCluster
// (asynchronous, the cluster as their result). The node IDs are ztpd
// device IDs (MACs, or serials), as in virtualmachines[].id.
func nodeCommands() []*command {
	idParam := paramDef{"id", "uuid", true, "the ID of the Kubernetes cluster"}
	return []*command{
		{Name: clusters.CmdAddNodes, Desc: "Add devices as worker nodes to a running Kubernetes cluster", Async: true, Since: "4.21.0",
			JavaClass: javaUserK8s + "cluster.AddNodesToKubernetesClusterCmd",
			Params: []paramDef{idParam,
				{"nodeids", "list", true, "the device IDs (MACs or serials) to add as workers (comma-separated): waiting devices are approved into the cluster, standalone ones join it by a join rollout"},
				{"manualupgrade", "boolean", false, "leave these nodes out of the cluster's rolling upgrades"}},
			Limits:   addNodesLimits,
			Response: clusterFields, run: (*Door).csAddNodes},
		{Name: clusters.CmdRemoveNodes, Desc: "Remove worker nodes from a running Kubernetes cluster (drained and taken out, as a scale-down)", Async: true, Since: "4.21.0",
			JavaClass: javaUserK8s + "cluster.RemoveNodesFromKubernetesClusterCmd",
			Params: []paramDef{idParam,
				{"nodeids", "list", true, "the device IDs of the worker nodes to remove (comma-separated)"}},
			Response: clusterFields, run: (*Door).csRemoveNodes},
		{Name: clusters.CmdAddVMs, Desc: "Add devices to a running Kubernetes cluster; answers once accepted (the admission is job displaytext names)", Since: "4.19.0",
			JavaClass: javaUserK8s + "cluster.AddVirtualMachinesToKubernetesClusterCmd",
			Params: []paramDef{idParam,
				{"virtualmachineids", "list", true, "the device IDs (MACs or serials) to add (comma-separated)"},
				{"iscontrolnode", "boolean", false, "add them as control planes (default false: workers)"}},
			Response: []string{"success", "displaytext"}, run: (*Door).csAddVMs},
		{Name: clusters.CmdRemoveVMs, Desc: "Remove worker devices from a running Kubernetes cluster; answers once accepted", Since: "4.19.0",
			JavaClass: javaUserK8s + "cluster.RemoveVirtualMachinesFromKubernetesClusterCmd",
			Params: []paramDef{idParam,
				{"virtualmachineids", "list", true, "the device IDs of the worker nodes to remove (comma-separated)"}},
			Response: []string{"id", "success", "displaytext"}, run: (*Door).csRemoveVMs},
	}
}

// addNodesLimits: mountcksisoonvr is VMware's, with no value ztpd honours
// but false.
var addNodesLimits = []limit{
	{"mountcksisoonvr", "boolean", "4.21.0", "false only: " + whyNoVMs,
		onlyFalse("mountcksisoonvr", "ztpd mounts no ISO on a virtual router: "+whyNoVMs)},
}

// idList splits a comma-separated list parameter, dropping empty items.
func idList(v string) []string {
	var out []string
	for _, id := range strings.Split(v, ",") {
		if id = strings.TrimSpace(id); id != "" {
			out = append(out, id)
		}
	}
	return out
}

func (d *Door) csAddNodes(r *csRequest) (any, *csError) {
	return asyncJob(d.clusters.AddNodes(r.ctx, r.caller, r.str("id"), idList(r.str("nodeids")),
		clusters.AddNodesOptions{ManualUpgrade: r.boolean("manualupgrade")}))
}

func (d *Door) csRemoveNodes(r *csRequest) (any, *csError) {
	return asyncJob(d.clusters.RemoveNodes(r.ctx, r.caller, r.str("id"), idList(r.str("nodeids")), clusters.CmdRemoveNodes))
}

func (d *Door) csAddVMs(r *csRequest) (any, *csError) {
	ids := idList(r.str("virtualmachineids"))
	j, err := d.clusters.AddNodes(r.ctx, r.caller, r.str("id"), ids,
		clusters.AddNodesOptions{Command: clusters.CmdAddVMs, Control: r.boolean("iscontrolnode")})
	if err != nil {
		return nil, domainError(err)
	}
	return jobSuccess{Success: true, DisplayText: fmt.Sprintf("adding %d %s: job %s (queryAsyncJobResult)",
		len(ids), plural(len(ids), "node", "nodes"), j.ID)}, nil
}

// vmRemoved is one item of removeVirtualMachinesFromKubernetesCluster's
// answer.
type vmRemoved struct {
	DisplayText string `json:"displaytext"`
	ID          string `json:"id"`
	Success     bool   `json:"success"`
}

func (d *Door) csRemoveVMs(r *csRequest) (any, *csError) {
	ids := idList(r.str("virtualmachineids"))
	j, err := d.clusters.RemoveNodes(r.ctx, r.caller, r.str("id"), ids, clusters.CmdRemoveVMs)
	if err != nil {
		return nil, domainError(err)
	}
	items := make([]vmRemoved, len(ids))
	for i, id := range ids {
		items[i] = vmRemoved{ID: id, Success: true, DisplayText: "removal accepted: job " + j.ID + " (queryAsyncJobResult)"}
	}
	// CloudStack names each item by the command's response name
	// (setObjectName(getCommandName())), so its list key is that name too.
	return listBody(strings.ToLower(clusters.CmdRemoveVMs)+"response", len(items), items), nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
