package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/internal/store/boltstore"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func init() { register(newVersionCmd) }

type versionInfo struct {
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
	Go      string `json:"go"`
	Schema  int    `json:"store_schema"`
}

func newVersionCmd(opts *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the ztpd version; manage Kubernetes versions (add, list, enable, disable, delete)",
		Long: `Without a subcommand, print the ztpd version, build commit and store schema.
Its subcommands manage the Kubernetes versions clusters run; see "ztpd version add --help".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			vi := versionInfo{Version: version, Go: runtime.Version(), Schema: boltstore.SchemaVersion}
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, s := range bi.Settings {
					if s.Key == "vcs.revision" {
						vi.Commit = s.Value
					}
				}
			}
			return printResult(opts, os.Stdout, vi, func(tw *tabwriter.Writer) {
				row(tw, "version", vi.Version)
				if vi.Commit != "" {
					row(tw, "commit", vi.Commit)
				}
				row(tw, "go", vi.Go)
				row(tw, "store schema", vi.Schema)
			})
		},
	}
	cmd.AddCommand(newK8sVersionCmds(opts)...)
	return cmd
}
