package main

import (
	"fmt"
	"net/url"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/internal/core"
)

func init() { register(newDeviceCmd) }

func newDeviceCmd(opts *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "device",
		Short: "Devices: approve them for joining a cluster",
		Long: `Work with the devices (switches and VMs) ztpd has seen.

A device that presents a valid enrollment secret but matches no
joiner.auto_approve rule waits (its join answer is 202 with a reason) until
it is approved here; it then gets its bundle on its next try.`,
	}
	cmd.AddCommand(newDeviceApproveCmd(opts))
	return cmd
}

func newDeviceApproveCmd(opts *rootOptions) *cobra.Command {
	var cluster string
	cmd := &cobra.Command{
		Use:   "approve ID|MAC|SERIAL",
		Short: "Approve a device for joining (optionally into a cluster)",
		Example: `  ztpd device approve 0c:29:ef:00:00:01
  ztpd device approve SN1234 --cluster prod`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutputFormat(opts); err != nil {
				return err
			}
			s, err := openAdmin(opts)
			if err != nil {
				return err
			}
			defer s.close()
			q := url.Values{}
			if cluster != "" {
				q.Set("cluster", cluster)
			}
			var d core.Device
			if err := s.do("POST", "/admin/devices/"+url.PathEscape(args[0])+"/approve?"+q.Encode(), nil, &d); err != nil {
				return fmt.Errorf("device approve: %w", err)
			}
			return printResult(opts, os.Stdout, d, func(tw *tabwriter.Writer) {
				row(tw, "device", d.ID)
				row(tw, "approved", d.Approved)
				row(tw, "cluster", dash(d.Cluster))
				row(tw, "state", d.State)
			})
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "cluster name or id to admit the device into")
	return cmd
}
