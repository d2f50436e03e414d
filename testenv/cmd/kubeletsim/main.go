// Command kubeletsim runs simulated kubelets (package testenv/kubeletsim)
// against a real kube-apiserver: TLS bootstrap, Node registration, status
// updates and Lease renewals. The lab runs one per device inside the
// device's network namespace; the bench runs hundreds in one process:
//
//	kubeletsim --count 500 --name-prefix bench- --bootstrap-kubeconfig bootstrap-kubelet.conf
//
// Progress goes to stderr; a JSON summary goes to stdout when the process
// ends (after --run-for, on SIGINT/SIGTERM, or right after registration
// with --exit-after-registration). SIGUSR1 makes every kubelet report
// NotReady, SIGUSR2 Ready again. The exit status is 1 if any kubelet failed
// to bootstrap or register.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ztpd/ztpd/testenv/kubeletsim"
)

func main() {
	code, err := run(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubeletsim:", err)
	}
	os.Exit(code)
}

type options struct {
	count                int
	name, namePrefix     string
	firstIndex           int
	bootstrapKubeconfig  string
	clientCert           string
	clientKey            string
	server, caFile       string
	labels               string
	nodeIP               string
	kubeletVersion       string
	kubeletVersionFile   string
	runPods              bool
	statusEvery          time.Duration
	statusReportEvery    time.Duration
	leaseDurationSeconds int
	leaseEvery           time.Duration
	bootstrapConcurrency int
	bootstrapTimeout     time.Duration
	registerTimeout      time.Duration
	runFor               time.Duration
	exitAfterRegister    bool
	progressEvery        time.Duration
	logLevel             string
}

func run(args []string) (int, error) {
	var o options
	fs := flag.NewFlagSet("kubeletsim", flag.ContinueOnError)
	fs.IntVar(&o.count, "count", 1, "number of simulated kubelets")
	fs.StringVar(&o.name, "name", "", "node name (with --count 1)")
	fs.StringVar(&o.namePrefix, "name-prefix", "sim-", "node name prefix when --name is not given: <prefix><index>, zero-padded")
	fs.IntVar(&o.firstIndex, "first-index", 1, "index of the first node with --name-prefix")
	fs.StringVar(&o.bootstrapKubeconfig, "bootstrap-kubeconfig", "", "bootstrap kubeconfig (kubeadm's bootstrap-kubelet.conf)")
	fs.StringVar(&o.clientCert, "client-cert", "", "bootstrap client certificate (PEM), instead of a kubeconfig")
	fs.StringVar(&o.clientKey, "client-key", "", "key of --client-cert (PEM)")
	fs.StringVar(&o.server, "server", "", "API server URL (overrides the kubeconfig's; required with --client-cert)")
	fs.StringVar(&o.caFile, "ca-file", "", "cluster CA (PEM; overrides the kubeconfig's; required with --client-cert)")
	fs.StringVar(&o.labels, "node-labels", "", "labels to register with, k=v,k=v (kubelet --node-labels)")
	fs.StringVar(&o.nodeIP, "node-ip", "", "InternalIP to report; with --count > 1 each node takes the next address")
	fs.StringVar(&o.kubeletVersion, "kubelet-version", kubeletsim.DefaultKubeletVersion, "nodeInfo.kubeletVersion")
	fs.StringVar(&o.kubeletVersionFile, "kubelet-version-file", "", "file whose contents, while it exists, are the kubelet version reported (read at every status update; an upgrade writes it)")
	fs.BoolVar(&o.runPods, "run-pods", false, "report the pods bound to each Node Running and finish their deletion, as a kubelet (one pod watch per node)")
	fs.DurationVar(&o.statusEvery, "node-status-update-frequency", 0, "how often the status is computed (kubelet default 10s)")
	fs.DurationVar(&o.statusReportEvery, "node-status-report-frequency", 0, "how often an unchanged status is patched (kubelet default 5m, or the update frequency when that is set)")
	fs.IntVar(&o.leaseDurationSeconds, "node-lease-duration-seconds", 40, "lease duration")
	fs.DurationVar(&o.leaseEvery, "lease-renew-interval", 0, "lease renew interval (default a quarter of the duration)")
	fs.IntVar(&o.bootstrapConcurrency, "bootstrap-concurrency", kubeletsim.DefaultBootstrapConcurrent, "TLS bootstraps running at once")
	fs.DurationVar(&o.bootstrapTimeout, "bootstrap-timeout", kubeletsim.DefaultBootstrapTimeout, "how long to wait for a CSR to be approved and signed")
	fs.DurationVar(&o.registerTimeout, "register-timeout", kubeletsim.DefaultRegisterTimeout, "how long to retry registration")
	fs.DurationVar(&o.runFor, "run-for", 0, "stop this long after all kubelets registered (0: run until SIGINT/SIGTERM)")
	fs.BoolVar(&o.exitAfterRegister, "exit-after-registration", false, "stop as soon as every kubelet registered or failed")
	fs.DurationVar(&o.progressEvery, "progress-every", 2*time.Second, "progress line interval on stderr")
	fs.StringVar(&o.logLevel, "log-level", "warn", "log level of the per-kubelet logs on stderr: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, nil
		}
		return 2, err
	}
	if fs.NArg() > 0 {
		return 2, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.progressEvery <= 0 || o.runFor < 0 {
		return 2, errors.New("--progress-every must be positive and --run-for not negative")
	}
	cfgs, err := o.configs()
	if err != nil {
		return 2, err
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	pool := kubeletsim.NewPool(kubeletsim.PoolOptions{BootstrapConcurrency: o.bootstrapConcurrency})
	start := time.Now()
	kubelets := make([]*kubeletsim.Kubelet, 0, len(cfgs))
	for _, c := range cfgs {
		k, err := pool.Start(ctx, c)
		if err != nil {
			return 2, err
		}
		kubelets = append(kubelets, k)
	}

	var registered, failed atomic.Int64
	var allDone sync.WaitGroup
	for _, k := range kubelets {
		allDone.Add(1)
		go func() {
			defer allDone.Done()
			if err := k.WaitRegistered(ctx); err != nil {
				if ctx.Err() == nil {
					failed.Add(1)
					fmt.Fprintf(os.Stderr, "kubeletsim: %v\n", err)
				}
				return
			}
			registered.Add(1)
		}()
	}
	done := make(chan struct{})
	go func() { allDone.Wait(); close(done) }()

	readiness := make(chan os.Signal, 1)
	signal.Notify(readiness, syscall.SIGUSR1, syscall.SIGUSR2)
	tick := time.NewTicker(o.progressEvery)
	defer tick.Stop()
	var registeredIn time.Duration
	var stopAt <-chan time.Time
	progress := func() {
		fmt.Fprintf(os.Stderr, "kubeletsim: %d/%d registered, %d failed (%.1fs)\n",
			registered.Load(), len(kubelets), failed.Load(), time.Since(start).Seconds())
	}
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
			progress()
		case s := <-readiness:
			ready := s == syscall.SIGUSR2
			for _, k := range kubelets {
				k.SetReady(ready)
			}
			fmt.Fprintf(os.Stderr, "kubeletsim: every kubelet now reports Ready=%v\n", ready)
		case <-done:
			done = nil
			registeredIn = time.Since(start)
			progress()
			if o.exitAfterRegister {
				break loop
			}
			if o.runFor > 0 {
				stopAt = time.After(o.runFor)
			}
		case <-stopAt:
			break loop
		}
	}
	for _, k := range kubelets {
		k.Stop()
	}
	sum := summarize(kubelets, registeredIn, time.Since(start), o.bootstrapConcurrency)
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(sum); err != nil {
		return 1, err
	}
	if sum.Failed > 0 || sum.Registered < sum.Count {
		return 1, nil
	}
	return 0, nil
}

func (o options) configs() ([]kubeletsim.Config, error) {
	if o.count < 1 {
		return nil, errors.New("--count must be at least 1")
	}
	if o.name != "" && o.count != 1 {
		return nil, errors.New("--name names one node; use --name-prefix with --count")
	}
	var base kubeletsim.Config
	var err error
	switch {
	case o.bootstrapKubeconfig != "" && o.clientCert != "":
		return nil, errors.New("give --bootstrap-kubeconfig or --client-cert, not both")
	case o.bootstrapKubeconfig != "":
		if base.BootstrapKubeconfig, err = os.ReadFile(o.bootstrapKubeconfig); err != nil {
			return nil, err
		}
	case o.clientCert != "":
		if o.clientKey == "" {
			return nil, errors.New("--client-cert needs --client-key")
		}
		if base.ClientCertPEM, err = os.ReadFile(o.clientCert); err != nil {
			return nil, err
		}
		if base.ClientKeyPEM, err = os.ReadFile(o.clientKey); err != nil {
			return nil, err
		}
	default:
		return nil, errors.New("no bootstrap credentials: give --bootstrap-kubeconfig or --client-cert and --client-key")
	}
	base.APIServer = o.server
	if o.caFile != "" {
		if base.CACertPEM, err = os.ReadFile(o.caFile); err != nil {
			return nil, err
		}
	}
	if base.Labels, err = parseLabels(o.labels); err != nil {
		return nil, err
	}
	base.KubeletVersion = o.kubeletVersion
	base.VersionFile = o.kubeletVersionFile
	base.RunPods = o.runPods
	base.StatusEvery = o.statusEvery
	base.StatusReportEvery = o.statusReportEvery
	base.LeaseDuration = time.Duration(o.leaseDurationSeconds) * time.Second
	base.LeaseEvery = o.leaseEvery
	base.BootstrapTimeout = o.bootstrapTimeout
	base.RegisterTimeout = o.registerTimeout
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	base.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	var ip netip.Addr
	if o.nodeIP != "" {
		if ip, err = netip.ParseAddr(o.nodeIP); err != nil {
			return nil, fmt.Errorf("--node-ip: %w", err)
		}
	}
	width := len(fmt.Sprint(o.firstIndex + o.count - 1))
	out := make([]kubeletsim.Config, o.count)
	for i := range out {
		c := base
		if o.name != "" {
			c.NodeName = o.name
		} else {
			c.NodeName = fmt.Sprintf("%s%0*d", o.namePrefix, width, o.firstIndex+i)
		}
		if ip.IsValid() {
			c.InternalIP = ip.String()
			ip = ip.Next()
		}
		out[i] = c
	}
	return out, nil
}

func parseLabels(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--node-labels: %q is not key=value", kv)
		}
		m[k] = v
	}
	return m, nil
}

// quantiles are seconds.
type quantiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func quantilesOf(ds []time.Duration) *quantiles {
	if len(ds) == 0 {
		return nil
	}
	slices.Sort(ds)
	at := func(q float64) float64 { return ds[int(q*float64(len(ds)-1))].Seconds() }
	return &quantiles{P50: at(0.5), P90: at(0.9), P99: at(0.99), Max: ds[len(ds)-1].Seconds()}
}

type failure struct {
	Node  string `json:"node"`
	Error string `json:"error"`
}

type summary struct {
	Count                int        `json:"count"`
	Registered           int        `json:"registered"`
	Failed               int        `json:"failed"`
	BootstrapConcurrency int        `json:"bootstrap_concurrency"`
	AllRegisteredSeconds float64    `json:"all_registered_seconds,omitempty"`
	RanSeconds           float64    `json:"ran_seconds"`
	BootstrapSeconds     *quantiles `json:"bootstrap_seconds,omitempty"`
	RegisterSeconds      *quantiles `json:"register_seconds,omitempty"`
	StatusPatches        int64      `json:"status_patches"`
	LeaseRenewals        int64      `json:"lease_renewals"`
	HeartbeatFailures    int64      `json:"heartbeat_failures"`
	NodesDeleted         int        `json:"nodes_deleted"`
	Failures             []failure  `json:"failures,omitempty"` // the first 20
}

func summarize(ks []*kubeletsim.Kubelet, registeredIn, ran time.Duration, conc int) summary {
	s := summary{Count: len(ks), BootstrapConcurrency: conc, RanSeconds: ran.Seconds()}
	if registeredIn > 0 {
		s.AllRegisteredSeconds = registeredIn.Seconds()
	}
	var boot, reg []time.Duration
	for _, k := range ks {
		st := k.Stats()
		if st.Registered {
			s.Registered++
			boot, reg = append(boot, st.Bootstrap), append(reg, st.Register)
		}
		if st.Error != "" {
			s.Failed++
			if len(s.Failures) < 20 {
				s.Failures = append(s.Failures, failure{st.Node, st.Error})
			}
		}
		if st.NodeDeleted {
			s.NodesDeleted++
		}
		s.StatusPatches += st.StatusPatches
		s.LeaseRenewals += st.LeaseRenewals
		s.HeartbeatFailures += st.HeartbeatFails
	}
	s.BootstrapSeconds, s.RegisterSeconds = quantilesOf(boot), quantilesOf(reg)
	return s
}
