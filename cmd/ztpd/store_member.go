package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/internal/app"
	"github.com/ztpd/ztpd/internal/store/etcdstore"
)

// newStoreMemberCmd is `ztpd store member`: the embedded etcd cluster's
// members, and replacing a dead appliance's.
func newStoreMemberCmd(opts *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "member",
		Short: "List the appliances' etcd members, or replace a dead appliance's (store.backend etcd-embedded)",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List the etcd cluster's members as this appliance's member sees them",
		Example: `  ztpd store member list --config /etc/ztpd/ztpd.yaml
  ztpd store member list -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutputFormat(opts); err != nil {
				return err
			}
			cfg, err := loadConfig(opts)
			if err != nil {
				return err
			}
			cli, err := app.EtcdMemberClient(cfg)
			if err != nil {
				return err
			}
			defer cli.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), 15*time.Second)
			defer cancel()
			ms, err := etcdstore.Members(ctx, cli)
			if err != nil {
				return err
			}
			return printResult(opts, os.Stdout, ms, func(tw *tabwriter.Writer) {
				fmt.Fprintln(tw, "NAME\tID\tPEER URLS\tSTARTED")
				for _, m := range ms {
					name := m.Name
					if name == "" {
						name = "(added, not started)"
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%v\n", name, m.ID, strings.Join(m.PeerURLs, ","), m.Started)
				}
			})
		},
	})
	var yes bool
	replace := &cobra.Command{
		Use:   "replace NAME",
		Short: "Replace a dead appliance's etcd member, so a new box (an empty data directory) can join",
		Long: `Run on a surviving appliance (its ztpd serving) when appliance NAME is gone for
good (its disk or the box). The old member is removed from the etcd cluster and
a new one is added at NAME's peer URL from store.peers. Then start ztpd on the
replacement box with the same configuration (name, peers, certificates, the
shared at-rest key) and an empty data directory: it finds itself added, joins
the running cluster and receives the data from it.

An appliance that lost its etcd data but is still listed refuses to start and
names this command. Removing a member is refused by etcd when it would leave
the cluster without a quorum.`,
		Example: `  # a2's disk died; on a1:
  ztpd store member replace a2 --config /etc/ztpd/ztpd.yaml
  # then on the new a2 (empty /var/lib/ztpd, same ztpd.yaml and secret.key):
  systemctl start ztpd`,
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutputFormat(opts); err != nil {
				return err
			}
			cfg, err := loadConfig(opts)
			if err != nil {
				return err
			}
			name := args[0]
			var peerURL string
			for _, p := range cfg.Store.Peers {
				if p.Name == name {
					peerURL = p.URL
				}
			}
			if peerURL == "" {
				return fmt.Errorf("%s is not among store.peers", name)
			}
			if name == cfg.Store.Name {
				return fmt.Errorf("%s is this appliance: run the command on a surviving one", name)
			}
			if err := confirm(cmd, "remove appliance "+name+"'s etcd member and add a new one at "+peerURL, yes); err != nil {
				return err
			}
			cli, err := app.EtcdMemberClient(cfg)
			if err != nil {
				return err
			}
			defer cli.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
			defer cancel()
			res, err := etcdstore.ReplaceMember(ctx, cli, name, peerURL)
			if err != nil {
				return err
			}
			return printResult(opts, os.Stdout, res, func(tw *tabwriter.Writer) {
				if res.Removed != "" {
					row(tw, "removed", "member "+res.Removed+" ("+name+")")
				}
				row(tw, "added", "member "+res.Added+" at "+peerURL)
				row(tw, "next", "start ztpd on the new "+name+" with an empty data directory, the same configuration and the shared secret.key")
			})
		},
	}
	addYesFlag(replace, &yes)
	cmd.AddCommand(replace)
	return cmd
}
