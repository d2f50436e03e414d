package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/internal/app"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/internal/store/kv"
)

func init() { register(newStoreCmd) }

func newStoreCmd(opts *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Move the store between bbolt (one box) and etcd (several appliances); the appliances' etcd members",
	}
	cmd.AddCommand(newStoreMigrateCmd(opts), newStoreMemberCmd(opts))
	return cmd
}

// migrateResult is what `store migrate` did.
type migrateResult struct {
	From     string         `json:"from"`
	To       string         `json:"to"`
	Records  int            `json:"records"`
	Buckets  map[string]int `json:"buckets"`
	Replaced int64          `json:"replaced_keys,omitempty"`
	Seconds  float64        `json:"seconds"`
}

func newStoreMigrateCmd(opts *rootOptions) *cobra.Command {
	var to, from, into string
	var replace, yes bool
	cmd := &cobra.Command{
		Use:   "migrate --to etcd|bolt",
		Short: "Copy a bbolt store into the configured etcd store, or the etcd store into a bbolt file",
		Long: `Copy every record (devices, leases, clusters, versions, tokens, memberships,
secrets, events, images' records, API keys, jobs, desired states, rollouts) and
every sequence from one store engine to the other, as of one consistent state.

--to etcd reads the bbolt store of --from (default: the data directory) and
writes it into the etcd store the configuration names (store.backend etcd or
etcd-embedded, store.prefix). The destination must be empty (--replace deletes
what is under the prefix first). The schema version is written last, so
appliances waiting for the store start only on a whole copy. For three
embedded appliances: configure all three, start "ztpd serve" on the second and
third (they wait for the first), and run this on the first instead of its
first "ztpd serve".

--to bolt reads the configured etcd store and writes a new bbolt store into
--into (default: the data directory), which must not hold one.

Sealed secrets travel as they are: every appliance needs the same at-rest key
(secret.key) as the store it serves. Image blobs stay on disk: copy the data
directory's images/ too. No ztpd may serve this data directory meanwhile.`,
		Example: `  # one box -> three appliances (on the first appliance, ztpd stopped)
  ztpd store migrate --to etcd --from /var/lib/ztpd-old --config /etc/ztpd/ztpd.yaml

  # etcd -> a bbolt file (an offline copy, or back to one box)
  ztpd store migrate --to bolt --into /var/lib/ztpd-copy --config /etc/ztpd/ztpd.yaml -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutputFormat(opts); err != nil {
				return err
			}
			cfg, err := loadConfig(opts)
			if err != nil {
				return err
			}
			if serverRunning(cfg.DataDir) {
				return fmt.Errorf("a ztpd server runs on %s: stop it first (systemctl stop ztpd)", cfg.DataDir)
			}
			log := newLogger(cfg)
			start := time.Now()
			res := migrateResult{Buckets: map[string]int{}}
			progress := func(b kv.Bucket, n int) {
				res.Buckets[string(b)] = n
				if opts.output != "json" {
					fmt.Fprintf(os.Stderr, "  %-12s %d\n", b, n)
				}
			}
			switch to {
			case "etcd":
				if from == "" {
					from = cfg.DataDir
				}
				if _, err := os.Stat(filepath.Join(from, boltstore.FileName)); err != nil {
					return fmt.Errorf("--from %s: no bbolt store there: %w", from, err)
				}
				src, err := boltstore.Open(from, boltstore.Options{})
				if err != nil {
					return err
				}
				defer src.Close()
				dst, err := app.OpenEtcdForCopy(cfg, log)
				if err != nil {
					return err
				}
				defer dst.Close()
				empty, err := dst.Empty()
				if err != nil {
					return err
				}
				if !empty {
					if !replace {
						return fmt.Errorf("the etcd store (prefix %s) is not empty: pass --replace to delete what it holds first", prefixOf(cfg.Store.Prefix))
					}
					if err := confirm(cmd, "delete everything under etcd prefix "+prefixOf(cfg.Store.Prefix)+" and replace it with "+from, yes); err != nil {
						return err
					}
					if res.Replaced, err = dst.Clear(); err != nil {
						return err
					}
				}
				l := dst.Loader()
				if res.Records, err = src.Copy(l, progress); err != nil {
					return fmt.Errorf("copy into etcd (the prefix holds a partial copy with no schema version: run again with --replace): %w", err)
				}
				if err := l.Finish(); err != nil {
					return err
				}
				res.From, res.To = "bolt:"+from, "etcd:"+prefixOf(cfg.Store.Prefix)
			case "bolt":
				if into == "" {
					into = cfg.DataDir
				}
				src, err := app.OpenEtcdForCopy(cfg, log)
				if err != nil {
					return err
				}
				defer src.Close()
				if _, err := src.Schema(); err != nil {
					return fmt.Errorf("the etcd store (prefix %s) holds no ztpd store: %w", prefixOf(cfg.Store.Prefix), err)
				}
				err = boltstore.Load(into, func(l kv.Loader) error {
					var err error
					res.Records, err = src.Copy(l, progress)
					return err
				})
				if errors.Is(err, boltstore.ErrNotEmpty) {
					return fmt.Errorf("%w: give another --into", err)
				}
				if err != nil {
					return err
				}
				res.From, res.To = "etcd:"+prefixOf(cfg.Store.Prefix), "bolt:"+into
			default:
				return fmt.Errorf("--to must be etcd or bolt (got %q)", to)
			}
			res.Seconds = time.Since(start).Seconds()
			return printResult(opts, os.Stdout, res, func(tw *tabwriter.Writer) {
				row(tw, "copied", fmt.Sprintf("%d records from %s to %s in %.1fs", res.Records, res.From, res.To, res.Seconds))
				if res.Replaced > 0 {
					row(tw, "replaced", fmt.Sprintf("%d keys deleted first", res.Replaced))
				}
				row(tw, "next", "give every appliance the same at-rest key (secret.key) and the images/ directory")
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&to, "to", "", "destination engine: etcd (the configured store) or bolt (a new bbolt file)")
	fl.StringVar(&from, "from", "", "with --to etcd: the data directory holding the bbolt store to copy (default: data_dir)")
	fl.StringVar(&into, "into", "", "with --to bolt: the directory to write the new bbolt store into (default: data_dir)")
	fl.BoolVar(&replace, "replace", false, "with --to etcd: delete what the etcd prefix holds first")
	addYesFlag(cmd, &yes)
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

func prefixOf(p string) string {
	if p == "" {
		return "/ztpd/"
	}
	return p
}
