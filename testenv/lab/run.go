package lab

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
)

// Scenario is what a lab onboards.
type Scenario struct {
	Switches int // SONiC switches, alternating between subnet A and B (behind the relay)
	ONIE     int // switches that first install SONiC through ONIE
	VMs      int // CloudStack VMs, alternating between subnets
	Clusters int // clusters; VM i < Clusters is cluster i's control plane
	// Upgrade starts the clusters at the Kubernetes version before the
	// newest built and, once every device joined, upgrades them to the
	// newest node by node (upgrade.go: a rollout per cluster, the devices'
	// real agents, simulated kubeadm and kubelets).
	Upgrade bool
	// Positions cables every switch (SONiC and ONIE) to a port of its
	// own behind ISC dhcrelay -a and plans it by that port: a cabling plan
	// names each port's switch, cluster, role and address (replace: auto),
	// and no profile matches its serial, so what a switch is comes from
	// where it is plugged in. IPv4 only.
	Positions bool
	// EtcdNodes builds cluster lab-0 with that many etcd nodes (external
	// etcd): the VMs after the control planes, their profile's role etcd.
	// Each runs the real etcd from its join data.
	EtcdNodes int
}

// Options tune Run.
type Options struct {
	Prefix  string // namespace prefix
	Octet   int    // third octet of subnet A
	WorkDir string
	Bin     string    // the ztpd binary
	Out     io.Writer // live progress table; nil for none
	Live    bool      // redraw the table in place (a terminal)
	Timeout time.Duration
	// Kubeletsim is the testenv/cmd/kubeletsim binary the
	// devices' simulated kubelets run.
	Kubeletsim string
	// Hollow runs kubemark's hollow node as every device's kubelet instead
	// of kubeletsim (the real kubelet over a fake container runtime, so
	// pods scheduled to a Node go through the kubelet's pod workers and
	// termination grace periods), and kube-scheduler beside each control
	// plane; with Scenario.Upgrade, the hollow node of the newer version
	// replaces it when the device's kubelet restarts. Needs kubemark built
	// for both versions (testenv/k8sbin/build.sh).
	Hollow bool
	// EditConfig, if set, changes the appliance configuration before ztpd
	// starts (a test that wants a device to wait for approval narrows
	// joiner.auto_approve).
	EditConfig func(config string) string
	// OnStarted, if set, runs once ztpd serves and the clusters exist,
	// before any device starts (a test attaches its watchers there); its
	// error ends Open.
	OnStarted func(*Lab) error
	// Family is the lab's address families: IPv4 (the zero value), IPv6
	// (v6-only) or DualStack.
	Family Family
	// UpgradeByHand, with Scenario.Upgrade, prepares the upgrade (the
	// newest version registered, the devices' agents running) but leaves
	// starting it to a person (the cluster's page, or ztpd cluster
	// upgrade); Lab.FollowRollouts shows it in the table.
	UpgradeByHand bool
	// BeforeUpgrade, if set, runs with Scenario.Upgrade once every device
	// joined and the clusters settled, before the upgrade starts (a test
	// puts the workload the upgrade must move there); its error ends Open.
	BeforeUpgrade func(*Lab) error
}

// Result is the checked end state.
type Result struct {
	Devices  []core.Device  `json:"devices"`
	Clusters []ClusterState `json:"clusters"`
	Elapsed  time.Duration  `json:"elapsed_ns"`
	// KubernetesVersion is what the clusters run (the newest built).
	KubernetesVersion string `json:"kubernetes_version"`
	// ControlPlanes are the real control planes, by cluster.
	ControlPlanes []ControlPlaneInfo `json:"control_planes"`
	// Rollouts are the clusters' upgrades (Scenario.Upgrade), by cluster;
	// UpgradedTo the version they went to.
	Rollouts   []RolloutResult `json:"rollouts,omitempty"`
	UpgradedTo string          `json:"upgraded_to,omitempty"`
}

// ControlPlaneInfo says where a cluster's real control plane runs.
type ControlPlaneInfo struct {
	Cluster   string        `json:"cluster"`
	Device    string        `json:"device"`
	Namespace string        `json:"namespace"`
	URL       string        `json:"url"`
	Dir       string        `json:"dir"` // its /etc/kubernetes, logs under ../logs
	Started   time.Duration `json:"start_ns"`
}

// Plan lays the scenario out as devices.
func (s Scenario) Plan() []Device {
	var devs []Device
	cluster := func(i int) string { return fmt.Sprintf("lab-%d", i%max(s.Clusters, 1)) }
	for i := 0; i < s.VMs; i++ {
		role := "worker"
		switch {
		case i < s.Clusters:
			role = "control-plane"
		case i < s.Clusters+s.EtcdNodes:
			role = "etcd"
		}
		devs = append(devs, Device{Name: fmt.Sprintf("vm%d", i), Kind: "vm", Subnet: Subnet(i % 2),
			MAC: fmt.Sprintf("1e:00:00:00:01:%02x", i), Cluster: cluster(i), Role: role})
	}
	for i := 0; i < s.Switches+s.ONIE; i++ {
		d := Device{Name: fmt.Sprintf("sw%d", i), Kind: "sonic", Subnet: Subnet(i % 2),
			MAC: fmt.Sprintf("02:00:00:00:02:%02x", i), Serial: fmt.Sprintf("LAB%04d", i),
			Product: "Accton-AS7712-32X", Cluster: cluster(i), Role: "sonic"}
		if s.Positions {
			d.Subnet, d.Cabled, d.Port = SubnetB, true, i
		}
		if i >= s.Switches {
			d.Name, d.Kind, d.Platform = fmt.Sprintf("onie%d", i-s.Switches), "onie", "x86_64-accton_as7712_32x-r0"
		}
		devs = append(devs, d)
	}
	return devs
}

// Lab probes: the appliance's watch probes each cluster every second and
// moves it to Alert after 20 s unhealthy, so the tests see both quickly.
const (
	labProbeInterval = time.Second
	// LabAlertAfter is the lab's api.cluster_alert_after.
	LabAlertAfter = 20 * time.Second
)

// cabledProfile is the one profile of the switches a lab plans by port.
const cabledProfile = "lab-switch"

// profile is the profile the lab's configuration gives d.
func (d Device) profile() string {
	if d.Cabled {
		return cabledProfile
	}
	return d.Name
}

// Config renders the appliance configuration and writes the profiles.
func (t *Topology) Config(devs []Device) (string, error) {
	pdir := filepath.Join(t.WorkDir, "profiles")
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		return "", err
	}
	var profiles, plan strings.Builder
	for _, d := range devs {
		if d.Cabled {
			// The position is the switch's identity: no profile by serial.
			fmt.Fprintf(&plan, "  - {name: %s, relay: %s, circuit_id: %s, address: %s, rack: lab, port: %s, cluster: %s, role: %s, profile: %s, replace: auto}\n",
				d.Name, t.RelayGW, PortName(d.Port), t.PortAddr(d.Port), PortName(d.Port), d.Cluster, d.Role, cabledProfile)
			continue
		}
		fmt.Fprintf(&profiles, "---\nname: %s\nmatch:\n", d.Name)
		if d.Kind == "vm" {
			fmt.Fprintf(&profiles, "  mac: \"%s\"\n", d.MAC)
		} else {
			fmt.Fprintf(&profiles, "  serial: %s\n", d.Serial)
		}
		fmt.Fprintf(&profiles, "hostname: %s\n", d.Name)
		if d.Cluster != "" {
			fmt.Fprintf(&profiles, "cluster: %s\nrole: %s\n", d.Cluster, d.Role)
		}
	}
	if plan.Len() > 0 {
		// The switches' one profile, as for a rack of leaves: by the port
		// they are cabled to, the plan giving each its name and cluster.
		profiles.WriteString("---\nname: " + cabledProfile + "\nmatch:\n  circuit_id: \"p*\"\n")
	}
	if err := os.WriteFile(filepath.Join(pdir, "lab.yaml"), []byte(profiles.String()), 0o644); err != nil {
		return "", err
	}
	if t.Family != IPv4 {
		return t.config6(pdir), nil
	}
	// dnsmasq relays subnet B: giaddr is its br1 address, and it sends from
	// that address too (through its uplink on br0). ISC dhcrelay (a lab
	// with relay ports) sends from its uplink's.
	relay := fmt.Sprintf("{address: %s, interface: br0}", t.RelayGW)
	positions := ""
	if t.Ports > 0 {
		relay = fmt.Sprintf("{address: %s, giaddrs: [%s], interface: br0}", t.RelayUp, t.RelayGW)
		file := filepath.Join(t.WorkDir, "positions.yaml")
		if err := os.WriteFile(file, []byte("positions:\n"+plan.String()), 0o644); err != nil {
			return "", err
		}
		positions = "positions: [" + file + "]\n"
	}
	a, b := t.Nets[0], t.Nets[1]
	pool := func(p string) string { return p + "10-" + p + "200" }
	pa := strings.TrimSuffix(a.Addr().String(), "0")
	pb := strings.TrimSuffix(b.Addr().String(), "0")
	return fmt.Sprintf(`data_dir: %[1]s
advertise_addr: %[2]s
log: {level: info, format: json}
http:
  addr: %[2]s:8080
  metadata_addr: %[2]s:80
  # switches fetch their join answer over pinned HTTPS
  tls: {enabled: true, addr: "%[2]s:8442"}
api:
  cluster_probe_interval: %[9]s
  cluster_alert_after: %[10]s
dhcp:
  interfaces: [br0]
  lease_time: 1h
  vm: {mac_prefixes: ["1e:00"]}
  relays:
    - %[11]s
  subnets:
    - {name: lab-a, subnet: %[3]s, interface: br0, pools: ["%[4]s"], router: %[2]s}
    - {name: lab-b, subnet: %[5]s, pools: ["%[6]s"], router: %[7]s}
profiles: [%[8]s]
%[12]sjoiner:
  auto_approve:
    - {subnets: [%[3]s, %[5]s], roles: [control-plane, worker]}
`, filepath.Join(t.WorkDir, "data"), t.AppAddr, a, pool(pa), b, pool(pb), t.RelayGW, pdir, labProbeInterval, LabAlertAfter,
		relay, positions), nil
}

// config6 is the appliance configuration of an IPv6 or dual-stack lab:
// DHCPv6 on both subnets (B through dhcrelay -6), ONIE's link-local
// discovery answered on br0, and on a dual-stack lab the IPv4 subnets too,
// each device getting URLs in the family it asked over.
func (t *Topology) config6(pdir string) string {
	a6, b6 := t.Nets6[0], t.Nets6[1]
	pool6 := func(p netip.Prefix) string {
		base := strings.TrimSuffix(p.Addr().String(), "::")
		return fmt.Sprintf("%s::100-%s::1ff", base, base)
	}
	app6 := "[" + t.AppAddr6.String() + "]"
	var c strings.Builder
	fmt.Fprintf(&c, "data_dir: %s\nlog: {level: info, format: json}\n", filepath.Join(t.WorkDir, "data"))
	subnets := fmt.Sprintf(`    - {name: lab-a6, subnet: "%s", interface: br0, pools: ["%s"]}
    - {name: lab-b6, subnet: "%s", pools: ["%s"]}
`, a6, pool6(a6), b6, pool6(b6))
	relays := fmt.Sprintf("    - {address: \"%s\", giaddrs: [\"%s\"]}\n", t.RelayUp6, t.RelayGW6)
	approve := fmt.Sprintf(`"%s", "%s"`, a6, b6)
	if t.Family == IPv6 {
		fmt.Fprintf(&c, `advertise_addr: "%[1]s"
http:
  addr: "%[2]s:8080"
  metadata_addr: "%[2]s:80"
  onie_link_local: [br0]
  tls: {enabled: true, addr: "%[2]s:8442"}
api:
  addr: "%[2]s:8443"
`, t.AppAddr6, app6)
	} else {
		pa := strings.TrimSuffix(t.Nets[0].Addr().String(), "0")
		pb := strings.TrimSuffix(t.Nets[1].Addr().String(), "0")
		fmt.Fprintf(&c, `advertise_addr: %[1]s
advertise_addr6: "%[2]s"
http:
  addr: "[::]:8080"
  metadata_addr: %[1]s:80
  onie_link_local: [br0]
  tls: {enabled: true, addr: "[::]:8442"}
api:
  addr: %[1]s:8443
`, t.AppAddr, app6)
		subnets = fmt.Sprintf(`    - {name: lab-a, subnet: %s, interface: br0, pools: ["%s10-%s200"], router: %s}
    - {name: lab-b, subnet: %s, pools: ["%s10-%s200"], router: %s}
`, t.Nets[0], pa, pa, t.AppAddr, t.Nets[1], pb, pb, t.RelayGW) + subnets
		relays = fmt.Sprintf("    - {address: %s, interface: br0}\n", t.RelayGW) + relays
		approve = fmt.Sprintf("%s, %s, ", t.Nets[0], t.Nets[1]) + approve
	}
	fmt.Fprintf(&c, `  cluster_probe_interval: %s
  cluster_alert_after: %s
dhcp:
  interfaces: [br0]
  lease_time: 1h
  vm: {mac_prefixes: ["1e:00"]}
  relays:
%s  subnets:
%sprofiles: [%s]
joiner:
  auto_approve:
    - {subnets: [%s], roles: [control-plane, worker]}
`, labProbeInterval, LabAlertAfter, relays, subnets, pdir, approve)
	return c.String()
}

// Lab is an onboarded lab whose appliance, control planes and kubelets
// still run (for tests that go on from there). Close tears it down.
type Lab struct {
	Topo     *Topology
	App      *Appliance
	Kube     *Kube
	Plan     []Device
	Result   *Result
	clusters *clusterReader

	opts  Options
	start time.Time
	steps *stepTable
	// UpgradeTo is the version the lab's upgrade goes to (Scenario.Upgrade).
	UpgradeTo string
}

// Close stops everything the lab started and removes its namespaces.
func (l *Lab) Close() error { return l.Topo.Close() }

// Run builds a lab, onboards it (Open), checks it and tears it down.
func Run(ctx context.Context, s Scenario, o Options) (*Result, error) {
	l, err := Open(ctx, s, o)
	if l == nil {
		return nil, err
	}
	defer l.Close()
	return l.Result, err
}

// Open builds a lab, starts ztpd, creates the clusters over the CloudStack
// API with the newest Kubernetes built here, onboards every device with
// real clients (real control planes and kubeadm discovery, simulated
// kubelets), and checks the end state against the real API servers and
// ztpd (Result.Check). When the returned Lab is not nil it runs, also with
// an error: Close it.
func Open(ctx context.Context, s Scenario, o Options) (*Lab, error) {
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	start := time.Now()
	var kube *Kube
	var err error
	var upgradeTo string
	if s.Upgrade {
		var from string
		if from, upgradeTo, err = UpgradeVersions(); err != nil {
			return nil, err
		}
		if kube, err = NewKubeAt(o.Kubeletsim, from); err != nil {
			return nil, err
		}
		kube.StatusEvery = 2 * time.Second
	} else if kube, err = NewKube(o.Kubeletsim); err != nil {
		return nil, err
	}
	if o.Hollow {
		var also []string
		if upgradeTo != "" {
			also = append(also, upgradeTo)
		}
		if err := kube.UseHollow(also...); err != nil {
			return nil, err
		}
	}
	var topo *Topology
	if s.Positions {
		if o.Family != IPv4 {
			return nil, fmt.Errorf("a lab with positions is IPv4 only (dhcrelay -a's option 82 circuit-ids): drop --ipv6/--dual-stack")
		}
		topo, err = BuildPorts(o.Prefix, o.Octet, o.WorkDir, s.Switches+s.ONIE)
	} else {
		topo, err = BuildFamily(o.Prefix, o.Octet, o.WorkDir, o.Family)
	}
	if err != nil {
		return nil, err
	}
	kube.attach(topo)
	l := &Lab{Topo: topo, Kube: kube, Plan: s.Plan(), Result: &Result{KubernetesVersion: kube.Bins.Version},
		opts: o, start: start, UpgradeTo: upgradeTo}
	devs := l.Plan
	if o.Family == IPv6 {
		// ONIE discovers by link-local, which no relay carries: its
		// switches sit on the appliance's own link.
		for i := range devs {
			if devs[i].Kind == "onie" {
				devs[i].Subnet = SubnetA
			}
		}
	}
	cfg, err := topo.Config(devs)
	if err != nil {
		return l, err
	}
	if o.EditConfig != nil {
		cfg = o.EditConfig(cfg)
	}
	app, err := topo.StartAppliance(ctx, o.Bin, cfg)
	if err != nil {
		return l, err
	}
	l.App = app
	l.clusters = newClusterReader(app, topo, kube)
	if err := app.UseAdminKey(ctx); err != nil {
		return l, err
	}
	installer, err := addInstaller(ctx, app, topo.WorkDir)
	if err != nil {
		return l, err
	}
	if err := createClusters(ctx, app, devs, s.Clusters, kube.Bins.Version); err != nil {
		return l, err
	}
	if o.OnStarted != nil {
		if err := o.OnStarted(l); err != nil {
			return l, err
		}
	}

	steps := newStepTable(devs)
	l.steps = steps
	var wg sync.WaitGroup
	errs := make([]error, len(devs))
	for i := range devs {
		d := &devs[i]
		d.InstallerSHA256 = installer
		if o.Family != IPv4 {
			d.V6, d.DualStack = topo.link6(d), o.Family == DualStack
		}
		ns, err := topo.plugDevice(d)
		if err != nil {
			return l, err
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			dir := filepath.Join(topo.WorkDir, "devices", d.Name)
			os.MkdirAll(dir, 0o755)
			if d.Kind == "vm" {
				errs[i] = RunVM(ctx, kube, ns, dir, *d, steps.set)
			} else {
				errs[i] = RunSwitch(ctx, kube, ns, dir, *d, steps.set)
			}
			if errs[i] != nil {
				steps.set(d.Name, "FAILED: "+firstLine(errs[i].Error()))
			}
		}(i)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	// The table shows ztpd's device states and the Nodes as the real API
	// servers show them (read every 2 s once a cluster hands out its
	// kubeconfig).
	var devices []core.Device
	var cs []ClusterState
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	lastRead := time.Time{}
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-tick.C:
		}
		devices, _ = listDevices(ctx, app)
		if o.Out != nil && time.Since(lastRead) > 2*time.Second {
			cs, _ = l.clusters.read(ctx)
			lastRead = time.Now()
		}
		if o.Out != nil {
			steps.print(o.Out, devices, cs, o.Live && running, time.Since(start))
		}
	}
	var failed []string
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s (%s): %v%s", devs[i].Name, devs[i].MAC, err, evidence(topo.WorkDir, devs[i].MAC)))
		}
	}
	res := l.Result
	res.Devices = devices
	for _, p := range kube.Planes() {
		res.ControlPlanes = append(res.ControlPlanes, ControlPlaneInfo{Cluster: p.Cluster, Device: p.Device, Namespace: p.NS.Name,
			URL: p.CP.URL(), Dir: p.CP.KubernetesDir(), Started: p.CP.StartDuration})
	}
	if len(failed) > 0 {
		res.Clusters, _ = l.clusters.read(ctx)
		res.Elapsed = time.Since(start)
		return l, fmt.Errorf("%d device(s) failed:\n  %s\n(logs under %s)", len(failed), strings.Join(failed, "\n  "), topo.WorkDir)
	}
	// The devices are done; the clusters turn Running and ztpd shows every
	// member joined once its watch has seen the Nodes Ready.
	err = l.clusters.settle(ctx, res, devs, 2*time.Minute)
	if err == nil && s.Upgrade && o.BeforeUpgrade != nil {
		err = o.BeforeUpgrade(l)
	}
	if err == nil && s.Upgrade {
		if o.UpgradeByHand {
			_, err = l.prepareUpgrade(ctx)
		} else {
			res.UpgradedTo = upgradeTo
			err = l.upgrade(ctx)
		}
	}
	res.Elapsed = time.Since(start)
	if o.Out != nil {
		steps.print(o.Out, res.Devices, res.Clusters, false, res.Elapsed)
	}
	return l, err
}

// Cluster reads one cluster from ztpd and its API server.
func (l *Lab) Cluster(ctx context.Context, name string) (ClusterState, error) {
	cs, err := l.clusters.read(ctx)
	if err != nil {
		return ClusterState{}, err
	}
	for _, c := range cs {
		if c.Name == name {
			return c, nil
		}
	}
	return ClusterState{}, fmt.Errorf("no cluster %s", name)
}

// Kubectl runs kubectl against a cluster (by name) with the kubeconfig
// ztpd's getKubernetesClusterConfig gave, from the appliance's namespace.
func (l *Lab) Kubectl(ctx context.Context, cluster string, args ...string) ([]byte, error) {
	c, err := l.Cluster(ctx, cluster)
	if err != nil {
		return nil, err
	}
	return l.clusters.Kubectl(ctx, c.ID, args...)
}

// ZTPD runs the ztpd CLI against the appliance's API (from its namespace,
// with the lab's admin key) and returns its standard output.
func (l *Lab) ZTPD(ctx context.Context, args ...string) ([]byte, error) {
	return l.App.APICLI(ctx, args...)
}

// addInstaller stores an ONIE installer for the lab platform and returns
// its sha256.
func addInstaller(ctx context.Context, app *Appliance, work string) (string, error) {
	path := filepath.Join(work, "sonic-lab.bin")
	body := []byte("#!/bin/sh\n# lab SONiC installer\n" + strings.Repeat("x", 1<<20))
	if err := os.WriteFile(path, body, 0o644); err != nil {
		return "", err
	}
	if _, err := app.CLI(ctx, "image", "add", path, "--kind", "onie-installer",
		"--platform", "x86_64-accton_as7712_32x-r0", "--version", "lab"); err != nil {
		return "", err
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:]), nil
}

// createClusters registers a version and creates each cluster, sized to the
// devices planned into it, through the CloudStack API.
func createClusters(ctx context.Context, app *Appliance, devs []Device, n int, version string) error {
	semver := strings.TrimPrefix(version, "v")
	v, err := app.CloudStack(ctx, "addKubernetesSupportedVersion", url.Values{
		"semanticversion": {semver}, "name": {"v" + semver}, "url": {"http://lab.invalid/k8s-" + semver + ".iso"}})
	if err != nil {
		return err
	}
	var ver client.CSVersion
	json.Unmarshal(v["kubernetessupportedversion"], &ver)
	zr, err := app.CloudStack(ctx, "listZones", nil)
	if err != nil {
		return err
	}
	var zones []client.CSZone
	json.Unmarshal(zr["zone"], &zones)
	if len(zones) == 0 {
		return fmt.Errorf("listZones returned none")
	}
	so, err := app.CloudStack(ctx, "listServiceOfferings", nil)
	if err != nil {
		return err
	}
	var offerings []client.CSOffering
	json.Unmarshal(so["serviceoffering"], &offerings)
	if len(offerings) == 0 {
		return fmt.Errorf("listServiceOfferings returned none")
	}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("lab-%d", i)
		control, workers, etcd := 0, 0, 0
		for _, d := range devs {
			if d.Cluster != name {
				continue
			}
			switch d.Role {
			case "control-plane":
				control++
			case "etcd":
				etcd++
			default:
				workers++
			}
		}
		p := url.Values{
			"name": {name}, "kubernetesversionid": {ver.ID}, "size": {strconv.Itoa(workers)},
			"controlnodes": {strconv.Itoa(max(control, 1))}, "serviceofferingid": {offerings[0].ID}, "zoneid": {zones[0].ID}}
		if etcd > 0 {
			p.Set("etcdnodes", strconv.Itoa(etcd))
		}
		if _, err := app.CloudStack(ctx, "createKubernetesCluster", p); err != nil {
			return err
		}
	}
	return nil
}

func listDevices(ctx context.Context, app *Appliance) ([]core.Device, error) {
	var page struct {
		Items []core.Device `json:"items"`
	}
	err := app.REST(ctx, "/api/v1/devices", url.Values{"limit": {"1000"}}, &page)
	return page.Items, err
}

// stepTable is the live view: one row per device.
type stepTable struct {
	mu    sync.Mutex
	devs  []Device
	steps map[string]string
	lines int
	last  string
}

func newStepTable(devs []Device) *stepTable {
	return &stepTable{devs: devs, steps: map[string]string{}}
}

func (s *stepTable) set(device, step string) {
	s.mu.Lock()
	s.steps[device] = step
	s.mu.Unlock()
}

func (s *stepTable) print(w io.Writer, devices []core.Device, clusters []ClusterState, live bool, elapsed time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	byMAC := map[string]core.Device{}
	for _, d := range devices {
		byMAC[d.MAC] = d
	}
	// The Node of each device, as its cluster's API server shows it.
	nodeOf := map[string]string{} // device id -> Node Ready
	for _, c := range clusters {
		ready := map[string]string{}
		for _, n := range c.Nodes {
			ready[n.Name] = "Ready=" + n.Ready
			if n.ControlPlane {
				ready[n.Name] += ",control-plane"
			}
			if n.KubeletVersion != "" {
				ready[n.Name] += " " + n.KubeletVersion
			}
		}
		for _, m := range c.Members {
			if r, ok := ready[m.NodeName]; ok {
				nodeOf[m.Device] = m.NodeName + " " + r
			}
		}
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "DEVICE\tKIND\tSUBNET\tIP\tZTPD STATE\tCLUSTER\tNODE (API SERVER)\tSTEP\n")
	joined := 0
	for _, d := range s.devs {
		st := byMAC[d.MAC]
		if st.State == core.StateJoined {
			joined++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Name, d.Kind, []string{"A", "B (relay)"}[d.Subnet],
			dashIfEmpty(st.IP), dashIfEmpty(string(st.State)), d.Cluster, dashIfEmpty(nodeOf[st.ID]), s.steps[d.Name])
	}
	tw.Flush()
	for _, c := range clusters {
		ready := 0
		for _, n := range c.Nodes {
			if n.Ready == "True" {
				ready++
			}
		}
		line := fmt.Sprintf("cluster %s: %s, API %s, %d/%d Nodes Ready", c.Name, c.State, dashIfEmpty(c.Endpoint), ready, len(c.Nodes))
		if c.NodesError != "" && len(c.Nodes) == 0 {
			line = fmt.Sprintf("cluster %s: %s, API %s (%s)", c.Name, c.State, dashIfEmpty(c.Endpoint), firstLine(c.NodesError))
		}
		b.WriteString(line + "\n")
	}
	if !live && b.String() == s.last {
		return // a log, not a screen: print changes only
	}
	s.last = b.String()
	fmt.Fprintf(&b, "%d/%d joined, %s\n", joined, len(s.devs), elapsed.Truncate(100*time.Millisecond))
	if live && s.lines > 0 {
		fmt.Fprintf(w, "\x1b[%dA\x1b[J", s.lines)
	}
	io.WriteString(w, b.String())
	s.lines = strings.Count(b.String(), "\n")
	if !live {
		s.lines = 0
	}
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// evidence is what the appliance and the relay logged about a failed
// device (the last lines naming its MAC, and the relay's last lines), so a
// failure report read from CI's tail says why without the work directory.
func evidence(work, mac string) string {
	var b strings.Builder
	last := func(file, what string, n int, keep func(string) bool) {
		raw, err := os.ReadFile(filepath.Join(work, file))
		if err != nil {
			return
		}
		var lines []string
		for _, l := range strings.Split(string(raw), "\n") {
			if l != "" && keep(l) {
				lines = append(lines, l)
			}
		}
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		fmt.Fprintf(&b, "\n    %s, last %d lines%s:", file, len(lines), what)
		for _, l := range lines {
			if len(l) > 400 {
				l = l[:400] + "..."
			}
			b.WriteString("\n      " + l)
		}
	}
	last("ztpd.out", " naming "+mac, 12, func(l string) bool { return strings.Contains(strings.ToLower(l), strings.ToLower(mac)) })
	last("relay.log", "", 8, func(string) bool { return true })
	return b.String()
}
