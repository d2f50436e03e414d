// Command rolloutbench is the rolling-upgrade benchmark
// (bench/rollout.sh): the rollout engine upgrades the
// Kubernetes version of a simulated cluster of -nodes nodes
// (-control-planes of them control planes, the rest workers)
// -max-unavailable at a time, and it reports the wall time against the
// floor: the sum of the per-node steps divided by the parallelism.
// Control planes go one at a time, so
//
//	floor = sum of the control planes' steps + sum of the workers' steps / min(max-unavailable, workers)
//
// What is real: the engine (internal/rollout), the desired-state owner
// (internal/desired) and a bbolt store in a temporary directory (every
// write fsynced, as in ztpd). What is simulated: the cluster's API server
// (NodeOps: cordon and drain take their time, a Node turns Ready -ready
// after its kubelet restarted) and the device agents, one goroutine per
// node that behaves as ztpd-agent.py under its systemd timer: a run starts
// at the timer's tick, -poll plus a random 0..-poll/2 after the previous
// tick (a tick within a run is merged into it, as systemd does); it polls
// its document through AgentDocument and, handed the kubeadm-upgrade
// step, reports it running through AgentReport, takes -agent, moves its
// Node to the version and reports it succeeded; while the document's
// poll_seconds is shorter than -poll (the engine's nodes get -fast-poll,
// its next ones, in flight or next to start, -next-poll, as ztpd's
// desired-state owner is wired to the engine), the run polls on
// every poll_seconds plus up to a tenth, past the interval, until the
// document says the interval again (at most agent.LingerMax).
//
// Every duration flag is a real-world time, multiplied by -scale; each
// node's step times are drawn uniformly within ±-spread of the flags
// (seeded by -seed), and the floor is computed from the times drawn. The
// times the report shows are the measured (scaled) ones.
//
// It reports; it never fails on a time. It exits non-zero when the
// rollout does not succeed, when a node does not end done with its Node
// Ready, uncordoned and at the target, or when more nodes than
// -max-unavailable were cordoned at once. The last line is
//
//	RESULT rollout nodes=<n> seconds=<s> floor_s=<f>
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/desired"
	"github.com/ztpd/ztpd/internal/rollout"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/joiner/agent"
)

const (
	clusterID   = "c1"
	fromVersion = "v1.36.3"
	target      = "v1.37.2"
)

type config struct {
	nodes, controlPlanes, maxUnavailable int
	scale, spread                        float64
	seed                                 uint64
	cordon, drain, agent, ready, poll    time.Duration
	fastPoll, nextPoll                   time.Duration
	timeout                              time.Duration
	breakNode                            int
	failPct                              float64 // rollback mode (rollback.go)
	dir                                  string
	verbose                              bool
}

func main() {
	var c config
	flag.IntVar(&c.nodes, "nodes", 200, "nodes in the cluster")
	flag.IntVar(&c.controlPlanes, "control-planes", 1, "control planes among them (upgraded one at a time, first)")
	flag.IntVar(&c.maxUnavailable, "max-unavailable", 10, "the rollout's maxUnavailable")
	flag.Float64Var(&c.scale, "scale", 1, "multiplies every duration flag (0.1: ten times faster than real)")
	flag.Float64Var(&c.spread, "spread", 0.2, "each node's step times vary uniformly within ±spread of the flags")
	flag.Uint64Var(&c.seed, "seed", 1, "seed of the step times")
	flag.DurationVar(&c.cordon, "cordon", 50*time.Millisecond, "time to cordon a Node (real world)")
	flag.DurationVar(&c.drain, "drain", 2*time.Second, "time to drain a Node (real world)")
	flag.DurationVar(&c.agent, "agent", 5*time.Second, "time of the agent's kubeadm upgrade (real world)")
	flag.DurationVar(&c.ready, "ready", time.Second, "time from the kubelet restart to the Node Ready (real world)")
	flag.DurationVar(&c.poll, "poll", agent.DefaultInterval, "agents' poll interval (their timer's), plus a random 0..poll/2 (real world)")
	flag.DurationVar(&c.fastPoll, "fast-poll", desired.DefaultFastPollInterval, "the poll interval ztpd gives the agents of the rollout's nodes (real world, whole seconds; 0: none)")
	flag.DurationVar(&c.nextPoll, "next-poll", desired.DefaultNextPollInterval, "the poll interval ztpd gives the agents of the rollout's next nodes, in flight or next to start (real world, whole seconds; 0: none)")
	flag.DurationVar(&c.timeout, "timeout", time.Hour, "give up waiting for the rollout after this (measured time; a hang guard, not a limit)")
	flag.IntVar(&c.breakNode, "break-node", -1, "the agent of this node (index) fails its upgrade: shows the bench fails then")
	flag.Float64Var(&c.failPct, "fail-pct", 0, "rollback mode: this percentage of the workers fail their kubelet restart and are rolled back (rollback auto, on_failure continue)")
	flag.StringVar(&c.dir, "dir", "", "store directory (default: a temporary one, removed)")
	flag.BoolVar(&c.verbose, "v", false, "log the engine and the desired-state owner to stderr")
	flag.Parse()
	if err := c.check(); err != nil {
		fmt.Fprintln(os.Stderr, "rolloutbench:", err)
		os.Exit(2)
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "rolloutbench:", err)
		os.Exit(1)
	}
}

func (c *config) check() error {
	switch {
	case c.nodes < 1 || c.nodes > 65536:
		return fmt.Errorf("-nodes %d: want 1..65536", c.nodes)
	case c.controlPlanes < 1 || c.controlPlanes > c.nodes:
		return fmt.Errorf("-control-planes %d: want 1..%d (the nodes)", c.controlPlanes, c.nodes)
	case c.maxUnavailable < 1:
		return fmt.Errorf("-max-unavailable %d: want at least 1", c.maxUnavailable)
	case c.scale <= 0:
		return fmt.Errorf("-scale %g: want more than 0", c.scale)
	case c.spread < 0 || c.spread >= 1:
		return fmt.Errorf("-spread %g: want 0 <= spread < 1", c.spread)
	case c.cordon < 0 || c.drain < 0 || c.agent < 0 || c.ready < 0:
		return errors.New("step times cannot be negative")
	case c.poll <= 0:
		return fmt.Errorf("-poll %v: want more than 0", c.poll)
	case c.fastPoll < 0 || c.nextPoll < 0:
		return fmt.Errorf("-fast-poll %v, -next-poll %v: want 0 (none) or more", c.fastPoll, c.nextPoll)
	case c.failPct < 0 || c.failPct > 100:
		return fmt.Errorf("-fail-pct %g: want 0..100", c.failPct)
	}
	return nil
}

func (c *config) scaled(d time.Duration) time.Duration { return time.Duration(float64(d) * c.scale) }

// steps are one node's step times (scaled).
type steps struct{ cordon, drain, agent, ready time.Duration }

func (s steps) total() time.Duration { return s.cordon + s.drain + s.agent + s.ready }

func deviceID(i int) string { return fmt.Sprintf("02:00:00:00:%02x:%02x", i>>8, i&0xff) }

func nodeName(i int) string { return fmt.Sprintf("node-%d", i) }

// simNode is a Node as the simulated API server shows it.
type simNode struct {
	steps         steps
	version       string
	readyAt       time.Time // Ready from then on
	unschedulable bool
	ours          bool
}

// cluster simulates the API server: NodeOps with the nodes' step times.
type cluster struct {
	mu        sync.Mutex
	nodes     map[string]*simNode
	cordoned  int
	maxCordon int
}

func (c *cluster) node(name string) (*simNode, error) {
	n := c.nodes[name]
	if n == nil {
		return nil, fmt.Errorf("node %s not found", name)
	}
	return n, nil
}

func (c *cluster) Node(_ context.Context, _, name string) (rollout.NodeInfo, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.nodes[name]
	if !ok {
		return rollout.NodeInfo{}, false, nil
	}
	return rollout.NodeInfo{KubeletVersion: n.version, Ready: !time.Now().Before(n.readyAt), Unschedulable: n.unschedulable}, true, nil
}

func (c *cluster) Cordon(_ context.Context, _, name, _ string) (bool, error) {
	c.mu.Lock()
	n, err := c.node(name)
	c.mu.Unlock()
	if err != nil {
		return false, err
	}
	time.Sleep(n.steps.cordon)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !n.unschedulable {
		n.unschedulable, n.ours = true, true
		c.cordoned++
		c.maxCordon = max(c.maxCordon, c.cordoned)
	}
	return n.ours, nil
}

// Uncordon is one PATCH, like Cordon; it is left out of the floor and
// costs no simulated time.
func (c *cluster) Uncordon(_ context.Context, _, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.node(name)
	if err != nil {
		return err
	}
	if n.unschedulable {
		n.unschedulable, n.ours = false, false
		c.cordoned--
	}
	return nil
}

func (c *cluster) Drain(_ context.Context, _, name string, _ time.Duration) error {
	c.mu.Lock()
	n, err := c.node(name)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	time.Sleep(n.steps.drain)
	return nil
}

// WaitReady waits as a watch would: until the Node is at version and its
// Ready time has come.
func (c *cluster) WaitReady(ctx context.Context, _, name, version string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c.mu.Lock()
		n, err := c.node(name)
		var at time.Time
		atVersion := false
		if err == nil {
			at, atVersion = n.readyAt, version == "" || n.version == version
		}
		c.mu.Unlock()
		if err != nil {
			return err
		}
		wait := time.Millisecond // not yet at the version: look again soon
		if atVersion {
			if wait = time.Until(at); wait <= 0 {
				return nil
			}
		}
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("node %s not Ready at %s within %s", name, version, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

func (c *cluster) DeleteNode(_ context.Context, _, name string) error {
	return fmt.Errorf("delete node %s: not part of an upgrade", name)
}

// upgraded is the agent's kubeadm upgrade ending: the kubelet restarted
// at version, the Node Ready after its ready time.
func (c *cluster) upgraded(name, version string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.nodes[name]; n != nil {
		n.version, n.readyAt = version, time.Now().Add(n.steps.ready)
	}
}

// credentialIsDevice: the simulated agents' credential is their device ID.
type credentialIsDevice struct{}

func (credentialIsDevice) AuthenticateAgent(_ context.Context, cred string, _ netip.Addr) (string, error) {
	return cred, nil
}

// noMembers: an upgrade ends no membership.
type noMembers struct{}

func (noMembers) MemberLeft(context.Context, string, string) error {
	return errors.New("not part of an upgrade")
}
func (noMembers) RevokeAgent(context.Context, string, string) error {
	return errors.New("not part of an upgrade")
}
func (noMembers) ResetDevice(context.Context, string) (core.Device, error) {
	return core.Device{}, errors.New("not part of an upgrade")
}

// agents are the simulated device agents.
type agents struct {
	des *desired.Service
	cl  *cluster
	// poll is the timer's interval, lingerMax how long a run polls on at
	// most (both scaled); scale scales the documents' poll_seconds.
	poll, lingerMax time.Duration
	scale           func(time.Duration) time.Duration
	broken          string          // this device's agent fails its upgrade
	failing         map[string]bool // these fail and roll back (-fail-pct)
	polls           atomic.Int64
	fastPolls       atomic.Int64 // polls a run made on, at the document's pace
	errs            atomic.Int64
	lastErr         atomic.Value // string
}

// Polling on, as ztpd-agent.py's Agent.linger does it: at most
// lingerMax into a run (agent.LingerMax, scaled), and a run whose polls
// fail backs off to the timer's interval and ends after lingerFailures of
// them in a row (the script's LINGER_FAILURES).
const lingerFailures = 3

// run is one agent under its timer: a run starts at the timer's tick
// (OnUnitActiveSec -poll plus RandomizedDelaySec 0..-poll/2 from the last
// tick); it polls, runs the operation its document carries, and polls on
// at the document's pace while that is faster than the timer's, past the
// interval, until the document says the interval again (the engine is
// done with the node), lingerMax has passed or lingerFailures polls in a
// row failed. A tick that falls within a run is merged into it by systemd,
// and the next tick counts from it: after a long run the next comes at
// once.
func (a *agents) run(ctx context.Context, i int) {
	dev, node := deviceID(i), nodeName(i)
	addr := netip.AddrFrom4([4]byte{10, 99, byte(1 + i>>8), byte(i)})
	tick := func(from time.Time) time.Time { return from.Add(a.poll + rand.N(a.poll/2+1)) }
	// Agents booted at different times: their timers are out of step.
	next := time.Now().Add(rand.N(a.poll))
	for {
		if !sleep(ctx, time.Until(next)) {
			return
		}
		started := time.Now()
		deadline := started.Add(a.lingerMax)
		every, failures := a.poll, 1
		if d, ok := a.pollOnce(ctx, dev, node, addr); ok {
			every, failures = d, 0
		}
		for every < a.poll && failures < lingerFailures {
			pace := every
			if failures > 0 {
				pace = a.poll
			}
			wait := pace + rand.N(pace/10+1)
			if time.Now().Add(wait).After(deadline) || !sleep(ctx, wait) {
				break
			}
			a.fastPolls.Add(1)
			if d, ok := a.pollOnce(ctx, dev, node, addr); ok {
				every, failures = d, 0
			} else {
				failures++
			}
		}
		next = tick(started)
		if now := time.Now(); now.After(next) {
			// The tick came during the run: merged into it, and the
			// next counts from it (at once when that is past too).
			next = tick(next)
			if now.After(next) {
				next = now
			}
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// pollOnce reads the document and runs its operation; it returns the
// document's poll interval (scaled).
func (a *agents) pollOnce(ctx context.Context, dev, node string, addr netip.Addr) (time.Duration, bool) {
	a.polls.Add(1)
	doc, err := a.des.AgentDocument(ctx, dev, addr)
	if err != nil {
		a.fail(dev, "poll", err)
		return 0, false
	}
	every := a.scale(time.Duration(doc.PollSeconds) * time.Second)
	if doc.Operation != nil {
		a.runOperation(ctx, dev, node, addr, doc.Operation)
	}
	return every, true
}

// runOperation runs the steps as the agent does: running, the work,
// succeeded (a kubeadm upgrade moves the Node).
func (a *agents) runOperation(ctx context.Context, dev, node string, addr netip.Addr, op *desired.DocumentOp) {
	for _, st := range op.Steps {
		if st.Action == core.ActionRollback && op.Kind != core.OpRollback {
			continue // runs only after a failure
		}
		rep := desired.Report{Operation: op.ID, Step: st.Name, State: core.StepRunning, AgentVersion: "rolloutbench"}
		if err := a.des.AgentReport(ctx, dev, addr, rep); err != nil {
			a.fail(dev, "report running", err)
			break
		}
		if a.failing[dev] && st.Action == "kubeadm-upgrade" {
			a.failAndRollBack(ctx, dev, node, addr, op, st)
			break
		}
		rep.State, rep.Output = core.StepSucceeded, st.Action+" done"
		if dev == a.broken {
			rep.State, rep.ExitCode, rep.Output = core.StepFailed, 1, "kubeadm upgrade failed (-break-node)"
		} else if st.Action == "kubeadm-upgrade" {
			a.cl.mu.Lock()
			d := a.cl.nodes[node].steps.agent
			a.cl.mu.Unlock()
			time.Sleep(d)
			a.cl.upgraded(node, st.Args["version"])
		}
		if err := a.des.AgentReport(ctx, dev, addr, rep); err != nil {
			a.fail(dev, "report succeeded", err)
			break
		}
	}
}

func (a *agents) fail(dev, what string, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	a.errs.Add(1)
	a.lastErr.Store(fmt.Sprintf("agent of %s: %s: %v", dev, what, err))
}

func run(c config) error {
	dir := c.dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "rolloutbench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	st, err := boltstore.Open(dir, boltstore.Options{Registerer: storeMetrics})
	if err != nil {
		return err
	}
	defer st.Close()

	// Each node's step times, drawn once.
	rng := rand.New(rand.NewPCG(c.seed, 17))
	vary := func(d time.Duration) time.Duration {
		f := 1 + c.spread*(2*rng.Float64()-1)
		return time.Duration(float64(c.scaled(d)) * f)
	}
	cl := &cluster{nodes: map[string]*simNode{}}
	for i := range c.nodes {
		cl.nodes[nodeName(i)] = &simNode{version: fromVersion,
			steps: steps{cordon: vary(c.cordon), drain: vary(c.drain), agent: vary(c.agent), ready: vary(c.ready)}}
	}
	if err := seed(st, c); err != nil {
		return fmt.Errorf("seed the store: %w", err)
	}

	log := slog.New(slog.DiscardHandler)
	if c.verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	// As ztpd wires them: the rollout's nodes poll fast (the engine is
	// built after the owner it is given).
	var eng *rollout.Engine
	dopts := desired.Options{Auth: credentialIsDevice{}, PollInterval: c.poll, FastPollInterval: c.fastPoll, NextPollInterval: c.nextPoll, Log: log}
	if c.fastPoll > 0 {
		dopts.FastPoll = func(device string) bool { return eng != nil && eng.Involved(device) }
	}
	if c.nextPoll > 0 {
		dopts.NextPoll = func(device string) bool { return eng != nil && eng.Upcoming(device) }
	}
	des := desired.New(st, dopts)
	spec := rollout.Spec{Cluster: clusterID, Kind: core.RolloutKubernetes, Target: target, MaxUnavailable: c.maxUnavailable, By: "rolloutbench"}
	eopts := rollout.Options{Nodes: cl, Agents: des, Members: noMembers{}, Log: log}
	withCanary(c, &spec, &eopts)
	if c.failPct > 0 {
		spec.Rollback, spec.OnFailure = core.RollbackAuto, core.OnFailureContinue
	}
	eng, err = rollout.New(st, eopts)
	if err != nil {
		return err
	}
	ag := &agents{des: des, cl: cl, poll: c.scaled(c.poll), lingerMax: c.scaled(agent.LingerMax), scale: c.scaled}
	if c.breakNode >= 0 {
		ag.broken = deviceID(c.breakNode)
	}
	ag.failing = pickFailing(c)
	ctx, stopAgents := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range c.nodes {
		wg.Go(func() { ag.run(ctx, i) })
	}
	defer func() { stopAgents(); wg.Wait() }()

	eventsBefore, err := countEvents(st)
	if err != nil {
		return err
	}
	commitsBefore := commits()
	cpuBefore := cpuTime()
	t0 := time.Now()
	r, err := eng.Start(context.Background(), spec)
	if err != nil {
		return fmt.Errorf("start the rollout: %w", err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	r, err = eng.Wait(wctx, r.ID)
	cancel()
	if err != nil {
		return fmt.Errorf("rollout %s did not end within -timeout %s: %w", r.ID, c.timeout, err)
	}
	wall := time.Since(t0)
	cpu := cpuTime() - cpuBefore
	commitCount := commits() - commitsBefore
	stopAgents()
	wg.Wait()
	eventsAfter, err := countEvents(st)
	if err != nil {
		return err
	}

	if err := verify(r, cl, des, c, ag.failing); err != nil {
		return err
	}

	// The floor, from the step times drawn.
	var cpSum, workerSum time.Duration
	workers := 0
	for _, n := range r.Nodes {
		s := cl.nodes[n.NodeName].steps
		if n.Role == "control-plane" {
			cpSum += s.total()
		} else {
			workerSum += s.total()
			workers++
		}
	}
	par := max(1, min(c.maxUnavailable, workers))
	floor := cpSum + workerSum/time.Duration(par)
	if f, ok := canaryFloor(c, r, func(node string) time.Duration { return cl.nodes[node].steps.total() }); ok {
		floor = f
	}

	// Per node: its time in the engine beyond its own steps, and the part
	// of it the agent's poll took (operation handed -> agent running).
	var beyond, pickup []time.Duration
	var firstPickup time.Duration // the first node's: its agent's first run after the start
	for i, n := range r.Nodes {
		beyond = append(beyond, n.Finished.Sub(n.Started)-cl.nodes[n.NodeName].steps.total())
		d, err := des.Get(n.Device)
		if err != nil {
			return err
		}
		if op := d.Operation; op != nil && len(op.Steps) > 0 {
			pickup = append(pickup, op.Steps[0].Started.Sub(op.Created))
			if i == 0 {
				firstPickup = pickup[len(pickup)-1]
			}
		}
	}

	var mean steps
	for _, n := range cl.nodes {
		mean.cordon += n.steps.cordon
		mean.drain += n.steps.drain
		mean.agent += n.steps.agent
		mean.ready += n.steps.ready
	}
	k := time.Duration(c.nodes)
	mean = steps{mean.cordon / k, mean.drain / k, mean.agent / k, mean.ready / k}

	fmt.Printf("rollout: kubernetes %s -> %s, %d nodes (%d control plane(s) one at a time, %d workers), maxUnavailable %d, scale %g\n",
		fromVersion, target, c.nodes, c.nodes-workers, workers, c.maxUnavailable, c.scale)
	fmt.Printf("steps per node (scaled, mean of the drawn times, spread ±%.0f%%): cordon %s, drain %s, agent upgrade %s, Node Ready %s = %s\n",
		100*c.spread, ms(mean.cordon), ms(mean.drain), ms(mean.agent), ms(mean.ready), ms(mean.total()))
	fast := "none"
	if c.fastPoll > 0 {
		fast = ms(c.scaled(c.fastPoll.Round(time.Second)))
	}
	next := "none"
	if c.nextPoll > 0 {
		next = ms(c.scaled(c.nextPoll.Round(time.Second)))
	}
	fmt.Printf("agents' runs start every %s + 0..%s; the rollout's nodes poll on every %s, its next ones (in flight, next to start) every %s (scaled); load average %s, %d cpus\n",
		ms(ag.poll), ms(ag.poll/2), fast, next, loadavg(), runtime.NumCPU())
	fmt.Println()
	fmt.Printf("%6s %12s %8s %8s %11s %17s\n", "nodes", "maxUnavail", "wall_s", "floor_s", "wall/floor", "overhead/node_ms")
	overhead := (wall - floor) * time.Duration(par) / k
	fmt.Printf("%6d %12d %8.2f %8.2f %11.3f %17.1f\n", c.nodes, c.maxUnavailable, wall.Seconds(), floor.Seconds(),
		wall.Seconds()/floor.Seconds(), float64(overhead)/float64(time.Millisecond))
	fmt.Println()
	fmt.Printf("overhead per node = (wall - floor) x %d / %d nodes\n", par, c.nodes)
	fmt.Printf("each node's time beyond its own steps: p50 %s, mean %s, p99 %s, max %s\n",
		ms(pct(beyond, 50)), ms(avg(beyond)), ms(pct(beyond, 99)), ms(pct(beyond, 100)))
	fmt.Printf("  of which the agent's pickup (operation handed -> running): p50 %s, mean %s, p99 %s, max %s\n",
		ms(pct(pickup, 50)), ms(avg(pickup)), ms(pct(pickup, 99)), ms(pct(pickup, 100)))
	fmt.Printf("  the first node's pickup (its agent learns of the rollout at its timer's next run, 0..%s after the start): %s\n",
		ms(ag.poll+ag.poll/2), ms(firstPickup))
	fmt.Printf("store: %d commits (%.1f per node), %d events (%.1f per node); agent polls %d (%.0f/s, %d of them fast); "+
		"CPU %.2f s (%.1f ms per node: engine, store and simulated agents)\n",
		commitCount, float64(commitCount)/float64(c.nodes), eventsAfter-eventsBefore, float64(eventsAfter-eventsBefore)/float64(c.nodes),
		ag.polls.Load(), float64(ag.polls.Load())/wall.Seconds(), ag.fastPolls.Load(), cpu.Seconds(), float64(cpu)/float64(time.Millisecond)/float64(c.nodes))
	if n := ag.errs.Load(); n > 0 {
		fmt.Printf("agent calls that failed: %d (last: %s)\n", n, ag.lastErr.Load())
	}
	canaryReport(r)
	fmt.Printf("most nodes cordoned at once: %d (maxUnavailable %d); rollout %s: %s\n", cl.maxCordon, c.maxUnavailable, r.ID, r.State)
	if len(ag.failing) > 0 {
		if err := printRollbacks(r, des, ag.failing); err != nil {
			return err
		}
	}
	fmt.Printf("RESULT rollout nodes=%d seconds=%.2f floor_s=%.2f\n", c.nodes, wall.Seconds(), floor.Seconds())
	return nil
}

// seed stores the cluster: its members on the roster, the first control
// plane in its join state, every Node at fromVersion.
func seed(st core.Store, c config) error {
	return st.Update(func(tx core.Tx) error {
		if err := tx.Clusters().Put(core.Cluster{ID: clusterID, Name: "bench", State: core.ClusterRunning}); err != nil {
			return err
		}
		if err := tx.Clusters().PutJoinState(clusterID, core.JoinState{FirstControlPlane: deviceID(0)}); err != nil {
			return err
		}
		for i := range c.nodes {
			role := "worker"
			if i < c.controlPlanes {
				role = "control-plane"
			}
			id := deviceID(i)
			if err := tx.Devices().Put(core.Device{ID: id, MAC: id, Kind: core.KindVM, State: core.StateJoined}); err != nil {
				return err
			}
			m := core.Membership{Device: id, Cluster: clusterID, Role: role, State: core.StateJoined, NodeName: nodeName(i),
				Created: time.Unix(int64(i), 0).UTC()}
			if err := tx.Memberships().Put(m); err != nil {
				return err
			}
			if err := tx.Memberships().Enlist(clusterID, id, role); err != nil {
				return err
			}
		}
		return nil
	})
}

// verify: the rollout succeeded, every node is done, its Node Ready,
// uncordoned and at the target, its desired state says the target, and
// maxUnavailable held.
func verify(r core.Rollout, cl *cluster, des *desired.Service, c config, failing map[string]bool) error {
	var bad []string
	if r.State != core.RolloutSucceeded {
		bad = append(bad, fmt.Sprintf("rollout %s %s: %s", r.ID, r.State, r.Reason))
	}
	if len(r.Nodes) != c.nodes {
		bad = append(bad, fmt.Sprintf("the rollout has %d nodes, the cluster %d", len(r.Nodes), c.nodes))
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for _, n := range r.Nodes {
		sn := cl.nodes[n.NodeName]
		d, err := des.Get(n.Device)
		if failing[n.Device] {
			if why := verifyRolledBack(n, sn); why != "" {
				bad = append(bad, why)
			}
			continue
		}
		switch {
		case n.Phase != core.NodeDone:
			why := ""
			if n.Reason != "" {
				why = ": " + n.Reason
			}
			bad = append(bad, fmt.Sprintf("%s (%s) ended %s%s", n.NodeName, n.Device, n.Phase, why))
		case sn == nil:
			bad = append(bad, fmt.Sprintf("%s: no such Node", n.NodeName))
		case sn.version != target || time.Now().Before(sn.readyAt) || sn.unschedulable:
			bad = append(bad, fmt.Sprintf("%s: Node at %s, Ready %v, unschedulable %v", n.NodeName, sn.version,
				!time.Now().Before(sn.readyAt), sn.unschedulable))
		case err != nil:
			bad = append(bad, fmt.Sprintf("%s: desired state: %v", n.Device, err))
		case d.KubernetesVersion != target || d.Operation == nil || d.Operation.State != core.StepSucceeded:
			bad = append(bad, fmt.Sprintf("%s: desired version %q, operation %+v", n.Device, d.KubernetesVersion, d.Operation))
		}
	}
	if cl.maxCordon > c.maxUnavailable {
		bad = append(bad, fmt.Sprintf("%d nodes were cordoned at once with maxUnavailable %d", cl.maxCordon, c.maxUnavailable))
	}
	if len(bad) == 0 {
		return nil
	}
	more := ""
	if len(bad) > 10 {
		more = fmt.Sprintf("\n  ... and %d more", len(bad)-10)
		bad = bad[:10]
	}
	return fmt.Errorf("the rollout did not upgrade every node:\n  %s%s", strings.Join(bad, "\n  "), more)
}

func countEvents(st core.Store) (int, error) {
	n := 0
	err := st.View(func(tx core.Tx) error {
		for _, s := range []core.EventStream{core.DeviceEvents, core.AuditEvents} {
			c, err := tx.Events().Count(s)
			if err != nil {
				return err
			}
			n += c
		}
		return nil
	})
	return n, err
}

// storeMetrics holds the bench store's metrics.
var storeMetrics = prometheus.NewRegistry()

// commits is boltstore's durable commit counter.
func commits() int64 {
	mfs, err := storeMetrics.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() == "ztpd_store_commits_total" && len(mf.GetMetric()) > 0 {
			return int64(mf.GetMetric()[0].GetCounter().GetValue())
		}
	}
	return 0
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.SortFunc(s, cmp.Compare)
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)]
}

func avg(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t / time.Duration(len(ds))
}

func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	if v > -10 && v < 10 {
		return fmt.Sprintf("%.1fms", v)
	}
	return fmt.Sprintf("%.0fms", v)
}
