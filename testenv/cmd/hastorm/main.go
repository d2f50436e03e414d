// Command hastorm is the boot storm against three appliances on one etcd store:
// the 10,000 simulated SONiC switches of bench bootstorm onboard (DORA
// through a relay, ztp.json, config_db.json, the join bundle, the joined
// report) through three `ztpd serve` on embedded etcd, built by
// testenv/halab: each appliance in its own namespace on a bridge, the
// fleet behind a relay that broadcasts to all of them. A switch that fails
// starts over a second later, as SONiC's ZTP does.
//
// It runs the storm twice, each time on a fresh group: once with every
// appliance alive, once killing the appliance whose etcd member leads the
// cluster (SIGKILL, the worst case: every store stalls until a new leader
// is elected) when a third of the switches are through (-kill-after). Each
// run checks what halab's kill test checks: every switch onboarded, no
// address ACKed to two clients nor a client two addresses (tcpdump of every
// reply), no address in the fleet's records twice, the store holding every
// switch's lease and its join bundle issued. It prints a line per run and
// ends with
//
//	storm_s=<s>        the run with every appliance alive
//	storm_kill_s=<s>   the run with the kill
//	RESULT ha_storm devices=<n> storm_s=<s> storm_kill_s=<s> failed=<n> failed_kill=<n> double_acks=<n> double_acks_kill=<n> takeover_s=<s>
//
// A run's seconds are NA when any of its checks failed (its line says which
// and how many); it then exits 1. It needs root and tcpdump; its namespaces
// are hastorm<pid>{a,k}-*, addresses 10.99.0.0/16 only.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/ha"
	"github.com/ztpd/ztpd/testenv/fleet"
	"github.com/ztpd/ztpd/testenv/halab"
	"github.com/ztpd/ztpd/testenv/netns"
	"github.com/ztpd/ztpd/testenv/procstat"
	"github.com/ztpd/ztpd/ztp/dhcp"
)

type options struct {
	n, clusters, conc, appliances int
	killAfter                     float64
	runs                          string
	bin, work                     string
	keep                          bool
	serverCPUs, fleetCPUs         string
	logLevel                      string
	timeout                       time.Duration
	cpuProfile                    string
	profileDelay                  time.Duration
}

// poolLast is the pool's last /24: 10.99.1.0 - 10.99.200.254, as bench
// bootstorm's.
const poolLast = 200

func main() {
	if spec := os.Getenv(halab.FleetEnv); spec != "" {
		if err := halab.RunFleetProcess(spec); err != nil {
			fmt.Fprintln(os.Stderr, "fleet:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	flag.IntVar(&o.n, "n", 10000, "switches")
	flag.IntVar(&o.clusters, "clusters", 10, "clusters (at most 1000 workers each)")
	flag.IntVar(&o.conc, "concurrency", 256, "switches onboarding at the same time")
	flag.IntVar(&o.appliances, "appliances", 3, "appliances in the group")
	flag.Float64Var(&o.killAfter, "kill-after", 1.0/3, "the kill run SIGKILLs the etcd leader once this fraction of the switches is through")
	flag.StringVar(&o.runs, "runs", "all,kill", "runs, in order: all (every appliance alive), kill")
	flag.StringVar(&o.bin, "ztpd", "bin/ztpd", "ztpd binary")
	flag.StringVar(&o.work, "work", "", "work directory (default: a temp dir, removed unless -keep)")
	flag.BoolVar(&o.keep, "keep", false, "keep the work directory (configs, logs, captures)")
	flag.StringVar(&o.serverCPUs, "server-cpus", "", "taskset CPU list for every appliance (empty: no pinning)")
	flag.StringVar(&o.fleetCPUs, "fleet-cpus", "", "taskset CPU list for the fleet (empty: no pinning)")
	flag.StringVar(&o.logLevel, "log-level", "warn", "the appliances' log level (bench bootstorm's is warn)")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "a run's fleet gives up after this long")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write each appliance's CPU profile of 10 s of the all-alive run to <this>.<appliance>")
	flag.DurationVar(&o.profileDelay, "cpuprofile-delay", 5*time.Second, "start the profiles this long into the storm")
	flag.Parse()
	ok, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hastorm:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// outcome is one run's figures and what its checks found.
type outcome struct {
	seconds  float64
	res      halab.FleetResult
	doubles  []string // from the capture and the fleet's records
	problems []string // every failed check, doubles included
	takeover float64  // kill run: the victim's last ACK -> first survivor ACK for its buckets (NaN: none)
}

func (r outcome) ok() bool { return len(r.problems) == 0 }

func run(o options) (bool, error) {
	if err := netns.Check(); err != nil {
		return false, err
	}
	if _, err := exec.LookPath("tcpdump"); err != nil {
		return false, fmt.Errorf("needs tcpdump (every reply is captured to find an address ACKed twice)")
	}
	switch {
	case o.n < 1:
		return false, fmt.Errorf("-n %d: want at least one switch", o.n)
	case o.clusters < 1 || (o.n+o.clusters-1)/o.clusters > 1000:
		return false, fmt.Errorf("%d switches in %d clusters is more than 1000 per cluster", o.n, o.clusters)
	case o.n > poolLast*254/2:
		return false, fmt.Errorf("at most %d switches (half the pool)", poolLast*254/2)
	case o.killAfter <= 0 || o.killAfter >= 1:
		return false, fmt.Errorf("-kill-after %g: want a fraction between 0 and 1", o.killAfter)
	case o.appliances < 2 && strings.Contains(o.runs, "kill"):
		return false, fmt.Errorf("the kill run needs at least two appliances")
	}
	var err error
	if o.bin, err = filepath.Abs(o.bin); err != nil {
		return false, err
	}
	if _, err := os.Stat(o.bin); err != nil {
		return false, fmt.Errorf("ztpd binary: %w", err)
	}
	if o.work == "" {
		if o.work, err = os.MkdirTemp("", "hastorm-"); err != nil {
			return false, err
		}
		if !o.keep {
			defer os.RemoveAll(o.work)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	halab.CleanupStale("hastorm", "hastorm")
	fmt.Printf("hastorm: %d SONiC switches, %d clusters, concurrency %d, %d appliances on embedded etcd (session_ttl %s), server cpus %s, fleet cpus %s\n",
		o.n, o.clusters, o.conc, o.appliances, halab.SessionTTL, orAny(o.serverCPUs), orAny(o.fleetCPUs))
	results := map[string]outcome{}
	allOK := true
	for _, name := range strings.Split(o.runs, ",") {
		if name != "all" && name != "kill" {
			return false, fmt.Errorf("-runs: unknown run %q (all, kill)", name)
		}
		r, err := stormRun(ctx, o, name == "kill")
		if err != nil {
			return false, fmt.Errorf("%s run: %w", name, err)
		}
		results[name] = r
		allOK = allOK && r.ok()
	}
	secs := func(name string) string {
		r, ran := results[name]
		if !ran || !r.ok() {
			return "NA"
		}
		return fmt.Sprintf("%.2f", r.seconds)
	}
	count := func(name string, f func(outcome) int) string {
		if r, ran := results[name]; ran {
			return fmt.Sprint(f(r))
		}
		return "NA"
	}
	failed := func(r outcome) int { return r.res.NotDone() }
	doubles := func(r outcome) int { return len(r.doubles) }
	takeover := "NA"
	if r, ran := results["kill"]; ran && !math.IsNaN(r.takeover) {
		takeover = fmt.Sprintf("%.2f", r.takeover)
	}
	fmt.Printf("storm_s=%s\n", secs("all"))
	fmt.Printf("storm_kill_s=%s\n", secs("kill"))
	fmt.Printf("RESULT ha_storm devices=%d storm_s=%s storm_kill_s=%s failed=%s failed_kill=%s double_acks=%s double_acks_kill=%s takeover_s=%s\n",
		o.n, secs("all"), secs("kill"), count("all", failed), count("kill", failed), count("all", doubles), count("kill", doubles), takeover)
	return allOK, nil
}

// stormRun starts a fresh group, runs the storm through it (killing the
// etcd leader on the way when kill is set), checks the outcome and stops
// the group.
func stormRun(ctx context.Context, o options, kill bool) (outcome, error) {
	name, tag := "all alive", "a"
	if kill {
		name, tag = "kill", "k"
	}
	out := outcome{takeover: math.NaN()}
	work := filepath.Join(o.work, tag)
	if err := os.MkdirAll(work, 0o755); err != nil {
		return out, err
	}
	logf := func(format string, args ...any) {
		fmt.Printf("  [%s] %s\n", name, fmt.Sprintf(format, args...))
	}
	t0 := time.Now()
	g, err := halab.Start(ctx, halab.Options{Prefix: fmt.Sprintf("hastorm%x%s", os.Getpid()&0xffff, tag), Work: work,
		Bin: o.bin, Appliances: o.appliances, PoolLast: poolLast, Clusters: o.clusters, LogLevel: o.logLevel,
		ServerCPUs: o.serverCPUs, Pprof: o.cpuProfile != "" && !kill, Logf: logf})
	if err != nil {
		return out, err
	}
	defer g.Close()
	logf("group started in %.1fs", time.Since(t0).Seconds())
	first := g.Apps[0]
	if err := first.App.UseAdminKey(ctx); err != nil {
		return out, err
	}
	if err := first.App.CreateStormClusters(ctx, o.clusters, (o.n+o.clusters-1)/o.clusters); err != nil {
		return out, err
	}
	var victim *halab.Appliance
	survivors := g.Apps
	if kill {
		if victim, err = g.RaftLeader(); err != nil {
			return out, err
		}
		survivors = g.Others(victim)
		logf("%s (%s, %s) dies with SIGKILL once %d switches are through", victim.Name, victim.IP, g.Roles(victim),
			int(math.Ceil(o.killAfter*float64(o.n))))
	}
	pcap := filepath.Join(work, "replies.pcap")
	stopCapture, err := g.Capture(pcap)
	if err != nil {
		return out, err
	}
	exe, err := os.Executable()
	if err != nil {
		return out, err
	}
	argv := []string{exe}
	if o.fleetCPUs != "" {
		argv = append([]string{"taskset", "-c", o.fleetCPUs}, argv...)
	}
	cpu0 := map[*halab.Appliance]time.Duration{}
	cpuAt := map[*halab.Appliance]time.Duration{}
	for _, a := range g.Apps {
		cpu0[a], _ = procstat.CPU(a.App.Proc.Cmd.Process.Pid)
	}
	profiled := make(chan struct{})
	if o.cpuProfile != "" && !kill {
		go func() {
			defer close(profiled)
			time.Sleep(o.profileDelay)
			var wg sync.WaitGroup
			for _, a := range g.Apps {
				wg.Add(1)
				go func() {
					defer wg.Done()
					path := o.cpuProfile + "." + a.Name
					if err := a.CPUProfile(path, 10*time.Second); err != nil {
						logf("cpu profile of %s: %v", a.Name, err)
					} else {
						logf("cpu profile of %s, 10 s from %s into the storm: %s", a.Name, o.profileDelay, path)
					}
				}()
			}
			wg.Wait()
		}()
	} else {
		close(profiled)
	}
	var tKill time.Time
	killAt := int(math.Ceil(o.killAfter * float64(o.n)))
	healed := make(chan error, 1)
	var healTook time.Duration
	stormStart := time.Now()
	fctx, cancel := context.WithTimeout(ctx, o.timeout+time.Minute)
	defer cancel()
	res, err := g.RunFleet(fctx, argv, halab.FleetSpec{N: o.n, Concurrency: o.conc, Clusters: o.clusters,
		Deadline: time.Now().Add(o.timeout)}, func(done int) {
		if !kill || !tKill.IsZero() || done < killAt {
			return
		}
		cpuAt[victim], _ = procstat.CPU(victim.App.Proc.Cmd.Process.Pid)
		tKill = time.Now()
		if err := victim.Kill(); err != nil {
			out.problems = append(out.problems, fmt.Sprintf("SIGKILL of %s: %v", victim.Name, err))
			healed <- err
			return
		}
		logf("%s killed %.1fs into the storm, %d switches through", victim.Name, tKill.Sub(stormStart).Seconds(), done)
		go func() {
			err := g.WaitBuckets(30*time.Second, survivors, nil)
			healTook = time.Since(tKill)
			healed <- err
		}()
	})
	if err != nil {
		stopCapture()
		return out, fmt.Errorf("%w\n%s", err, g.LogTails(20))
	}
	dropped := stopCapture()
	<-profiled
	out.res = res
	out.seconds = res.Elapsed.Seconds()
	var cpu time.Duration
	for _, a := range g.Apps {
		c, err := procstat.CPU(a.App.Proc.Cmd.Process.Pid)
		if a == victim {
			c, err = cpuAt[a], nil
		}
		if err == nil {
			cpu += c - cpu0[a]
		}
	}
	if kill {
		if tKill.IsZero() {
			out.problems = append(out.problems, fmt.Sprintf("the storm never got %d switches through: nothing was killed", killAt))
		} else if err := <-healed; err != nil {
			out.problems = append(out.problems, fmt.Sprintf("after the kill the survivors never answered every bucket: %v", err))
		} else {
			logf("the survivors' /healthz showed every bucket answered %.2fs after the kill", healTook.Seconds())
		}
	}
	notDone := res.NotDone()
	if notDone > 0 {
		out.problems = append(out.problems, fmt.Sprintf("%d of %d switches never onboarded", notDone, o.n))
	}
	logf("%d of %d switches onboarded in %.2fs (%.0f/s), %d started over at least once; first attempt to joined report p50 %.0f ms, p99 %.0f ms; appliances' CPU %.1fs",
		o.n-notDone, o.n, out.seconds, float64(o.n-notDone)/out.seconds, res.Retried(), ms(res.P50), ms(res.P99), cpu.Seconds())
	for i, e := range res.Errors {
		if i == 5 {
			break
		}
		logf("  failed attempt (started over): %s", e)
	}

	// The capture: no address ACKed to two clients, no client two addresses.
	rs, err := halab.ReadReplies(pcap)
	if err != nil {
		return out, err
	}
	if dropped > 0 {
		out.problems = append(out.problems, fmt.Sprintf("tcpdump dropped %d packets: the capture is incomplete", dropped))
	}
	out.doubles = append(halab.DoubleGrants(rs), res.SharedLeases()...)
	for i, d := range out.doubles {
		if i < 5 {
			logf("DOUBLE: %s", d)
		}
	}
	if len(out.doubles) > 0 {
		out.problems = append(out.problems, fmt.Sprintf("%d addresses given twice", len(out.doubles)))
	}
	acks := halab.Acks(rs)
	logf("capture: %d replies, %d ACKs, %d addresses ACKed to two clients or clients ACKed two addresses", len(rs), len(acks), len(out.doubles))
	if kill && !tKill.IsZero() {
		out.takeover = takeover(rs, g.Names(), victim, tKill)
		if math.IsNaN(out.takeover) {
			out.problems = append(out.problems, fmt.Sprintf("no survivor ever ACKed a client of %s's buckets after its last ACK", victim.Name))
		} else {
			logf("take-over: %s's last ACK to the first survivor ACK for its buckets %.2fs", victim.Name, out.takeover)
		}
	}

	// The store, through a survivor: every switch's lease, its bundle issued.
	s := survivors[0]
	if s != first {
		if err := s.App.UseAdminKey(ctx); err != nil {
			return out, err
		}
	}
	sp, err := storeProblems(ctx, s, res)
	if err != nil {
		return out, err
	}
	out.problems = append(out.problems, sp...)
	issued, err := s.App.CountDevices(ctx, "join-issued")
	if err != nil {
		return out, err
	}
	if issued != o.n {
		out.problems = append(out.problems, fmt.Sprintf("%d of %d switches join-issued in the store", issued, o.n))
	}
	logf("%s's store: %d switches join-issued, %d lease problems", s.Name, issued, len(sp))
	if out.ok() {
		logf("OK: every switch onboarded, no address given twice, the store agrees")
	} else {
		for _, p := range out.problems {
			logf("FAILED: %s", p)
		}
		fmt.Print(indent(g.LogTails(15)))
	}
	return out, nil
}

// takeover is the time from the victim's last ACK to the first ACK a
// survivor gave a client of the victim's buckets (NaN when none did).
func takeover(rs []halab.Reply, names []string, victim *halab.Appliance, tKill time.Time) float64 {
	var last time.Time
	for _, r := range rs {
		if r.Type == dhcpv4.MessageTypeAck && r.Server.String() == victim.IP && r.Time.Before(tKill) {
			last = r.Time
		}
	}
	if last.IsZero() {
		return math.NaN()
	}
	for _, r := range rs {
		if r.Type == dhcpv4.MessageTypeAck && r.Time.After(last) && r.Server.String() != victim.IP &&
			ha.Primary(names, int(dhcp.LBHash(r.Key()))) == victim.Name {
			return r.Time.Sub(last).Seconds()
		}
	}
	return math.NaN()
}

// storeProblems compares a's lease table with the fleet's records: every
// switch that onboarded holds exactly one active lease, the address it
// onboarded with, and no address is listed twice.
func storeProblems(ctx context.Context, a *halab.Appliance, res halab.FleetResult) ([]string, error) {
	raw, err := a.App.CLI(ctx, "lease", "list", "-o", "json")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", a.Name, err)
	}
	var leases []core.Lease
	if err := json.Unmarshal(raw, &leases); err != nil {
		return nil, fmt.Errorf("%s lease list: %w", a.Name, err)
	}
	var bad []string
	active := map[string]string{}
	seenIP := map[string]bool{}
	for _, l := range leases {
		if seenIP[l.IP] {
			bad = append(bad, fmt.Sprintf("the lease table lists %s twice", l.IP))
		}
		seenIP[l.IP] = true
		if l.State != core.LeaseActive {
			continue
		}
		mac := strings.ToLower(l.MAC)
		if other, ok := active[mac]; ok {
			bad = append(bad, fmt.Sprintf("%s holds two active leases, %s and %s", mac, other, l.IP))
		}
		active[mac] = l.IP
	}
	missing, wrong := 0, 0
	for i, ip := range res.Leases {
		if ip == "" {
			continue
		}
		switch got, ok := active[fleet.MAC(i).String()]; {
		case !ok:
			missing++
		case got != ip:
			wrong++
		}
	}
	if missing > 0 || wrong > 0 {
		bad = append(bad, fmt.Sprintf("%d switches without an active lease in the store, %d with another address than they onboarded with", missing, wrong))
	}
	slices.Sort(bad)
	return bad, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func orAny(s string) string {
	if s == "" {
		return "any"
	}
	return s
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}
