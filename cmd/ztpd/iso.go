package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/ztpd/ztpd/images/bom"
	"github.com/ztpd/ztpd/isobuild"
)

func init() { register(newISOCmd) }

func newISOCmd(opts *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "iso",
		Short: "Build and inspect CloudStack Kubernetes binaries ISOs",
		Long: `Build and inspect the per-version Kubernetes binaries ISOs that CloudStack's
Kubernetes Service (CKS) attaches to cluster nodes.

An ISO carries everything a node needs to install Kubernetes offline: kubeadm,
kubelet, kubectl, CNI plugins, crictl, the kubelet systemd units, the network and
dashboard manifests and one container image archive per image. What goes on it
is fixed by a bill of materials (BOM) per Kubernetes version; built-in BOMs: ` + strings.Join(bom.BuiltinVersions(), ", ") + `.`,
	}
	cmd.AddCommand(newISOBuildCmd(opts), newISOInspectCmd(opts), newISOBOMCmd(opts))
	return cmd
}

type isoBuildFlags struct {
	version, arch, bomFile, fromDir, cache, out, label, tempDir string
	allowUnpinned, noFsync                                      bool
	parallel                                                    int
}

type isoBuildOutput struct {
	*isobuild.Result
	KubernetesVersion string             `json:"kubernetes_version"`
	Arch              string             `json:"arch"`
	Skipped           []isobuild.Skipped `json:"skipped,omitempty"`
}

func newISOBuildCmd(opts *rootOptions) *cobra.Command {
	var fl isoBuildFlags
	cmd := &cobra.Command{
		Use:   "build",
		Short: "Build a Kubernetes binaries ISO (ISO 9660 + Rock Ridge, label CDROM), then verify it",
		Long: `Build one Kubernetes binaries ISO for CloudStack CKS from a bill of materials.

Sources, in order:
  --from-dir DIR  a tree laid out like the ISO (k8s/kubeadm, cni/..., docker/<image>:<tag>.tar).
                  The normal, air-gapped case. Files are used as they are.
  --cache DIR     artifacts with a URL that are not in --from-dir are downloaded into DIR
                  (in parallel, resumed with HTTP Range after an interruption) and verified
                  before use: against the BOM's pinned sha256, else against the checksum
                  file the upstream project publishes (sha256URL). Artifacts with neither
                  are only downloaded with --allow-unpinned. Image archives are never
                  downloaded; export them with ctr (the error says how).

Checksums: a sha256 pinned in the BOM is checked for every source, from-dir included.
Without a pin, a --from-dir file is trusted as it is and its sha256 is reported;
a file that is modified or truncated while it is being copied fails the build.
A mismatch stops the build naming the artifact and both hashes; no ISO is written.

The image: ISO 9660 with Rock Ridge (POSIX names, so docker/<image>:<tag>.tar keeps
its colon; binaries mode 0755), volume label CDROM, CloudStack layout, padded to
2048-byte sectors. Reproducible: files are sorted and every date is
SOURCE_DATE_EPOCH (default 1970-01-01), so the same inputs give the same bytes.
Files of 4 GiB or more are refused (ISO 9660 sizes are 32-bit).
It is written to a hidden temp file next to the output. Every chunk is read back
from the image and compared with its source; every file's sha256 and the image's
are computed from what was read back, and the directory records are re-read to
check names, sizes and modes. Then it is fsynced and only then renamed:
an interrupted build (even kill -9) never leaves a partial ISO under that name.

Output path: --out/-O. (-o/--output is ztpd's global output format, table or json,
as for every command; -o json prints the result, sha256 and size included, as JSON.)`,
		Example: `  # air-gapped: everything in a prepared tree
  ztpd iso build --kubernetes-version 1.31.4 --arch amd64 --from-dir ./k8s-1.31.4 -O k8s-1.31.4-x86_64.iso

  # download what is missing into a cache (image archives must be in --from-dir)
  ztpd iso build --kubernetes-version 1.31.4 --from-dir ./images-only --cache ~/.cache/ztpd -O k8s.iso

  # your own bill of materials, JSON result for scripts
  ztpd iso build --bom ./my-bom.yaml --from-dir ./tree -O my.iso -o json

  # what a BOM expects in --from-dir
  ztpd iso bom --kubernetes-version 1.31.4 --arch arm64`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runISOBuild(cmd, opts, fl)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.version, "kubernetes-version", "", "Kubernetes version, e.g. 1.31.4 (selects the built-in BOM; checked against --bom)")
	f.StringVar(&fl.arch, "arch", "amd64", "node architecture: amd64 or arm64")
	f.StringVar(&fl.bomFile, "bom", "", "bill of materials YAML file (default: the built-in one for --kubernetes-version)")
	f.StringVar(&fl.fromDir, "from-dir", "", "directory laid out like the ISO (air-gapped source)")
	f.StringVar(&fl.cache, "cache", "", "download cache directory; enables downloads of missing artifacts")
	f.StringVarP(&fl.out, "out", "O", "", "ISO file to write (default kubernetes-<version>-<arch>.iso)")
	f.StringVar(&fl.label, "label", isobuild.DefaultLabel, "volume label; CloudStack nodes look for CDROM")
	f.BoolVar(&fl.allowUnpinned, "allow-unpinned", false, "download artifacts that have no pinned or published sha256 (their hash is reported)")
	f.BoolVar(&fl.noFsync, "no-fsync", false, "skip the final fsync (faster; a power loss right after the build may lose the ISO, a crash of ztpd never leaves a partial one)")
	f.IntVar(&fl.parallel, "parallel", 4, "concurrent downloads")
	f.StringVar(&fl.tempDir, "temp-dir", "", "where to stage the (empty) placeholder tree (default $TMPDIR)")
	return cmd
}

func loadBOM(version, file string) (*bom.BOM, error) {
	if file == "" {
		if version == "" {
			return nil, fmt.Errorf("give --kubernetes-version (built-in: %s) or --bom FILE", strings.Join(bom.BuiltinVersions(), ", "))
		}
		return bom.Builtin(strings.TrimPrefix(version, "v"))
	}
	b, err := bom.Load(file)
	if err != nil {
		return nil, err
	}
	if version != "" && strings.TrimPrefix(version, "v") != b.KubernetesVersion {
		return nil, fmt.Errorf("--kubernetes-version %s but %s is for Kubernetes %s", version, file, b.KubernetesVersion)
	}
	return b, nil
}

func runISOBuild(cmd *cobra.Command, opts *rootOptions, fl isoBuildFlags) error {
	if err := checkOutputFormat(opts); err != nil {
		return err
	}
	cfg, err := loadConfig(opts)
	if err != nil {
		return err
	}
	log := newLogger(cfg)
	b, err := loadBOM(fl.version, fl.bomFile)
	if err != nil {
		return err
	}
	items, err := b.Resolve(fl.arch)
	if err != nil {
		return err
	}
	if fl.out == "" {
		fl.out = fmt.Sprintf("kubernetes-%s-%s.iso", b.KubernetesVersion, fl.arch)
	}
	epoch, err := isobuild.EpochFromEnv()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	tty := term.IsTerminal(int(os.Stderr.Fd())) && opts.output != "json"
	so := isobuild.SourceOptions{FromDir: fl.fromDir, CacheDir: fl.cache, AllowUnpinned: fl.allowUnpinned, Parallel: fl.parallel, Logger: log}
	var dlBar *progressbar.ProgressBar
	if tty && fl.cache != "" {
		var started atomic.Bool
		so.Progress = func(n int64) {
			if started.CompareAndSwap(false, true) {
				dlBar = progressbar.DefaultBytes(-1, "downloading")
			}
			if dlBar != nil {
				_ = dlBar.Add64(n)
			}
		}
	}
	files, skipped, err := isobuild.ResolveSources(ctx, items, so)
	if dlBar != nil {
		_ = dlBar.Finish()
	}
	if err != nil {
		return err
	}
	for _, s := range skipped {
		log.Info("optional artifact left out", "artifact", s.Name, "path", s.Path, "reason", s.Reason)
	}

	bo := isobuild.Options{Files: files, Output: fl.out, Label: fl.label, Epoch: epoch, TempDir: fl.tempDir, NoFsync: fl.noFsync}
	var bar *progressbar.ProgressBar
	if tty {
		bo.Progress = func(p isobuild.Progress) {
			if bar == nil {
				bar = progressbar.NewOptions64(2*p.Total,
					progressbar.OptionSetDescription("writing + verifying "+fl.out),
					progressbar.OptionSetWriter(os.Stderr), progressbar.OptionShowBytes(true),
					progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100*time.Millisecond),
					progressbar.OptionClearOnFinish())
			}
			_ = bar.Set64(p.Written + p.Verified)
		}
	}
	res, err := isobuild.Build(ctx, bo)
	if bar != nil {
		_ = bar.Finish()
	}
	if err != nil {
		var ce *isobuild.ChecksumError
		if errors.As(err, &ce) {
			return fmt.Errorf("%w\nno ISO was written; fix or re-fetch the artifact (or correct the pin in the BOM)", err)
		}
		return err
	}
	log.Debug("iso built", "path", res.Path, "sha256", res.SHA256, "size", res.Size, "total_s", res.Timings.Total)
	out := isoBuildOutput{Result: res, KubernetesVersion: b.KubernetesVersion, Arch: fl.arch, Skipped: skipped}
	return printResult(opts, os.Stdout, out, func(tw *tabwriter.Writer) {
		row(tw, "iso", res.Path)
		row(tw, "size", fmt.Sprintf("%s (%d bytes)", humanBytes(res.Size), res.Size))
		row(tw, "sha256", res.SHA256)
		row(tw, "label", res.Label)
		row(tw, "kubernetes", b.KubernetesVersion+" "+fl.arch)
		row(tw, "files", fmt.Sprintf("%d, each re-read from the image: size, mode and sha256 verified", len(res.Files)))
		t := res.Timings
		row(tw, "took", fmt.Sprintf("%.2fs (structure %.2fs, data %.2fs, verified at %.2fs, sync %.2fs)", t.Total, t.Structure, t.Data, t.Verify, t.Sync))
		fmt.Fprintln(tw)
		row(tw, "PATH", "SIZE", "MODE", "SHA256", "CHECKED AGAINST")
		for _, f := range res.Files {
			against := "source file"
			if f.Pinned {
				against = "pinned/published sha256"
			}
			row(tw, f.Path, humanBytes(f.Size), f.Mode, f.SHA256, against)
		}
	})
}

func newISOInspectCmd(opts *rootOptions) *cobra.Command {
	var hash bool
	cmd := &cobra.Command{
		Use:   "inspect FILE.iso",
		Short: "List an ISO's files (Rock Ridge names, sizes, modes, sha256) and the image's sha256",
		Long: `List the regular files of any ISO 9660 image, read with ztpd's own reader
(no mount needed), with every file's sha256 and the image's. --hash=false
skips the hashing (faster on a large image) and leaves the sha256 out.`,
		Example: `  ztpd iso inspect kubernetes-1.31.4-amd64.iso
  ztpd iso inspect --hash=false setup-v1.31.4-x86_64.iso -o json`,
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutputFormat(opts); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			m, err := isobuild.ReadManifest(ctx, args[0], hash)
			if err != nil {
				return err
			}
			return printResult(opts, os.Stdout, m, func(tw *tabwriter.Writer) {
				row(tw, "label", m.Label)
				row(tw, "size", fmt.Sprintf("%s (%d bytes)", humanBytes(m.Size), m.Size))
				if m.SHA256 != "" {
					row(tw, "sha256", m.SHA256)
				}
				row(tw, "rock ridge", m.RockRidge)
				fmt.Fprintln(tw)
				// Without hashing there is no sha256 to show: no empty column.
				if hash {
					row(tw, "PATH", "SIZE", "MODE", "SHA256")
				} else {
					row(tw, "PATH", "SIZE", "MODE")
				}
				for _, f := range m.Files {
					if hash {
						row(tw, f.Path, humanBytes(f.Size), f.Mode, f.SHA256)
					} else {
						row(tw, f.Path, humanBytes(f.Size), f.Mode)
					}
				}
			})
		},
	}
	cmd.Flags().BoolVar(&hash, "hash", true, "compute every file's sha256 and the image's (--hash=false skips it)")
	return cmd
}

func newISOBOMCmd(opts *rootOptions) *cobra.Command {
	var version, arch, file string
	cmd := &cobra.Command{
		Use:   "bom",
		Short: "Show what a bill of materials puts on the ISO for one arch",
		Long: `Expand a bill of materials for one arch: each artifact's path on the ISO (which
is also its path under --from-dir), mode, source and pinned sha256.`,
		Example: `  ztpd iso bom --kubernetes-version 1.31.4
  ztpd iso bom --bom ./my-bom.yaml --arch arm64 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputFormat(opts); err != nil {
				return err
			}
			b, err := loadBOM(version, file)
			if err != nil {
				return err
			}
			items, err := b.Resolve(arch)
			if err != nil {
				return err
			}
			type row_ struct {
				Name   string `json:"name"`
				Path   string `json:"path"`
				Mode   string `json:"mode"`
				Kind   string `json:"kind"`
				Source string `json:"source,omitempty"`
				SHA256 string `json:"sha256,omitempty"`
			}
			rows := make([]row_, 0, len(items))
			for _, it := range items {
				src := it.URL
				if it.Kind == bom.KindImage {
					src = it.Image
				}
				sha := it.SHA256
				if it.Kind == bom.KindContent {
					src = "inline"
				}
				rows = append(rows, row_{it.Name, it.Path, fmt.Sprintf("%04o", uint32(it.Mode)), string(it.Kind), src, sha})
			}
			return printResult(opts, os.Stdout, rows, func(tw *tabwriter.Writer) {
				row(tw, "PATH", "MODE", "KIND", "SOURCE", "SHA256")
				for _, r := range rows {
					sha := r.SHA256
					if sha == "" {
						sha = "(not pinned)"
					}
					row(tw, r.Path, r.Mode, r.Kind, r.Source, sha)
				}
			})
		},
	}
	cmd.Flags().StringVar(&version, "kubernetes-version", "", "Kubernetes version of a built-in BOM")
	cmd.Flags().StringVar(&arch, "arch", "amd64", "amd64 or arm64")
	cmd.Flags().StringVar(&file, "bom", "", "bill of materials YAML file")
	return cmd
}
