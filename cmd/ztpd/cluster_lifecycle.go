package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/api/client"
)

// Cluster lifecycle operations: each is a CloudStack asynchronous job the
// command waits for (unless --no-wait), printing the resulting cluster.

func newClusterCreateCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var version, offering, description, keypair, lbIP, joinMethod string
	var size, control, etcdNodes int
	var nodeOfferings, nodeTemplates, cniDetails map[string]string
	var cni string
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a cluster: its CA and join tokens; it is Starting until its devices boot",
		Long: `Create a cluster and wait for the create job (--no-wait: print the job ID).
The job makes the cluster's CA and join tokens and ends with the cluster
Starting: nothing has booted yet. It becomes Running once ztpd sees its API
server answer and its control-plane Nodes Ready, after devices it admits
have joined: the first control plane (a VM or server admitted with the
control-plane role) runs kubeadm init from its join bundle, then workers and
switches join. ztpd cluster show NAME and ztpd events --follow show the way.

The version must be added first (ztpd kube-version add --semver ... --url ...).

--node-offering and --node-template shape one node type (worker or control)
apart: its members are planned as that offering, and get that profile (a
loaded profile's name, or its template ID from CloudStack's listTemplates)
instead of the one they match. --cni names a
registered CNI configuration applied once the first control plane answers,
--cni-detail the values of its parameters.

--etcd-nodes N (an odd 1 to 7) builds the cluster with external etcd on N
dedicated members of role etcd (kubeadm's external etcd topology): the first
N devices admitted run etcd, with keys they make themselves and certificates
from the cluster's own etcd CA, and the first control plane waits for them.
Without it (0) etcd runs on the control planes.`,
		Example: `  ztpd cluster create edge-1 --version 1.31.4 --size 3
  ztpd cluster create core --version v1.31.4 --size 10 --control-nodes 3 --offering ztpd-large
  ztpd cluster create fabric --version 1.31.4 --size 4 --node-offering control=ztpd-large --node-template worker=leaf
  ztpd cluster create net --version 1.31.4 --cni calico --cni-detail PodCIDR=10.1.0.0/16
  ztpd cluster create db --version 1.37.2 --size 3 --etcd-nodes 3 --node-offering etcd=ztpd-medium`,
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			vid, err := versionID(c, version)
			if err != nil {
				return err
			}
			var zones []client.CSZone
			if err := c.CSList("listZones", "zone", nil, &zones); err != nil {
				return err
			}
			if len(zones) == 0 {
				return fmt.Errorf("the API lists no zone")
			}
			var offs []client.CSOffering
			if err := c.CSList("listServiceOfferings", "serviceoffering", url.Values{"name": {offering}}, &offs); err != nil {
				return err
			}
			if len(offs) != 1 {
				return fmt.Errorf("no service offering named %q (ztpd has ztpd-small, ztpd-medium, ztpd-large, ztpd-xlarge)", offering)
			}
			p := url.Values{"name": {args[0]}, "zoneid": {zones[0].ID}, "kubernetesversionid": {vid},
				"serviceofferingid": {offs[0].ID}, "size": {strconv.Itoa(size)}, "controlnodes": {strconv.Itoa(control)}}
			if etcdNodes != 0 {
				p.Set("etcdnodes", strconv.Itoa(etcdNodes))
			}
			setNodeMap(p, "nodeofferings", "offering", nodeOfferings)
			setNodeMap(p, "nodetemplates", "template", nodeTemplates)
			if cni != "" {
				p.Set("cniconfigurationid", cni)
			}
			for i, k := range slices.Sorted(maps.Keys(cniDetails)) {
				p.Set(fmt.Sprintf("cniconfigdetails[%d].key", i), k)
				p.Set(fmt.Sprintf("cniconfigdetails[%d].value", i), cniDetails[k])
			}
			for k, v := range map[string]string{"description": description, "keypair": keypair,
				"externalloadbalanceripaddress": lbIP, "joinmethod": joinMethod} {
				if v != "" {
					p.Set(k, v)
				}
			}
			return clusterJob(opts, f, c, "createKubernetesCluster", p, "creating "+args[0])
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&version, "version", "", "Kubernetes version: name, semantic version or ID (required)")
	fl.IntVar(&size, "size", 1, "number of worker nodes")
	fl.IntVar(&control, "control-nodes", 1, "number of control-plane nodes (more than 1 needs Kubernetes 1.16.0+)")
	fl.StringVar(&offering, "offering", "ztpd-small", "service offering name")
	fl.StringVar(&description, "description", "", "description")
	fl.StringVar(&keypair, "keypair", "", "SSH key pair name to record")
	fl.StringVar(&lbIP, "external-lb-ip", "", "external load balancer address for the API endpoint")
	fl.StringVar(&joinMethod, "join-method", "", "kubeadm (default), k3s, or sonic: a switch fabric, a kubeadm cluster whose control plane is the first VM or server admitted as control-plane (e.g. examples/profiles/fabric-control-plane.yaml) and whose workers are the switches")
	fl.IntVar(&etcdNodes, "etcd-nodes", 0, "number of dedicated etcd nodes, an odd 1 to 7 (external etcd); 0 runs etcd on the control planes")
	fl.StringToStringVar(&nodeOfferings, "node-offering", nil, "TYPE=OFFERING: the service offering of node type worker, control or etcd (repeatable)")
	fl.StringToStringVar(&nodeTemplates, "node-template", nil, "TYPE=PROFILE: the profile (name or template ID) the members of node type worker, control or etcd get (repeatable)")
	fl.StringVar(&cni, "cni", "", "a registered CNI configuration (name or ID) to apply once the first control plane answers")
	fl.StringToStringVar(&cniDetails, "cni-detail", nil, "NAME=VALUE: a value of the CNI configuration's parameters (repeatable)")
	_ = cmd.MarkFlagRequired("version")
	return cmd
}

// setNodeMap sets a per-role map parameter as CloudStack takes it:
// name[i].node=TYPE&name[i].valueKey=VALUE, in node type order.
func setNodeMap(p url.Values, name, valueKey string, m map[string]string) {
	for i, t := range slices.Sorted(maps.Keys(m)) {
		p.Set(fmt.Sprintf("%s[%d].node", name, i), t)
		p.Set(fmt.Sprintf("%s[%d].%s", name, i, valueKey), m[t])
	}
}

func newClusterScaleCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var size int
	var offering string
	var remove []string
	cmd := &cobra.Command{
		Use:   "scale NAME",
		Short: "Change the number of workers (Created or Running) or the offering",
		Long: `Change the desired number of worker nodes. On a Running cluster the joiner
admits waiting devices; a smaller size takes the newest workers out (drained,
reset by their agents, their Nodes deleted, their credentials revoked), or the
ones --remove names. A Stopped cluster may change its offering but not its
size.`,
		Example: `  ztpd cluster scale edge-1 --size 5
  ztpd cluster scale edge-1 --offering ztpd-large
  ztpd cluster scale edge-1 --remove 52:54:00:12:34:56`,
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if size == 0 && offering == "" && len(remove) == 0 {
				return fmt.Errorf("give --size, --offering, --remove or a combination")
			}
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			id, err := clusterID(c, args[0])
			if err != nil {
				return err
			}
			p := url.Values{"id": {id}}
			if size != 0 {
				p.Set("size", strconv.Itoa(size))
			}
			if len(remove) > 0 {
				p.Set("nodeids", strings.Join(remove, ","))
			}
			if offering != "" {
				var offs []client.CSOffering
				if err := c.CSList("listServiceOfferings", "serviceoffering", url.Values{"name": {offering}}, &offs); err != nil {
					return err
				}
				if len(offs) != 1 {
					return fmt.Errorf("no service offering named %q", offering)
				}
				p.Set("serviceofferingid", offs[0].ID)
			}
			return clusterJob(opts, f, c, "scaleKubernetesCluster", p, "scaling "+args[0])
		},
	}
	cmd.Flags().IntVar(&size, "size", 0, "new number of worker nodes")
	cmd.Flags().StringVar(&offering, "offering", "", "new (not smaller) service offering name")
	cmd.Flags().StringSliceVar(&remove, "remove", nil, "worker devices to take out (drained, reset by their agents, their Nodes deleted), instead of the newest")
	return cmd
}

func newClusterUpgradeCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var version string
	cmd := &cobra.Command{
		Use:   "upgrade NAME",
		Short: "Upgrade a Running cluster (same major, minor +1 at most, never down)",
		Args:  oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			id, err := clusterID(c, args[0])
			if err != nil {
				return err
			}
			vid, err := versionID(c, version)
			if err != nil {
				return err
			}
			return clusterJob(opts, f, c, "upgradeKubernetesCluster", url.Values{"id": {id}, "kubernetesversionid": {vid}}, "upgrading "+args[0])
		},
	}
	cmd.Flags().StringVar(&version, "version", "", "target Kubernetes version: name, semantic version or ID (required)")
	_ = cmd.MarkFlagRequired("version")
	return cmd
}

func newClusterSimpleCmd(opts *rootOptions, f *apiFlags, op string) *cobra.Command {
	short := map[string]string{
		"start":  "Start a Stopped cluster (join tokens re-enabled), or recover one in Alert",
		"stop":   "Stop a Running cluster (join tokens suspended, members kept)",
		"delete": "Delete a cluster (tokens revoked, members left, CA destroyed)",
	}[op]
	command := op + "KubernetesCluster"
	var yes, force bool
	cmd := &cobra.Command{
		Use:   op + " NAME",
		Short: short,
		Args:  oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			id, err := clusterID(c, args[0])
			if err != nil {
				return err
			}
			if op == "delete" {
				what := fmt.Sprintf("delete cluster %q (%s): its members are taken out of it, its join tokens are revoked and its CA is destroyed, which cannot be undone", args[0], id)
				if force {
					what += "; with --force also when members cannot be taken out, which are then left on their nodes as they are"
				}
				if err := confirm(cmd, what, yes); err != nil {
					return err
				}
			}
			if force {
				return forceDelete(opts, f, c, id, args[0])
			}
			res, job, err := c.async(command, url.Values{"id": {id}}, op+" "+args[0])
			if err != nil {
				return err
			}
			if f.noWait {
				return printJob(opts, command, job)
			}
			var r struct {
				Cluster *client.CSCluster `json:"kubernetescluster"`
				Success bool              `json:"success"`
				Text    string            `json:"displaytext"`
			}
			if err := json.Unmarshal(res, &r); err != nil {
				return err
			}
			if r.Cluster != nil {
				return printCluster(opts, *r.Cluster)
			}
			return printResult(opts, os.Stdout, map[string]any{"id": id, "name": args[0], "success": r.Success, "displaytext": r.Text},
				func(tw *tabwriter.Writer) { row(tw, args[0], r.Text) })
		},
	}
	if op == "delete" {
		addYesFlag(cmd, &yes)
		cmd.Flags().BoolVar(&force, "force", false, "delete the cluster even if its members cannot be taken out of it first (drained, reset by their agents, Nodes deleted); those are left on their nodes as they are and named in the result")
		cmd.Long = `Delete a cluster: every member is taken out of it on its node (cordoned, drained,
reset by its device agent, its Node deleted, its agent credential revoked), then its
join tokens are revoked and its CA is destroyed. If a member cannot be taken out
(a PodDisruptionBudget, an agent that does not answer) the delete fails and the
cluster goes to Alert; with --force the cluster is deleted all the same, and the
members left on their nodes are listed with why (an audit event records them).
A Starting cluster none of whose members has joined is deleted at once; one with
joined members is refused until it is Running, or in Alert after
api.cluster_start_timeout; --force deletes a cluster in any state.`
	}
	return cmd
}

// forceDelete deletes a cluster with force through the REST API (CloudStack
// has no such parameter), waits for its job and prints the members it
// abandoned.
func forceDelete(opts *rootOptions, f *apiFlags, c *apiClient, id, name string) error {
	const command = "deleteKubernetesCluster"
	var started client.JobAccepted
	path := "/api/v1/clusters/" + url.PathEscape(id)
	if err := c.REST("DELETE", path, url.Values{"force": {"true"}}, nil, &started); err != nil {
		return err
	}
	if f.noWait {
		return printJob(opts, command, started.Job.ID)
	}
	if _, err := c.waitJob(command, started.Job.ID, "delete "+name); err != nil {
		return err
	}
	var job client.Job
	if err := c.REST("GET", "/api/v1/jobs/"+url.PathEscape(started.Job.ID), nil, nil, &job); err != nil {
		return err
	}
	text := "Kubernetes cluster deleted"
	switch n := len(job.Abandoned); n {
	case 0:
	case 1:
		text += "; 1 member abandoned on its node"
	default:
		text += fmt.Sprintf("; %d members abandoned on their nodes", n)
	}
	if job.Abandoned == nil {
		job.Abandoned = []client.AbandonedNode{}
	}
	return printResult(opts, os.Stdout, map[string]any{"id": id, "name": name, "success": true, "displaytext": text, "abandoned": job.Abandoned},
		func(tw *tabwriter.Writer) {
			row(tw, name, text)
			if len(job.Abandoned) > 0 {
				row(tw)
				row(tw, "DEVICE", "NODE", "WHY")
				for _, a := range job.Abandoned {
					row(tw, a.Device, cmp.Or(a.Node, "-"), a.Reason)
				}
			}
		})
}

// clusterJob runs an asynchronous cluster command and prints the cluster as
// the job left it, or only the job with --no-wait.
func clusterJob(opts *rootOptions, f *apiFlags, c *apiClient, command string, p url.Values, progress string) error {
	res, job, err := c.async(command, p, progress)
	if err != nil {
		return err
	}
	if f.noWait {
		return printJob(opts, command, job)
	}
	return clusterResult(opts, res)
}
