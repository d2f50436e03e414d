package main

import (
	"fmt"
	"net/url"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/api/rest"
	"github.com/ztpd/ztpd/internal/apikeys"
)

func init() { register(newAPIKeyCmd) }

func newAPIKeyCmd(opts *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "apikey",
		Short: "Create, list and revoke API keys (local admin operation)",
		Long: `API keys authenticate the CloudStack-compatible API and the REST API. A key
is an API key (public) and a secret key, with a role and an account:
  admin  everything, on every account's clusters, including Kubernetes version
         management, device approval, join tokens
  user   its account's clusters; reading versions, images, and the devices,
         leases and events of its account's clusters
The account owns the clusters a key creates; keys of one account share them.
By default an admin key is in the account "admin" and a user key in an account
of its own (named by its API key): give keys of one team the same --account.

These commands work on this host's data directory (through the running
server's admin socket, or the store directly when no server runs); the
socket's file mode is their access control. The secret is printed once, at
creation. The server keeps it sealed with AES-256-GCM under
<data-dir>/secret.key (HMAC verification needs the secret itself) plus a
SHA-256 hash; it never appears in lists, events or logs.`,
		Example: `  ztpd apikey create --role admin --name ops
  ztpd apikey create --role user --name alice --account team-a
  ztpd apikey create --role user -o json
  ztpd apikey list
  ztpd apikey revoke Xk2...`,
	}
	var role, name, account string
	create := &cobra.Command{
		Use:   "create",
		Short: "Create a key and print its secret (shown only this once)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var res rest.NewKeyResult
			if err := adminDo(opts, "POST", "/admin/apikeys?"+url.Values{"role": {role}, "name": {name}, "account": {account}}.Encode(), nil, &res); err != nil {
				return err
			}
			return printResult(opts, os.Stdout, res, func(tw *tabwriter.Writer) {
				row(tw, "api key", res.APIKey)
				row(tw, "secret key", res.SecretKey)
				row(tw, "role", res.Role)
				row(tw, "account", res.Account)
				if res.Name != "" {
					row(tw, "name", res.Name)
				}
				row(tw, "note", "the secret is not shown again; use: export ZTPD_API_KEY=<api key> ZTPD_SECRET_KEY=<secret key>")
			})
		},
	}
	create.Flags().StringVar(&role, "role", "", "admin or user (required)")
	create.Flags().StringVar(&name, "name", "", "who uses the key; also the user name of the kubeconfigs it fetches")
	create.Flags().StringVar(&account, "account", "", "the account owning what the key creates (default: admin for admin keys, the key's own for user keys)")
	_ = create.MarkFlagRequired("role")

	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List keys (never their secrets)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var keys []apikeys.Info
			if err := adminDo(opts, "GET", "/admin/apikeys", nil, &keys); err != nil {
				return err
			}
			return printResult(opts, os.Stdout, keys, func(tw *tabwriter.Writer) {
				row(tw, "API KEY", "ROLE", "ACCOUNT", "NAME", "CREATED")
				for _, k := range keys {
					row(tw, k.APIKey, k.Role, k.Account, dash(k.Name), k.Created.Format(time.RFC3339))
				}
			})
		},
	}
	var yes bool
	revoke := &cobra.Command{
		Use:     "revoke APIKEY",
		Aliases: []string{"delete"},
		Short:   "Revoke a key (the last admin key cannot be revoked)",
		Args:    oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := confirm(cmd, fmt.Sprintf("revoke API key %s: every client using it is refused from now on", args[0]), yes); err != nil {
				return err
			}
			var k apikeys.Info
			if err := adminDo(opts, "DELETE", "/admin/apikeys/"+url.PathEscape(args[0]), nil, &k); err != nil {
				return err
			}
			return printResult(opts, os.Stdout, k, func(tw *tabwriter.Writer) { row(tw, "revoked", k.APIKey, k.Role) })
		},
	}
	addYesFlag(revoke, &yes)
	cmd.AddCommand(create, list, revoke)
	return cmd
}
