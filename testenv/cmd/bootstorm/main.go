// Command bootstorm is the boot-storm benchmark: a fleet of SONiC switches,
// simulated in one process, onboards through a real `ztpd serve` all at
// once: DORA through a relay address, ztp.json, config_db.json, the join
// bundle and the joined report (a hint: with no Kubernetes here, no Node
// ever makes the switches joined, so they end join-issued, their report
// recorded). It prints devices per second, the p50 and p99 time from
// DISCOVER to the accepted report and ztpd's CPU per switch, and ends with
//
//	RESULT boot_storm devices=<n> seconds=<n> p99_ms=<n> cpu_ms=<n> floor_cpu_ms=<n>
//
// With -floor (bench/boot-storm.sh passes it) the same fleet then runs the
// same storm against testenv/cmd/stormfloor, the least a Go server does
// per switch, in fresh namespaces: floor_cpu_ms is its CPU per switch (0
// without -floor), the floor under ztpd's on this machine.
//
// It needs root. ztpd runs in namespace bs-srv (10.99.0.1/16), the fleet in
// bs-cli (10.99.0.2/16, the relay's giaddr), joined by a veth pair. Each
// switch talks HTTP from the address it leased, as a real one does (ztpd
// hands join material only to the address a switch holds): the pool's /24s
// are "local" routes in bs-cli and routed to 10.99.0.2 from bs-srv.
//
// With -ipv6 the storm runs over DHCPv6 and IPv6 (namespaces bs6-srv and
// bs6-cli, testenv/stormlab's IPv6 layout): each switch leases by
// Solicit/Advertise/Request/Reply through the fleet's DHCPv6 relay, as
// dhclient -6 does, and fetches from its address in fd99:0:0:100::/64.
//
// Its -fleet mode (the fleet alone, in the fleet's namespace) is also what
// testenv/cmd/scalebench runs, and its -renew mode renews a -fleet run's leases
// at T1 (each switch a RENEWING client unicasting from its address).
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv6"

	"github.com/ztpd/ztpd/testenv/fleet"
	"github.com/ztpd/ztpd/testenv/lab"
	"github.com/ztpd/ztpd/testenv/netns"
	"github.com/ztpd/ztpd/testenv/procstat"
	"github.com/ztpd/ztpd/testenv/promtext"
	"github.com/ztpd/ztpd/testenv/stormlab"
)

type options struct {
	n, clusters, conc int
	bin, work         string
	serverCPUs        string
	fleetCPUs         string
	cpuProfile        string
	fleetProfile      string
	fleetOut          string // fleet mode: write the result here
	profileDelay      time.Duration
	renewLeases       string // renew mode: the storm's fleet result, with each switch's lease
	renewWindow       time.Duration
	ipv6              bool   // the storm over DHCPv6 and IPv6 (stormlab's IPv6 layout)
	deviceTLS         bool   // the device HTTPS listener on (ztpd's default)
	floor             string // the stormfloor binary: the same storm against it after ztpd's
	floorProfile      string
}

const poolFirst, poolLast = 1, 200 // pool 10.99.<first>.0 - 10.99.<last>.254

func main() {
	var o options
	fleetMode := flag.Bool("fleet", false, "internal: run only the fleet (inside bs-cli)")
	renewMode := flag.Bool("renew", false, "internal: renew the leases of -renew-leases at T1 (inside the fleet's namespace)")
	flag.StringVar(&o.renewLeases, "renew-leases", "", "internal: a -fleet-out result of the storm whose leases -renew renews")
	flag.DurationVar(&o.renewWindow, "renew-window", time.Minute, "internal: -renew spreads the fleet's REQUESTs uniformly over this window")
	flag.IntVar(&o.n, "n", 10000, "switches")
	flag.BoolVar(&o.ipv6, "ipv6", false, "the storm over DHCPv6 (Solicit, Advertise, Request, Reply through a relay) and HTTP over IPv6, the fleet leasing from a /64")
	flag.BoolVar(&o.deviceTLS, "device-tls", true, "ztpd's device HTTPS listener (its default); false: the join and the report over plain HTTP, to measure what TLS costs")
	flag.IntVar(&o.clusters, "clusters", 10, "clusters (at most 1000 workers each)")
	flag.IntVar(&o.conc, "concurrency", 256, "switches onboarding at the same time")
	flag.StringVar(&o.bin, "ztpd", "bin/ztpd", "ztpd binary")
	flag.StringVar(&o.floor, "floor", "", "after ztpd's storm, run the same storm against this testenv/cmd/stormfloor binary, the least a Go server does per switch, and report its CPU per switch beside ztpd's")
	flag.StringVar(&o.work, "work", "", "work directory (default: a temp dir, removed)")
	flag.StringVar(&o.serverCPUs, "server-cpus", "", "taskset CPU list for ztpd (empty: no pinning)")
	flag.StringVar(&o.fleetCPUs, "fleet-cpus", "", "taskset CPU list for the fleet (empty: no pinning)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write ztpd's CPU profile of 10 s of the storm here")
	flag.DurationVar(&o.profileDelay, "cpuprofile-delay", 0, "start the ztpd profile this long into the storm")
	flag.StringVar(&o.floorProfile, "floor-cpuprofile", "", "write the floor's CPU profile of its whole storm here")
	flag.StringVar(&o.fleetProfile, "fleet-cpuprofile", "", "write the fleet's own CPU profile here")
	flag.StringVar(&o.fleetOut, "fleet-out", "", "internal: fleet result file")
	flag.Parse()
	var err error
	switch {
	case *renewMode:
		err = runRenew(o)
	case *fleetMode:
		err = runFleet(o)
	default:
		err = run(o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bootstorm:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if err := netns.Check(); err != nil {
		return err
	}
	if o.n/o.clusters > 1000 {
		return fmt.Errorf("%d switches in %d clusters is more than 1000 per cluster", o.n, o.clusters)
	}
	if !o.ipv6 && o.n > (poolLast-poolFirst+1)*254 {
		return fmt.Errorf("at most %d switches fit the pool", (poolLast-poolFirst+1)*254)
	}
	o.bin, _ = filepath.Abs(o.bin)
	if o.work == "" {
		d, err := os.MkdirTemp("", "bootstorm-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		o.work = d
	}
	res, cpu, joined, err := stormZtpd(o)
	if err != nil {
		return err
	}
	perDevice := 1000 * cpu / float64(max(res.Devices, 1))
	result := func(floorMs float64) {
		fmt.Printf("RESULT boot_storm devices=%d seconds=%.2f p99_ms=%.1f cpu_ms=%.3f floor_cpu_ms=%.3f\n",
			res.Devices-res.Failed, res.Elapsed.Seconds(), ms(res.P99), perDevice, floorMs)
	}
	if res.Failed > 0 || joined != o.n {
		result(0)
		return fmt.Errorf("%d failed, %d of %d with their bundle issued", res.Failed, joined, o.n)
	}
	floorMs := 0.0
	if o.floor != "" {
		fmt.Fprintf(os.Stderr, "the floor: the same storm against %s\n", o.floor)
		fres, fcpu, err := stormFloor(o, res.BytesPerStep)
		if err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		if fres.Failed > 0 {
			return fmt.Errorf("floor: %d of %d switches failed: %v", fres.Failed, fres.Devices, fres.Errors)
		}
		floorMs = 1000 * fcpu / float64(max(fres.Devices, 1))
		fmt.Printf("floor CPU %.1f s, %.3f ms per device (%.1f s, p99 %.1f ms); ztpd above it %.3f ms per device\n",
			fcpu, floorMs, fres.Elapsed.Seconds(), ms(fres.P99), perDevice-floorMs)
	}
	result(floorMs)
	return nil
}

// stormZtpd runs the storm against ztpd and prints its report: the
// fleet's result, ztpd's CPU seconds over it and the devices the store
// holds with their bundle issued.
func stormZtpd(o options) (res fleet.StormResult, cpu float64, joined int, err error) {
	ctx := context.Background()
	st, err := stormlab.Start(ctx, stormlab.StormOptions{
		Net:    stormlab.NetOptions{Prefix: nsPrefix(o.ipv6), PoolFirst: poolFirst, PoolLast: poolLast, IPv6: o.ipv6},
		Config: stormlab.ConfigOptions{Pprof: true, DeviceTLSOff: !o.deviceTLS},
		Bin:    o.bin, Work: o.work,
		Clusters: o.clusters, PerCluster: (o.n + o.clusters - 1) / o.clusters,
	})
	if err != nil {
		return res, 0, 0, err
	}
	defer st.Close()
	srv, cli, app := st.Srv, st.Cli, st.App
	if o.serverCPUs != "" {
		if out, err := lab.Pin(app.Proc, o.serverCPUs); err != nil {
			return res, 0, 0, fmt.Errorf("taskset: %v %s", err, out)
		}
	}

	profDone := make(chan error, 1)
	if o.cpuProfile != "" {
		go func() {
			time.Sleep(o.profileDelay)
			profDone <- saveProfile(lab.NSClient(srv), o.cpuProfile, o.ipv6)
		}()
	} else {
		profDone <- nil
	}
	fmt.Fprintf(os.Stderr, "boot storm: %d SONiC switches, %d clusters, concurrency %d, %s\n", o.n, o.clusters, o.conc, family(o.ipv6))
	cpu0, _ := procstat.CPU(app.Proc.Cmd.Process.Pid) // `ip netns exec` execs ztpd in place: the pid is its own
	commits0, callers0, err := storeCommits(lab.NSClient(srv), o.ipv6)
	if err != nil {
		return res, 0, 0, err
	}
	if res, err = fleetIn(ctx, cli, o); err != nil {
		return res, 0, 0, err
	}
	if err := <-profDone; err != nil {
		fmt.Fprintln(os.Stderr, "cpu profile:", err)
	}
	if joined, err = app.CountDevices(ctx, "join-issued"); err != nil {
		return res, 0, 0, err
	}
	secs := res.Elapsed.Seconds()
	cpu1, _ := procstat.CPU(app.Proc.Cmd.Process.Pid)
	cpu = (cpu1 - cpu0).Seconds()
	fmt.Printf("devices %d, failed %d, with their bundle issued in the store %d\n", res.Devices, res.Failed, joined)
	fmt.Printf("elapsed %.2f s, %.0f devices/s, time to the accepted report p50 %.1f ms p99 %.1f ms\n",
		secs, float64(res.Devices-res.Failed)/secs, ms(res.P50), ms(res.P99))
	fmt.Printf("ztpd CPU %.1f s, %.3f ms per device\n", cpu, 1000*cpu/float64(max(res.Devices, 1)))
	if commits1, callers1, err := storeCommits(lab.NSClient(srv), o.ipv6); err == nil && commits1 > commits0 {
		c := commits1 - commits0
		fmt.Printf("store commits %.0f, %.2f per device, %.1f writers per commit\n", c, c/float64(max(res.Devices, 1)), (callers1-callers0)/c)
	}
	for _, step := range []string{"dhcp", "ztp.json", "config", "join", "report"} {
		fmt.Printf("  mean %-9s %.1f ms  %6d bytes\n", step, ms(res.PerStep[step]), res.BytesPerStep[step])
	}
	for _, e := range res.Errors {
		fmt.Println("  error:", e)
	}
	return res, cpu, joined, nil
}

// stormFloor runs the same storm against testenv/cmd/stormfloor in fresh
// namespaces, its documents as large as ztpd's were (sizes, bytes per
// step): the fleet's result and the floor's CPU seconds over it.
func stormFloor(o options, sizes map[string]int64) (res fleet.StormResult, cpu float64, err error) {
	n, err := stormlab.NewNet(stormlab.NetOptions{Prefix: nsPrefix(o.ipv6), PoolFirst: poolFirst, PoolLast: poolLast, IPv6: o.ipv6})
	if err != nil {
		return res, 0, err
	}
	defer n.Close()
	args := []string{"-pool-first", strconv.Itoa(poolFirst), "-ztp-bytes", strconv.FormatInt(sizes["ztp.json"], 10),
		"-config-bytes", strconv.FormatInt(sizes["config"], 10), "-bundle-bytes", strconv.FormatInt(sizes["join"], 10)}
	if o.ipv6 {
		prefix, _ := netip.ParsePrefix(stormlab.FleetPrefix6)
		args = append(args, "-ipv6", "-addr", stormlab.ServerAddr6, "-prefix6", prefix.Addr().String())
	} else {
		args = append(args, "-addr", stormlab.ServerAddr)
	}
	if o.floorProfile != "" {
		args = append(args, "-cpuprofile", o.floorProfile)
	}
	if !o.deviceTLS {
		args = append(args, "-clear")
	}
	bin, _ := filepath.Abs(o.floor)
	cmd := n.Srv.Command(context.Background(), bin, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return res, 0, err
	}
	p, err := lab.StartProc(cmd)
	if err != nil {
		return res, 0, err
	}
	defer p.Stop(15 * time.Second) // SIGTERM: the floor writes its profile, then exits
	ready := make(chan error, 1)
	go func() {
		line := make([]byte, 6)
		_, err := io.ReadFull(out, line)
		if err == nil && string(line) != "ready\n" {
			err = fmt.Errorf("said %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			return res, 0, fmt.Errorf("%s did not start: %w", bin, err)
		}
	case <-time.After(30 * time.Second):
		return res, 0, fmt.Errorf("%s not ready after 30 s", bin)
	}
	pid := cmd.Process.Pid
	if o.serverCPUs != "" {
		if out, err := lab.Pin(p, o.serverCPUs); err != nil {
			return res, 0, fmt.Errorf("taskset: %v %s", err, out)
		}
	}
	cpu0, err := procstat.CPU(pid)
	if err != nil {
		return res, 0, err
	}
	if res, err = fleetIn(context.Background(), n.Cli, o); err != nil {
		return res, 0, err
	}
	cpu1, err := procstat.CPU(pid)
	if err != nil {
		return res, 0, err
	}
	return res, (cpu1 - cpu0).Seconds(), nil
}

// fleetIn runs the fleet (this binary's -fleet mode) in cli and reads its
// result.
func fleetIn(ctx context.Context, cli *netns.NS, o options) (fleet.StormResult, error) {
	var res fleet.StormResult
	self, err := os.Executable()
	if err != nil {
		return res, err
	}
	resPath := filepath.Join(o.work, "fleet.json")
	args := []string{"-fleet", "-n", strconv.Itoa(o.n), "-clusters", strconv.Itoa(o.clusters),
		"-concurrency", strconv.Itoa(o.conc), "-fleet-out", resPath, "-fleet-cpuprofile", o.fleetProfile}
	if o.ipv6 {
		args = append(args, "-ipv6")
	}
	name := self
	if o.fleetCPUs != "" {
		name, args = "taskset", append([]string{"-c", o.fleetCPUs, self}, args...)
	}
	cmd := cli.Command(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return res, fmt.Errorf("fleet: %w", err)
	}
	raw, err := os.ReadFile(resPath)
	if err != nil {
		return res, err
	}
	return res, json.Unmarshal(raw, &res)
}

// runFleet is the fleet itself, started inside bs-cli.
func runFleet(o options) error {
	if o.fleetProfile != "" {
		f, err := os.Create(o.fleetProfile)
		if err != nil {
			return err
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	storm := &fleet.Storm{Concurrency: o.conc, Switches: switches(o),
		Progress: func(done, failed int) {
			if done%1000 == 0 {
				fmt.Fprintf(os.Stderr, "  %d/%d onboarded (%d failed)\n", done, o.n, failed)
			}
		}}
	if o.ipv6 {
		relay, err := relay6()
		if err != nil {
			return err
		}
		defer relay.Close()
		storm.Relay6 = relay
	} else {
		relay, err := fleet.NewRelay(netip.MustParseAddr(stormlab.RelayAddr), netip.MustParseAddr(stormlab.ServerAddr))
		if err != nil {
			return err
		}
		defer relay.Close()
		storm.Relay = relay
	}
	res := storm.Run(context.Background())
	raw, err := json.Marshal(res)
	if err != nil {
		return err
	}
	return os.WriteFile(o.fleetOut, raw, 0o644)
}

// relay6 is the fleet's DHCPv6 relay in stormlab's IPv6 layout.
func relay6() (*fleet.Relay6, error) {
	return fleet.NewRelay6(netip.MustParseAddr(stormlab.RelayAddr6), netip.MustParseAddr(stormlab.LinkAddr6),
		netip.MustParseAddr(stormlab.ServerAddr6))
}

// nsPrefix names the namespaces: bs-srv and bs-cli, bs6-* over IPv6, so
// the two storms may run side by side.
func nsPrefix(ipv6 bool) string {
	if ipv6 {
		return "bs6"
	}
	return "bs"
}

func family(ipv6 bool) string {
	if ipv6 {
		return "DHCPv6 and IPv6"
	}
	return "DHCPv4 and IPv4"
}

// serverHost is ztpd's address as a URL's host.
func serverHost(ipv6 bool) string {
	if ipv6 {
		return "[" + stormlab.ServerAddr6 + "]"
	}
	return stormlab.ServerAddr
}

// switches is the storm's fleet: switch i has MAC fleet.MAC(i) and serial
// STORM-<i mod clusters>-<i>.
func switches(o options) []fleet.Switch {
	sws := make([]fleet.Switch, o.n)
	for i := range sws {
		sws[i] = fleet.Switch{N: i, MAC: fleet.MAC(i).String(), Product: "Accton-AS7712-32X",
			Serial: fmt.Sprintf("STORM-%02d-%06d", i%o.clusters, i)}
	}
	return sws
}

// runRenew renews the storm fleet's leases at T1 (inside the fleet's
// namespace, where the leased addresses are local): each switch unicasts a
// RENEWING DHCPREQUEST from its address to the server, the fleet spread
// over -renew-window. It writes a fleet.RenewResult to -fleet-out.
func runRenew(o options) error {
	raw, err := os.ReadFile(o.renewLeases)
	if err != nil {
		return err
	}
	var storm fleet.StormResult
	if err := json.Unmarshal(raw, &storm); err != nil {
		return fmt.Errorf("%s: %w", o.renewLeases, err)
	}
	sws := switches(o)
	if len(storm.Leases) != len(sws) {
		return fmt.Errorf("%s holds %d leases for %d switches (-n and -clusters must be the storm's)", o.renewLeases, len(storm.Leases), len(sws))
	}
	var clients []fleet.Renewal
	for i, sw := range sws {
		if storm.Leases[i] == "" {
			continue // its DORA failed: nothing to renew
		}
		ip, err := netip.ParseAddr(storm.Leases[i])
		if err != nil {
			return fmt.Errorf("%s: lease of %s: %w", o.renewLeases, sw.MAC, err)
		}
		r := fleet.Renewal{IP: ip}
		if o.ipv6 {
			r.ID6, err = sw.Identity6()
		} else {
			r.ID, err = sw.Identity()
		}
		if err != nil {
			return err
		}
		clients = append(clients, r)
	}
	fmt.Fprintf(os.Stderr, "  renewing %d leases over %s\n", len(clients), o.renewWindow)
	rs := &fleet.RenewStorm{Server: netip.MustParseAddr(stormlab.ServerAddr), Clients: clients, Window: o.renewWindow, Seed: uint64(o.n)}
	if o.ipv6 {
		sid, err := hex.DecodeString(storm.ServerDUID)
		if err != nil || len(sid) == 0 {
			return fmt.Errorf("%s: no DHCPv6 server identifier %q: %v", o.renewLeases, storm.ServerDUID, err)
		}
		if rs.ServerDUID, err = dhcpv6.DUIDFromBytes(sid); err != nil {
			return fmt.Errorf("%s: server identifier: %w", o.renewLeases, err)
		}
		relay, err := relay6()
		if err != nil {
			return err
		}
		defer relay.Close()
		rs.Relay6 = relay
	}
	out, err := json.Marshal(rs.Run(context.Background()))
	if err != nil {
		return err
	}
	return os.WriteFile(o.fleetOut, out, 0o644)
}

// storeCommits reads ztpd's durable commits and the writers they carried
// from its metrics.
func storeCommits(c *http.Client, ipv6 bool) (commits, writers float64, err error) {
	m, err := promtext.Unlabelled(c, "http://"+serverHost(ipv6)+":8080/metrics")
	return m["ztpd_store_commits_total"], m["ztpd_store_batch_size_sum"], err
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func saveProfile(c *http.Client, path string, ipv6 bool) error {
	c.Timeout = time.Minute
	resp, err := c.Get("http://" + serverHost(ipv6) + ":6060/debug/pprof/profile?seconds=10")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}
