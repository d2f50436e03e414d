package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/api/client"
)

// The cluster command group: clusters through the CloudStack-compatible API.
// Its commands are split by job: cluster_lifecycle.go (create, scale, upgrade,
// start, stop, delete: asynchronous jobs), cluster_list.go (list, show) and
// cluster_access.go (kubeconfig, members).

func init() { register(newClusterCmd) }

func newClusterCmd(opts *rootOptions) *cobra.Command {
	f := &apiFlags{}
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Manage Kubernetes clusters through the CloudStack-compatible API",
		Long: `Create, list, scale, upgrade, stop, start and delete Kubernetes clusters, and
fetch their kubeconfig. These commands use the CloudStack API (/client/api), so
they work against ztpd and against a CloudStack management server with CKS.

Clusters follow CloudStack's state machine: Created -> Starting -> Running;
Running -> Stopping -> Stopped -> Starting; Running -> Scaling/Upgrading ->
Running; any failure -> Alert (start recovers it) or Error (delete only).
Operations wait for their job unless --no-wait is given.`,
		Example: `  export ZTPD_API_KEY=... ZTPD_SECRET_KEY=...
  ztpd cluster create edge-1 --version v1.31.4 --size 3 --control-nodes 3
  ztpd cluster list
  ztpd cluster scale edge-1 --size 5
  ztpd cluster upgrade edge-1 --version v1.32.0
  ztpd cluster kubeconfig edge-1 -f edge-1.kubeconfig
  ztpd cluster stop edge-1 && ztpd cluster start edge-1
  ztpd cluster delete edge-1
  ztpd cluster register lab-b --kubeconfig lab-b-onboarder.kubeconfig`,
	}
	addAPIFlags(cmd, f)
	cmd.AddCommand(newClusterCreateCmd(opts, f), newClusterListCmd(opts, f), newClusterShowCmd(opts, f),
		newClusterScaleCmd(opts, f), newClusterUpgradeCmd(opts, f), newClusterSimpleCmd(opts, f, "start"),
		newClusterSimpleCmd(opts, f, "stop"), newClusterSimpleCmd(opts, f, "delete"), newClusterKubeconfigCmd(opts, f),
		newClusterMembersCmd(opts, f), newClusterRegisterCmd(opts, f), newClusterAddNodesCmd(opts, f), newClusterRemoveNodesCmd(opts, f))
	return cmd
}

// clusterID resolves a cluster name or ID.
func clusterID(c *apiClient, ref string) (string, error) {
	var list []client.CSCluster
	// listall: an admin key finds every account's clusters (a user key its own).
	if err := c.CSList("listKubernetesClusters", "kubernetescluster", url.Values{"name": {ref}, "listall": {"true"}}, &list); err != nil {
		return "", err
	}
	if len(list) == 1 {
		return list[0].ID, nil
	}
	if err := c.CSList("listKubernetesClusters", "kubernetescluster", url.Values{"id": {ref}, "listall": {"true"}}, &list); err == nil && len(list) == 1 {
		return list[0].ID, nil
	}
	return "", fmt.Errorf("cluster %q not found (ztpd cluster list)", ref)
}

func printCluster(opts *rootOptions, c client.CSCluster) error {
	return printResult(opts, os.Stdout, c, func(tw *tabwriter.Writer) {
		row(tw, "name", c.Name)
		row(tw, "id", c.ID)
		row(tw, "account", dash(c.Account))
		row(tw, "state", c.State)
		row(tw, "version", c.KubernetesVersionName)
		row(tw, "control nodes", c.ControlNodes)
		row(tw, "workers", c.Size)
		row(tw, "offering", c.ServiceOfferingName)
		row(tw, "cpu / memory", c.CPUNumber+" vCPU / "+c.Memory+" MiB")
		row(tw, "endpoint", dash(c.Endpoint))
		if c.ZTPDWaiting != "" {
			row(tw, "waiting", c.ZTPDWaiting)
		}
		switch {
		case c.ZTPDAPIReachable == nil:
			row(tw, "api server", "not reached yet")
		case *c.ZTPDAPIReachable:
			row(tw, "api server", "answering, last seen "+c.ZTPDLastSeen)
		default:
			row(tw, "api server", "NOT answering, last seen "+dash(c.ZTPDLastSeen))
		}
		if c.ZTPDReadyNodes != nil {
			row(tw, "ready nodes", fmt.Sprintf("%d of %d", *c.ZTPDReadyNodes, c.ControlNodes+c.Size))
		}
		if c.Description != "" {
			row(tw, "description", c.Description)
		}
		row(tw, "members", len(c.VirtualMachines))
		for _, vm := range c.VirtualMachines {
			node := "node " + dash(vm.ZTPDNode)
			if vm.ZTPDNodeReady != "" {
				node += " Ready=" + vm.ZTPDNodeReady + " (seen " + vm.ZTPDNodeSeen + ")"
			}
			row(tw, "  "+vm.Name, vm.ZTPDRole+" "+vm.ZTPDState+" "+dash(vm.IPAddress)+" "+node)
		}
	})
}

// clusterResult decodes a job result {"kubernetescluster": {...}} and prints it.
func clusterResult(opts *rootOptions, raw json.RawMessage) error {
	var r struct {
		Cluster client.CSCluster `json:"kubernetescluster"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return err
	}
	return printCluster(opts, r.Cluster)
}
