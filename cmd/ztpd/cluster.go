package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/internal/app"
	"github.com/ztpd/ztpd/internal/core"
)

func init() { register(newClusterCmd) }

func newClusterCmd(opts *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Kubernetes clusters: admin kubeconfig and members",
		Long: `Work with the Kubernetes clusters ztpd provisions members for.

Clusters are created through the CloudStack-compatible API
(createKubernetesCluster) or the REST API; each gets its own CA when it is
created. These commands use the admin socket of a running ztpd, or open the
data directory directly when none runs.`,
	}
	cmd.AddCommand(newClusterKubeconfigCmd(opts), newClusterMembersCmd(opts))
	return cmd
}

func newClusterKubeconfigCmd(opts *rootOptions) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "kubeconfig NAME|ID",
		Short: "Write an admin kubeconfig with a fresh client certificate from the cluster CA",
		Long: `Issue an admin client certificate (CN=kubernetes-admin, O=system:masters)
signed by the cluster's CA and write a kubeconfig for it: the cluster's API
endpoint, its CA certificate and the embedded certificate and key.

The cluster needs an API endpoint: its first control plane must have been
admitted (or an external load balancer address set). The file is written
with mode 0600, atomically; without --file the kubeconfig goes to stdout.`,
		Example: `  ztpd cluster kubeconfig prod -f prod.kubeconfig
  kubectl --kubeconfig prod.kubeconfig get nodes
  ztpd cluster kubeconfig prod > ~/.kube/config`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := openAdmin(opts)
			if err != nil {
				return err
			}
			defer s.close()
			raw, err := adminRaw(s, "GET", "/admin/clusters/"+url.PathEscape(args[0])+"/kubeconfig")
			if err != nil {
				return fmt.Errorf("cluster kubeconfig: %w", err)
			}
			if file == "" || file == "-" {
				_, err = os.Stdout.Write(raw)
				return err
			}
			if _, err := app.CopyAtomic(file, bytes.NewReader(raw), 0o600); err != nil {
				return fmt.Errorf("write %s: %w", file, err)
			}
			if opts.output == "json" {
				return printResult(opts, os.Stdout, map[string]string{"cluster": args[0], "file": file}, nil)
			}
			fmt.Fprintf(os.Stderr, "wrote %s (mode 0600)\n", file)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "write the kubeconfig to this file (default stdout)")
	return cmd
}

func newClusterMembersCmd(opts *rootOptions) *cobra.Command {
	return &cobra.Command{
		Use:     "members NAME|ID",
		Short:   "List a cluster's members: device, role, state, version",
		Example: "  ztpd cluster members prod\n  ztpd cluster members prod -o json",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutputFormat(opts); err != nil {
				return err
			}
			s, err := openAdmin(opts)
			if err != nil {
				return err
			}
			defer s.close()
			var list []core.Membership
			if err := s.do("GET", "/admin/clusters/"+url.PathEscape(args[0])+"/members", nil, &list); err != nil {
				return fmt.Errorf("cluster members: %w", err)
			}
			return printResult(opts, os.Stdout, list, func(tw *tabwriter.Writer) {
				row(tw, "DEVICE", "ROLE", "STATE", "VERSION", "SINCE")
				for _, m := range list {
					row(tw, m.Device, m.Role, m.State, dash(m.Version), m.UpdatedAt.Format(time.RFC3339))
				}
			})
		},
	}
}

// adminRaw sends a request and returns the raw body of a 2xx answer.
func adminRaw(s *adminSession, method, path string) ([]byte, error) {
	req, err := http.NewRequest(method, "http://ztpd"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(raw, &e) == nil && e.Error != "" {
			return nil, fmt.Errorf("%s", e.Error)
		}
		return nil, app.AdminError(resp, raw)
	}
	return raw, nil
}
