package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/api/client"
)

// Access to a cluster: its kubeconfig (through the API or the admin socket)
// and its members (admin socket, on the appliance).

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
		Args: oneArg,
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
			inner, err := c.CS("getKubernetesClusterConfig", url.Values{"id": {id}})
			if err != nil {
				return err
			}
			var cc client.CSClusterConfig
			if err := json.Unmarshal(inner["clusterconfig"], &cc); err != nil {
				return err
			}
			if out != "" {
				// A kubeconfig holds client credentials: owner-only.
				if err := os.WriteFile(out, []byte(cc.ConfigData), 0o600); err != nil {
					return err
				}
				return os.Chmod(out, 0o600)
			}
			if opts.output == "json" {
				return printResult(opts, os.Stdout, cc, nil)
			}
			_, err = fmt.Fprint(os.Stdout, cc.ConfigData)
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
		Args:    oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			return localMembers(opts, args[0])
		},
	}
}
