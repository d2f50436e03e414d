package main

import (
	"net/url"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/api/client"
)

func init() { register(newLeaseCmd) }

func newLeaseCmd(opts *rootOptions) *cobra.Command {
	f := &apiFlags{}
	cmd := &cobra.Command{
		Use:     "lease",
		Short:   "List DHCP leases",
		Example: "  ztpd lease list --state active\n  ztpd lease list --mac 52:54:00:12:34:56 -o json",
	}
	addAPIFlags(cmd, f)
	var state, subnet, mac string
	var limit int
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List leases in address order",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			leases, err := client.All[client.Lease](c.Client, "/api/v1/leases", url.Values{"state": {state}, "subnet": {subnet}, "mac": {mac}}, limit)
			if err != nil {
				return err
			}
			return printResult(opts, os.Stdout, leases, func(tw *tabwriter.Writer) {
				row(tw, "IP", "MAC", "STATE", "SUBNET", "HOSTNAME", "EXPIRES", "RESERVED")
				for _, l := range leases {
					exp := l.Expiry.Local().Format("2006-01-02 15:04:05")
					if d := time.Until(l.Expiry); d > 0 {
						exp += " (in " + d.Round(time.Second).String() + ")"
					}
					row(tw, l.IP, l.MAC, l.State, l.Subnet, dash(l.Hostname), exp, l.Reserved)
				}
			})
		},
	}
	fl := list.Flags()
	fl.StringVar(&state, "state", "", "active, released, expired or declined")
	fl.StringVar(&subnet, "subnet", "", "only this subnet")
	fl.StringVar(&mac, "mac", "", "only this client MAC")
	fl.IntVar(&limit, "limit", 0, "at most this many leases (0: all)")
	cmd.AddCommand(list)
	return cmd
}
