package main

import (
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/api/client"
)

func init() { register(newDeviceTLSCmd) }

func newDeviceTLSCmd(opts *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "device-tls",
		Short: "Show and rotate the device HTTPS listener's key pair (local admin operation)",
		Long: `Devices fetch their secrets (join bundles, tokens, keys) from ztpd's device
HTTPS listener (http.tls), pinned to its certificate: the documents they
fetch in clear (ztp.json, cloud-init data) name the SHA-256 pin of its public
key in curl's --pinnedpubkey form, sha256//<base64>.

Without http.tls.cert_file the key pair is generated once and kept sealed in
the store, so every appliance of a group serves the same one. "rotate" makes
the next pair: from then on documents name both pins; after
http.tls.rotation_grace (24h by default) the listener serves the new pair,
and documents name the old pin too until the grace after that switch ends.
An operator's certificate is rotated by replacing its files.

These commands work on this host's data directory (through the running
server's admin socket, or the store directly when no server runs).`,
		Example: `  ztpd device-tls show
  ztpd device-tls rotate
  ztpd device-tls show -o json`,
	}
	show := &cobra.Command{
		Use:   "show",
		Short: "The pin devices check, the documents' pins and the rotation under way",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var st client.DeviceTLS
			if err := adminDo(opts, "GET", "/admin/device-tls", nil, &st); err != nil {
				return err
			}
			return printResult(opts, os.Stdout, st, func(tw *tabwriter.Writer) { deviceTLSRows(tw, st) })
		},
	}
	rotate := &cobra.Command{
		Use:   "rotate",
		Short: "Make the next key pair: documents name both pins, the listener switches after the grace",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var st client.DeviceTLS
			if err := adminDo(opts, "POST", "/admin/device-tls/rotate", nil, &st); err != nil {
				return err
			}
			return printResult(opts, os.Stdout, st, func(tw *tabwriter.Writer) { deviceTLSRows(tw, st) })
		},
	}
	cmd.AddCommand(show, rotate)
	return cmd
}

func deviceTLSRows(tw *tabwriter.Writer, st client.DeviceTLS) {
	row(tw, "source", st.Source)
	row(tw, "serving pin", st.ServingPin)
	row(tw, "created", st.Created.Format(time.RFC3339))
	row(tw, "documents pin", strings.Join(st.Pins, ";"))
	row(tw, "rotation", st.Phase)
	if !st.SwitchAt.IsZero() {
		row(tw, "switch at", st.SwitchAt.Format(time.RFC3339))
	}
	if !st.OldPinUntil.IsZero() {
		row(tw, "old pin until", st.OldPinUntil.Format(time.RFC3339))
	}
	row(tw, "grace", st.Grace)
}
