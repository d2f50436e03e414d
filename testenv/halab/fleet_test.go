package halab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ztpd/ztpd/testenv/fleet"
	"github.com/ztpd/ztpd/testenv/netns"
)

// fleetEnv names the spec file when the test binary runs as the fleet
// (inside the fleet's namespace, where the leased addresses are local).
const fleetEnv = "HALAB_FLEET_SPEC"

// stormClusters is how many clusters the storm's switches join (profile
// storm-<c> matches serial STORM-<c>-*).
const stormClusters = 4

func TestMain(m *testing.M) {
	if spec := os.Getenv(fleetEnv); spec != "" {
		if err := runFleet(spec); err != nil {
			fmt.Fprintln(os.Stderr, "fleet:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	var err error
	if buildDir, err = os.MkdirTemp("", "halab-bin-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(buildDir)
	os.Exit(code)
}

// fleetSpec is what the fleet process runs.
type fleetSpec struct {
	N           int       `json:"n"`
	Concurrency int       `json:"concurrency"`
	Relay       string    `json:"relay"`
	Server      string    `json:"server"`
	Deadline    time.Time `json:"deadline"`
	Out         string    `json:"out"`
}

// fleetResult is what it did, switch by switch.
type fleetResult struct {
	Done     []bool        `json:"done"`     // onboarded completely (joined report accepted)
	Leases   []string      `json:"leases"`   // the address of its last complete onboarding
	Attempts []int         `json:"attempts"` // onboardings started
	Errors   []string      `json:"errors"`   // the first failures
	Elapsed  time.Duration `json:"elapsed"`
}

// stormSwitch is switch i of the storm: MAC fleet.MAC(i), serial
// STORM-<i mod clusters>-<i>, as bench bootstorm's.
func stormSwitch(i int) fleet.Switch {
	return fleet.Switch{N: i, MAC: fleet.MAC(i).String(), Product: "Accton-AS7712-32X",
		Serial: fmt.Sprintf("STORM-%02d-%06d", i%stormClusters, i)}
}

// runFleet is the fleet process: every switch onboards through the fleet's
// own code (fleet.Storm: DORA through the relay, ztp.json, config_db.json,
// the join bundle, the joined report); a switch that fails starts over a
// second later, as SONiC's ZTP does, until it is through or the deadline
// passes. It prints "done <n>" after each switch that is through.
func runFleet(specPath string) error {
	raw, err := os.ReadFile(specPath)
	if err != nil {
		return err
	}
	var spec fleetSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		return err
	}
	relay, err := fleet.NewRelay(netip.MustParseAddr(spec.Relay), netip.MustParseAddr(spec.Server))
	if err != nil {
		return err
	}
	defer relay.Close()
	ctx, cancel := context.WithDeadline(context.Background(), spec.Deadline)
	defer cancel()
	res := fleetResult{Done: make([]bool, spec.N), Leases: make([]string, spec.N), Attempts: make([]int, spec.N)}
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
				sw := stormSwitch(i)
				for ctx.Err() == nil {
					res.Attempts[i]++
					r := (&fleet.Storm{Relay: relay, Concurrency: 1, Switches: []fleet.Switch{sw}}).Run(ctx)
					if r.Failed == 0 {
						res.Done[i], res.Leases[i] = true, r.Leases[0]
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
	raw, err = json.Marshal(res)
	if err != nil {
		return err
	}
	return os.WriteFile(spec.Out, raw, 0o644)
}

// doraLoad keeps DHCP clients busy through a relay, about rate full DORAs
// per second, each client as a real one (four tries, the wait doubling
// from 2 s): two of three DORAs are by clients 0..n-1 in turn (MAC
// fleet.MAC(base+i), no client id: they come back for the address they
// hold), every third by a client never seen before (n, n+1, ...: a lease
// that must be committed before it is ACKed). Every ACKed address is
// recorded per client.
type doraLoad struct {
	relay *fleet.Relay
	base  int
	n     int
	rate  int

	mu     sync.Mutex
	leases map[int]map[string]int // client -> address -> ACKs
	ok     int
	failed int
	errs   []string
	stop   context.CancelFunc
	done   chan struct{}
}

// startDORALoad binds the relay inside ns and starts the clients.
func startDORALoad(ns *netns.NS, base, n, rate int) (*doraLoad, error) {
	var relay *fleet.Relay
	err := ns.Do(func() error {
		var err error
		relay, err = fleet.NewRelay(netip.MustParseAddr(relayAddr), netip.MustParseAddr(broadcastAddr))
		return err
	})
	if err != nil {
		return nil, err
	}
	l := &doraLoad{relay: relay, base: base, n: n, rate: rate, leases: map[int]map[string]int{}, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	l.stop = cancel
	go l.run(ctx)
	return l, nil
}

func (l *doraLoad) run(ctx context.Context) {
	defer close(l.done)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4096) // clients are independent: a stalled one holds no other back
	tick := time.NewTicker(time.Second / time.Duration(l.rate))
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-tick.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			continue // every slot busy: the tick is skipped
		}
		c := (i - i/3) % l.n
		if i%3 == 2 {
			c = l.n + i/3
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			lease, err := l.relay.DORA(ctx, fleet.Identity{MAC: fleet.MAC(l.base + c)})
			l.mu.Lock()
			defer l.mu.Unlock()
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					l.failed++
					if len(l.errs) < 10 {
						l.errs = append(l.errs, err.Error())
					}
				}
				return
			}
			l.ok++
			if l.leases[c] == nil {
				l.leases[c] = map[string]int{}
			}
			l.leases[c][lease.IP.String()]++
		}()
	}
}

// Stop ends the load (exchanges in flight are abandoned) and closes the relay.
func (l *doraLoad) Stop() {
	l.stop()
	<-l.done
	l.relay.Close()
}
