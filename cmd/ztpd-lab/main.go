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
	"net"
	"net/url"
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

	"github.com/ztpd/ztpd/testenv/browser"
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
	var prefix, work, ztpd, kubeletsim, output, consoleAddr, upgrade string
	var ipv6, dualStack, hollow bool
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
  - CloudStack VMs: busybox udhcpc, the cloud-init metadata service, public
    user-data (checked with cloud-init schema) whose join waiter (python3)
    fetches the kubeadm configuration over pinned HTTPS once the VM is
    admitted (its systemd commands logged, not run); the first control
    plane of each cluster runs a REAL control plane from it (kubeadm init
    phases, etcd, kube-apiserver, kube-controller-manager as processes in
    its namespace, kubeadm mark-control-plane), every other VM runs the
    real kubeadm join discovery (token, CA hash, signed cluster-info); then
    the joined report, over pinned HTTPS.

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

--ipv6: the lab is v6-only, no IPv4 address anywhere: subnets
fd99:0:<octet>:1::/64 and fd99:0:<octet>:2::/64 (hex), served by ztpd's
DHCPv6, the second through ISC dhcrelay -6. SONiC switches run dhclient -6
with SONiC's option declarations (59, 239, user class SONiC-ZTP) and fetch
ztp.json from option 59; ONIE switches discover without DHCP (ping6 ff02::1,
the waterfall at the appliance's link-local address, port 80) and sit on the
appliance's link; VMs run dhclient -6 and walk the metadata service with curl
(cloud-init's CloudStack datasource has no IPv6); control planes, API
servers and kubelets are on IPv6. The lab adds the on-link prefix and
default route Router Advertisements would give (it runs no RA daemon).
--dual-stack: both families; SONiC switches ask DHCPv4 and DHCPv6 and fetch
ztp.json over IPv6, ONIE switches and VMs keep to IPv4. Needs dhcrelay too.

--positions: the rack planned by cable position. Every switch (SONiC and
ONIE) is cabled to a port of its own on the relay, which is ISC dhcrelay -a
(option 82 circuit-id = the port, p0, p1, ...); a cabling plan
(<work-dir>/positions.yaml) names each port's switch, cluster, role and
address (10.99.<octet+1>.210 + port, replace: auto), and the switches share
one profile matched by circuit-id: no profile names a serial, so what a
switch is comes from where it is plugged in. The console's Positions page
shows the rack. IPv4 only, at most 40 switches.

--upgrade: the clusters start at the Kubernetes version before the newest
built, and once every device joined each cluster is upgraded to the newest
with upgradeKubernetesCluster: ztpd rolls it out one node at a time (cordon
and drain through the real API server, the device's agent runs kubeadm
upgrade, the Node Ready at the new version, uncordon), and the table's STEP
column shows each device's phase; the lab then checks every Node Ready at the
new version. --upgrade=manual prepares the same but leaves starting it to you
(Upgrade on the cluster's page, or ztpd cluster upgrade; ztpd rollout start
works too), keeps the lab up until Ctrl-C and shows every rollout you start
in the table. Real: the rollout engine, the API servers,
each device's agent (the python3 script its join bundle installed, polling
ztpd over TLS with its own credential from the device's address, every 2 s).
Simulated: the devices' kubeadm and systemctl (they record the call and
"install" the new kubelet version, which the simulated kubelet reports);
the control planes' own binaries stay at the old version.

--hollow: every device's kubelet is kubemark's hollow node instead of the
simulated kubelet: the real kubelet (TLS bootstrap, registration, pod
workers, termination grace periods) over a fake container runtime, which
runs no containers; kube-scheduler runs beside each control plane, so pods
land on the Nodes and an upgrade's drains really evict them and wait for
them. With --upgrade, a device's kubelet restart after its kubeadm upgrade
starts the hollow node of the new version. Needs kubemark built for the
versions (make k8s-bins).

--console ADDR: the web console (on ztpd's API listener in the lab's
namespace) is forwarded to ADDR on this host, its URL and an admin key to
sign in with are printed before the devices boot, and the lab stays up after
its checks until Ctrl-C. Open Devices to watch the onboarding, Rollouts to
watch the upgrade device by device (Pause, Resume and Abort work there).

The ztpd binary is --ztpd, by default the ztpd next to ztpd-lab (make build
puts both in bin/), else the one on PATH; kubeletsim likewise (--kubeletsim).`,
		Example: `  make build && sudo bin/ztpd-lab
  sudo ztpd-lab --switches 8 --onie 2 --vms 6 --clusters 3
  sudo ztpd-lab --ztpd ./bin/ztpd --work-dir /tmp/lab   # keep configs and logs
  sudo ztpd-lab -o json > lab-result.json
  sudo ztpd-lab --ipv6 --switches 2 --onie 1 --vms 2 --clusters 1
  sudo ztpd-lab --dual-stack
  sudo ztpd-lab --positions --switches 6 --onie 2 --console 127.0.0.1:8443   # then open /positions
  sudo ztpd-lab --upgrade --console 127.0.0.1:8443   # then open https://127.0.0.1:8443/rollouts
  sudo ztpd-lab --hollow --upgrade=manual --vms 4 --clusters 1 --switches 0 --onie 0   # real kubelets: deploy pods, then upgrade`,
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
			if ipv6 && dualStack {
				return fmt.Errorf("--ipv6 and --dual-stack: choose one (--ipv6 is v6-only)")
			}
			if s.Positions && (ipv6 || dualStack) {
				return fmt.Errorf("--positions is IPv4 only (dhcrelay -a's option 82 circuit-ids): drop --ipv6/--dual-stack")
			}
			if s.Positions && s.Switches+s.ONIE > 40 {
				return fmt.Errorf("--positions: at most 40 switches (--switches + --onie: %d), one relay port each", s.Switches+s.ONIE)
			}
			if octet < 0 || octet > 253 {
				return fmt.Errorf("--octet %d: use 0..253", octet)
			}
			switch upgrade {
			case "", "auto":
			case "manual":
			default:
				return fmt.Errorf("--upgrade %q: use --upgrade (auto) or --upgrade=manual", upgrade)
			}
			s.Upgrade = upgrade != ""
			if consoleAddr != "" {
				if _, _, err := net.SplitHostPort(consoleAddr); err != nil {
					return fmt.Errorf("--console %q: want host:port, e.g. 127.0.0.1:8443: %v", consoleAddr, err)
				}
			}
			bin, err := findNextTo("ztpd", "--ztpd", ztpd, "make build")
			if err != nil {
				return err
			}
			ksim, err := findNextTo("kubeletsim", "--kubeletsim", kubeletsim, "make build, or go build ./testenv/cmd/kubeletsim")
			if err != nil {
				return err
			}
			// A work directory of its own is removed on exit, so the last
			// lines name no file in it.
			kept := work != ""
			if !kept {
				if work, err = os.MkdirTemp("", "ztpd-lab-"); err != nil {
					return err
				}
				defer os.RemoveAll(work)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			o := lab.Options{Prefix: prefix, Octet: octet, WorkDir: filepath.Clean(work), Bin: bin, Kubeletsim: ksim, Timeout: timeout,
				UpgradeByHand: upgrade == "manual", Hollow: hollow}
			switch {
			case ipv6:
				o.Family = lab.IPv6
			case dualStack:
				o.Family = lab.DualStack
			}
			if output == "table" {
				o.Out = stdout
				f, ok := stdout.(*os.File)
				o.Live = ok && term.IsTerminal(int(f.Fd()))
			}
			// Notes for the person at the terminal: on standard error
			// when standard output is JSON.
			notes := stdout
			if output == "json" {
				notes = cmd.ErrOrStderr()
			}
			var console *consoleForward
			if consoleAddr != "" {
				o.OnStarted = func(l *lab.Lab) (err error) {
					console, err = serveConsole(l, consoleAddr, notes)
					return err
				}
			}
			l, err := lab.Open(ctx, s, o)
			if l == nil {
				return err
			}
			defer l.Close()
			if console != nil {
				defer console.fwd.Close()
			}
			// The result is printed on failure too: it shows how far each
			// device and cluster got.
			err = errors.Join(err, printResult(stdout, output, l.Result, kept))
			if err == nil && output == "table" {
				fmt.Fprintln(stdout, passedLine(l.Result))
			}
			if ctx.Err() != nil || (console == nil && !o.UpgradeByHand) {
				return err
			}
			// The lab stays up for a person: the console, a rollout to
			// start by hand.
			fmt.Fprintln(notes)
			if console != nil {
				fmt.Fprintf(notes, "The lab stays up for the console at %s (sign in with API key %s).\n", console.url, console.key)
			}
			if o.UpgradeByHand && err == nil {
				fmt.Fprintf(notes, "Upgrade a cluster to %s: Upgrade on its page", l.UpgradeTo)
				if console != nil {
					fmt.Fprintf(notes, " (%sclusters)", console.url)
				}
				fmt.Fprintf(notes, ", or\n  ztpd --config %s cluster upgrade lab-0 --version %s\n", l.App.Config, l.UpgradeTo)
				fmt.Fprintln(notes, "Every rollout started from now on shows in the table below, device by device.")
			}
			fmt.Fprintln(notes, "Ctrl-C tears the lab down.")
			if o.UpgradeByHand && err == nil {
				if rs := l.FollowRollouts(ctx); len(rs) > 0 && output == "table" {
					l.Result.Rollouts = rs
					err = errors.Join(err, printResult(stdout, output, l.Result, kept))
				}
			}
			<-ctx.Done()
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
	fl.StringVar(&upgrade, "upgrade", "", "start the clusters at the Kubernetes version before the newest built and, once onboarded, upgrade them node by node (a rollout each); =manual: leave starting it to you")
	fl.Lookup("upgrade").NoOptDefVal = "auto"
	fl.BoolVar(&ipv6, "ipv6", false, "a v6-only lab (DHCPv6, dhcrelay -6, ONIE by link-local; fd99:0:<octet>::/48)")
	fl.BoolVar(&dualStack, "dual-stack", false, "IPv4 and IPv6 on both subnets; switches fetch ztp.json over IPv6")
	fl.BoolVar(&s.Positions, "positions", false, "cable every switch to its own port behind dhcrelay -a and plan it by that port (a cabling plan, no serial profiles)")
	fl.BoolVar(&hollow, "hollow", false, "run kubemark's hollow node (the real kubelet, fake container runtime) as every kubelet, and kube-scheduler beside each control plane")
	fl.StringVar(&consoleAddr, "console", "", "forward the web console to this host:port, print how to sign in, and keep the lab up until Ctrl-C")
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

// passedLine is the lab's last word when every check held.
func passedLine(res *lab.Result) string {
	return fmt.Sprintf("all checks passed: %d devices Ready Nodes with ztpd's labels and joined in ztpd, %d clusters Running", len(res.Devices), len(res.Clusters))
}

// printResult prints the lab's end state; the control planes' files only
// when the work directory outlives the lab (kept).
func printResult(w io.Writer, output string, res *lab.Result, kept bool) error {
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
		files := "; files " + p.Dir
		if !kept {
			files = ""
		}
		fmt.Fprintf(w, "  %s on %s (netns %s) at %s, up in %s%s\n", p.Cluster, p.Device, p.Namespace, p.URL, p.Started.Round(100*time.Millisecond), files)
	}
	if !kept && len(res.ControlPlanes) > 0 {
		fmt.Fprintln(w, "  (their files, configs and logs go with the lab's temporary work directory; --work-dir DIR keeps them)")
	}
	fmt.Fprintln(w, "Simulated: the kubelets (kubeletsim in each device's namespace: TLS bootstrap, Node, status, Lease; no pods).")
	if len(res.Rollouts) > 0 {
		fmt.Fprintln(w, "Rollouts (ztpd's engine over the real API servers, the devices' real agents; their kubeadm and systemctl simulated, the control planes' binaries not upgraded):")
		for _, r := range res.Rollouts {
			fmt.Fprintf(w, "  %s %s to %s: %s in %s, at most %d node(s) underway at a time\n", r.Cluster, r.ID, r.Target, r.State, r.Elapsed.Round(100*time.Millisecond), r.MaxUnderway)
			for i, n := range r.Nodes {
				fmt.Fprintf(w, "    %d. %s (%s): %s\n", i+1, n.Device, n.Node, strings.Join(n.Phases, " > "))
			}
		}
	}
	fmt.Fprintf(w, "devices %d, elapsed %s\n", len(res.Devices), res.Elapsed.Truncate(time.Millisecond))
	return nil
}

// consoleForward is the web console forwarded to the host for a person.
type consoleForward struct {
	fwd      *browser.Forwarder
	url, key string
}

// serveConsole forwards addr on this host to ztpd's API listener in the
// lab's namespace (where the console is served), makes an admin key for a
// person to sign in with, and says so on w. The key and its secret are
// shown once, here; they end with the lab's data directory.
func serveConsole(l *lab.Lab, addr string, w io.Writer) (*consoleForward, error) {
	api, err := url.Parse(l.App.APIBase)
	if err != nil {
		return nil, err
	}
	fwd, err := browser.ForwardNSOn(addr, l.Topo.App, api.Host)
	if err != nil {
		return nil, fmt.Errorf("--console %s: %w", addr, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key, secret, err := l.App.CreateAPIKey(ctx, "admin", "console")
	if err != nil {
		fwd.Close()
		return nil, err
	}
	c := &consoleForward{fwd: fwd, url: api.Scheme + "://" + fwd.Addr + "/", key: key}
	fmt.Fprintf(w, "Web console: %s", c.url)
	if api.Scheme == "https" {
		fmt.Fprint(w, " (ztpd's self-signed API certificate: accept it in the browser)")
	}
	fmt.Fprintf(w, "\n  sign in with API key %s and secret %s (an admin key of this lab's ztpd, gone with it)\n", key, secret)
	fmt.Fprintf(w, "  devices onboarding: %sdevices   rollouts: %srollouts\n", c.url, c.url)
	fmt.Fprintf(w, "  the CLI: ztpd --config %s rollout list|show|watch|pause|resume|abort\n\n", l.App.Config)
	return c, nil
}
