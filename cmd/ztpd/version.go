package main

import (
	"fmt"
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
	return &cobra.Command{
		Use:   "version",
		Short: "Print the ztpd build version, commit, Go version and store schema",
		Long: `Print the version of this ztpd binary: its release version, build commit, the Go
version it was built with, and the newest store schema it understands. The
Kubernetes versions clusters run are managed with "ztpd kube-version".`,
		Example: `  ztpd version
  ztpd version -o json`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				// The Kubernetes version subcommands lived here once.
				return fmt.Errorf("version takes no arguments (Kubernetes versions: ztpd kube-version %s)", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			vi := buildVersion()
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
}

func buildVersion() versionInfo {
	vi := versionInfo{Version: version, Go: runtime.Version(), Schema: boltstore.SchemaVersion}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				vi.Commit = s.Value
			}
		}
	}
	return vi
}
