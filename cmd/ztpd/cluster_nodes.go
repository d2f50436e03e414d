package main

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/cobra"
)

// nodesArgs: the cluster, then one device at least.
func nodesArgs(cmd *cobra.Command, args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("give the cluster and one device at least: usage: %s %s (%s --help)",
			cmd.CommandPath(), strings.Join(strings.Fields(cmd.Use)[1:], " "), cmd.CommandPath())
	}
	return nil
}

func newClusterAddNodesCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var manual bool
	cmd := &cobra.Command{
		Use:   "add-nodes NAME DEVICE...",
		Short: "Admit devices into a Running cluster by name (addNodesToKubernetesCluster)",
		Long: `Admit the named devices (MACs or serials) into a Running cluster; its size
grows by as many. A device waiting for approval or room is approved into the
cluster and joins when it next asks; a standalone device joins by a join
rollout, which the command waits for (its Node Ready). --manual-upgrade leaves
the nodes out of rolling upgrades (shown skipped in the rollout).
(Control planes are added with CloudStack's
addVirtualMachinesToKubernetesCluster iscontrolnode=true.)`,
		Example: `  ztpd cluster add-nodes edge-1 52:54:00:12:34:56 52:54:00:12:34:57
  ztpd cluster add-nodes edge-1 52:54:00:12:34:58 --manual-upgrade`,
		Args: nodesArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			id, err := clusterID(c, args[0])
			if err != nil {
				return err
			}
			p := url.Values{"id": {id}, "nodeids": {strings.Join(args[1:], ",")}}
			if manual {
				p.Set("manualupgrade", "true")
			}
			return clusterJob(opts, f, c, "addNodesToKubernetesCluster", p, "adding nodes to "+args[0])
		},
	}
	cmd.Flags().BoolVar(&manual, "manual-upgrade", false, "leave the nodes out of rolling upgrades")
	return cmd
}

func newClusterRemoveNodesCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "remove-nodes NAME DEVICE...",
		Short: "Take named workers out of a Running cluster (removeNodesFromKubernetesCluster)",
		Long: `Take the named worker devices out of a Running cluster, as a scale-down
naming them does: drained, reset by their agents, their Nodes deleted, their
credentials revoked; the size shrinks by as many (one worker stays).`,
		Example: `  ztpd cluster remove-nodes edge-1 52:54:00:12:34:56`,
		Args:    nodesArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			id, err := clusterID(c, args[0])
			if err != nil {
				return err
			}
			p := url.Values{"id": {id}, "nodeids": {strings.Join(args[1:], ",")}}
			return clusterJob(opts, f, c, "removeNodesFromKubernetesCluster", p, "removing nodes from "+args[0])
		},
	}
	return cmd
}
