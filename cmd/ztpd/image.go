package main

import (
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/ztpd/ztpd/api/client"
)

func init() { register(newImageCmd) }

func newImageCmd(opts *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Manage the artifact store: installers, binaries ISOs and files",
		Long: `Manage the content-addressed artifact store in the data directory.

Artifacts are kept once per sha256 under <data-dir>/images and served at
/images/<sha256|name>. ONIE installers with --platform are what ONIE switches of
that platform get from option 114.`,
	}
	cmd.AddCommand(newImageAddCmd(opts), newImageListCmd(opts), newImageRmCmd(opts))
	return cmd
}

func newImageAddCmd(opts *rootOptions) *cobra.Command {
	var kind, platform, ver, name, sha string
	cmd := &cobra.Command{
		Use:   "add FILE",
		Short: "Store a file (stored once per content, verified, atomic)",
		Example: `  ztpd image add sonic-broadcom.bin --kind onie-installer --platform x86_64-accton_as7712_32x-r0 --version 202405
  ztpd image add kubernetes-1.31.4.iso --kind binaries-iso --name k8s-1.31.4
  ztpd image add motd.txt --kind file --sha256 9f86d08...`,
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutputFormat(opts); err != nil {
				return err
			}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			st, err := f.Stat()
			if err != nil || !st.Mode().IsRegular() {
				return fmt.Errorf("%s is not a regular file", args[0])
			}
			if name == "" {
				name = filepath.Base(args[0])
			}
			s, err := openAdmin(opts)
			if err != nil {
				return err
			}
			defer s.close()
			var body io.Reader = f
			if term.IsTerminal(int(os.Stderr.Fd())) && opts.output != "json" {
				bar := progressbar.DefaultBytes(st.Size(), "adding "+name)
				body = io.TeeReader(f, bar)
				defer bar.Finish()
			}
			q := url.Values{"name": {name}, "kind": {kind}, "platform": {platform}, "version": {ver}, "sha256": {sha}}
			var res client.ImageAdded
			if err := s.do("POST", "/admin/images?"+q.Encode(), body, &res); err != nil {
				return fmt.Errorf("image add: %w", err)
			}
			return printResult(opts, os.Stdout, res, func(tw *tabwriter.Writer) {
				row(tw, "name", res.Image.Name)
				row(tw, "sha256", res.Image.SHA256)
				row(tw, "size", fmt.Sprintf("%s (%d bytes)", humanBytes(res.Image.Size), res.Image.Size))
				row(tw, "kind", res.Image.Kind)
				if res.Existed {
					row(tw, "note", "content was already stored; not stored again")
				}
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&kind, "kind", "", "sonic-installer, onie-installer, binaries-iso or file (required)")
	fl.StringVar(&platform, "platform", "", "ONIE platform, e.g. x86_64-accton_as7712_32x-r0")
	fl.StringVar(&ver, "version", "", "version label, e.g. SONiC 202405 or Kubernetes 1.31.4")
	fl.StringVar(&name, "name", "", "name to serve it under (default: the file name)")
	fl.StringVar(&sha, "sha256", "", "expected sha256; the add fails on a mismatch")
	_ = cmd.MarkFlagRequired("kind")
	return cmd
}

func newImageListCmd(opts *rootOptions) *cobra.Command {
	var kind string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List stored artifacts",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var list []client.Image
			if err := adminDo(opts, "GET", "/admin/images?"+url.Values{"kind": {kind}}.Encode(), nil, &list); err != nil {
				return err
			}
			if list == nil {
				list = []client.Image{}
			}
			return printResult(opts, os.Stdout, list, func(tw *tabwriter.Writer) {
				row(tw, "NAME", "KIND", "PLATFORM", "VERSION", "SIZE", "SHA256")
				for _, im := range list {
					row(tw, im.Name, im.Kind, dash(im.Platform), dash(im.Version), humanBytes(im.Size), im.SHA256[:16])
				}
			})
		},
	}
	cmd.Flags().StringVar(&kind, "kind", "", "only this kind")
	return cmd
}

func newImageRmCmd(opts *rootOptions) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:     "rm NAME|SHA256",
		Aliases: []string{"remove", "delete"},
		Short:   "Remove an artifact (refused while a Kubernetes version uses it)",
		Args:    oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := confirm(cmd, fmt.Sprintf("remove image %q from the image store", args[0]), yes); err != nil {
				return err
			}
			var im client.Image
			if err := adminDo(opts, "DELETE", "/admin/images/"+url.PathEscape(args[0]), nil, &im); err != nil {
				return fmt.Errorf("image rm: %w", err)
			}
			return printResult(opts, os.Stdout, im, func(tw *tabwriter.Writer) {
				row(tw, "removed", im.Name, im.SHA256)
			})
		},
	}
	addYesFlag(cmd, &yes)
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
