// Command ztpd-lab watches a ztpd binary onboard a simulated fleet in network
// namespaces: real DHCP, ZTP and cloud-init clients, a DHCP relay, clusters
// created over the CloudStack API, and a live table of each device's
// progress. It is a development and demonstration tool, so it is not part of
// the product binary; the lab itself is the library testenv/lab, which the
// end-to-end test drives too.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/ztpd/ztpd/testenv/lab"
)

func main() {
	if err := newRootCmd(os.Stdout).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "ztpd-lab:", err)
		os.Exit(1)
	}
}

func newRootCmd(stdout io.Writer) *cobra.Command {
	var s lab.Scenario
	var prefix, work, ztpd, output string
	var octet int
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "ztpd-lab",
		Short: "Watch ztpd onboard a simulated fleet in network namespaces (root)",
		Long: `Build a management network in network namespaces, start a ztpd binary in it,
and onboard simulated devices with real clients while a live table shows each
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
joined, every cluster at its desired size; the exit status is non-zero
otherwise. Everything is torn down on exit or Ctrl-C. Needs root, ip,
dnsmasq, dhclient, busybox, curl and python3. Addresses are
10.99.<octet>.0/24 and 10.99.<octet+1>.0/24.

The ztpd binary is --ztpd, by default the ztpd next to ztpd-lab (make build
puts both in bin/), else the one on PATH.`,
		Example: `  make build && sudo bin/ztpd-lab
  sudo ztpd-lab --switches 8 --onie 2 --vms 6 --clusters 3
  sudo ztpd-lab --ztpd ./bin/ztpd --work-dir /tmp/lab   # keep configs and logs
  sudo ztpd-lab -o json > lab-result.json`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return fmt.Errorf("--output %q: use table or json", output)
			}
			if s.Clusters < 1 || s.VMs < s.Clusters {
				return fmt.Errorf("--vms (%d) must be at least --clusters (%d), and --clusters at least 1: each cluster's control plane is a VM", s.VMs, s.Clusters)
			}
			if s.Switches < 0 || s.ONIE < 0 {
				return fmt.Errorf("--switches and --onie cannot be negative")
			}
			if s.Switches+s.ONIE+s.VMs > 180 {
				return fmt.Errorf("at most 180 devices (one /24 pool per subnet)")
			}
			if octet < 0 || octet > 253 {
				return fmt.Errorf("--octet %d: use 0..253", octet)
			}
			bin, err := findZtpd(ztpd)
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
			o := lab.Options{Prefix: prefix, Octet: octet, WorkDir: filepath.Clean(work), Bin: bin, Timeout: timeout}
			if output == "table" {
				o.Out = stdout
				f, ok := stdout.(*os.File)
				o.Live = ok && term.IsTerminal(int(f.Fd()))
			}
			res, err := lab.Run(ctx, s, o)
			if res != nil {
				// The result is printed on failure too: it shows how far
				// each device and cluster got.
				err = errors.Join(err, printResult(stdout, output, res))
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
	fl.StringVar(&ztpd, "ztpd", "", "the ztpd binary to run (default: ztpd next to ztpd-lab, else on PATH)")
	fl.StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

// findZtpd resolves the ztpd binary: flag if given, else the ztpd next to
// this executable, else the one on PATH.
func findZtpd(flag string) (string, error) {
	if flag != "" {
		p, err := exec.LookPath(flag)
		if err != nil {
			return "", fmt.Errorf("--ztpd %s: %w", flag, err)
		}
		return filepath.Abs(p)
	}
	if self, err := os.Executable(); err == nil {
		if p, err := exec.LookPath(filepath.Join(filepath.Dir(self), "ztpd")); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("ztpd"); err == nil {
		return filepath.Abs(p)
	}
	return "", errors.New("no ztpd binary next to ztpd-lab or on PATH: build it (make build) or give --ztpd PATH")
}

func printResult(w io.Writer, output string, res *lab.Result) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(cells ...any) {
		parts := make([]string, len(cells))
		for i, c := range cells {
			parts[i] = fmt.Sprint(c)
		}
		fmt.Fprintln(tw, strings.Join(parts, "\t"))
	}
	row("CLUSTER", "STATE", "CONTROL", "WORKERS", "JOINED")
	for _, c := range res.Clusters {
		row(c.Name, c.State, c.Control, c.Size, c.Joined)
	}
	row("")
	row("devices", len(res.Devices), "elapsed", res.Elapsed.Truncate(time.Millisecond))
	return tw.Flush()
}
