package main

import (
	"fmt"
	"net/url"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/api/client"
)

// Reading clusters: list and show.

func newClusterListCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var state, keyword, typ string
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
			if typ != "" {
				p.Set("clustertype", typ)
			}
			if keyword != "" {
				p.Set("keyword", keyword)
			}
			var list []client.CSCluster
			if err := c.CSList("listKubernetesClusters", "kubernetescluster", p, &list); err != nil {
				return err
			}
			if list == nil {
				list = []client.CSCluster{}
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
	cmd.Flags().StringVar(&typ, "type", "", "only clusters of this type: CloudManaged (built by ztpd) or ExternalManaged (registered)")
	cmd.Flags().StringVar(&keyword, "keyword", "", "only clusters whose name or description contains this")
	return cmd
}

func newClusterShowCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Show one cluster with its members",
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
			var list []client.CSCluster
			if err := c.CSList("listKubernetesClusters", "kubernetescluster", url.Values{"id": {id}}, &list); err != nil {
				return err
			}
			if len(list) != 1 {
				return fmt.Errorf("cluster %s disappeared", args[0])
			}
			return printCluster(opts, list[0])
		},
	}
}
