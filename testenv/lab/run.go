package lab

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// Scenario is what a lab onboards.
type Scenario struct {
	Switches int // SONiC switches, alternating between subnet A and B (behind the relay)
	ONIE     int // switches that first install SONiC through ONIE
	VMs      int // CloudStack VMs, alternating between subnets
	Clusters int // clusters; VM i < Clusters is cluster i's control plane
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
}

// Result is the checked end state.
type Result struct {
	Devices  []core.Device  `json:"devices"`
	Clusters []ClusterState `json:"clusters"`
	Elapsed  time.Duration  `json:"elapsed_ns"`
}

// ClusterState is a cluster's size and its joined members, from the API.
type ClusterState struct {
	Name    string `json:"name"`
	State   string `json:"state"`
	Size    int    `json:"size"`
	Control int    `json:"control_nodes"`
	Joined  int    `json:"joined"`
}

// Plan lays the scenario out as devices.
func (s Scenario) Plan() []Device {
	var devs []Device
	cluster := func(i int) string { return fmt.Sprintf("lab-%d", i%max(s.Clusters, 1)) }
	for i := 0; i < s.VMs; i++ {
		role := "worker"
		if i < s.Clusters {
			role = "control-plane"
		}
		devs = append(devs, Device{Name: fmt.Sprintf("vm%d", i), Kind: "vm", Subnet: Subnet(i % 2),
			MAC: fmt.Sprintf("1e:00:00:00:01:%02x", i), Cluster: cluster(i), Role: role})
	}
	for i := 0; i < s.Switches+s.ONIE; i++ {
		d := Device{Name: fmt.Sprintf("sw%d", i), Kind: "sonic", Subnet: Subnet(i % 2),
			MAC: fmt.Sprintf("02:00:00:00:02:%02x", i), Serial: fmt.Sprintf("LAB%04d", i),
			Product: "Accton-AS7712-32X", Cluster: cluster(i), Role: "sonic"}
		if i >= s.Switches {
			d.Name, d.Kind, d.Platform = fmt.Sprintf("onie%d", i-s.Switches), "onie", "x86_64-accton_as7712_32x-r0"
		}
		devs = append(devs, d)
	}
	return devs
}

// Config renders the appliance configuration and writes the profiles.
func (t *Topology) Config(devs []Device) (string, error) {
	pdir := filepath.Join(t.WorkDir, "profiles")
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		return "", err
	}
	var profiles strings.Builder
	for _, d := range devs {
		fmt.Fprintf(&profiles, "---\nname: %s\nmatch:\n", d.Name)
		if d.Kind == "vm" {
			fmt.Fprintf(&profiles, "  mac: \"%s\"\n", d.MAC)
		} else {
			fmt.Fprintf(&profiles, "  serial: %s\n", d.Serial)
		}
		fmt.Fprintf(&profiles, "hostname: %s\ncluster: %s\nrole: %s\n", d.Name, d.Cluster, d.Role)
	}
	if err := os.WriteFile(filepath.Join(pdir, "lab.yaml"), []byte(profiles.String()), 0o644); err != nil {
		return "", err
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
dhcp:
  interfaces: [br0]
  lease_time: 1h
  vm: {mac_prefixes: ["1e:00"]}
  subnets:
    - {name: lab-a, subnet: %[3]s, interface: br0, pools: ["%[4]s"], router: %[2]s}
    - {name: lab-b, subnet: %[5]s, pools: ["%[6]s"], router: %[7]s}
profiles: [%[8]s]
joiner:
  auto_approve:
    - {subnets: [%[3]s, %[5]s], roles: [control-plane, worker]}
`, filepath.Join(t.WorkDir, "data"), t.AppAddr, a, pool(pa), b, pool(pb), t.RelayGW, pdir), nil
}

// Run builds a lab, starts ztpd, creates the clusters over the CloudStack
// API, onboards every device with real clients, and checks the end state
// through the API: every device joined, every cluster at its desired size.
func Run(ctx context.Context, s Scenario, o Options) (*Result, error) {
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	start := time.Now()
	topo, err := Build(o.Prefix, o.Octet, o.WorkDir)
	if err != nil {
		return nil, err
	}
	defer topo.Close()
	devs := s.Plan()
	cfg, err := topo.Config(devs)
	if err != nil {
		return nil, err
	}
	app, err := topo.StartAppliance(ctx, o.Bin, cfg)
	if err != nil {
		return nil, err
	}
	if err := app.UseAdminKey(ctx); err != nil {
		return nil, err
	}
	installer, err := addInstaller(ctx, app, topo.WorkDir)
	if err != nil {
		return nil, err
	}
	if err := createClusters(ctx, app, devs, s.Clusters); err != nil {
		return nil, err
	}

	steps := newStepTable(devs)
	var wg sync.WaitGroup
	errs := make([]error, len(devs))
	for i := range devs {
		d := &devs[i]
		d.InstallerSHA256 = installer
		ns, err := topo.AddDevice(d.Name, d.Subnet, d.MAC)
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			dir := filepath.Join(topo.WorkDir, "devices", d.Name)
			os.MkdirAll(dir, 0o755)
			if d.Kind == "vm" {
				errs[i] = RunVM(ctx, ns, dir, *d, steps.set)
			} else {
				errs[i] = RunSwitch(ctx, ns, dir, *d, steps.set)
			}
			if errs[i] != nil {
				steps.set(d.Name, "FAILED: "+firstLine(errs[i].Error()))
			}
		}(i)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var devices []core.Device
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-tick.C:
		}
		devices, _ = listDevices(ctx, app)
		if o.Out != nil {
			steps.print(o.Out, devices, o.Live && running, time.Since(start))
		}
	}
	var failed []string
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", devs[i].Name, err))
		}
	}
	res := &Result{Devices: devices, Elapsed: time.Since(start)}
	if res.Clusters, err = clusterStates(ctx, app); err != nil {
		return res, err
	}
	if len(failed) > 0 {
		return res, fmt.Errorf("%d device(s) failed:\n  %s\n(logs under %s)", len(failed), strings.Join(failed, "\n  "), topo.WorkDir)
	}
	return res, res.Check(devs)
}

// Check verifies the end state: every planned device is joined and every
// cluster has exactly its desired members.
func (r *Result) Check(devs []Device) error {
	state := map[string]core.Device{}
	for _, d := range r.Devices {
		state[d.MAC] = d
	}
	var bad []string
	for _, d := range devs {
		got, ok := state[d.MAC]
		if !ok || got.State != core.StateJoined {
			bad = append(bad, fmt.Sprintf("%s (%s) is %q, not joined", d.Name, d.MAC, got.State))
		}
	}
	for _, c := range r.Clusters {
		if c.Joined != c.Size+c.Control {
			bad = append(bad, fmt.Sprintf("cluster %s has %d joined members, wants %d control + %d workers", c.Name, c.Joined, c.Control, c.Size))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("end state wrong:\n  %s", strings.Join(bad, "\n  "))
	}
	return nil
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
func createClusters(ctx context.Context, app *Appliance, devs []Device, n int) error {
	v, err := app.CloudStack(ctx, "addKubernetesSupportedVersion", url.Values{
		"semanticversion": {"1.31.4"}, "name": {"v1.31.4"}, "url": {"http://lab.invalid/k8s-1.31.4.iso"}})
	if err != nil {
		return err
	}
	var ver struct {
		ID string `json:"id"`
	}
	json.Unmarshal(v["kubernetessupportedversion"], &ver)
	zr, err := app.CloudStack(ctx, "listZones", nil)
	if err != nil {
		return err
	}
	var zones []struct {
		ID string `json:"id"`
	}
	json.Unmarshal(zr["zone"], &zones)
	if len(zones) == 0 {
		return fmt.Errorf("listZones returned none")
	}
	so, err := app.CloudStack(ctx, "listServiceOfferings", nil)
	if err != nil {
		return err
	}
	var offerings []struct {
		ID string `json:"id"`
	}
	json.Unmarshal(so["serviceoffering"], &offerings)
	if len(offerings) == 0 {
		return fmt.Errorf("listServiceOfferings returned none")
	}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("lab-%d", i)
		control, workers := 0, 0
		for _, d := range devs {
			if d.Cluster != name {
				continue
			}
			if d.Role == "control-plane" {
				control++
			} else {
				workers++
			}
		}
		if _, err := app.CloudStack(ctx, "createKubernetesCluster", url.Values{
			"name": {name}, "kubernetesversionid": {ver.ID}, "size": {strconv.Itoa(workers)},
			"controlnodes": {strconv.Itoa(max(control, 1))}, "serviceofferingid": {offerings[0].ID}, "zoneid": {zones[0].ID}}); err != nil {
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

func clusterStates(ctx context.Context, app *Appliance) ([]ClusterState, error) {
	inner, err := app.CloudStack(ctx, "listKubernetesClusters", nil)
	if err != nil {
		return nil, err
	}
	var list []struct {
		Name            string `json:"name"`
		State           string `json:"state"`
		Size            int    `json:"size"`
		ControlNodes    int    `json:"controlnodes"`
		VirtualMachines []struct {
			State string `json:"ztpdstate"`
		} `json:"virtualmachines"`
	}
	json.Unmarshal(inner["kubernetescluster"], &list)
	var out []ClusterState
	for _, c := range list {
		cs := ClusterState{Name: c.Name, State: c.State, Size: c.Size, Control: c.ControlNodes}
		for _, vm := range c.VirtualMachines {
			if vm.State == string(core.StateJoined) {
				cs.Joined++
			}
		}
		out = append(out, cs)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
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

func (s *stepTable) print(w io.Writer, devices []core.Device, live bool, elapsed time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	byMAC := map[string]core.Device{}
	for _, d := range devices {
		byMAC[d.MAC] = d
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "DEVICE\tKIND\tSUBNET\tIP\tZTPD STATE\tCLUSTER\tSTEP\n")
	joined := 0
	for _, d := range s.devs {
		st := byMAC[d.MAC]
		if st.State == core.StateJoined {
			joined++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Name, d.Kind, []string{"A", "B (relay)"}[d.Subnet],
			dashIfEmpty(st.IP), dashIfEmpty(string(st.State)), d.Cluster, s.steps[d.Name])
	}
	tw.Flush()
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
