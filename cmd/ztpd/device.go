package main

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
)

func init() { register(newDeviceCmd) }

func newDeviceCmd(opts *rootOptions) *cobra.Command {
	f := &apiFlags{}
	cmd := &cobra.Command{
		Use:   "device",
		Short: "List, show, approve and reset devices; show and change what they should run",
		Long: `Devices are the switches and VMs ztpd has seen on DHCP or HTTP, keyed by MAC
address, with their onboarding state (discovered, leased, ztp-served, ...,
waiting, join-issued, joined). A device waiting for approval joins its cluster
once approved. "device show" tells a device's story (its events); "device list
--state unmatched" lists the devices whose last ZTP request got no content, and
"--state refused" the addresses without a lease that asked for it. "device
desired" shows and changes what a device should run (mode, image, Kubernetes
version, labels, hooks) and what its agent last did.`,
		Example: `  ztpd device list --state waiting
  ztpd device list --state unmatched
  ztpd device show 52:54:00:12:34:56
  ztpd device approve 52:54:00:12:34:56 --cluster edge-1
  ztpd device reset 52:54:00:12:34:56
  ztpd device desired set 52:54:00:12:34:56 --image sonic-202411.bin`,
	}
	addAPIFlags(cmd, f)
	cmd.AddCommand(newDeviceListCmd(opts, f), newDeviceShowCmd(opts, f), newDeviceApproveCmd(opts, f), newDeviceResetCmd(opts, f),
		newDeviceDesiredCmd(opts, f))
	return cmd
}

// deviceView is a device as the CLI prints it with -o json: the API's
// record with its cluster's name beside the ID.
type deviceView struct {
	client.Device
	ClusterName string `json:"cluster_name,omitempty"`
}

func newDeviceListCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var state, kind, cluster, subnet string
	var limit int
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List devices (all pages; --limit bounds the count)",
		Long: `List devices with their onboarding state. Two --state values are not states:

  --state unmatched  devices (holding a lease or a reserved address) whose last
                     ZTP request got no content, with the reason: no profile
                     matches them, or a request contradicted their record.
                     They leave the list once they are served.
  --state refused    addresses that hold no lease and no reservation and asked
                     for ZTP content since ztpd started (kept in memory only,
                     never stored: made-up devices must not fill the store).`,
		Example: `  ztpd device list
  ztpd device list --state unmatched
  ztpd device list --state refused
  ztpd device list --cluster edge-1 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			if state == "refused" {
				return printRefused(opts, c)
			}
			clusterID, err := visClusterRef(c, cluster)
			if err != nil {
				return err
			}
			q := url.Values{"state": {state}, "kind": {kind}, "cluster": {clusterID}, "subnet": {subnet}}
			list, err := client.All[client.Device](c.Client, "/api/v1/devices", q, limit)
			if err != nil {
				return err
			}
			names := visClusterNames(c)
			views := make([]deviceView, len(list))
			refused := false
			for i, d := range list {
				views[i] = deviceView{Device: d, ClusterName: names[d.Cluster]}
				refused = refused || d.Refusal.Refused()
			}
			return printResult(opts, os.Stdout, views, func(tw *tabwriter.Writer) {
				if state == "unmatched" {
					row(tw, "MAC", "KIND", "STATE", "IP", "HOSTNAME", "SERIAL", "ASKED FOR", "REFUSED", "WHY")
					for _, d := range list {
						r := d.Refusal
						row(tw, d.ID, d.Kind, d.State, dash(d.IP), dash(d.Hostname), dash(d.Serial), r.What, ago(r.At), r.Reason)
					}
					return
				}
				head := []any{"MAC", "KIND", "STATE", "IP", "HOSTNAME", "SERIAL", "CLUSTER", "APPROVED", "LAST SEEN"}
				if refused {
					head = append(head, "LAST REFUSAL")
				}
				row(tw, head...)
				for _, d := range list {
					cells := []any{d.ID, d.Kind, d.State, dash(d.IP), dash(d.Hostname), dash(d.Serial), dash(names.cluster(d.Cluster)), d.Approved, ago(d.LastSeen)}
					if refused {
						cells = append(cells, dash(d.Refusal.Kind))
					}
					row(tw, cells...)
				}
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&state, "state", "", "only devices in this state (e.g. waiting), unmatched, or refused (see above)")
	fl.StringVar(&kind, "kind", "", "sonic, onie, vm or unknown")
	fl.StringVar(&cluster, "cluster", "", "only devices assigned to this cluster (name or ID)")
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

// deviceTimeline bounds the events "device show" prints: the newest.
const deviceTimeline = 30

// deviceShown is "device show -o json": the device, its cluster's name and
// its newest events, oldest first.
type deviceShown struct {
	deviceView
	Timeline []eventView `json:"timeline"`
}

func newDeviceShowCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show MAC|SERIAL",
		Short: "Show one device and its timeline (its newest events)",
		Long: `Show one device: its facts, state, cluster, the reason its last ZTP request
was refused (if it was), and its timeline: its newest events, oldest first
(lease, ZTP fetches and refusals, approval, join, Node). For the whole history
use "ztpd events --device MAC".`,
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			var d client.Device
			if err := c.REST("GET", "/api/v1/devices/"+url.PathEscape(args[0]), nil, nil, &d); err != nil {
				return err
			}
			var p client.EventsPage
			q := url.Values{"device": {d.ID}, "tail": {strconv.Itoa(deviceTimeline)}}
			if err := c.REST("GET", "/api/v1/events", q, nil, &p); err != nil {
				return err
			}
			names := visClusterNames(c)
			shown := deviceShown{deviceView: deviceView{Device: d, ClusterName: names[d.Cluster]}, Timeline: eventViews(p.Items)}
			if shown.Timeline == nil {
				shown.Timeline = []eventView{}
			}
			for i := range shown.Timeline {
				shown.Timeline[i].ClusterName = names[shown.Timeline[i].Cluster]
			}
			return printResult(opts, os.Stdout, shown, func(tw *tabwriter.Writer) {
				deviceRows(tw, shown.deviceView)
				if len(shown.Timeline) == 0 {
					row(tw, "timeline", "no events")
					return
				}
				row(tw, "timeline", fmt.Sprintf("newest %d events, oldest first (all: ztpd events --device %s)", len(shown.Timeline), d.ID))
				tw.Flush()
				for _, e := range shown.Timeline {
					fmt.Fprintf(tw, "  %s  %-18s %s\n", e.Time.Local().Format("2006-01-02 15:04:05"), e.Type, eventText(e))
				}
			})
		},
	}
}

// printDevice prints a device an operation answered (approve, reset), its
// cluster by name: the names are read now, after the operation, so a
// cluster created a moment ago is named too.
func printDevice(opts *rootOptions, c *apiClient, d client.Device) error {
	v := deviceView{Device: d}
	if d.Cluster != "" && opts.output != "json" {
		v.ClusterName = visClusterNames(c)[d.Cluster]
	}
	return printResult(opts, os.Stdout, d, func(tw *tabwriter.Writer) { deviceRows(tw, v) })
}

func deviceRows(tw *tabwriter.Writer, v deviceView) {
	d := v.Device
	row(tw, "mac", d.ID)
	row(tw, "kind", d.Kind)
	row(tw, "state", d.State)
	row(tw, "approved", strconv.FormatBool(d.Approved))
	cluster := d.Cluster
	if v.ClusterName != "" && v.ClusterName != d.Cluster {
		cluster = v.ClusterName + " (" + d.Cluster + ")"
	}
	for _, kv := range [][2]string{{"ip", d.IP}, {"hostname", d.Hostname}, {"serial", d.Serial}, {"product", d.Product},
		{"platform", d.Platform}, {"subnet", d.Subnet}, {"cluster", cluster}, {"role", d.Role}, {"profile", d.Profile},
		{"vendor class", d.VendorClass}, {"sonic version", d.SONiCVer}} {
		if kv[1] != "" {
			row(tw, kv[0], kv[1])
		}
	}
	if c := d.SerialConflict; c != nil {
		row(tw, "serial conflict", fmt.Sprintf("serial %q is stated by %s too: actions by this serial are refused, act by MAC",
			c.Serial, strings.Join(c.With, ", ")))
	}
	if r := d.Refusal; r.Kind == core.RefusalWaiting {
		row(tw, "waiting", fmt.Sprintf("%s %s: %s", visWhen(r.At), r.What, r.Reason))
	} else if r.Refused() {
		row(tw, "last refused", fmt.Sprintf("%s %s: %s (%s)", visWhen(r.At), r.What, r.Reason, r.Kind))
	}
	row(tw, "first seen", visWhen(d.FirstSeen))
	row(tw, "last seen", visWhen(d.LastSeen))
}

// printRefused prints the addresses without a lease the running server
// refused since it started ("device list --state refused").
func printRefused(opts *rootOptions, c *apiClient) error {
	var r client.Refusals
	if err := c.REST("GET", "/api/v1/refusals", nil, nil, &r); err != nil {
		return err
	}
	if opts.output != "json" {
		if r.Since.IsZero() {
			fmt.Fprintln(os.Stderr, "ztpd is not running on this data directory: refusals of addresses without a lease are kept by a running server only")
		} else {
			fmt.Fprintf(os.Stderr, "addresses without a lease refused since ztpd started (%s), newest first\n", visWhen(r.Since))
		}
	}
	return printResult(opts, os.Stdout, r, func(tw *tabwriter.Writer) {
		row(tw, "ADDRESS", "ASKED FOR", "OVER", "TIMES", "FIRST", "LAST", "WHY")
		for _, x := range r.Items {
			row(tw, x.Addr, x.What, x.Transport, x.Count, ago(x.First), ago(x.Last), x.Reason)
		}
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
		Args: oneArg,
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
			var d client.Device
			if err := c.REST("POST", "/api/v1/devices/"+url.PathEscape(args[0])+"/approve", nil, body, &d); err != nil {
				return err
			}
			return printDevice(opts, c, d)
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
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := confirm(cmd, "reset device "+args[0]+": its membership ends and its credentials are revoked", yes); err != nil {
				return err
			}
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			var d client.Device
			if err := c.REST("POST", "/api/v1/devices/"+url.PathEscape(args[0])+"/reset", nil, map[string]string{}, &d); err != nil {
				return err
			}
			return printDevice(opts, c, d)
		},
	}
	addYesFlag(cmd, &yes)
	return cmd
}
