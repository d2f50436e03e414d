package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/internal/app"
)

func init() { register(newBackupCmd) }

func newBackupCmd(opts *rootOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "backup FILE",
		Short: "Write a consistent hot copy of the store to FILE",
		Long: `Write a consistent copy of the bbolt store to FILE.

Works while "ztpd serve" is running (through the admin socket in the data
directory) and when it is not. The copy is taken in one read transaction, so it
is consistent even under load, and written atomically: FILE is either the
complete backup or untouched. Restore by stopping ztpd and copying FILE to
<data-dir>/ztpd.db.`,
		Example: `  ztpd backup /var/backups/ztpd-$(date +%F).db
  ztpd --data-dir /srv/ztpd backup -o json /tmp/ztpd.db`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutputFormat(opts); err != nil {
				return err
			}
			cfg, err := loadConfig(opts)
			if err != nil {
				return err
			}
			client, closeFn, err := app.AdminClient(cfg, newLogger(cfg))
			if err != nil {
				return err
			}
			defer closeFn()
			resp, err := client.Get("http://ztpd/admin/backup")
			if err != nil {
				return fmt.Errorf("backup: %w", err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				body, _ := io.ReadAll(resp.Body)
				return fmt.Errorf("backup: %w", app.AdminError(resp, body))
			}
			out, _ := filepath.Abs(args[0])
			n, err := app.CopyAtomic(out, resp.Body, 0o600)
			if err != nil {
				return fmt.Errorf("backup to %s: %w", out, err)
			}
			res := map[string]any{"file": out, "bytes": n}
			return printResult(opts, os.Stdout, res, func(tw *tabwriter.Writer) {
				row(tw, "backup written", out)
				row(tw, "bytes", n)
			})
		},
	}
}
