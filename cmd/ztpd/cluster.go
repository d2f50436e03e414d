package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func init() { register(newClusterCmd) }

// csCluster is the CloudStack kubernetescluster object (the fields the CLI shows).
type csCluster struct {
	ID                    string `json:"id"`
	Name                  string `json:"name"`
	Description           string `json:"description"`
	Account               string `json:"account"`
	KubernetesVersionID   string `json:"kubernetesversionid"`
	KubernetesVersionName string `json:"kubernetesversionname"`
	ServiceOfferingName   string `json:"serviceofferingname"`
	Size                  int    `json:"size"`
	ControlNodes          int    `json:"controlnodes"`
	CPUNumber             string `json:"cpunumber"`
	Memory                string `json:"memory"`
	State                 string `json:"state"`
	Endpoint              string `json:"endpoint"`
	Created               string `json:"created"`
	VirtualMachines       []struct {
		ID        string `json:"id"`
		Name      string `json:"name"`
		State     string `json:"state"`
		IPAddress string `json:"ipaddress"`
		Role      string `json:"ztpdrole"`
		ZTPDState string `json:"ztpdstate"`
	} `json:"virtualmachines"`
}

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
  ztpd cluster delete edge-1`,
	}
	addAPIFlags(cmd, f)
	cmd.AddCommand(newClusterCreateCmd(opts, f), newClusterListCmd(opts, f), newClusterShowCmd(opts, f),
		newClusterScaleCmd(opts, f), newClusterUpgradeCmd(opts, f), newClusterSimpleCmd(opts, f, "start"),
		newClusterSimpleCmd(opts, f, "stop"), newClusterSimpleCmd(opts, f, "delete"), newClusterKubeconfigCmd(opts, f),
		newClusterMembersCmd(opts, f))
	return cmd
}

// clusterID resolves a cluster name or ID.
func clusterID(c *apiClient, ref string) (string, error) {
	var list []csCluster
	// listall: an admin key finds every account's clusters (a user key its own).
	if err := c.list("listKubernetesClusters", "kubernetescluster", url.Values{"name": {ref}, "listall": {"true"}}, &list); err != nil {
		return "", err
	}
	if len(list) == 1 {
		return list[0].ID, nil
	}
	if err := c.list("listKubernetesClusters", "kubernetescluster", url.Values{"id": {ref}, "listall": {"true"}}, &list); err == nil && len(list) == 1 {
		return list[0].ID, nil
	}
	return "", fmt.Errorf("no Kubernetes cluster named %q", ref)
}

// versionID resolves a Kubernetes version name, semantic version or ID.
func versionID(c *apiClient, ref string) (string, error) {
	var list []csVersion
	if err := c.list("listKubernetesSupportedVersions", "kubernetessupportedversion", nil, &list); err != nil {
		return "", err
	}
	for _, v := range list {
		if v.ID == ref || v.Name == ref {
			return v.ID, nil
		}
	}
	var match []string
	for _, v := range list {
		if v.SemanticVersion == ref {
			match = append(match, v.ID)
		}
	}
	if len(match) == 1 {
		return match[0], nil
	}
	if len(match) > 1 {
		return "", fmt.Errorf("several versions are %s; name one by its name or ID", ref)
	}
	return "", fmt.Errorf("no Kubernetes version %q (see: ztpd version list)", ref)
}

func printCluster(opts *rootOptions, c csCluster) error {
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
		if c.Description != "" {
			row(tw, "description", c.Description)
		}
		row(tw, "members", len(c.VirtualMachines))
		for _, vm := range c.VirtualMachines {
			row(tw, "  "+vm.Name, vm.Role+" "+vm.ZTPDState+" "+dash(vm.IPAddress))
		}
	})
}

// clusterResult decodes a job result {"kubernetescluster": {...}} and prints it.
func clusterResult(opts *rootOptions, raw json.RawMessage) error {
	var r struct {
		Cluster csCluster `json:"kubernetescluster"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return err
	}
	return printCluster(opts, r.Cluster)
}

func newClusterCreateCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var version, offering, description, keypair, lbIP, joinMethod string
	var size, control int
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a cluster and wait until it is Running (CA and join tokens provisioned)",
		Example: `  ztpd cluster create edge-1 --version 1.31.4 --size 3
  ztpd cluster create core --version v1.31.4 --size 10 --control-nodes 3 --offering ztpd-large`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			vid, err := versionID(c, version)
			if err != nil {
				return err
			}
			var zones []struct {
				ID string `json:"id"`
			}
			if err := c.list("listZones", "zone", nil, &zones); err != nil {
				return err
			}
			if len(zones) == 0 {
				return fmt.Errorf("the API lists no zone")
			}
			var offs []struct {
				ID string `json:"id"`
			}
			if err := c.list("listServiceOfferings", "serviceoffering", url.Values{"name": {offering}}, &offs); err != nil {
				return err
			}
			if len(offs) != 1 {
				return fmt.Errorf("no service offering named %q (ztpd has ztpd-small, ztpd-medium, ztpd-large, ztpd-xlarge)", offering)
			}
			p := url.Values{"name": {args[0]}, "zoneid": {zones[0].ID}, "kubernetesversionid": {vid},
				"serviceofferingid": {offs[0].ID}, "size": {strconv.Itoa(size)}, "controlnodes": {strconv.Itoa(control)}}
			for k, v := range map[string]string{"description": description, "keypair": keypair,
				"externalloadbalanceripaddress": lbIP, "joinmethod": joinMethod} {
				if v != "" {
					p.Set(k, v)
				}
			}
			res, job, err := c.async("createKubernetesCluster", p, "creating "+args[0])
			if err != nil {
				return err
			}
			if f.noWait {
				return printJob(opts, "createKubernetesCluster", job)
			}
			return clusterResult(opts, res)
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
	fl.StringVar(&joinMethod, "join-method", "", "kubeadm (default), k3s or sonic")
	_ = cmd.MarkFlagRequired("version")
	return cmd
}

func newClusterListCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var state, keyword string
	var mine bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List clusters",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			// Admin keys see every account's clusters (CloudStack's
			// listall); --mine shows only the key's own account's.
			p := url.Values{}
			if !mine {
				p.Set("listall", "true")
			}
			if state != "" {
				p.Set("state", state)
			}
			if keyword != "" {
				p.Set("keyword", keyword)
			}
			var list []csCluster
			if err := c.list("listKubernetesClusters", "kubernetescluster", p, &list); err != nil {
				return err
			}
			if list == nil {
				list = []csCluster{}
			}
			return printResult(opts, os.Stdout, list, func(tw *tabwriter.Writer) {
				row(tw, "NAME", "ACCOUNT", "STATE", "VERSION", "CONTROL", "WORKERS", "MEMBERS", "CPU", "MEMORY(MiB)", "ENDPOINT", "ID")
				for _, k := range list {
					row(tw, k.Name, dash(k.Account), k.State, k.KubernetesVersionName, k.ControlNodes, k.Size, len(k.VirtualMachines),
						k.CPUNumber, k.Memory, dash(k.Endpoint), k.ID)
				}
			})
		},
	}
	cmd.Flags().BoolVar(&mine, "mine", false, "admin keys: only the key's own account's clusters (default: every account's)")
	cmd.Flags().StringVar(&state, "state", "", "only clusters in this state, e.g. Running")
	cmd.Flags().StringVar(&keyword, "keyword", "", "only clusters whose name or description contains this")
	return cmd
}

func newClusterShowCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Show one cluster with its members",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			id, err := clusterID(c, args[0])
			if err != nil {
				return err
			}
			var list []csCluster
			if err := c.list("listKubernetesClusters", "kubernetescluster", url.Values{"id": {id}}, &list); err != nil {
				return err
			}
			if len(list) != 1 {
				return fmt.Errorf("cluster %s disappeared", args[0])
			}
			return printCluster(opts, list[0])
		},
	}
}

func newClusterScaleCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var size int
	var offering string
	cmd := &cobra.Command{
		Use:   "scale NAME",
		Short: "Change the number of workers (Created or Running) or the offering",
		Long: `Change the desired number of worker nodes. On a Running cluster the joiner
admits waiting devices or marks surplus members leaving. A Stopped cluster may
change its offering but not its size.`,
		Example: `  ztpd cluster scale edge-1 --size 5
  ztpd cluster scale edge-1 --offering ztpd-large`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if size == 0 && offering == "" {
				return fmt.Errorf("give --size, --offering or both")
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
			if offering != "" {
				var offs []struct {
					ID string `json:"id"`
				}
				if err := c.list("listServiceOfferings", "serviceoffering", url.Values{"name": {offering}}, &offs); err != nil {
					return err
				}
				if len(offs) != 1 {
					return fmt.Errorf("no service offering named %q", offering)
				}
				p.Set("serviceofferingid", offs[0].ID)
			}
			res, job, err := c.async("scaleKubernetesCluster", p, "scaling "+args[0])
			if err != nil {
				return err
			}
			if f.noWait {
				return printJob(opts, "scaleKubernetesCluster", job)
			}
			return clusterResult(opts, res)
		},
	}
	cmd.Flags().IntVar(&size, "size", 0, "new number of worker nodes")
	cmd.Flags().StringVar(&offering, "offering", "", "new (not smaller) service offering name")
	return cmd
}

func newClusterUpgradeCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var version string
	cmd := &cobra.Command{
		Use:   "upgrade NAME",
		Short: "Upgrade a Running cluster (same major, minor +1 at most, never down)",
		Args:  cobra.ExactArgs(1),
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
			res, job, err := c.async("upgradeKubernetesCluster", url.Values{"id": {id}, "kubernetesversionid": {vid}}, "upgrading "+args[0])
			if err != nil {
				return err
			}
			if f.noWait {
				return printJob(opts, "upgradeKubernetesCluster", job)
			}
			return clusterResult(opts, res)
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
	return &cobra.Command{
		Use:   op + " NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			id, err := clusterID(c, args[0])
			if err != nil {
				return err
			}
			res, job, err := c.async(command, url.Values{"id": {id}}, op+" "+args[0])
			if err != nil {
				return err
			}
			if f.noWait {
				return printJob(opts, command, job)
			}
			var r struct {
				Cluster *csCluster `json:"kubernetescluster"`
				Success bool       `json:"success"`
				Text    string     `json:"displaytext"`
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
}

func newClusterKubeconfigCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "kubeconfig NAME",
		Short: "Print or save a kubeconfig for the cluster (a short-lived certificate from the cluster CA)",
		Long: `Issue a client certificate signed by the cluster's CA and print or write a
kubeconfig for it: the cluster's API endpoint, its CA certificate and the
embedded certificate and key. The certificate names the caller (CN = the API
key's name, or local-admin on the appliance) in the group ztpd:cluster-admins,
which ztpd binds to the cluster-admin ClusterRole in the cluster (not
system:masters); it is valid for api.kubeconfig_ttl (24h by default). Every
issue is a kubeconfig.issued event. The cluster needs an endpoint: its first
control plane must have been admitted (or an external load balancer address
set).

With API credentials this uses getKubernetesClusterConfig; without them, on
the appliance itself, it uses the admin socket of the data directory.`,
		Example: `  ztpd cluster kubeconfig edge-1 > edge-1.kubeconfig
  ztpd cluster kubeconfig edge-1 -f ~/.kube/edge-1 && kubectl --kubeconfig ~/.kube/edge-1 get nodes`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !apiCredentialsGiven(f) {
				return localKubeconfig(opts, args[0], out)
			}
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			id, err := clusterID(c, args[0])
			if err != nil {
				return err
			}
			inner, err := c.cs("getKubernetesClusterConfig", url.Values{"id": {id}})
			if err != nil {
				return err
			}
			var cc struct {
				ID     string `json:"id"`
				Name   string `json:"name"`
				Config string `json:"configdata"`
			}
			if err := json.Unmarshal(inner["clusterconfig"], &cc); err != nil {
				return err
			}
			if out != "" {
				// A kubeconfig holds client credentials: owner-only.
				if err := os.WriteFile(out, []byte(cc.Config), 0o600); err != nil {
					return err
				}
				return os.Chmod(out, 0o600)
			}
			if opts.output == "json" {
				return printResult(opts, os.Stdout, cc, nil)
			}
			_, err = fmt.Fprint(os.Stdout, cc.Config)
			return err
		},
	}
	cmd.Flags().StringVarP(&out, "file", "f", "", "write the kubeconfig to this file (mode 0600) instead of standard output")
	return cmd
}

func newClusterMembersCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "members NAME|ID",
		Short:   "List a cluster's members: device, role, state, version (admin socket, on the appliance)",
		Example: "  ztpd cluster members prod\n  ztpd cluster members prod -o json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return localMembers(opts, args[0])
		},
	}
}
