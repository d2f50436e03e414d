package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ztpd/ztpd/internal/packaging"
	"github.com/ztpd/ztpd/testenv/controlplane"
	"github.com/ztpd/ztpd/testenv/kubebin"
	"github.com/ztpd/ztpd/testenv/lab"
	"github.com/ztpd/ztpd/testenv/netns"
)

// walkStep is one marked piece of the README's walkthrough:
// <!-- walkthrough: KIND ARG --> before a fence (config, file, run) or
// alone (device: what the simulated device does at that point).
type walkStep struct {
	kind, arg, body string
	line            int
}

// readmeWalkthrough extracts the marked steps of the README's section
// "First real switch: a walkthrough", in order.
func readmeWalkthrough(t *testing.T) []walkStep {
	t.Helper()
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	marker := regexp.MustCompile(`^\s*<!-- walkthrough: (\w+) ?(.*?) -->\s*$`)
	var steps []walkStep
	in := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "## ") {
			in = l == "## First real switch: a walkthrough"
			continue
		}
		m := marker.FindStringSubmatch(l)
		if !in || m == nil {
			continue
		}
		s := walkStep{kind: m[1], arg: m[2], line: i + 1}
		if s.kind != "device" {
			j := i + 1
			if j >= len(lines) || !strings.HasPrefix(strings.TrimSpace(lines[j]), "```") {
				t.Fatalf("README.md:%d: walkthrough marker %q is not followed by a code block", i+1, l)
			}
			indent := lines[j][:len(lines[j])-len(strings.TrimLeft(lines[j], " "))]
			var body []string
			for j++; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
				body = append(body, strings.TrimPrefix(lines[j], indent))
			}
			s.body, i = strings.Join(body, "\n")+"\n", j
		}
		steps = append(steps, s)
	}
	if len(steps) == 0 {
		t.Fatal("README.md: no walkthrough steps found in \"First real switch: a walkthrough\"")
	}
	return steps
}

// TestReadmeWalkthrough runs the README's walkthrough as written: the
// operator's commands in the appliance's namespace, the configuration and
// profiles it shows, and the devices it describes (a SONiC switch as
// dhclient and curl, a CloudStack VM as udhcpc and its metadata fetch) in
// namespaces of their own behind the appliance's zd0 (10.99.77.1/24). The
// substitutions below are the only liberties taken. The join runs as in
// testenv/lab: the approved VM runs the real control plane from its
// cloud-config (kubeadm init phases, etcd, kube-apiserver,
// kube-controller-manager), the switch runs its join plugin, and only the
// kubelets are simulated. Without the Kubernetes binaries (make k8s-bins)
// the test checks every step up to the join and then skips, saying so.
func TestReadmeWalkthrough(t *testing.T) {
	if err := netns.Check(); err != nil {
		t.Skip(err)
	}
	for _, tool := range []string{"dhclient", "curl", "busybox"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s on PATH (the simulated switch and VM)", tool)
		}
	}
	steps := readmeWalkthrough(t)
	bin := buildZtpd(t)
	root := t.TempDir()
	cfgPath := filepath.Join(root, "etc/ztpd/ztpd.yaml")
	// The only substitutions: the package's paths under a scratch root, the
	// CLI with its configuration named, the service manager's three
	// commands on a ztpd serve this test runs, and the README's Kubernetes
	// version by the newest one built here when it is not built (logged).
	kubeVersion, kubeErr := walkKubernetesVersion(t)
	paths := strings.NewReplacer("/etc/ztpd/", root+"/etc/ztpd/", "/var/lib/ztpd", root+"/var/lib/ztpd",
		readmeKubernetesVersion, kubeVersion)
	const (
		startService  = "systemctl enable --now ztpd"
		reloadService = "systemctl reload ztpd"
		serviceLog    = "journalctl -u ztpd"
	)
	for _, d := range []string{"etc/ztpd/profiles", "var/lib/ztpd"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o750); err != nil {
			t.Fatal(err)
		}
	}

	// The management network: zd0, a bridge in the appliance's namespace,
	// with the switch and the VM each behind a veth.
	app, sw, vm := walkNS(t, "zwalk-app"), walkNS(t, "zwalk-sw"), walkNS(t, "zwalk-vm")
	for _, args := range [][]string{
		{"link", "add", "zd0", "type", "bridge"},
		{"addr", "add", "10.99.77.1/24", "dev", "zd0"},
		{"link", "set", "zd0", "up"},
	} {
		if err := app.IP(args...); err != nil {
			t.Fatal(err)
		}
	}
	const switchMAC, vmMAC = "02:99:77:00:00:01", "1e:00:77:00:00:0a"
	for _, dev := range []struct {
		ns       *netns.NS
		port     string
		mac      string
		hostname string
	}{{sw, "zdsw", switchMAC, "sonic"}, {vm, "zdvm", vmMAC, "fabric-cp"}} {
		for _, args := range [][]string{
			{"link", "add", dev.port, "type", "veth", "peer", "name", "eth0", "netns", dev.ns.Name},
			{"link", "set", dev.port, "master", "zd0", "up"},
		} {
			if err := app.IP(args...); err != nil {
				t.Fatal(err)
			}
		}
		if err := dev.ns.IP("link", "set", "eth0", "address", dev.mac, "up"); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env := cliEnv(t)
	var serve *exec.Cmd
	var serveLog syncBuf
	t.Cleanup(func() {
		if serve != nil && serve.Process != nil {
			serve.Process.Signal(syscall.SIGTERM)
			serve.Wait()
		}
	})
	// sh runs one command line of the README in the appliance's namespace.
	sh := func(s walkStep, cmdline string) string {
		t.Helper()
		cmdline = paths.Replace(strings.TrimPrefix(cmdline, "sudo "))
		switch {
		case cmdline == startService:
			serve = app.Command(context.Background(), bin, "serve", "--config", cfgPath)
			serve.Env, serve.Stdout, serve.Stderr = env, &serveLog, &serveLog
			if err := serve.Start(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "ztpd started", func() bool { return strings.Contains(serveLog.String(), `msg="ztpd started"`) })
			return ""
		case cmdline == reloadService:
			if err := serve.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			return ""
		case cmdline == serviceLog:
			return serveLog.String()
		case strings.HasPrefix(cmdline, "ztpd "):
			cmdline = bin + " --config " + cfgPath + strings.TrimPrefix(cmdline, "ztpd")
		}
		follow := strings.Contains(cmdline, "--follow")
		cctx, ccancel := context.WithTimeout(ctx, time.Minute)
		if follow { // "in another terminal": what it shows in a few seconds
			cctx, ccancel = context.WithTimeout(ctx, 3*time.Second)
		}
		defer ccancel()
		c := app.Command(cctx, "sh", "-c", cmdline)
		c.Env = env
		// A --follow runs until its time is up: the shell and what it
		// started go together, or the output pipe never closes.
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
		c.WaitDelay = 5 * time.Second
		out, err := c.CombinedOutput()
		if err != nil && !(follow && cctx.Err() != nil) {
			t.Fatalf("README.md:%d: %s: %v\n%s\nztpd's log:\n%s", s.line, cmdline, err, out, serveLog.tail(3000))
		}
		t.Logf("README.md:%d: $ %s\n%s", s.line, cmdline, out)
		return string(out)
	}
	cli := func(args ...string) string {
		c := app.Command(ctx, bin, append([]string{"--config", cfgPath}, args...)...)
		c.Env = env
		out, _ := c.CombinedOutput()
		return string(out)
	}
	id := lab.SwitchIdentity{Serial: "LEAF0001", Product: "Accton-AS7712-32X", BaseMAC: switchMAC, SONiCVersion: "N.A", Hostname: "sonic"}
	var ztpURL string
	outputs := map[string]string{} // first command word after ztpd + its args, for the checks below

	for _, s := range steps {
		switch s.kind {
		case "config":
			// The installed default with the README's edits over it.
			var base, edit map[string]any
			if err := yaml.Unmarshal([]byte(paths.Replace(string(packaging.DefaultConfig()))), &base); err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal([]byte(paths.Replace(s.body)), &edit); err != nil {
				t.Fatalf("README.md:%d: %v", s.line, err)
			}
			merged, err := yaml.Marshal(mergeYAML(base, edit))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(paths.Replace(s.arg), merged, 0o644); err != nil {
				t.Fatal(err)
			}
		case "file":
			if err := os.WriteFile(paths.Replace(s.arg), []byte(s.body), 0o644); err != nil {
				t.Fatal(err)
			}
		case "run":
			for _, l := range strings.Split(s.body, "\n") {
				if cmd, ok := strings.CutPrefix(l, "$ "); ok {
					// Keyed without the README's trailing comment.
					key, _, _ := strings.Cut(cmd, "  #")
					outputs[strings.TrimSpace(key)] = sh(s, cmd)
				}
			}
		case "device":
			switch s.arg {
			case "switch boots":
				lease, err := lab.Dhclient(ctx, sw, filepath.Join(root, "switch", "dhcp"), lab.SONiCDhclientConf(id.Product, id.Serial))
				if err != nil {
					t.Fatalf("README.md:%d: the switch's DHCP: %v", s.line, err)
				}
				if ztpURL = lease["ztp_json_url"]; ztpURL != "http://10.99.77.1:8080/ztp/ztp.json" || lease.IP() != "10.99.77.10" {
					t.Fatalf("the switch's lease: %v", lease)
				}
				if _, err := lab.Curl(ctx, sw, root, id, ztpURL); err == nil || !strings.Contains(err.Error(), "404") {
					t.Fatalf("the switch's first ztp.json, with no profile: %v, want a 404", err)
				}
			case "switch fetches its ztp.json":
				var err error
				waitFor(t, "the switch served its ztp.json", func() bool {
					_, err = lab.Curl(ctx, sw, root, id, ztpURL)
					return err == nil
				})
			case "vm boots":
				lease, err := lab.Udhcpc(ctx, vm, filepath.Join(root, "vm", "dhcp"), "fabric-cp", "")
				if err != nil {
					t.Fatalf("README.md:%d: the VM's DHCP: %v", s.line, err)
				}
				// cloud-init's CloudStack datasource asks the DHCP server.
				md := vm.Command(ctx, "curl", "-s", "http://"+lease["server_identifier"]+"/latest/user-data")
				ud, err := md.Output()
				if err != nil || len(ud) == 0 {
					t.Fatalf("the VM's user-data: %s %v", ud, err)
				}
				// With the device HTTPS listener the user-data is public
				// and its join waiter asks for the join data: told to wait.
				if u, pins, ok := lab.JoinWaiterOf(ud); ok {
					if code, err := lab.AskJoinData(ctx, vm, u, pins); err != nil || code != 503 {
						t.Fatalf("the VM's join waiter asking %s before approval: %d %v, want 503", u, code, err)
					}
				}
				if got := cli("device", "show", vmMAC); !regexp.MustCompile(`(?m)^kind\s+vm\b`).MatchString(got) && !strings.Contains(got, "kind: vm") && !strings.Contains(got, " vm ") {
					t.Fatalf("the CloudStack VM %s is not kind vm (dhcp.vm.mac_prefixes' default):\n%s", vmMAC, got)
				}
			case "switch joins":
				if kubeErr == nil {
					kubeErr = controlplane.Check()
				}
				if kubeErr != nil {
					t.Skipf("every step up to the join ran as written; the join needs the VM's real control plane: %v (make k8s-bins)", kubeErr)
				}
				walkJoin(ctx, t, root, kubeVersion, vm, sw, lab.Device{Name: "fabric-cp", Kind: "vm", MAC: vmMAC, Cluster: "fabric", Role: "control-plane"},
					lab.Device{Name: "leaf0001", Kind: "sonic", MAC: switchMAC, Serial: id.Serial, Product: id.Product, Cluster: "fabric", Role: "sonic"},
					cli, serveLog.String)
			default:
				t.Fatalf("README.md:%d: unknown device step %q", s.line, s.arg)
			}
		default:
			t.Fatalf("README.md:%d: unknown walkthrough step %q", s.line, s.kind)
		}
		checkWalkOutputs(t, outputs, serveLog.String())
	}
	for cmd := range walkOutputs {
		if _, ran := outputs[cmd]; !ran {
			t.Errorf("README walkthrough: %q, whose output this test checks, is not among its commands", cmd)
		}
	}
}

// readmeKubernetesVersion is the version the walkthrough's cluster runs.
const readmeKubernetesVersion = "1.37.2"

// walkKubernetesVersion is the version the walkthrough's cluster runs here:
// the README's when its binaries are built, else the newest pinned one that
// is (a substitution the test logs); with none built, the README's and why
// the join cannot run.
func walkKubernetesVersion(t *testing.T) (string, error) {
	t.Helper()
	if _, err := kubebin.Etcd(); err != nil {
		return readmeKubernetesVersion, err
	}
	_, err := kubebin.Kubernetes(readmeKubernetesVersion)
	if err == nil || !errors.Is(err, kubebin.ErrNotBuilt) {
		return readmeKubernetesVersion, err
	}
	vs, verr := kubebin.Versions()
	if verr != nil {
		return readmeKubernetesVersion, verr
	}
	for i := len(vs) - 1; i >= 0; i-- {
		if _, berr := kubebin.Kubernetes(vs[i]); berr == nil {
			v := strings.TrimPrefix(vs[i], "v")
			t.Logf("substitution: Kubernetes %s for the README's %s, whose binaries are not built (%v)", v, readmeKubernetesVersion, err)
			return v, nil
		}
	}
	return readmeKubernetesVersion, err
}

// walkJoin is what the approved devices do once the README approves them,
// with testenv/lab's pieces: the control-plane VM boots again, its
// cloud-init fetches the user-data that now carries its join (handed out
// once) and it runs the real control plane (lab.RunVM), then the
// switch's SONiC ZTP runs its join plugin and its kubelet (simulated)
// registers with the switch certificate (lab.RunSwitch). It returns once
// the switch's Node is Ready in that API server and ztpd has seen it.
func walkJoin(ctx context.Context, t *testing.T, root, version string, vm, sw *netns.NS, vmDev, swDev lab.Device, cli func(...string) string, log func() string) {
	t.Helper()
	kubeletsim := filepath.Join(root, "kubeletsim")
	if err := lab.BuildBinaries(map[string]string{kubeletsim: "github.com/ztpd/ztpd/testenv/cmd/kubeletsim"}); err != nil {
		t.Fatal(err)
	}
	k, closeKube, err := lab.NewKubeIn(kubeletsim, version, filepath.Join(root, "kube"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeKube() })
	progress := func(device, step string) { t.Logf("%s: %s", device, step) }
	if err := lab.RunVM(ctx, k, vm, filepath.Join(root, "vm"), vmDev, progress); err != nil {
		t.Fatalf("the control-plane VM: %v\nztpd's log:\n%s", err, tailString(log(), 3000))
	}
	plane := k.Plane("fabric")
	if plane == nil {
		t.Fatal("the VM ran no control plane for fabric")
	}
	waitLong(t, "fabric Running", func() bool {
		return regexp.MustCompile(`(?m)^state\s+Running\s*$`).MatchString(cli("cluster", "show", "fabric"))
	})
	if err := lab.RunSwitch(ctx, k, sw, filepath.Join(root, "switch"), swDev, progress); err != nil {
		t.Fatalf("the switch: %v\nztpd's log:\n%s", err, tailString(log(), 3000))
	}
	var ready string
	waitLong(t, "the switch's Node Ready in fabric's API server", func() bool {
		out, _ := plane.CP.Kubectl(ctx, "get", "node", swDev.Name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		ready = string(out)
		return ready == "True"
	})
	nodes, _ := plane.CP.Kubectl(ctx, "get", "nodes", "-o", "wide")
	t.Logf("kubectl get nodes (fabric's API server):\n%s", nodes)
	for _, d := range []lab.Device{vmDev, swDev} {
		waitLong(t, d.Name+"'s member joined", func() bool {
			return regexp.MustCompile(`(?m)^` + d.MAC + `\s.*\sjoined\s`).MatchString(cli("cluster", "members", "fabric"))
		})
	}
}

// waitLong is waitFor with a join's patience: a minute and a half.
func waitLong(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); !ok(); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 90s", what)
		}
	}
}

// walkOutputs is what each command the walkthrough shows must print, by
// its command line (without a trailing comment).
var walkOutputs = map[string]*regexp.Regexp{
	"sudo journalctl -u ztpd": regexp.MustCompile(`no device profiles are loaded`),
	"sudo ztpd cluster create fabric --version 1.37.2 --join-method sonic --size 1": regexp.MustCompile(`Starting`),
	"sudo ztpd device list --state unmatched":                                       regexp.MustCompile(`02:99:77:00:00:01\s+sonic\s+leased\s+10\.99\.77\.10.*LEAF0001.*no profile matches`),
	"sudo ztpd profile check --device LEAF0001":                                     regexp.MustCompile(`(?m)^matched\s+leaf\s*$`),
	"sudo ztpd device list":                                                         regexp.MustCompile(`02:99:77:00:00:01\s+sonic\s+ztp-served\s+10\.99\.77\.10`),
	"sudo ztpd device list --state waiting":                                         regexp.MustCompile(`1e:00:77:00:00:0a`),
	"sudo ztpd events --device 02:99:77:00:00:01 --follow":                          regexp.MustCompile(`member\.joined\s+02:99:77:00:00:01 fabric Node leaf0001 is Ready`),
	"sudo ztpd cluster members fabric":                                              regexp.MustCompile(`(?m)^02:99:77:00:00:01\s+leaf0001\s+sonic\s+joined\s`),
}

// checkWalkOutputs holds each command the walkthrough shows to what the
// README says it prints, once it has run.
func checkWalkOutputs(t *testing.T, outputs map[string]string, log string) {
	t.Helper()
	for cmd, want := range walkOutputs {
		got, ran := outputs[cmd]
		if ran && !want.MatchString(got) {
			t.Fatalf("README walkthrough: %s printed\n%s\nwant it to match %s; ztpd's log:\n%s", cmd, got, want, tailString(log, 3000))
		}
	}
}

// mergeYAML lays edit over base: maps merge key by key, anything else is
// replaced, as the README's "change ... and add" means.
func mergeYAML(base, edit map[string]any) map[string]any {
	for k, v := range edit {
		if bm, ok := base[k].(map[string]any); ok {
			if em, ok := v.(map[string]any); ok {
				base[k] = mergeYAML(bm, em)
				continue
			}
		}
		base[k] = v
	}
	return base
}

func walkNS(t *testing.T, name string) *netns.NS {
	t.Helper()
	n, err := netns.Add(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuf) tail(n int) string { return tailString(s.String(), n) }

func tailString(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
