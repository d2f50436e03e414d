// Command ztpd-lab watches a ztpd binary onboard a simulated fleet in network
// namespaces: real DHCP, ZTP and cloud-init clients, a DHCP relay, clusters
// created over the CloudStack API whose control planes are real (kubeadm,
// etcd, kube-apiserver, kube-controller-manager; only the kubelets are
// simulated), and a live table of each device's progress. It is a development and demonstration tool, so it is not part of
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
	var prefix, work, ztpd, kubeletsim, output string
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
    the ztpd join plugin (python3) fetches the join bundle, the switch's kubelet
    bootstraps with the bundle's client certificate, and the switch reports
    joined;
  - ONIE switches: dhclient with onie_vendor:<platform> downloads the installer
    from option 114, then "reboots" as SONiC and continues as above;
  - CloudStack VMs: busybox udhcpc, the cloud-init metadata service, user-data
    with the kubeadm configuration; the first control plane of each cluster
    runs a REAL control plane from it (kubeadm init phases, etcd,
    kube-apiserver, kube-controller-manager as processes in its namespace,
    kubeadm mark-control-plane), every other VM runs the real kubeadm join
    discovery (token, CA hash, signed cluster-info); then the joined report.

What is simulated: the kubelet (no container runtime here). Each device runs
kubeletsim in its namespace: the kubelet's TLS bootstrap (CSR approved and
signed by the real kube-controller-manager), Node registration, status and
Lease, against the real API server. No pods run.

Half of the devices sit behind a DHCP relay (dnsmasq) on a second subnet.
Clusters are created over the CloudStack API with the newest Kubernetes built
by testenv/k8sbin/build.sh (make k8s-bins); VM i < --clusters is cluster i's
control plane. At the end the state is read from the real API servers
(kubectl get nodes with the kubeconfig from getKubernetesClusterConfig) and
from ztpd: every device a Ready Node with ztpd's labels, ztpd showing it
joined, every cluster Running; the exit status is non-zero otherwise.
Everything is torn down on exit or Ctrl-C. Needs root, ip, dnsmasq, dhclient,
busybox, curl, python3, kubectl, unshare and the Kubernetes binaries.
Addresses are 10.99.<octet>.0/24 and 10.99.<octet+1>.0/24.

The ztpd binary is --ztpd, by default the ztpd next to ztpd-lab (make build
puts both in bin/), else the one on PATH; kubeletsim likewise (--kubeletsim).`,
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
			bin, err := findNextTo("ztpd", "--ztpd", ztpd, "make build")
			if err != nil {
				return err
			}
			ksim, err := findNextTo("kubeletsim", "--kubeletsim", kubeletsim, "make build, or go build ./testenv/kubeletsim/cmd/kubeletsim")
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
			o := lab.Options{Prefix: prefix, Octet: octet, WorkDir: filepath.Clean(work), Bin: bin, Kubeletsim: ksim, Timeout: timeout}
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
	fl.StringVar(&kubeletsim, "kubeletsim", "", "the simulated kubelet binary (default: kubeletsim next to ztpd-lab, else on PATH)")
	fl.StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

// findNextTo resolves a binary: flag if given, else the one next to this
// executable, else the one on PATH.
func findNextTo(name, flagName, flag, build string) (string, error) {
	if flag != "" {
		p, err := exec.LookPath(flag)
		if err != nil {
			return "", fmt.Errorf("%s %s: %w", flagName, flag, err)
		}
		return filepath.Abs(p)
	}
	if self, err := os.Executable(); err == nil {
		if p, err := exec.LookPath(filepath.Join(filepath.Dir(self), name)); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return filepath.Abs(p)
	}
	return "", fmt.Errorf("no %s binary next to ztpd-lab or on PATH: build it (%s) or give %s PATH", name, build, flagName)
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
	row("CLUSTER", "STATE", "CONTROL", "WORKERS", "JOINED", "NODES READY (API SERVER)", "API")
	for _, c := range res.Clusters {
		ready := 0
		for _, n := range c.Nodes {
			if n.Ready == "True" {
				ready++
			}
		}
		row(c.Name, c.State, c.Control, c.Size, c.Joined, fmt.Sprintf("%d/%d", ready, len(c.Nodes)), c.Endpoint)
	}
	row("")
	tw.Flush()
	fmt.Fprintf(w, "Real control planes (Kubernetes %s: kubeadm init phases, etcd, kube-apiserver, kube-controller-manager):\n", res.KubernetesVersion)
	for _, p := range res.ControlPlanes {
		fmt.Fprintf(w, "  %s on %s (netns %s) at %s, up in %s; files %s\n", p.Cluster, p.Device, p.Namespace, p.URL, p.Started.Round(100*time.Millisecond), p.Dir)
	}
	fmt.Fprintln(w, "Simulated: the kubelets (kubeletsim in each device's namespace: TLS bootstrap, Node, status, Lease; no pods).")
	fmt.Fprintf(w, "devices %d, elapsed %s\n", len(res.Devices), res.Elapsed.Truncate(time.Millisecond))
	return nil
}
