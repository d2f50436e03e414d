package lab

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/testenv/netns"
)

// Device is one simulated device of a lab.
type Device struct {
	Name     string
	Kind     string // sonic | onie | vm
	Subnet   Subnet
	MAC      string
	Serial   string // switches
	Product  string // switches
	Platform string // ONIE platform
	Cluster  string
	Role     string // control-plane | worker | sonic
	// Cabled says the switch is cabled to relay port Port (a lab with
	// Scenario.Positions): its position's circuit-id is PortName(Port).
	Cabled bool
	Port   int

	// InstallerSHA256 is what the ONIE download must hash to.
	InstallerSHA256 string
	// V6 is set on an IPv6 lab. On a v6-only lab the device asks DHCPv6
	// (ONIE discovers by link-local) and talks to ztpd over IPv6; on a
	// dual-stack lab (DualStack) a SONiC switch asks both, as SONiC's
	// dhclient does on a dual-stack eth0, and fetches ztp.json from the
	// DHCPv6 option 59 URL, over IPv6.
	V6        *Link6
	DualStack bool
}

// Link6 is what a v6-only device's management link gives it besides
// DHCPv6: the on-link prefix and default router its Router Advertisements
// would carry, and the metadata service's address.
type Link6 struct {
	OnLink   netip.Prefix
	Router   netip.Addr
	Metadata netip.Addr
}

// Progress receives each step a device takes.
type Progress func(device, step string)

// retryFor repeats fn while it fails, until ok or the budget is spent:
// a device whose cluster has no control plane yet is told to come back.
func retryFor(ctx context.Context, budget time.Duration, fn func() error) error {
	deadline := time.Now().Add(budget)
	wait := 500 * time.Millisecond
	for {
		err := fn()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(wait):
		}
		if wait < 4*time.Second {
			wait *= 2
		}
	}
}

// RunSwitch onboards a SONiC switch (after ONIE installs it, when Kind is
// onie): DHCP with dhclient configured as SONiC, the whole ztp.json walk
// with curl, the ztpd join plugin with python3, the kubelet's TLS
// bootstrap with the switch certificate against the real API server
// (simulated kubelet), and the joined report (a hint to ztpd).
func RunSwitch(ctx context.Context, k *Kube, ns *netns.NS, dir string, d Device, progress Progress) error {
	if d.Kind == "onie" {
		run := runONIE
		if d.V6 != nil && !d.DualStack {
			run = runONIELinkLocal
		}
		if err := run(ctx, ns, filepath.Join(dir, "onie"), d, progress); err != nil {
			return err
		}
		// "Reboot" into the installed SONiC: forget the ONIE address (on
		// IPv6 the link-local one stays: DHCPv6 is sent from it).
		if d.V6 == nil || d.DualStack {
			_ = ns.IP("-4", "addr", "flush", "dev", "eth0")
		}
	}
	var lease DHCPLease
	var err error
	if d.V6 != nil && d.DualStack {
		progress(d.Name, "dhcp and dhcpv6 (dhclient -4 and -6 as SONiC)")
		lease, err = Dhclient(ctx, ns, filepath.Join(dir, "dhcp"), SONiCDhclientConf(d.Product, d.Serial))
		if err == nil {
			var l6 DHCPLease
			if l6, err = Dhclient6(ctx, ns, filepath.Join(dir, "dhcp6"), SONiCDhclient6Conf, d.V6.OnLink, d.V6.Router); err == nil {
				lease["ztp_json_url"] = l6["dhcp6_boot_file_url"]
			}
		}
	} else if d.V6 != nil {
		progress(d.Name, "dhcpv6 (dhclient -6 as SONiC)")
		lease, err = Dhclient6(ctx, ns, filepath.Join(dir, "dhcp6"), SONiCDhclient6Conf, d.V6.OnLink, d.V6.Router)
		if err == nil {
			lease["ztp_json_url"] = lease["dhcp6_boot_file_url"] // option 59, as sonic-ztp's hook reads it
		}
	} else {
		progress(d.Name, "dhcp (dhclient as SONiC)")
		lease, err = Dhclient(ctx, ns, filepath.Join(dir, "dhcp"), SONiCDhclientConf(d.Product, d.Serial))
	}
	if err != nil {
		return err
	}
	ztpURL := lease["ztp_json_url"]
	if ztpURL == "" {
		return fmt.Errorf("lease %s has no option 67: %v", lease.IP(), lease)
	}
	if !strings.Contains(ztpURL, "://") && lease["tftp_server_name"] != "" {
		ztpURL = "tftp://" + lease["tftp_server_name"] + "/" + ztpURL
	}
	id := SwitchIdentity{Serial: d.Serial, Product: d.Product, BaseMAC: d.MAC, SONiCVersion: "N.A",
		Hostname: firstNonEmpty(lease["host_name"], "sonic")}
	progress(d.Name, "ztp.json "+lease.IP())
	var fetched []Fetched
	var doc map[string]any
	err = retryFor(ctx, 3*time.Minute, func() error {
		var err error
		doc, fetched, err = WalkZTPJSON(ctx, ns, dir, id, ztpURL)
		return err
	})
	if err != nil {
		return err
	}
	progress(d.Name, fmt.Sprintf("ztp sections fetched (%d urls)", len(fetched)))
	section, plugin := joinSection(doc, fetched)
	if section == nil {
		return fmt.Errorf("ztp.json has no join section: %v", doc)
	}
	root := filepath.Join(dir, "root")
	pluginPath := filepath.Join(dir, "ztpd-join-plugin")
	if err := os.WriteFile(pluginPath, plugin, 0o755); err != nil {
		return err
	}
	secPath := filepath.Join(dir, "join-section.json")
	raw, _ := json.Marshal(section)
	if err := os.WriteFile(secPath, raw, 0o600); err != nil {
		return err
	}
	progress(d.Name, "join plugin")
	wrapper := filepath.Join(dir, "run-join-plugin.py")
	if err := os.WriteFile(wrapper, []byte(keepDeliveryPy), 0o755); err != nil {
		return err
	}
	cmd := ns.Command(ctx, "python3", wrapper, pluginPath, secPath)
	cmd.Env = append(os.Environ(), "ZTPD_ROOT="+root, "ZTPD_MAX_WAIT=180")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("join plugin: %v: %s", err, tail(string(out), 800))
	}
	if err := k.joinSwitch(ctx, ns, root, d, lease.IP(), progress); err != nil {
		return err
	}
	return report(ctx, ns, dir, d, filepath.Join(root, "etc/sonic/ztpd/report.env"), progress)
}

// keepDeliveryPy runs the ztpd join plugin unchanged and keeps the join
// delivery it received under ZTPD_ROOT: on a switch, ctrmgrd's kubelet
// finds the API server in CONFIG_DB (which the plugin writes with
// sonic-cfggen, skipped under ZTPD_ROOT) and its node name and labels in
// the delivery; the lab's simulated kubelet reads them from this file.
const keepDeliveryPy = `import importlib.machinery, importlib.util, json, sys
loader = importlib.machinery.SourceFileLoader("ztpd_join_plugin", sys.argv[1])
plugin = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
loader.exec_module(plugin)
request_bundle = plugin.request_bundle
def keep(*args):
    b = request_bundle(*args)
    plugin.install("` + sonicJoinFile + `", json.dumps(b), 0o600)
    return b
plugin.request_bundle = keep
sys.argv = sys.argv[1:]
sys.exit(plugin.main())
`

// joinSection finds the section carrying an enrollment secret and the plugin
// the walk downloaded for it.
func joinSection(doc map[string]any, fetched []Fetched) (map[string]any, []byte) {
	ztp, _ := doc["ztp"].(map[string]any)
	for name, v := range ztp {
		sec, ok := v.(map[string]any)
		if !ok || sec["enrollment"] == nil {
			continue
		}
		for _, f := range fetched {
			if f.Section == name && bytes.HasPrefix(f.Body, []byte("#!")) {
				return map[string]any{name: sec}, f.Body
			}
		}
		return map[string]any{name: sec}, nil
	}
	return nil, nil
}

// runONIE is the ONIE installer's part: DHCP with its vendor class, then the
// installer from option 114 with ONIE's headers, checked by sha256.
func runONIE(ctx context.Context, ns *netns.NS, dir string, d Device, progress Progress) error {
	progress(d.Name, "dhcp (dhclient as ONIE)")
	lease, err := Dhclient(ctx, ns, filepath.Join(dir, "dhcp"), ONIEDhclientConf(d.Platform))
	if err != nil {
		return err
	}
	u := lease["onie_default_url"]
	if u == "" {
		return fmt.Errorf("ONIE lease %s has no option 114: %v", lease.IP(), lease)
	}
	progress(d.Name, "onie installer "+lease.IP())
	return onieDownload(ctx, ns, dir, d, u)
}

// runONIELinkLocal is ONIE's discovery without DHCP, on an IPv6 link:
// ping6 ff02::1, then the waterfall at each neighbour's link-local
// address until one serves the installer.
func runONIELinkLocal(ctx context.Context, ns *netns.NS, dir string, d Device, progress Progress) error {
	progress(d.Name, "onie ping6 ff02::1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	_, neigh, err := ONIELinkLocalURL(ctx, ns, d.Platform)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range neigh {
		u := fmt.Sprintf("http://[%s%%25eth0]/onie-installer-%s", n, d.Platform)
		progress(d.Name, "onie installer "+u)
		err := onieDownload(ctx, ns, dir, d, u)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("no link-local neighbour served the installer: %w", errors.Join(errs...))
}

// onieDownload fetches the installer at u with ONIE's headers and checks
// its sha256.
func onieDownload(ctx context.Context, ns *netns.NS, dir string, d Device, u string) error {
	arch, machine, rev := splitPlatform(d.Platform)
	out := filepath.Join(dir, "installer.bin")
	args := []string{"-f", "-s", "-S", "-o", out, "-A", "onie/1.0",
		"-H", "ONIE-SERIAL-NUMBER: " + d.Serial, "-H", "ONIE-ETH-ADDR: " + d.MAC, "-H", "ONIE-VENDOR-ID: 259",
		"-H", "ONIE-MACHINE: " + machine, "-H", "ONIE-MACHINE-REV: " + rev, "-H", "ONIE-ARCH: " + arch,
		"-H", "ONIE-MANUFACTURER: lab", "-H", "ONIE-VERSION: 2023.05", "-H", "ONIE-OPERATION: os-install", "--", u}
	if msg, err := ns.Command(ctx, "curl", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ONIE download %s: %v: %s", u, err, msg)
	}
	body, err := os.ReadFile(out)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	if got := hex.EncodeToString(sum[:]); d.InstallerSHA256 != "" && got != d.InstallerSHA256 {
		return fmt.Errorf("ONIE installer sha256 %s, want %s", got, d.InstallerSHA256)
	}
	return nil
}

// splitPlatform splits x86_64-accton_as7712_32x-r0 into ONIE's arch,
// machine and revision.
func splitPlatform(p string) (arch, machine, rev string) {
	arch, rest, _ := strings.Cut(p, "-")
	if i := strings.LastIndex(rest, "-r"); i > 0 {
		return arch, rest[:i], rest[i+2:]
	}
	return arch, rest, "0"
}

// RunVM onboards a CloudStack VM the way cloud-init's CloudStack datasource
// does: busybox udhcpc, the metadata service at the DHCP server address,
// user-data, checked with `cloud-init schema`, its write_files written
// under the VM's root. With the device HTTPS listener the user-data is
// public and installs ztpd's join waiter: the lab runs that script for
// real (python3 and curl pinned to ztpd's key, in the VM's namespace,
// ZTPD_ROOT=root), which waits while ztpd says so and then writes the
// join data's files; the commands it would run (systemd units, the
// install from the ISO) are logged and skipped under ZTPD_ROOT. Then what
// the deploy script does with kubeadm: the first control plane starts the
// real control plane from its init bundle, every other VM runs the real
// kubeadm join discovery; the VM's kubelet is simulated (see Kube). Last
// comes the report its deploy script sends (a hint to ztpd).
func RunVM(ctx context.Context, k *Kube, ns *netns.NS, dir string, d Device, progress Progress) error {
	if d.DualStack {
		d.V6 = nil // VMs on a dual-stack lab keep to IPv4: cloud-init's CloudStack datasource is IPv4 only
	}
	var lease DHCPLease
	var err error
	if d.V6 != nil {
		progress(d.Name, "dhcpv6 (dhclient -6)")
		lease, err = Dhclient6(ctx, ns, filepath.Join(dir, "dhcp6"), vmDhclient6Conf, d.V6.OnLink, d.V6.Router)
	} else {
		progress(d.Name, "dhcp (udhcpc)")
		lease, err = Udhcpc(ctx, ns, filepath.Join(dir, "dhcp"), d.Name, "")
	}
	if err != nil {
		return err
	}
	server := lease["server_identifier"]
	var ud []byte
	if d.V6 != nil {
		// cloud-init's CloudStack datasource finds the metadata server
		// from the DHCPv4 lease (the virtual router's address) and has
		// no IPv6 form: a v6-only VM walks the metadata service with
		// curl at the address its management network names.
		ud, err = curlMetadata(ctx, ns, dir, d, "["+d.V6.Metadata.String()+"]", lease.IP(), progress)
	} else if HaveCloudInit() {
		progress(d.Name, "cloud-init CloudStack datasource "+lease.IP())
		r, err := CloudInitCloudStack(ctx, ns, dir, server)
		if err != nil {
			return err
		}
		if ip, _ := r.Metadata["local-ipv4"].(string); ip != lease.IP() || r.InstanceID == "" {
			return fmt.Errorf("cloud-init meta-data: local-ipv4 %q (lease %s), instance-id %q", ip, lease.IP(), r.InstanceID)
		}
		// cloud-init logs a failed user-data fetch and boots without it,
		// never to run it on this instance: the user-data must be there
		// at the first boot, admitted or not.
		if !bytes.HasPrefix(r.UserData, []byte("#cloud-config")) {
			return fmt.Errorf("cloud-init got no cloud-config user-data at the first boot: %.80q", r.UserData)
		}
		ud = r.UserData
		if err := CloudInitSchema(ctx, filepath.Join(dir, "cloud-init", "user-data")); err != nil {
			return err
		}
	} else {
		ud, err = curlMetadata(ctx, ns, dir, d, server, lease.IP(), progress)
	}
	if err != nil {
		return err
	}
	var cc struct {
		WriteFiles []struct {
			Path        string `yaml:"path"`
			Permissions string `yaml:"permissions"`
			Content     string `yaml:"content"`
		} `yaml:"write_files"`
	}
	if !bytes.HasPrefix(ud, []byte("#cloud-config")) {
		return fmt.Errorf("user-data is not a cloud-config: %.80q", ud)
	}
	if err := yaml.Unmarshal(ud, &cc); err != nil {
		return fmt.Errorf("user-data: %w", err)
	}
	root := filepath.Join(dir, "root")
	for _, f := range cc.WriteFiles {
		dst := filepath.Join(root, filepath.Clean("/"+f.Path))
		os.MkdirAll(filepath.Dir(dst), 0o700)
		mode, err := strconv.ParseUint(f.Permissions, 8, 32)
		if err != nil {
			mode = 0o600
		}
		if err := os.WriteFile(dst, []byte(f.Content), os.FileMode(mode)); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(root, bundle.JoinWaitScriptPath)); err == nil {
		if err := runJoinWaiter(ctx, ns, dir, root, d, progress); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(root, bundle.EtcdMemberConfig)); err == nil {
		// An etcd node: the real etcd from its join data; no kubelet.
		return k.startEtcdNode(ctx, ns, dir, root, d, progress)
	}
	_, err = os.Stat(filepath.Join(root, "etc/kubernetes/pki/ca.key"))
	if err == nil {
		err = k.startFirstControlPlane(ctx, ns, dir, root, d, lease.IP(), progress)
	} else {
		err = k.joinNode(ctx, ns, dir, root, d, lease.IP(), progress)
	}
	if err != nil {
		return err
	}
	return report(ctx, ns, dir, d, filepath.Join(root, "etc/ztpd/report.env"), progress)
}

// JoinWaitLog is where RunVM keeps the join waiter's output, in the VM's
// directory.
const JoinWaitLog = "join-wait.log"

// JoinWaitCap is the lab's ZTPD_WAIT_CAP: the waiter asks again at least
// this often (in seconds), whatever Retry-After says, so the lab's VMs
// follow their cluster and approval within seconds.
const JoinWaitCap = 2

// runJoinWaiter runs the join waiter the user-data wrote, as its systemd
// unit would (ExecStart=/usr/bin/python3 <script>), in the VM's
// namespace with ZTPD_ROOT=root, until it has installed the join data;
// what it says is kept in JoinWaitLog and each wait is shown as the
// VM's step.
func runJoinWaiter(ctx context.Context, ns *netns.NS, dir, root string, d Device, progress Progress) error {
	progress(d.Name, "join waiter (pinned TLS)")
	logf, err := os.Create(filepath.Join(dir, JoinWaitLog))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := ns.Command(ctx, "python3", filepath.Join(root, bundle.JoinWaitScriptPath))
	cmd.Env = append(os.Environ(), "ZTPD_ROOT="+root, "ZTPD_WAIT_CAP="+strconv.Itoa(JoinWaitCap))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return err
	}
	var last []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(logf, time.Now().UTC().Format(time.RFC3339Nano), line)
		if msg, ok := strings.CutPrefix(line, "ztpd-join-wait: waiting: "); ok {
			progress(d.Name, "join waiter: "+msg)
		}
		if last = append(last, line); len(last) > 12 {
			last = last[1:]
		}
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("join waiter: %v: %s", err, strings.Join(last, "\n"))
	}
	if _, err := os.Stat(filepath.Join(root, bundle.JoinWaitDone)); err != nil {
		return fmt.Errorf("join waiter ended without installing the join data: %s", strings.Join(last, "\n"))
	}
	progress(d.Name, "join data installed")
	return nil
}

// vmDhclient6Conf is a plain VM's dhclient -6: an address and DNS, no
// ZTP options.
const vmDhclient6Conf = `request dhcp6.name-servers, dhcp6.domain-search;
timeout 30;
retry 2;
`

// curlMetadata walks the metadata service with curl, for a machine without
// Debian's cloud-init.
func curlMetadata(ctx context.Context, ns *netns.NS, dir string, d Device, server, ip string, progress Progress) ([]byte, error) {
	base := "http://" + server + "/latest/"
	progress(d.Name, "meta-data "+ip)
	for _, k := range []string{"instance-id", "local-hostname", "local-ipv4", "availability-zone", "vm-id"} {
		body, err := Curl(ctx, ns, dir, SwitchIdentity{}, base+"meta-data/"+k)
		if err != nil {
			return nil, err
		}
		if k == "local-ipv4" && strings.TrimSpace(string(body)) != ip {
			return nil, fmt.Errorf("meta-data local-ipv4 %q, lease %s", body, ip)
		}
	}
	progress(d.Name, "user-data")
	var ud []byte
	err := retryFor(ctx, 3*time.Minute, func() error {
		var err error
		ud, err = Curl(ctx, ns, dir, SwitchIdentity{}, base+"user-data")
		return err
	})
	return ud, err
}

// report posts "joined" with curl to the report URL the join bundle gave.
func report(ctx context.Context, ns *netns.NS, dir string, d Device, envFile string, progress Progress) error {
	env, err := readEnvFile(envFile)
	if err != nil {
		return fmt.Errorf("no report credential from the join bundle: %w", err)
	}
	u, tok := env["ZTPD_REPORT_URL"], env["ZTPD_REPORT_TOKEN"]
	if u == "" || tok == "" {
		return fmt.Errorf("%s lacks ZTPD_REPORT_URL or ZTPD_REPORT_TOKEN", envFile)
	}
	progress(d.Name, "report joined")
	args := []string{"-f", "-s", "-S"}
	if pin := env["ZTPD_REPORT_PIN"]; pin != "" {
		args = append(args, "-k", "--pinnedpubkey", pin)
	}
	args = append(args, "-X", "POST", "-H", "Content-Type: application/json",
		"-H", "Authorization: Bearer "+tok, "--data", `{"state":"joined"}`, "--", u)
	out, err := ns.Command(ctx, "curl", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("report: %v: %s", err, out)
	}
	progress(d.Name, "joined")
	return nil
}

func readEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if ok {
			env[k] = strings.Trim(v, `'"`)
		}
	}
	return env, sc.Err()
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
