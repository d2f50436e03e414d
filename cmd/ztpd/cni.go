package main

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/api/client"
)

func init() { register(newCNICmd) }

const cniPath = "/api/v1/cni-configurations"

func newCNICmd(opts *rootOptions) *cobra.Command {
	f := &apiFlags{}
	cmd := &cobra.Command{
		Use:   "cni",
		Short: "Register, list, show and delete CNI configurations (CloudStack 4.21's registerCniConfiguration)",
		Long: `A CNI configuration is a Kubernetes manifest (a CNI plugin's, or anything a
new cluster needs first) that ztpd applies to a cluster created with it
(ztpd cluster create --cni NAME), once the cluster's first control plane's
API server answers. Its parameters appear in the manifest as
{{ ds.meta_data.NAME }} and take the values the cluster's creator gives
(--cni-detail NAME=VALUE), each a plain value: letters, digits and . _ : / @ , = + -.

Registering and deleting are for admin keys (a configuration is applied with
cluster-admin rights); every key may list them and create clusters with one.
A configuration a cluster was created with cannot be deleted until that
cluster is.`,
		Example: `  ztpd cni register calico --file calico.yaml --param PodCIDR --param MTU
  ztpd cni list
  ztpd cni show calico --manifest > calico-as-registered.yaml
  ztpd cluster create net --version 1.31.4 --cni calico --cni-detail PodCIDR=10.1.0.0/16 --cni-detail MTU=1450
  ztpd cni delete calico --yes`,
	}
	addAPIFlags(cmd, f)
	cmd.AddCommand(newCNIRegisterCmd(opts, f), newCNIListCmd(opts, f), newCNIShowCmd(opts, f), newCNIDeleteCmd(opts, f))
	return cmd
}

func newCNIRegisterCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var file string
	var params []string
	cmd := &cobra.Command{
		Use:   "register NAME --file MANIFEST",
		Short: "Register a CNI configuration from a manifest file (admin key)",
		Long: `Register the manifest in --file (YAML, up to 1 MiB; - reads standard input)
under NAME. --param declares each parameter the manifest uses as
{{ ds.meta_data.NAME }} (repeatable, or comma-separated); a placeholder whose
name is not declared is refused, and a cluster created with the
configuration must give every declared parameter a value.`,
		Example: `  ztpd cni register calico --file calico.yaml --param PodCIDR,MTU
  ztpd cni register flannel --file kube-flannel.yml
  curl -sL https://example.org/cni.yaml | ztpd cni register vendor-cni --file - -o json`,
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutputFormat(opts); err != nil {
				return err
			}
			manifest, err := readManifest(cmd, file)
			if err != nil {
				return err
			}
			var names []string
			for _, p := range params {
				for _, n := range strings.Split(p, ",") {
					if n = strings.TrimSpace(n); n != "" {
						names = append(names, n)
					}
				}
			}
			if names == nil {
				names = []string{}
			}
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			var cfg client.CNIConfiguration
			body := client.CNIConfigurationCreate{Name: args[0], Manifest: manifest, Params: names}
			if err := c.REST("POST", cniPath, nil, body, &cfg); err != nil {
				return err
			}
			return printCNI(opts, cfg)
		},
	}
	cmd.Flags().StringVarP(&file, "file", "f", "", "the manifest file (- for standard input) (required)")
	cmd.Flags().StringSliceVar(&params, "param", nil, "NAME of a parameter the manifest uses as {{ ds.meta_data.NAME }} (repeatable)")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// maxManifestFile is read of a manifest file: one byte over what the
// server takes, so an oversized file is refused here with its size.
const maxManifestFile = 1<<20 + 1

func readManifest(cmd *cobra.Command, file string) (string, error) {
	var r io.Reader
	if file == "-" {
		r = cmd.InOrStdin()
	} else {
		fh, err := os.Open(file)
		if err != nil {
			return "", err
		}
		defer fh.Close()
		r = fh
	}
	raw, err := io.ReadAll(io.LimitReader(r, maxManifestFile))
	switch {
	case err != nil:
		return "", fmt.Errorf("%s: %w", file, err)
	case len(raw) >= maxManifestFile:
		return "", fmt.Errorf("%s: a CNI manifest is at most 1 MiB", file)
	case len(strings.TrimSpace(string(raw))) == 0:
		return "", fmt.Errorf("%s: the manifest is empty", file)
	}
	return string(raw), nil
}

func newCNIListCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var keyword string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the registered CNI configurations",
		Example: `  ztpd cni list
  ztpd cni list --keyword cal -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			list, err := client.All[client.CNIConfiguration](c.Client, cniPath, url.Values{"keyword": {keyword}}, 0)
			if err != nil {
				return err
			}
			return printResult(opts, os.Stdout, list, func(tw *tabwriter.Writer) {
				row(tw, "NAME", "ID", "PARAMS", "SIZE", "ACCOUNT", "CREATED")
				for _, cfg := range list {
					row(tw, cfg.Name, cfg.ID, dash(strings.Join(cfg.Params, ",")), humanBytes(int64(len(cfg.Manifest))),
						dash(cfg.Account), cfg.Created.UTC().Format(time.RFC3339))
				}
			})
		},
	}
	cmd.Flags().StringVar(&keyword, "keyword", "", "only configurations whose name contains this")
	return cmd
}

func newCNIShowCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var manifest bool
	cmd := &cobra.Command{
		Use:   "show NAME|ID",
		Short: "Show one CNI configuration; --manifest prints its manifest as registered",
		Example: `  ztpd cni show calico
  ztpd cni show calico --manifest > calico.yaml
  ztpd cni show 6f1c0a4e-2b0d-4c59-9a57-3c1f0e2d7b11 -o json`,
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if manifest && opts.output == "json" {
				return errors.New("--manifest prints the manifest as it is: give it without -o json (-o json shows it in the \"manifest\" field)")
			}
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			var cfg client.CNIConfiguration
			if err := c.REST("GET", cniPath+"/"+url.PathEscape(args[0]), nil, nil, &cfg); err != nil {
				return err
			}
			if manifest {
				_, err := io.WriteString(os.Stdout, cfg.Manifest)
				return err
			}
			return printCNI(opts, cfg)
		},
	}
	cmd.Flags().BoolVar(&manifest, "manifest", false, "print only the manifest, as registered")
	return cmd
}

func printCNI(opts *rootOptions, cfg client.CNIConfiguration) error {
	return printResult(opts, os.Stdout, cfg, func(tw *tabwriter.Writer) {
		row(tw, "name", cfg.Name)
		row(tw, "id", cfg.ID)
		row(tw, "params", dash(strings.Join(cfg.Params, ",")))
		row(tw, "manifest", fmt.Sprintf("%s, %d lines (--manifest prints it)", humanBytes(int64(len(cfg.Manifest))),
			strings.Count(strings.TrimSuffix(cfg.Manifest, "\n"), "\n")+1))
		row(tw, "account", dash(cfg.Account))
		row(tw, "created", cfg.Created.UTC().Format(time.RFC3339))
	})
}

func newCNIDeleteCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:     "delete NAME|ID",
		Aliases: []string{"rm"},
		Short:   "Delete a CNI configuration no cluster was created with (admin key)",
		Long: `Delete a CNI configuration. One a cluster was created with is refused,
naming the clusters, until they are deleted; clusters it was applied to keep
what it made.`,
		Example: `  ztpd cni delete calico --yes`,
		Args:    oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutputFormat(opts); err != nil {
				return err
			}
			if err := confirm(cmd, "delete CNI configuration "+args[0], yes); err != nil {
				return err
			}
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			if err := c.REST("DELETE", cniPath+"/"+url.PathEscape(args[0]), nil, nil, nil); err != nil {
				return err
			}
			return printResult(opts, os.Stdout, map[string]string{"deleted": args[0]}, func(tw *tabwriter.Writer) {
				row(tw, "deleted", args[0])
			})
		},
	}
	addYesFlag(cmd, &yes)
	return cmd
}
