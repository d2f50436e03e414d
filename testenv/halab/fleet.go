package halab

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ztpd/ztpd/testenv/fleet"
)

// FleetEnv names the spec file when a binary runs as the fleet (inside
// the fleet's namespace, where the leased addresses are local): its main
// or TestMain calls RunFleetProcess with it.
const FleetEnv = "HALAB_FLEET_SPEC"

// StormClusters is the default number of clusters the storm's switches
// join (profile storm-<c> matches serial STORM-<c>-*).
const StormClusters = 4

// FleetSpec is what the fleet process runs.
type FleetSpec struct {
	N           int       `json:"n"`
	Concurrency int       `json:"concurrency"`
	Clusters    int       `json:"clusters"` // serials STORM-<i mod Clusters>-<i> (0: StormClusters)
	Relay       string    `json:"relay"`
	Server      string    `json:"server"`
	Deadline    time.Time `json:"deadline"`
	Out         string    `json:"out"`
}

// FleetResult is what the fleet did, switch by switch.
type FleetResult struct {
	Done     []bool        `json:"done"`     // onboarded completely (joined report accepted)
	Leases   []string      `json:"leases"`   // the address of its last complete onboarding
	Attempts []int         `json:"attempts"` // onboardings started
	Errors   []string      `json:"errors"`   // the first failures
	Elapsed  time.Duration `json:"elapsed"`  // from the first switch's start to the last one's end
	// P50 and P99 are over the switches that onboarded: from their first
	// attempt's start to their accepted report, retries included.
	P50, P99 time.Duration
}

// NotDone counts the switches that never onboarded.
func (r FleetResult) NotDone() int {
	n := 0
	for _, ok := range r.Done {
		if !ok {
			n++
		}
	}
	return n
}

// Retried counts the switches that started over at least once.
func (r FleetResult) Retried() int {
	n := 0
	for _, a := range r.Attempts {
		if a > 1 {
			n++
		}
	}
	return n
}

// SharedLeases lists every address the fleet's records give to two
// switches.
func (r FleetResult) SharedLeases() []string {
	byIP := map[string]int{}
	var bad []string
	for i, ip := range r.Leases {
		if ip == "" {
			continue
		}
		if j, dup := byIP[ip]; dup {
			bad = append(bad, fmt.Sprintf("switches %d and %d both onboarded with %s", j, i, ip))
		}
		byIP[ip] = i
	}
	return bad
}

// StormSwitch is switch i of the storm: MAC fleet.MAC(i), serial
// STORM-<i mod clusters>-<i>, as bench bootstorm's.
func StormSwitch(i, clusters int) fleet.Switch {
	return fleet.Switch{N: i, MAC: fleet.MAC(i).String(), Product: "Accton-AS7712-32X",
		Serial: fmt.Sprintf("STORM-%02d-%06d", i%clusters, i)}
}

// RunFleetProcess is the fleet process: every switch onboards through the
// fleet's own code (fleet.Storm: DORA through the relay, ztp.json,
// config_db.json, the join bundle, the joined report); a switch that fails
// starts over a second later, as SONiC's ZTP does, until it is through or
// the deadline passes. It prints "done <n>" after each switch that is
// through, and writes a FleetResult to the spec's Out.
func RunFleetProcess(specPath string) error {
	raw, err := os.ReadFile(specPath)
	if err != nil {
		return err
	}
	var spec FleetSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return err
	}
	if spec.Clusters == 0 {
		spec.Clusters = StormClusters
	}
	relay, err := fleet.NewRelay(netip.MustParseAddr(spec.Relay), netip.MustParseAddr(spec.Server))
	if err != nil {
		return err
	}
	defer relay.Close()
	ctx, cancel := context.WithDeadline(context.Background(), spec.Deadline)
	defer cancel()
	res := FleetResult{Done: make([]bool, spec.N), Leases: make([]string, spec.N), Attempts: make([]int, spec.N)}
	took := make([]time.Duration, spec.N)
	var mu sync.Mutex
	var next, done atomic.Int64
	out := bufio.NewWriter(os.Stdout)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < spec.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= spec.N {
					return
				}
				sw := StormSwitch(i, spec.Clusters)
				t0 := time.Now()
				for ctx.Err() == nil {
					res.Attempts[i]++
					r := (&fleet.Storm{Relay: relay, Concurrency: 1, Switches: []fleet.Switch{sw}}).Run(ctx)
					if r.Failed == 0 {
						res.Done[i], res.Leases[i], took[i] = true, r.Leases[0], time.Since(t0)
						n := done.Add(1)
						mu.Lock()
						fmt.Fprintf(out, "done %d\n", n)
						out.Flush()
						mu.Unlock()
						break
					}
					mu.Lock()
					if len(res.Errors) < 20 {
						res.Errors = append(res.Errors, fmt.Sprintf("%.1fs %s", time.Since(start).Seconds(), strings.Join(r.Errors, "; ")))
					}
					mu.Unlock()
					select {
					case <-ctx.Done():
					case <-time.After(time.Second):
					}
				}
			}
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	var ok []time.Duration
	for i, d := range took {
		if res.Done[i] {
			ok = append(ok, d)
		}
	}
	if len(ok) > 0 {
		slices.Sort(ok)
		res.P50, res.P99 = ok[len(ok)/2], ok[min(len(ok)-1, len(ok)*99/100)]
	}
	raw, err = json.Marshal(res)
	if err != nil {
		return err
	}
	return os.WriteFile(spec.Out, raw, 0o644)
}

// RunFleet runs the fleet process for spec inside the fleet's namespace
// and waits for it. argv starts a binary that calls RunFleetProcess when
// FleetEnv is set (a test binary with -test.run=^$, a command's own
// executable; taskset first pins it). onDone, if set, is called after each
// switch that is through with how many are. spec.Relay and spec.Server
// default to the lab's, spec.Out to <work>/fleet.json; the spec goes to
// <work>/fleet-spec.json and the fleet's stderr to <work>/fleet.err.
func (g *Group) RunFleet(ctx context.Context, argv []string, spec FleetSpec, onDone func(done int)) (FleetResult, error) {
	if spec.Relay == "" {
		spec.Relay = RelayAddr
	}
	if spec.Server == "" {
		spec.Server = BroadcastAddr
	}
	if spec.Out == "" {
		spec.Out = filepath.Join(g.Work, "fleet.json")
	}
	specPath := filepath.Join(g.Work, "fleet-spec.json")
	raw, err := json.Marshal(spec)
	if err != nil {
		return FleetResult{}, err
	}
	if err := os.WriteFile(specPath, raw, 0o644); err != nil {
		return FleetResult{}, err
	}
	cmd := g.Fleet.Command(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), FleetEnv+"="+specPath)
	errPath := filepath.Join(g.Work, "fleet.err")
	stderr, err := os.Create(errPath)
	if err != nil {
		return FleetResult{}, err
	}
	defer stderr.Close()
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return FleetResult{}, err
	}
	if err := cmd.Start(); err != nil {
		return FleetResult{}, err
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var done int
		if _, err := fmt.Sscanf(sc.Text(), "done %d", &done); err == nil && onDone != nil {
			onDone(done)
		}
	}
	if err := cmd.Wait(); err != nil {
		b, _ := os.ReadFile(errPath)
		return FleetResult{}, fmt.Errorf("fleet: %v\n%s", err, TailLines(string(b), 20))
	}
	var res FleetResult
	if raw, err := os.ReadFile(spec.Out); err != nil {
		return res, err
	} else if err := json.Unmarshal(raw, &res); err != nil {
		return res, fmt.Errorf("%s: %w", spec.Out, err)
	}
	return res, nil
}
