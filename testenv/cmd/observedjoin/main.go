// Command observedjoin is the observed-join benchmark (bench/observed-join.sh):
// N SONiC switches join a real Kubernetes cluster while ztpd watches it,
// and it reports how long until ztpd's API shows every one joined next to
// how long until the API server itself has every Node Ready (the
// reference, measured in the same run), with the CPU time and peak RSS of
// ztpd and of the control plane. The last line is
//
//	RESULT observed_join nodes=<n> seconds=<s> ztpd_rss_mb=<m>
//
// What runs: a real `ztpd serve` in namespace oj-srv (10.99.0.1/16, its
// default configuration but for the addresses, DHCP subnet, profiles and
// auto-approval a deployment needs). In oj-cli (10.99.0.2/16, the DHCP
// relay's giaddr; the pool's /24s are "local" routes there, so every
// leased address is usable as a source) one process plays every client:
//
//  1. a CloudStack VM (DORA, /latest/user-data from its leased address)
//     gets the first-control-plane cloud-config of cluster "oj" and runs
//     the real control plane from it (testenv/controlplane: kubeadm init
//     phases with ztpd's CA, etcd, kube-apiserver, kube-controller-manager
//     as processes, ztpd's RBAC manifests), registers its Node with a
//     simulated kubelet (kubeadm's kubelet.conf) and runs kubeadm's
//     mark-control-plane; the driver waits until ztpd shows the cluster
//     Running;
//  2. N SONiC switches onboard as in the boot storm (testenv/fleet: DORA,
//     ztp.json, config_db.json, join bundle) and keep their bundles;
//  3. at t0, N simulated kubelets (testenv/kubeletsim, one Pool) start,
//     each with its switch's client certificate, node name, labels and
//     API server: TLS bootstrap (a CSR KCM approves and signs), Node
//     registration, status and Lease.
//
// From t0 it times two things: the API server's view (a Node informer with
// kubeadm's admin.conf: every switch Node Ready) and ztpd's (GET
// /api/v1/clusters/{id} every 250 ms: every switch member "joined"), and
// samples /proc/<pid>/stat (CPU) and /proc/<pid>/status (VmHWM) of ztpd,
// kube-apiserver, kube-controller-manager, etcd and itself. It needs root
// and the binaries testenv/k8sbin/build.sh builds.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	apiclient "github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/testenv/controlplane"
	"github.com/ztpd/ztpd/testenv/fleet"
	"github.com/ztpd/ztpd/testenv/kubebin"
	"github.com/ztpd/ztpd/testenv/kubeletsim"
	"github.com/ztpd/ztpd/testenv/lab"
	"github.com/ztpd/ztpd/testenv/netns"
	"github.com/ztpd/ztpd/testenv/procstat"
	"github.com/ztpd/ztpd/testenv/stormlab"
)

type options struct {
	n             int
	version       string // Kubernetes version, e.g. v1.37.2
	probeInterval string // api.cluster_probe_interval; empty: ztpd's default
	conc          int    // switches onboarding at once
	bootstrapConc int    // kubelet TLS bootstraps at once (kubeletsim's default 16)
	bin, work     string
	timeout       time.Duration

	// client mode (inside oj-cli), from the parent
	client    bool
	clusterID string
	ztpdPID   int
	apiBase   string
	apiCA     string
	outFile   string
}

const (
	poolFirst = 1 // pool 10.99.<first>.10 - 10.99.<last>.254
	vmMAC     = "1e:00:00:00:00:01"
	srvAddr   = "10.99.0.1"
	relayAddr = "10.99.0.2"
)

func poolLast(n int) int { return poolFirst + (n+1)/254 + 1 }

func main() {
	var o options
	flag.IntVar(&o.n, "n", 500, "switches (simulated kubelets)")
	flag.StringVar(&o.version, "kubernetes", "", "Kubernetes version (default: the newest in testenv/k8sbin/versions)")
	flag.StringVar(&o.probeInterval, "probe-interval", "", "ztpd api.cluster_probe_interval (default: ztpd's own default)")
	flag.IntVar(&o.conc, "concurrency", 64, "switches onboarding through ztpd at once")
	flag.IntVar(&o.bootstrapConc, "bootstrap-concurrency", 0, "kubelet TLS bootstraps at once (0: kubeletsim's default)")
	flag.StringVar(&o.bin, "ztpd", "bin/ztpd", "ztpd binary")
	flag.StringVar(&o.work, "work", "", "work directory (default: a temp dir, removed)")
	flag.DurationVar(&o.timeout, "timeout", 15*time.Minute, "give up on the join phase after this long")
	flag.BoolVar(&o.client, "client", false, "internal: run the clients (inside oj-cli)")
	flag.StringVar(&o.clusterID, "cluster", "", "internal: cluster id")
	flag.IntVar(&o.ztpdPID, "ztpd-pid", 0, "internal: ztpd's pid")
	flag.StringVar(&o.apiBase, "api-base", "", "internal: ztpd's API base URL")
	flag.StringVar(&o.apiCA, "api-ca", "", "internal: ztpd's API certificate")
	flag.StringVar(&o.outFile, "out", "", "internal: write the result here")
	flag.Parse()
	var err error
	if o.client {
		err = runClient(o)
	} else {
		err = run(o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "observedjoin:", err)
		os.Exit(1)
	}
}

// skip is a precondition that is not met: the bench cannot run here.
type skip struct{ reason string }

func (s skip) Error() string { return "skipped: " + s.reason }

func run(o options) error {
	if err := netns.Check(); err != nil {
		return skip{err.Error()}
	}
	if err := controlplane.Check(); err != nil {
		return skip{err.Error()}
	}
	if o.n < 1 || o.n > 1000 {
		return fmt.Errorf("-n %d: want 1 to 1000 (one cluster holds at most 1000 workers)", o.n)
	}
	if o.version == "" {
		vs, err := kubebin.Versions()
		if err != nil {
			return err
		}
		o.version = vs[len(vs)-1]
	}
	if _, err := kubebin.Kubernetes(o.version); err != nil {
		return skip{fmt.Sprintf("%v (run testenv/k8sbin/build.sh)", err)}
	}
	if _, err := kubebin.Etcd(); err != nil {
		return skip{fmt.Sprintf("%v (run testenv/k8sbin/build.sh)", err)}
	}
	if o.probeInterval != "" {
		if _, err := time.ParseDuration(o.probeInterval); err != nil {
			return fmt.Errorf("-probe-interval: %w", err)
		}
	}
	o.bin, _ = filepath.Abs(o.bin)
	if o.work == "" {
		d, err := os.MkdirTemp("", "observedjoin-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		o.work = d
	}
	n, err := stormlab.NewNet(stormlab.NetOptions{Prefix: "oj", ServerAddr: srvAddr, PoolFirst: poolFirst, PoolLast: poolLast(o.n), DefaultRoute: true})
	if err != nil {
		return err
	}
	defer n.Close()
	srv, cli := n.Srv, n.Cli
	if err := writeProfiles(o); err != nil {
		return err
	}
	ctx := context.Background()
	app, err := lab.StartAppliance(ctx, srv, o.bin, o.work, config(o), "http://"+srvAddr+":8080")
	if err != nil {
		return err
	}
	defer app.Close()
	if err := app.UseAdminKey(ctx); err != nil {
		return err
	}
	clusterID, err := createCluster(ctx, app, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "observed join: ztpd %s, cluster oj (%s), %d switches, Kubernetes %s\n", o.bin, clusterID, o.n, o.version)

	// An admin key of the client's own, through its environment, not argv.
	apiKey, secretKey, err := app.CreateAPIKey(ctx, "admin", "observedjoin")
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	out := filepath.Join(o.work, "result.txt")
	args := []string{"-client", "-n", strconv.Itoa(o.n), "-kubernetes", o.version, "-concurrency", strconv.Itoa(o.conc),
		"-bootstrap-concurrency", strconv.Itoa(o.bootstrapConc), "-work", o.work, "-timeout", o.timeout.String(),
		"-cluster", clusterID, "-ztpd-pid", strconv.Itoa(app.Proc.Cmd.Process.Pid),
		"-api-base", app.APIBase, "-api-ca", filepath.Join(app.DataDir, "api-tls", "cert.pem"), "-out", out}
	cmd := cli.Command(ctx, self, args...)
	cmd.Env = append(os.Environ(), "OJ_API_KEY="+apiKey, "OJ_API_SECRET="+secretKey)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	runErr := cmd.Run()
	// The report is printed here, after the client stopped its control
	// plane, so that RESULT is the last line of the output.
	if b, err := os.ReadFile(out); err == nil {
		os.Stdout.Write(b)
	}
	if runErr != nil {
		return fmt.Errorf("client: %w (logs in %s: ztpd.out, controlplane/logs)", runErr, o.work)
	}
	return nil
}

func writeProfiles(o options) error {
	pdir := filepath.Join(o.work, "profiles")
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		return err
	}
	prof := fmt.Sprintf(`---
name: oj-control-plane
match:
  mac: "%s"
hostname: cp0
cluster: oj
role: control-plane
---
name: oj-switches
match:
  serial: "OJ-*"
hostname: 'sw-{{ .Serial | lower }}'
cluster: oj
role: sonic
`, vmMAC)
	return os.WriteFile(filepath.Join(pdir, "oj.yaml"), []byte(prof), 0o644)
}

// config is ztpd's configuration: what a deployment must say (addresses,
// the DHCP subnet and pool, where the profiles are, which devices join
// without an operator) and nothing tuned; the probe interval only when
// asked for.
func config(o options) string {
	api := ""
	if o.probeInterval != "" {
		api = "api: {cluster_probe_interval: " + o.probeInterval + "}\n"
	}
	return fmt.Sprintf(`data_dir: %s
advertise_addr: %s
http: {addr: "%s:8080"}
%sdhcp:
  interfaces: [s0]
  relays: [{address: 10.99.0.2}] # the fleet relays from its own address
  lease_time: 1h
  vm: {mac_prefixes: ["1e:00"]}
  subnets:
    - {name: oj, subnet: 10.99.0.0/16, interface: s0, pools: ["10.99.%d.10-10.99.%d.254"], router: %s}
profiles: [%s]
joiner:
  auto_approve: [{subnets: [10.99.0.0/16], roles: [control-plane, worker]}]
`, filepath.Join(o.work, "data"), srvAddr, srvAddr, api, poolFirst, poolLast(o.n), srvAddr, filepath.Join(o.work, "profiles"))
}

// createCluster creates cluster "oj": one control plane (the VM) and n
// switches, at the benchmark's Kubernetes version.
func createCluster(ctx context.Context, app *lab.Appliance, o options) (string, error) {
	semver := strings.TrimPrefix(o.version, "v")
	v, err := app.CloudStack(ctx, "addKubernetesSupportedVersion", url.Values{
		"semanticversion": {semver}, "name": {"v" + semver}, "url": {"http://oj.invalid/k8s-" + semver + ".iso"}})
	if err != nil {
		return "", err
	}
	var ver struct{ ID string }
	json.Unmarshal(v["kubernetessupportedversion"], &ver)
	zone, err := app.FirstID(ctx, "listZones", "zone")
	if err != nil {
		return "", err
	}
	offering, err := app.FirstID(ctx, "listServiceOfferings", "serviceoffering")
	if err != nil {
		return "", err
	}
	res, err := app.CloudStack(ctx, "createKubernetesCluster", url.Values{
		"name": {"oj"}, "kubernetesversionid": {ver.ID}, "size": {strconv.Itoa(o.n)}, "controlnodes": {"1"},
		// A switch fabric: its workers join with certificates, so kubeadm
		// init does not create a bootstrap token per switch.
		"joinmethod": {"sonic"},
		"zoneid":     {zone}, "serviceofferingid": {offering}})
	if err != nil {
		return "", err
	}
	var c struct{ ID string }
	json.Unmarshal(res["kubernetescluster"], &c)
	if c.ID == "" {
		return "", fmt.Errorf("createKubernetesCluster returned no cluster id: %v", res)
	}
	return c.ID, nil
}

// ---- the client side, inside oj-cli ----

// client is the driver's side of the benchmark.
type client struct {
	o      options
	api    *http.Client
	key    string
	secret []byte
	relay  *fleet.Relay
	bins   kubebin.Set
	etcd   string
	log    *slog.Logger
}

func runClient(o options) error {
	c := &client{o: o, key: os.Getenv("OJ_API_KEY"), secret: []byte(os.Getenv("OJ_API_SECRET")),
		log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if c.key == "" {
		return errors.New("no OJ_API_KEY (the client mode is started by the benchmark itself)")
	}
	var err error
	if c.bins, err = kubebin.Kubernetes(o.version); err != nil {
		return err
	}
	if c.etcd, err = kubebin.Etcd(); err != nil {
		return err
	}
	pem, err := os.ReadFile(o.apiCA)
	if err != nil {
		return fmt.Errorf("ztpd's API certificate: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return fmt.Errorf("%s holds no certificate", o.apiCA)
	}
	c.api = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	if c.relay, err = fleet.NewRelay(netip.MustParseAddr(relayAddr), netip.MustParseAddr(srvAddr)); err != nil {
		return err
	}
	defer c.relay.Close()

	ctx := context.Background()
	cp, err := c.controlPlane(ctx)
	if err != nil {
		return err
	}
	defer cp.stop()

	bundles, err := c.onboardSwitches(ctx)
	if err != nil {
		return err
	}
	rep, err := c.join(ctx, cp, bundles)
	if rep != nil {
		if werr := os.WriteFile(c.o.outFile, rep, 0o644); werr != nil {
			return werr
		}
	}
	return err
}

// plane is the control-plane VM: the real control plane and its kubelet.
type plane struct {
	cp       *controlplane.ControlPlane
	kubelet  *kubeletsim.Kubelet
	nodeName string
}

func (p *plane) stop() {
	if p.kubelet != nil {
		p.kubelet.Stop()
	}
	p.cp.Stop()
}

// controlPlane onboards the VM and brings its cluster up from the
// cloud-config ztpd hands it, then waits until ztpd shows the cluster
// Running (its watch sees the API server and the Ready control plane).
func (c *client) controlPlane(ctx context.Context) (*plane, error) {
	begin := time.Now()
	hw, _ := net.ParseMAC(vmMAC)
	lease, err := c.relay.DORA(ctx, fleet.Identity{MAC: hw, Hostname: "cp0"})
	if err != nil {
		return nil, fmt.Errorf("control-plane VM: DHCP: %w", err)
	}
	vmIP := lease.IP.String()
	hc := fromAddr(lease.IP)
	var ud []byte
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ud, err = get(ctx, hc, "http://"+srvAddr+":8080/latest/user-data")
		if err == nil && bytes.HasPrefix(ud, []byte("#cloud-config")) {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("control-plane VM %s: no cloud-config user-data: %v %.200q", vmIP, err, ud)
		}
		time.Sleep(time.Second)
	}
	root := filepath.Join(c.o.work, "cp0-root")
	if err := writeFiles(ud, root); err != nil {
		return nil, fmt.Errorf("control-plane VM: user-data: %w", err)
	}
	kcfg, caCert, caKey, manifests, err := controlplane.InputsFromRoot(root)
	if err != nil {
		return nil, fmt.Errorf("control-plane VM: not a first-control-plane bundle: %w", err)
	}
	name, labels, err := lab.NodeRegistration(kcfg, "InitConfiguration")
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "  control-plane VM %s (%s): kubeadm init phases, etcd, kube-apiserver, kube-controller-manager\n", name, vmIP)
	cp, err := controlplane.Start(ctx, controlplane.Config{
		Kubernetes: c.bins, Etcd: c.etcd, KubeadmConfig: kcfg, CACert: caCert, CAKey: caKey,
		Manifests: manifests, Dir: filepath.Join(c.o.work, "controlplane")})
	if err != nil {
		return nil, err
	}
	p := &plane{cp: cp, nodeName: name}
	kubeconf, err := os.ReadFile(filepath.Join(cp.KubernetesDir(), "kubelet.conf"))
	if err != nil {
		p.stop()
		return nil, err
	}
	p.kubelet, err = kubeletsim.Start(ctx, kubeletsim.Config{NodeName: name, BootstrapKubeconfig: kubeconf,
		Labels: labels, InternalIP: vmIP, KubeletVersion: c.o.version, Logger: c.log})
	if err == nil {
		err = p.kubelet.WaitRegistered(ctx)
	}
	if err == nil {
		err = cp.MarkControlPlane(ctx)
	}
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("control-plane VM: %w", err)
	}
	fmt.Fprintf(os.Stderr, "  control plane up at %s in %s; waiting for ztpd to show the cluster Running\n", cp.URL(), time.Since(begin).Round(100*time.Millisecond))
	deadline = time.Now().Add(3 * time.Minute)
	for {
		cl, err := c.cluster(ctx)
		if err == nil && cl.State == "Running" {
			break
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("ztpd does not show cluster oj Running after 3 min: %+v %v", cl, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "  cluster Running in ztpd %s after the VM's DHCP\n", time.Since(begin).Round(100*time.Millisecond))
	return p, nil
}

// sonicBundle is what a switch's kubelet needs from its join bundle.
type sonicBundle struct {
	nodeName      string
	labels        map[string]string
	cert, key, ca []byte
	server        string // https://ip:port
}

// onboardSwitches runs the switches through ztpd (DORA, ztp.json,
// config_db.json, join bundle) and returns their bundles.
func (c *client) onboardSwitches(ctx context.Context) ([]sonicBundle, error) {
	switches := make([]fleet.Switch, c.o.n)
	for i := range switches {
		switches[i] = fleet.Switch{N: i, MAC: fleet.MAC(i).String(), Product: "Accton-AS7712-32X", Serial: fmt.Sprintf("OJ-%06d", i)}
	}
	out := make([]sonicBundle, c.o.n)
	var mu sync.Mutex
	var parseErrs []error
	storm := &fleet.Storm{Relay: c.relay, Concurrency: c.o.conc, Switches: switches,
		Bundle: func(sw fleet.Switch, doc, keyPEM []byte) {
			b, err := parseSonicBundle(doc, keyPEM)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				parseErrs = append(parseErrs, fmt.Errorf("%s: %w", sw.Serial, err))
				return
			}
			out[sw.N] = b
		}}
	res := storm.Run(ctx)
	fmt.Fprintf(os.Stderr, "  %d switches onboarded through ztpd in %.1f s (%d failed)\n", res.Devices-res.Failed, res.Elapsed.Seconds(), res.Failed)
	if res.Failed > 0 {
		return nil, fmt.Errorf("%d switches failed to onboard: %v", res.Failed, res.Errors)
	}
	if len(parseErrs) > 0 {
		return nil, errors.Join(parseErrs...)
	}
	return out, nil
}

// parseSonicBundle reads a switch's delivery; keyPEM is the key the switch
// made for its certificate.
func parseSonicBundle(doc, keyPEM []byte) (sonicBundle, error) {
	d, err := lab.ParseSonicDelivery(doc)
	if err != nil {
		return sonicBundle{}, err
	}
	b := sonicBundle{nodeName: d.NodeName, labels: d.NodeLabels, server: d.Server()}
	b.cert, _ = d.File(bundle.SonicClientCertPath)
	b.key = keyPEM
	_, b.ca = d.CAFile()
	if b.cert == nil || b.key == nil || b.ca == nil {
		return b, errors.New("bundle lacks the client certificate or the cluster CA")
	}
	return b, nil
}

// procStat is one process's counters at a moment.
type procStat struct {
	cpu   time.Duration // utime + stime
	hwmKB int64         // VmHWM: peak RSS
	rssKB int64         // VmRSS
}

func readProc(pid int) (procStat, error) {
	var s procStat
	var err error
	if s.cpu, err = procstat.CPU(pid); err != nil {
		return s, err
	}
	kb, err := procstat.StatusKB(pid)
	if err != nil {
		return s, err
	}
	s.hwmKB, s.rssKB = kb["VmHWM"], kb["VmRSS"]
	return s, nil
}

type watched struct {
	name string
	pid  int
	t0   procStat
}

// join starts the switches' kubelets and times the API server's view and
// ztpd's; it returns the report.
func (c *client) join(ctx context.Context, p *plane, bundles []sonicBundle) ([]byte, error) {
	n := c.o.n
	want := make(map[string]bool, n)
	for _, b := range bundles {
		want[b.nodeName] = true
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(mustRead(p.cp.AdminKubeconfig()))
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst = 50, 100
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}

	// The API server's view: an informer on Nodes, as any controller.
	var mu sync.Mutex
	apiReady := map[string]time.Duration{}
	var t0 time.Time
	apiDone := make(chan struct{})
	observe := func(obj any) {
		node, ok := obj.(*corev1.Node)
		if !ok || !want[node.Name] || !nodeReady(node) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, seen := apiReady[node.Name]; seen || t0.IsZero() {
			return
		}
		apiReady[node.Name] = time.Since(t0)
		if len(apiReady) == n {
			close(apiDone)
		}
	}
	factory := informers.NewSharedInformerFactory(kc, 0)
	inf := factory.Core().V1().Nodes().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
	}); err != nil {
		return nil, err
	}
	stopInf := make(chan struct{})
	defer close(stopInf)
	factory.Start(stopInf)
	if !cache.WaitForCacheSync(stopInf, inf.HasSynced) {
		return nil, errors.New("node informer did not sync")
	}

	procs := []*watched{{name: "ztpd", pid: c.o.ztpdPID},
		{name: "kube-apiserver", pid: p.cp.PID(controlplane.APIServer)},
		{name: "kube-controller-manager", pid: p.cp.PID(controlplane.ControllerManager)},
		{name: "etcd", pid: p.cp.PID(controlplane.Etcd)},
		{name: "kubelets + driver", pid: os.Getpid()}}
	for _, w := range procs {
		if w.pid == 0 {
			return nil, fmt.Errorf("%s is not running", w.name)
		}
		if w.t0, err = readProc(w.pid); err != nil {
			return nil, err
		}
	}

	pool := kubeletsim.NewPool(kubeletsim.PoolOptions{BootstrapConcurrency: c.o.bootstrapConc})
	kctx, cancel := context.WithCancel(ctx)
	defer cancel()
	mu.Lock()
	t0 = time.Now()
	mu.Unlock()
	fmt.Fprintf(os.Stderr, "  t0: %d simulated kubelets start (TLS bootstrap with the switch certificates)\n", n)
	kubelets := make([]*kubeletsim.Kubelet, 0, n)
	defer func() {
		for _, k := range kubelets {
			k.Stop()
		}
	}()
	for _, b := range bundles {
		k, err := pool.Start(kctx, kubeletsim.Config{NodeName: b.nodeName, ClientCertPEM: b.cert, ClientKeyPEM: b.key,
			APIServer: b.server, CACertPEM: b.ca, Labels: b.labels, KubeletVersion: c.o.version, Logger: c.log})
		if err != nil {
			return nil, err
		}
		kubelets = append(kubelets, k)
	}
	var regFailed []string
	var regMu sync.Mutex
	var regWG sync.WaitGroup
	for _, k := range kubelets {
		regWG.Add(1)
		go func() {
			defer regWG.Done()
			wctx, wcancel := context.WithTimeout(kctx, c.o.timeout)
			defer wcancel()
			if err := k.WaitRegistered(wctx); err != nil {
				regMu.Lock()
				regFailed = append(regFailed, err.Error())
				regMu.Unlock()
			}
		}()
	}

	// ztpd's view: its REST API, polled.
	ztpdJoined := map[string]time.Duration{}
	deadline := t0.Add(c.o.timeout)
	var tAPI, tZtpd time.Duration
	lastProgress := time.Now()
	var polls int
	var pollTime time.Duration
	var pollBytes int
	for tZtpd == 0 || tAPI == 0 {
		pollStart := time.Now()
		cl, size, err := c.clusterSized(ctx)
		polls, pollTime, pollBytes = polls+1, pollTime+time.Since(pollStart), pollBytes+size
		now := time.Since(t0)
		if err == nil {
			for _, m := range cl.Members {
				if m.State == "joined" && want[m.NodeName] {
					if _, seen := ztpdJoined[m.NodeName]; !seen {
						ztpdJoined[m.NodeName] = now
					}
				}
			}
			if len(ztpdJoined) == n && tZtpd == 0 {
				tZtpd = now
			}
		}
		select {
		case <-apiDone:
			if tAPI == 0 {
				mu.Lock()
				for _, d := range apiReady {
					tAPI = max(tAPI, d)
				}
				mu.Unlock()
			}
		default:
		}
		if time.Since(lastProgress) >= 10*time.Second {
			lastProgress = time.Now()
			mu.Lock()
			ready := len(apiReady)
			mu.Unlock()
			fmt.Fprintf(os.Stderr, "  %5.1f s: %d/%d Ready per the API server, %d/%d joined per ztpd\n", now.Seconds(), ready, n, len(ztpdJoined), n)
		}
		if time.Now().After(deadline) {
			mu.Lock()
			ready := len(apiReady)
			mu.Unlock()
			regMu.Lock()
			fails := regFailed[:min(len(regFailed), 5)]
			regMu.Unlock()
			return nil, fmt.Errorf("after %s: %d/%d Nodes Ready per the API server, %d/%d joined per ztpd; kubelet errors: %v",
				c.o.timeout, ready, n, len(ztpdJoined), n, fails)
		}
		time.Sleep(250 * time.Millisecond)
	}
	var stats []*procStat
	for _, w := range procs {
		s, err := readProc(w.pid)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", w.name, err)
		}
		stats = append(stats, &s)
	}
	regWG.Wait()

	// Per node: how long after the API server had it Ready ztpd showed it
	// joined (to within the 250 ms poll).
	var lags, bootstraps []time.Duration
	mu.Lock()
	for name, at := range ztpdJoined {
		lags = append(lags, max(at-apiReady[name], 0))
	}
	mu.Unlock()
	for _, k := range kubelets {
		bootstraps = append(bootstraps, k.Stats().Bootstrap)
	}

	var r bytes.Buffer
	fmt.Fprintf(&r, "observed join: %d SONiC switches' simulated kubelets (TLS bootstrap with their ztpd client certificates) against kube-apiserver %s, ztpd watching (its default configuration", n, c.o.version)
	if c.o.probeInterval != "" {
		fmt.Fprintf(&r, ", cluster_probe_interval %s", c.o.probeInterval)
	}
	fmt.Fprintf(&r, ")\n")
	fmt.Fprintf(&r, "  %-44s %8.2f s\n", "all Nodes Ready per the API server (ref.)", tAPI.Seconds())
	fmt.Fprintf(&r, "  %-44s %8.2f s\n", "all members joined per ztpd's API", tZtpd.Seconds())
	fmt.Fprintf(&r, "  %-44s %8.2f s   ratio %.3f x\n", "lag", (tZtpd - tAPI).Seconds(), tZtpd.Seconds()/tAPI.Seconds())
	fmt.Fprintf(&r, "  per node, ztpd after the API server: p50 %.2f s, p99 %.2f s, max %.2f s (250 ms poll)\n",
		pct(lags, 50).Seconds(), pct(lags, 99).Seconds(), pct(lags, 100).Seconds())
	fmt.Fprintf(&r, "  kubelet TLS bootstrap (CSR created to certificate issued): p50 %.1f s, max %.1f s; %.1f Nodes/s\n",
		pct(bootstraps, 50).Seconds(), pct(bootstraps, 100).Seconds(), float64(n)/tAPI.Seconds())
	fmt.Fprintf(&r, "  %-26s %12s %10s %12s\n", "process", "CPU s (t0-)", "RSS MB", "peak RSS MB")
	for i, w := range procs {
		s := stats[i]
		fmt.Fprintf(&r, "  %-26s %12.2f %10.1f %12.1f\n", w.name, (s.cpu - w.t0.cpu).Seconds(), float64(s.rssKB)/1024, float64(s.hwmKB)/1024)
	}
	fmt.Fprintf(&r, "  ztpd's part in that: %d REST polls of the cluster, mean %.1f ms, %.0f KB each\n",
		polls, float64(pollTime.Microseconds())/1000/float64(polls), float64(pollBytes)/1024/float64(polls))
	apiS, ztpdS := stats[1], stats[0]
	fmt.Fprintf(&r, "  ztpd / kube-apiserver: CPU %.3f x, peak RSS %.3f x\n",
		(ztpdS.cpu-procs[0].t0.cpu).Seconds()/max((apiS.cpu-procs[1].t0.cpu).Seconds(), 0.001), float64(ztpdS.hwmKB)/float64(max(apiS.hwmKB, 1)))
	if len(regFailed) > 0 {
		fmt.Fprintf(&r, "  kubelet failures: %d (%s)\n", len(regFailed), regFailed[0])
	}
	fmt.Fprintf(&r, "RESULT observed_join nodes=%d seconds=%.2f ztpd_rss_mb=%.1f\n", n, tZtpd.Seconds(), float64(ztpdS.hwmKB)/1024)
	return r.Bytes(), nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func mustRead(p string) []byte {
	b, _ := os.ReadFile(p)
	return b
}

func (c *client) cluster(ctx context.Context) (apiclient.Cluster, error) {
	cl, _, err := c.clusterSized(ctx)
	return cl, err
}

// clusterSized is cluster with the size of the answer.
func (c *client) clusterSized(ctx context.Context) (apiclient.Cluster, int, error) {
	var cl apiclient.Cluster
	path := "/api/v1/clusters/" + c.o.clusterID
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.o.apiBase+path, nil)
	if err != nil {
		return cl, 0, err
	}
	apiclient.New(c.o.apiBase, c.key, c.secret, c.api).SignREST(req, nil)
	resp, err := c.api.Do(req)
	if err != nil {
		return cl, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return cl, len(body), err
	}
	if resp.StatusCode != http.StatusOK {
		return cl, len(body), fmt.Errorf("GET %s: HTTP %d: %.300s", path, resp.StatusCode, body)
	}
	return cl, len(body), json.Unmarshal(body, &cl)
}

// fromAddr is an HTTP client whose connections come from addr (a leased
// address, local in oj-cli), as the device holding it talks.
func fromAddr(addr netip.Addr) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: addr.AsSlice()}}).DialContext}}
}

func get(ctx context.Context, hc *http.Client, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: HTTP %d", u, resp.StatusCode)
	}
	return b, err
}

// writeFiles writes a cloud-config's write_files under root, as cloud-init
// writes them.
func writeFiles(ud []byte, root string) error {
	var cc struct {
		WriteFiles []struct {
			Path     string `json:"path"`
			Content  string `json:"content"`
			Encoding string `json:"encoding"`
		} `json:"write_files"`
	}
	if err := yaml.Unmarshal(ud, &cc); err != nil {
		return err
	}
	for _, f := range cc.WriteFiles {
		b := []byte(f.Content)
		switch f.Encoding {
		case "", "text/plain":
		case "b64", "base64":
			var err error
			if b, err = base64.StdEncoding.DecodeString(f.Content); err != nil {
				return fmt.Errorf("%s: %w", f.Path, err)
			}
		default:
			return fmt.Errorf("%s: encoding %q is not handled here", f.Path, f.Encoding)
		}
		dst := filepath.Join(root, filepath.Clean("/"+f.Path))
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			return err
		}
	}
	return nil
}
