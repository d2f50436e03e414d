package halab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ztpd/ztpd/testenv/fleet"
	"github.com/ztpd/ztpd/testenv/netns"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(FleetEnv); spec != "" {
		if err := RunFleetProcess(spec); err != nil {
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
		relay, err = fleet.NewRelay(netip.MustParseAddr(RelayAddr), netip.MustParseAddr(BroadcastAddr))
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
