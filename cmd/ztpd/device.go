package main

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/internal/core"
)

func init() { register(newDeviceCmd) }

func newDeviceCmd(opts *rootOptions) *cobra.Command {
	f := &apiFlags{}
	cmd := &cobra.Command{
		Use:   "device",
		Short: "List, show and approve devices (REST API)",
		Long: `Devices are the switches and VMs ztpd has seen on DHCP or HTTP, keyed by MAC
address, with their onboarding state (discovered, leased, ztp-served, ...,
waiting, join-issued, joined). A device waiting for approval joins its cluster
once approved.`,
		Example: `  ztpd device list --state waiting
  ztpd device show 52:54:00:12:34:56
  ztpd device approve 52:54:00:12:34:56 --cluster edge-1
  ztpd device reset 52:54:00:12:34:56`,
	}
	addAPIFlags(cmd, f)
	cmd.AddCommand(newDeviceListCmd(opts, f), newDeviceShowCmd(opts, f), newDeviceApproveCmd(opts, f), newDeviceResetCmd(opts, f))
	return cmd
}

func newDeviceListCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var state, kind, cluster, subnet string
	var limit int
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List devices (all pages; --limit bounds the count)",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			q := url.Values{"state": {state}, "kind": {kind}, "cluster": {cluster}, "subnet": {subnet}}
			list, err := restAll[core.Device](c, "/api/v1/devices", q, limit)
			if err != nil {
				return err
			}
			return printResult(opts, os.Stdout, list, func(tw *tabwriter.Writer) {
				row(tw, "MAC", "KIND", "STATE", "IP", "HOSTNAME", "SERIAL", "CLUSTER", "APPROVED", "LAST SEEN")
				for _, d := range list {
					row(tw, d.ID, d.Kind, d.State, dash(d.IP), dash(d.Hostname), dash(d.Serial), dash(d.Cluster), d.Approved, ago(d.LastSeen))
				}
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&state, "state", "", "only devices in this state, e.g. waiting")
	fl.StringVar(&kind, "kind", "", "sonic, onie, vm or unknown")
	fl.StringVar(&cluster, "cluster", "", "only devices assigned to this cluster ID")
	fl.StringVar(&subnet, "subnet", "", "only devices in this subnet")
	fl.IntVar(&limit, "limit", 0, "at most this many devices (0: all)")
	return cmd
}

// ago renders a time as a short age.
func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t).Round(time.Second)
	if d < 0 {
		d = 0
	}
	return d.String() + " ago"
}

func newDeviceShowCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show MAC|SERIAL",
		Short: "Show one device",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			var d core.Device
			if err := c.rest("GET", "/api/v1/devices/"+url.PathEscape(args[0]), nil, nil, &d); err != nil {
				return err
			}
			return printDevice(opts, d)
		},
	}
}

func printDevice(opts *rootOptions, d core.Device) error {
	return printResult(opts, os.Stdout, d, func(tw *tabwriter.Writer) {
		row(tw, "mac", d.ID)
		row(tw, "kind", d.Kind)
		row(tw, "state", d.State)
		row(tw, "approved", strconv.FormatBool(d.Approved))
		for _, kv := range [][2]string{{"ip", d.IP}, {"hostname", d.Hostname}, {"serial", d.Serial}, {"product", d.Product},
			{"platform", d.Platform}, {"subnet", d.Subnet}, {"cluster", d.Cluster}, {"role", d.Role}, {"profile", d.Profile},
			{"vendor class", d.VendorClass}, {"sonic version", d.SONiCVer}} {
			if kv[1] != "" {
				row(tw, kv[0], kv[1])
			}
		}
		row(tw, "first seen", d.FirstSeen.Format(time.RFC3339))
		row(tw, "last seen", d.LastSeen.Format(time.RFC3339))
	})
}

func newDeviceApproveCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var cluster string
	cmd := &cobra.Command{
		Use:   "approve MAC",
		Short: "Approve a waiting device so it may join (admin key)",
		Long: `Approve a device: the joiner admits it, into --cluster when given, and issues
its join credentials when its cluster has room. Without API credentials, on the
appliance itself, this goes through the admin socket of the data directory.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			body := map[string]string{}
			if cluster != "" {
				id, err := clusterID(c, cluster)
				if err != nil {
					return fmt.Errorf("--cluster: %w", err)
				}
				body["cluster"] = id
			}
			var d core.Device
			if err := c.rest("POST", "/api/v1/devices/"+url.PathEscape(args[0])+"/approve", nil, body, &d); err != nil {
				return err
			}
			return printDevice(opts, d)
		},
	}
	cmd.Flags().StringVar(&cluster, "cluster", "", "cluster name or ID to admit the device into")
	return cmd
}

func newDeviceResetCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "reset MAC|SERIAL",
		Short: "Let a device be re-installed: end its membership, revoke its credentials (admin key)",
		Long: `Join material (enrollment secrets, join bundles, the first control plane's CA
key) is handed out once per member: a device that fetches its ztp.json or
user-data again after its bundle was issued gets none. When a device is really
being re-installed, reset it: its membership ends (its slot is freed), its join
token, report credential and unused enrollment secret are revoked, and its next
ZTP or user-data fetch is issued join material once more. Its approval and
cluster assignment are kept. The reset is an audit event.

Without API credentials, on the appliance itself, this goes through the admin
socket of the data directory.`,
		Example: `  ztpd device reset 52:54:00:12:34:56
  ztpd device reset SN1234 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := confirm(cmd, "reset device "+args[0]+": its membership ends and its credentials are revoked", yes); err != nil {
				return err
			}
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			var d core.Device
			if err := c.rest("POST", "/api/v1/devices/"+url.PathEscape(args[0])+"/reset", nil, map[string]string{}, &d); err != nil {
				return err
			}
			return printDevice(opts, d)
		},
	}
	addYesFlag(cmd, &yes)
	return cmd
}
