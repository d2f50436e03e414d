// Command ztpd is the zero-touch provisioning appliance: DHCP, TFTP and HTTP ZTP
// serving, binaries ISO builds, join tokens and a CloudStack-compatible API.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// rootOptions are the flags every subcommand shares.
type rootOptions struct {
	configPath string
	dataDir    string
	output     string // "table" or "json"
	logLevel   string
	logFormat  string
}

// subcommands is filled by init functions in this package, one file per command
// group, so command groups stay independent of each other.
var subcommands []func(*rootOptions) *cobra.Command

func register(f func(*rootOptions) *cobra.Command) { subcommands = append(subcommands, f) }

func newRootCmd() *cobra.Command {
	opts := &rootOptions{}
	root := &cobra.Command{
		Use:   "ztpd",
		Short: "Zero-touch provisioning appliance for SONiC switches and CloudStack VMs",
		Long: `ztpd turns brand-new switches and VMs into Kubernetes cluster members.

It answers DHCP for SONiC, ONIE and CloudStack VMs, serves per-device ZTP content
over HTTP and TFTP, builds CloudStack-compatible Kubernetes binaries ISOs, issues
join credentials, and exposes a CloudStack-compatible API for cluster operations.

Quick start (no root, no external services):
  ztpd serve                      # state in ./ztpd-data, HTTP on 127.0.0.1:8080
  curl 127.0.0.1:8080/healthz`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&opts.configPath, "config", "", "YAML configuration file (see README, \"Configuration\")")
	pf.StringVar(&opts.dataDir, "data-dir", "", "state directory holding the bbolt store and image files (default ./ztpd-data)")
	pf.StringVarP(&opts.output, "output", "o", "table", "output format: table or json")
	pf.StringVar(&opts.logLevel, "log-level", "", "log level: debug, info, warn or error")
	pf.StringVar(&opts.logFormat, "log-format", "", "log format: text or json")
	for _, f := range subcommands {
		root.AddCommand(f(opts))
	}
	return root
}

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "ztpd:", err)
		os.Exit(1)
	}
}
