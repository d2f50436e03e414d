package main

import (
	"net/url"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/api/client"
)

func init() { register(newTokenCmd) }

// tokenInfo is a join token as the REST API shows it (never its secret),
// with its cluster's name beside the ID.
type tokenInfo struct {
	client.Token
	ClusterName string `json:"cluster_name,omitempty"`
}

func newTokenCmd(opts *rootOptions) *cobra.Command {
	f := &apiFlags{}
	cmd := &cobra.Command{
		Use:   "token",
		Short: "List and revoke join tokens (admin)",
		Long: `Join tokens are the credentials devices use to join clusters (kubeadm
bootstrap tokens, k3s tokens, enrollment tokens). Only their IDs and metadata
are shown; secrets are never stored in clear and never shown.`,
		Example: `  ztpd token list --cluster edge-1
  ztpd token revoke abcdef --kind kubeadm`,
	}
	addAPIFlags(cmd, f)
	cmd.AddCommand(newTokenListCmd(opts, f), newTokenRevokeCmd(opts, f))
	return cmd
}

func newTokenListCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var cluster, kind string
	var revoked string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List tokens",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			clusterID, err := visClusterRef(c, cluster)
			if err != nil {
				return err
			}
			list, err := client.All[tokenInfo](c.Client, "/api/v1/tokens", url.Values{"cluster": {clusterID}, "kind": {kind}, "revoked": {revoked}}, 0)
			if err != nil {
				return err
			}
			names := visClusterNames(c)
			for i := range list {
				list[i].ClusterName = names[list[i].Cluster]
			}
			return printResult(opts, os.Stdout, list, func(tw *tabwriter.Writer) {
				row(tw, "ID", "KIND", "CLUSTER", "DEVICE", "REVOKED", "EXPIRES", "USED")
				for _, t := range list {
					exp, used := "-", "-"
					if !t.Expires.IsZero() {
						exp = t.Expires.Local().Format("2006-01-02 15:04")
						if d := time.Until(t.Expires); d > 0 {
							exp += " (in " + d.Round(time.Minute).String() + ")"
						} else {
							exp += " (expired)"
						}
					}
					if !t.UsedAt.IsZero() {
						used = ago(t.UsedAt)
					}
					row(tw, t.ID, t.Kind, dash(names.cluster(t.Cluster)), dash(t.Device), t.Revoked, exp, used)
				}
			})
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "only tokens of this cluster (name or ID)")
	cmd.Flags().StringVar(&kind, "kind", "", "kubeadm, k3s, enrollment or certificate-key")
	cmd.Flags().StringVar(&revoked, "revoked", "", "true or false")
	return cmd
}

func newTokenRevokeCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var kind string
	var yes bool
	cmd := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a token: it cannot be used to join any more",
		Args:  oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := confirm(cmd, "revoke join token "+args[0]+": it cannot be used to join any more", yes); err != nil {
				return err
			}
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			q := url.Values{}
			if kind != "" {
				q.Set("kind", kind)
			}
			var t tokenInfo
			if err := c.REST("POST", "/api/v1/tokens/"+url.PathEscape(args[0])+"/revoke", q, nil, &t); err != nil {
				return err
			}
			return printResult(opts, os.Stdout, t, func(tw *tabwriter.Writer) {
				row(tw, "revoked", t.Kind, t.ID)
			})
		},
	}
	cmd.Flags().StringVar(&kind, "kind", "", "token kind, when two kinds share the ID")
	addYesFlag(cmd, &yes)
	return cmd
}
