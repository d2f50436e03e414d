package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/ztpd/ztpd/internal/app"
	"github.com/ztpd/ztpd/internal/backup"
)

func init() { register(newRestoreCmd) }

func newRestoreCmd(opts *rootOptions) *cobra.Command {
	var force, verifyOnly bool
	var passFile string
	cmd := &cobra.Command{
		Use:   "restore FILE",
		Short: "Restore a backup archive (ztpd backup) into the data directory",
		Long: `Restore a backup archive made by "ztpd backup" into the data directory
(--data-dir, or data_dir in --config).

The archive is decrypted with its passphrase (--passphrase-file, or
ZTPD_BACKUP_PASSPHRASE, or asked on the terminal) and read whole before
anything changes: every member is checked against the manifest's sizes and
sha256, and the archive's authentication must hold to its last byte. Then the
store, the image blobs it holds and the at-rest key (when it holds one) are
renamed into place. A restore that fails leaves the data directory as it was.

Refused while a ztpd server runs on the data directory, and over an existing
store unless --force is given; with --force the old store is kept as
ztpd.db.before-restore-<time> (and a different key as
secret.key.before-restore-<time>).

When the archive holds no key (made without --with-key), the key its store
needs must already be at <data-dir>/secret.key or key_file: restore checks
its fingerprint and names the one needed when it is missing or different.
Images whose blobs were not in the archive are listed; add them again with
"ztpd image add".`,
		Example: `  systemctl stop ztpd
  ztpd restore /var/backups/ztpd-2026-12-01.ztpdbak --passphrase-file /root/backup.pass
  ztpd restore --data-dir /var/lib/ztpd --force /mnt/usb/ztpd.ztpdbak
  ztpd restore --verify-only /var/backups/ztpd-2026-12-01.ztpdbak`,
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutputFormat(opts); err != nil {
				return err
			}
			cfg, err := loadConfig(opts)
			if err != nil {
				return err
			}
			dataDir, err := filepath.Abs(cfg.DataDir)
			if err != nil {
				return err
			}
			ro := backup.RestoreOptions{DataDir: dataDir, KeyFile: cfg.KeyFile, AdminSocket: filepath.Join(dataDir, app.AdminSocketName),
				Force: force, VerifyOnly: verifyOnly}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			// Refusals that need no passphrase come before it is asked.
			if err := backup.Preflight(ro); err != nil {
				return err
			}
			pass, err := backupPassphrase(passFile, false)
			if err != nil {
				return err
			}
			defer clear(pass)
			if term.IsTerminal(int(os.Stderr.Fd())) && opts.output != "json" {
				if st, err := f.Stat(); err == nil && st.Size() > 64<<20 {
					var bar *progressbar.ProgressBar
					ro.Progress = func(done, total int64) {
						if bar == nil {
							bar = progressbar.NewOptions64(total, progressbar.OptionSetDescription("restore"), progressbar.OptionSetWriter(os.Stderr),
								progressbar.OptionShowBytes(true), progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100*time.Millisecond),
								progressbar.OptionClearOnFinish())
						}
						bar.Set64(done)
					}
				}
			}
			res, err := backup.Restore(f, pass, ro)
			if err != nil {
				return fmt.Errorf("restore %s: %w", args[0], err)
			}
			return restorePrint(opts, res, verifyOnly)
		},
	}
	fl := cmd.Flags()
	fl.BoolVar(&force, "force", false, "replace an existing store (and a different at-rest key); the old ones are kept beside them")
	fl.BoolVar(&verifyOnly, "verify-only", false, "read and check the whole archive with its passphrase; write nothing")
	fl.StringVar(&passFile, "passphrase-file", "", "read the passphrase from this file (first line); default $"+backupPassphraseEnv+", else asked on the terminal")
	return cmd
}

func restorePrint(opts *rootOptions, res backup.RestoreResult, verifyOnly bool) error {
	m := res.Manifest
	for _, name := range res.MissingBlobs {
		if !verifyOnly {
			fmt.Fprintf(os.Stderr, "warning: image %s has no content here (the archive did not include it); devices get 503 for it until it is added again with ztpd image add\n", name)
		}
	}
	return printResult(opts, os.Stdout, res, func(tw *tabwriter.Writer) {
		if verifyOnly {
			row(tw, "archive", "complete and authentic; every member matches the manifest")
		} else {
			row(tw, "restored store", res.Store)
			if res.PreviousStore != "" {
				row(tw, "previous store kept as", res.PreviousStore)
			}
		}
		row(tw, "made", fmt.Sprintf("%s by ztpd %s on %s (%s)", m.Created.Local().Format(time.RFC3339), m.ZtpdVersion, m.Host, m.DataDir))
		row(tw, "sealed secrets", m.Store.Sealed)
		switch {
		case verifyOnly && m.Key.Included:
			row(tw, "at-rest key", "included, fingerprint "+m.Key.Fingerprint)
		case verifyOnly:
			row(tw, "at-rest key", "not included; a restore needs the key with fingerprint "+m.Key.Fingerprint)
		default:
			row(tw, "at-rest key", fmt.Sprintf("%s at %s (fingerprint %s)", res.Key, res.KeyFile, m.Key.Fingerprint))
			if res.PreviousKey != "" {
				row(tw, "previous key kept as", res.PreviousKey)
			}
		}
		var blobs int
		for _, im := range m.Images {
			if im.Blob {
				blobs++
			}
		}
		images := fmt.Sprintf("%d, %d with content in the archive", len(m.Images), blobs)
		if !verifyOnly {
			images += fmt.Sprintf(" (%d restored, %d already here)", res.BlobsRestored, res.BlobsPresent)
			if len(res.MissingBlobs) > 0 {
				images += fmt.Sprintf("; %d without content: %s", len(res.MissingBlobs), strings.Join(res.MissingBlobs, ", "))
			}
		}
		row(tw, "images", images)
		if !verifyOnly {
			row(tw, "next", "ztpd serve")
		}
	})
}
