// Command ztpd is the zero-touch provisioning appliance: DHCP, TFTP and HTTP ZTP
// serving, binaries ISO builds, join tokens and a CloudStack-compatible API.
package main

import (
	"fmt"
	"os"
	"strings"

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
  curl 127.0.0.1:8080/healthz

On an appliance installed from the package (config /etc/ztpd/ztpd.yaml, read by
default; commands run as root reach the service through its admin socket, no key):
  sudo ztpd device list --state unmatched   # devices refused, with the reason
  sudo ztpd events --follow                 # what every device is doing
  sudo ztpd profile check --device MAC      # what a device gets, and why not
  man ztpd                                  # every command`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&opts.configPath, "config", "", "YAML configuration file (default: $ZTPD_CONFIG, else /etc/ztpd/ztpd.yaml when it exists, else built-in defaults; every setting: docs/configuration.md)")
	pf.StringVar(&opts.dataDir, "data-dir", "", "state directory holding the bbolt store and image files (default ./ztpd-data)")
	pf.StringVarP(&opts.output, "output", "o", "table", "output format: table or json")
	pf.StringVar(&opts.logLevel, "log-level", "", "log level: debug, info, warn or error")
	pf.StringVar(&opts.logFormat, "log-format", "", "log format: text or json")
	for _, f := range subcommands {
		root.AddCommand(f(opts))
	}
	// cobra adds these during Execute; adding them now lets failLoudly cover them.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	failLoudly(root)
	completeNames(root, opts)
	return root
}

// failLoudly makes a mistyped command an error (exit 1) everywhere in the
// tree. cobra by itself rejects an unknown word only right after "ztpd": a
// command group such as "ztpd cluster" is not runnable, so "ztpd cluster craete"
// printed the group's help and exited 0, and a command without an Args rule
// ignored extra words. Groups get a RunE that prints their help when called
// bare and refuses anything else with "did you mean"; commands without an Args
// rule take no arguments.
func failLoudly(c *cobra.Command) {
	for _, sub := range c.Commands() {
		failLoudly(sub)
	}
	switch {
	case c.Name() == "help" && c.HasParent():
		c.Run = nil
		c.RunE = helpTopic
	case c.HasSubCommands() && !c.Runnable():
		c.Args = unknownSubcommand
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	case c.Args == nil:
		c.Args = unknownSubcommand
	}
}

// unknownSubcommand refuses any positional argument, naming the closest
// subcommands (or all of them when none is close).
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if !cmd.HasSubCommands() {
		return fmt.Errorf("unknown argument %q for %q: it takes no arguments (see: %s --help)",
			args[0], cmd.CommandPath(), cmd.CommandPath())
	}
	var b strings.Builder
	fmt.Fprintf(&b, "unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		b.WriteString("\n\nDid you mean this?\n")
		for _, name := range s {
			fmt.Fprintf(&b, "\t%s\n", name)
		}
	} else {
		b.WriteString("\n\nDid you mean one of these?\n")
		for _, sub := range cmd.Commands() {
			if sub.IsAvailableCommand() {
				fmt.Fprintf(&b, "\t%-14s %s\n", sub.Name(), sub.Short)
			}
		}
	}
	fmt.Fprintf(&b, "\nRun '%s --help' for usage.", cmd.CommandPath())
	return fmt.Errorf("%s", b.String())
}

// helpTopic is "ztpd help [command...]": cobra's own prints "Unknown help
// topic" and exits 0.
func helpTopic(cmd *cobra.Command, args []string) error {
	target := cmd.Root()
	for i, word := range args {
		next := findSub(target, word)
		if next == nil {
			return unknownSubcommand(target, args[i:])
		}
		target = next
	}
	return target.Help()
}

func findSub(c *cobra.Command, name string) *cobra.Command {
	for _, sub := range c.Commands() {
		if sub.Name() == name || sub.HasAlias(name) {
			return sub
		}
	}
	return nil
}

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "ztpd:", err)
		os.Exit(1)
	}
}
