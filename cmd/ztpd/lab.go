package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/ztpd/ztpd/testenv/lab"
)

func init() { register(newLabCmd) }

func newLabCmd(opts *rootOptions) *cobra.Command {
	var s lab.Scenario
	var prefix, work string
	var octet int
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Watch ztpd onboard a simulated fleet in network namespaces (root)",
		Long: `Build a management network in network namespaces, start this ztpd in it, and
onboard simulated devices with real clients while a live table shows each
device's progress:

  - SONiC switches: dhclient configured as SONiC (user class SONiC-ZTP, client id
    SONiC##<product>##<serial>), then curl walks ztp.json section by section,
    the ztpd join plugin (python3) fetches the join bundle, and the switch
    reports joined;
  - ONIE switches: dhclient with onie_vendor:<platform> downloads the installer
    from option 114, then "reboots" as SONiC and continues as above;
  - CloudStack VMs: busybox udhcpc, the cloud-init metadata service, user-data
    with the kubeadm join, and the joined report.

Half of the devices sit behind a DHCP relay (dnsmasq) on a second subnet.
Clusters are created over the CloudStack API; VM i < --clusters is cluster i's
control plane. At the end the state is checked through the API: every device
joined, every cluster at its desired size. Everything is torn down on exit or
Ctrl-C. Needs root, dnsmasq, dhclient, busybox, curl and python3. Addresses
are 10.99.<octet>.0/24 and 10.99.<octet+1>.0/24.`,
		Example: `  sudo ztpd lab
  sudo ztpd lab --switches 8 --onie 2 --vms 6 --clusters 3
  sudo ztpd lab -o json > lab-result.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputFormat(opts); err != nil {
				return err
			}
			if s.Clusters < 1 || s.VMs < s.Clusters {
				return fmt.Errorf("--vms (%d) must be at least --clusters (%d): each cluster's control plane is a VM", s.VMs, s.Clusters)
			}
			if s.Switches+s.ONIE+s.VMs > 180 {
				return fmt.Errorf("at most 180 devices (one /24 pool per subnet)")
			}
			if octet < 0 || octet > 253 {
				return fmt.Errorf("--octet %d: use 0..253", octet)
			}
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			if work == "" {
				if work, err = os.MkdirTemp("", "ztpd-lab-"); err != nil {
					return err
				}
				defer os.RemoveAll(work)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			live := opts.output != "json" && term.IsTerminal(int(os.Stdout.Fd()))
			o := lab.Options{Prefix: prefix, Octet: octet, WorkDir: filepath.Clean(work), Bin: bin, Live: live, Timeout: timeout}
			if opts.output != "json" {
				o.Out = os.Stdout
			}
			res, err := lab.Run(ctx, s, o)
			if res != nil {
				perr := printResult(opts, os.Stdout, res, func(tw *tabwriter.Writer) {
					row(tw, "CLUSTER", "STATE", "CONTROL", "WORKERS", "JOINED")
					for _, c := range res.Clusters {
						row(tw, c.Name, c.State, c.Control, c.Size, c.Joined)
					}
					row(tw, "")
					row(tw, "devices", len(res.Devices), "elapsed", res.Elapsed.Truncate(time.Millisecond))
				})
				if err == nil {
					err = perr
				}
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&s.Switches, "switches", 4, "SONiC switches")
	fl.IntVar(&s.ONIE, "onie", 1, "switches that install SONiC through ONIE first")
	fl.IntVar(&s.VMs, "vms", 3, "CloudStack VMs")
	fl.IntVar(&s.Clusters, "clusters", 2, "clusters (each needs one VM as control plane)")
	fl.StringVar(&prefix, "prefix", "ztpdlab", "network namespace name prefix")
	fl.IntVar(&octet, "octet", 100, "third octet of the lab's first subnet (10.99.<octet>.0/24)")
	fl.StringVar(&work, "work-dir", "", "keep configs and logs here (default: a temp dir, removed)")
	fl.DurationVar(&timeout, "timeout", 10*time.Minute, "give up after this long")
	return cmd
}
