// Command scalebench measures how ztpd's cost grows with the fleet, so a
// cost that grows faster than the fleet shows: per fleet size, a real `ztpd
// serve` with durable state (the default configuration, events.keep raised
// to hold -events, dhcp.lease_time -lease-time) takes the boot storm of
// testenv/cmd/bootstorm's fleet, sees the whole fleet renew its leases at
// T1 (bootstorm -renew: each switch unicasts a RENEWING DHCPREQUEST from
// its leased address, the fleet spread uniformly over -renew-window), then
// is stopped, given -events device events and started again, and answers
// the API under wrk.
//
// T1 is compressed: the lease is -lease-time (6m) and the fleet renews once
// every lease is past ztpd's lease cache (a quarter of the lease; REQUESTs
// for younger leases are answered without a write), so each renewal costs
// what it costs at a real T1. A size fails unless every ACKed renewal moved
// its lease's expiry in the store and the restart kept it.
//
// Per size it prints one "size" line: storm wall time and p50/p99 time to
// the accepted report, peak RSS (VmHWM) and CPU seconds (utime+stime) of
// ztpd over the storm, the store file's size, restart and backup times; an
// "api" line: req/s and p99 of listKubernetesClusters, GET
// /api/v1/devices?state=join-issued&limit=100 and GET
// /api/v1/events?device=<mac>; a "renewals" line: acked, NAKed, dropped
// (no answer after the retransmissions), p50/p99 REQUEST->ACK, ACKs per
// second, ztpd's CPU seconds. Then a "growth" line (per-device CPU and
// bytes relative to the smallest size) and
//
//	RESULT scale devices=<n> storm_s=<s> p99_ms=<ms> rss_mb=<m> api_p99_ms=<ms> restart_s=<s> ... family=<ipv4|ipv6>
//
// for the largest size (api_p99_ms: the worst of the three queries; a query
// no request of which completed under wrk counts with its lone time, a
// lower bound, and the line before RESULT says so).
//
// It needs root and wrk. ztpd runs in namespace sc-srv (10.99.0.1/16), the
// fleet (bootstorm -fleet, the same binary the boot storm uses) in sc-cli
// (10.99.0.2/16), joined by a veth pair; every /24 of 10.99.1.0 -
// 10.99.255.0 is the pool, so at most 255*256-1 = 65279 devices fit the
// lab's 10.99.0.0/16.
//
// With -ipv6 the same runs over IPv6 (stormlab's IPv6 layout, namespaces
// sc6-srv and sc6-cli): ztpd at fd99:0:0:1::1, the fleet's DHCPv6 relay at
// fd99:0:0:1::2 stating link address fd99:0:0:100::1, each switch leasing by
// Solicit/Advertise/Request/Reply and renewing by Renew through it, its HTTP
// from its address in fd99:0:0:100::/64. The /64 holds every size, so every
// device is stormed.
package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/testenv/fleet"
	"github.com/ztpd/ztpd/testenv/lab"
	"github.com/ztpd/ztpd/testenv/netns"
	"github.com/ztpd/ztpd/testenv/procstat"
	"github.com/ztpd/ztpd/testenv/stormlab"
)

const (
	poolFirst, poolLast = 1, 255 // pool 10.99.<first>.0 - 10.99.<last>.254
	maxDevices          = (poolLast-poolFirst+1)*256 - 2
	// maxDevices6 bounds a size over IPv6, whose /64 pool holds any
	// fleet: every device is stormed.
	maxDevices6 = 1_000_000
	perCluster  = 1000 // the storm's clusters take at most 1000 workers each
	srvAddr     = "10.99.0.1"
	// defaultEventsKeep is config.Default's events.keep: the device stream
	// is pruned to it, so a larger -events raises it.
	defaultEventsKeep = 200000
)

type options struct {
	sizes      []int
	events     int
	conc       int
	bin, storm string
	work       string
	duration   string
	conns      int
	profileDir string
	leaseTime  time.Duration
	window     time.Duration
	maxStormed int
	ipv6       bool // the storm and renewals over DHCPv6, the devices over IPv6
}

// sizeResult is what one fleet size measured.
type sizeResult struct {
	N                int
	Failed           int
	StormS           float64
	P50ms, P99ms     float64
	Stormed          int     // devices the storm onboarded (N, or the pool's maxDevices: see extend.go)
	RSSMB            float64 // VmHWM over the storm
	AnonMB           float64 // the highest RssAnon sampled over the storm: ztpd's own memory, without the store's mapped pages
	CPUS             float64 // utime+stime over the storm
	FleetCPUS        float64 // the fleet's (bootstorm -fleet) utime+stime over the storm
	RestartAnonMB    float64 // RssAnon once the restarted ztpd answered
	LeasesChecked    int     // active leases checked for an address given twice
	StoreBytes       int64   // the store file after the storm
	SeededBytes      int64   // the store file with -events
	TotalS           float64
	BackupErr        string
	Events           int // device events in the store when the API was measured
	StormEvents      int // device events the storm itself wrote
	StopS, RestartS  float64
	RestartRSSMB     float64
	BackupS          float64
	BackupBytes      int64
	API              map[string]wrkResult
	Floor            wrkResult
	Issued, Restored int // devices join-issued after the storm and after the restart
	Renew            renewResult
	Family           string // "ipv4" or "ipv6"
}

// renewResult is the fleet renewing at T1, and what the store says of it.
type renewResult struct {
	fleet.RenewResult
	Lease  time.Duration // dhcp.lease_time
	Waited time.Duration // from the storm's end to the first renewal
	CPUS   float64       // ztpd's utime+stime over the renewals
	// IdleCPUS is ztpd's CPU time over the idle wait before them (the
	// storm's written-behind tail, sweeps), scaled to the renewals' run:
	// roughly the part of CPUS the renewals did not cause.
	IdleCPUS float64
	Extended int // leases whose stored expiry moved to a full lease from the renewal
	// ExpiredEarly is set when a renewed lease ran out before the size's
	// API measurement ended (the sweep's writes then fell into it).
	ExpiredEarly bool
}

func (r sizeResult) cpuPerDevice() float64   { return r.CPUS / float64(r.Stormed) }
func (r sizeResult) bytesPerDevice() float64 { return float64(r.StoreBytes) / float64(r.N) }

type wrkResult struct {
	RPS      float64
	P99ms    float64
	Timeouts int     // requests wrk gave up on (--timeout 30s)
	Singlems float64 // one request alone, before wrk
	Bytes    int     // that request's body
	// WireBytes is the body as wrk gets it (gzipped when ztpd compresses it).
	WireBytes int
	// CPU use over the run, in percent of one core: ztpd's (pinned to one
	// core) and wrk's (pinned to the other). wrk near 100 means the client
	// is the bottleneck and the latencies are partly its own.
	ServerCPU, ClientCPU float64
}

// Completed reports whether wrk saw any answer; when none came within the
// run, the request alone is the only (lower-bound) latency there is.
func (w wrkResult) Completed() bool { return w.RPS > 0 && w.P99ms > 0 }

// p99 is the wrk p99, or the lone request's time when wrk saw no answer.
func (w wrkResult) p99() float64 {
	if w.Completed() {
		return w.P99ms
	}
	return w.Singlems
}

var apiNames = []string{"clusters", "devices", "events"}

func main() {
	var o options
	sizes := flag.String("sizes", "10000 30000", "fleet sizes, space or comma separated (past 65278, the pool in 10.99.0.0/16, the rest is written into the store: see extend.go)")
	flag.IntVar(&o.events, "events", 1000000, "device events in the store when the API is measured")
	flag.IntVar(&o.conc, "concurrency", 256, "switches onboarding at the same time")
	flag.StringVar(&o.bin, "ztpd", "bin/ztpd", "ztpd binary")
	flag.StringVar(&o.storm, "bootstorm", "bin/bootstorm", "bootstorm binary (its -fleet mode is the fleet)")
	flag.StringVar(&o.work, "work", "", "work directory (default: a temp dir, removed)")
	flag.StringVar(&o.duration, "duration", "10s", "wrk duration per query")
	flag.IntVar(&o.conns, "conns", 32, "wrk connections")
	flag.StringVar(&o.profileDir, "cpuprofile-dir", "", "write ztpd's CPU profiles of each storm and each wrk query here (storm-<n>.pprof, api-<n>-<query>.pprof)")
	flag.DurationVar(&o.leaseTime, "lease-time", 6*time.Minute, "ztpd's dhcp.lease_time: the fleet renews once its leases are a quarter of it old, so short (at least 1m)")
	flag.DurationVar(&o.window, "renew-window", time.Minute, "the fleet's renewals start uniformly over this window")
	flag.IntVar(&o.maxStormed, "max-stormed", 0, "storm at most this many devices of a size, write the rest into the store (extend.go; to try that path on a small fleet); 0: as many as the pool holds (65,278 over IPv4, every device over IPv6)")
	flag.BoolVar(&o.ipv6, "ipv6", false, "over IPv6: the storm's leases and renewals by DHCPv6 (through a relay, from a /64 pool in fd99::/16), the switches' HTTP from their IPv6 addresses, the API on IPv6")
	flag.Parse()
	for _, f := range strings.FieldsFunc(*sizes, func(r rune) bool { return r == ' ' || r == ',' }) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 1_000_000 {
			fmt.Fprintf(os.Stderr, "scalebench: size %q: want 1..1000000\n", f)
			os.Exit(2)
		}
		o.sizes = append(o.sizes, n)
	}
	if len(o.sizes) == 0 || o.events < 0 {
		fmt.Fprintln(os.Stderr, "scalebench: no sizes, or negative -events")
		os.Exit(2)
	}
	if o.leaseTime < time.Minute || o.window < 0 {
		fmt.Fprintln(os.Stderr, "scalebench: -lease-time under 1m (ztpd refuses it) or negative -renew-window")
		os.Exit(2)
	}
	switch {
	case o.ipv6 && o.maxStormed <= 0:
		o.maxStormed = maxDevices6
	case !o.ipv6:
		o.maxStormed = min(cmp.Or(max(o.maxStormed, 0), maxDevices), maxDevices)
	}
	sort.Ints(o.sizes)
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "scalebench:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if err := netns.Check(); err != nil {
		return err
	}
	if _, err := exec.LookPath("wrk"); err != nil {
		return fmt.Errorf("wrk is not installed (apt-get install wrk)")
	}
	for _, p := range []*string{&o.bin, &o.storm} {
		*p, _ = filepath.Abs(*p)
	}
	if o.work == "" {
		d, err := os.MkdirTemp("", "scalebench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		o.work = d
	}
	var results []sizeResult
	for _, n := range o.sizes {
		r, err := runSize(o, n)
		if err != nil {
			return fmt.Errorf("%d devices: %w", n, err)
		}
		printSize(r)
		results = append(results, r)
	}
	base := results[0]
	var cpu, bytes, rss, restartRSS []string
	for _, r := range results {
		rss = append(rss, fmt.Sprintf("%d=%.2f", r.N, (r.AnonMB/float64(r.Stormed))/(base.AnonMB/float64(base.Stormed))))
		restartRSS = append(restartRSS, fmt.Sprintf("%d=%.2f", r.N, (r.RestartAnonMB/float64(r.N))/(base.RestartAnonMB/float64(base.N))))
		cpu = append(cpu, fmt.Sprintf("%d=%.2f", r.N, r.cpuPerDevice()/base.cpuPerDevice()))
		bytes = append(bytes, fmt.Sprintf("%d=%.2f", r.N, r.bytesPerDevice()/base.bytesPerDevice()))
	}
	fmt.Printf("growth vs %d (goal <= 1.5): cpu_s_per_device %s; bytes_per_device %s; anon_rss_per_device storm %s, after restart %s\n",
		base.N, strings.Join(cpu, " "), strings.Join(bytes, " "), strings.Join(rss, " "), strings.Join(restartRSS, " "))
	last := results[len(results)-1]
	apiP99, worst := 0.0, ""
	for _, name := range apiNames {
		if p := last.API[name].p99(); p > apiP99 {
			apiP99, worst = p, name
		}
	}
	note := ""
	if !last.API[worst].Completed() {
		note = " (lower bound: no " + worst + " request completed under wrk)"
	}
	fmt.Printf("api_p99_ms is the %s query's%s\n", worst, note)
	if last.Stormed < last.N {
		fmt.Printf("storm_s and p99_ms are the storm of %d of the %d devices (the pool in 10.99.0.0/16); the rest were written into the store (extend.go)\n", last.Stormed, last.N)
	}
	fmt.Println("rss_mb is ztpd's anonymous memory (RssAnon), the highest of the storm's and after the restart; rss_hwm_mb adds the store's mapped file pages (VmHWM)")
	fmt.Printf("RESULT scale devices=%d storm_s=%.2f p99_ms=%.1f rss_mb=%.0f api_p99_ms=%.2f restart_s=%.2f stormed=%d rss_hwm_mb=%.0f family=%s\n",
		last.N, last.StormS, last.P99ms, max(last.AnonMB, last.RestartAnonMB), apiP99, last.RestartS, last.Stormed, max(last.RSSMB, last.RestartRSSMB), last.Family)
	return nil
}

func printSize(r sizeResult) {
	fmt.Printf("size family=%s devices=%d stormed=%d failed=%d storm_s=%.2f p50_ms=%.1f p99_ms=%.1f anon_mb=%.0f rss_hwm_mb=%.0f cpu_s=%.1f cpu_ms_per_device=%.3f "+
		"fleet_cpu_s=%.1f cpu_floor_s=%.2f "+
		"store_mb=%.1f bytes_per_device=%.0f store_with_events_mb=%.1f storm_events=%d events=%d stop_s=%.2f restart_s=%.2f restart_anon_mb=%.0f restart_rss_hwm_mb=%.0f "+
		"backup_s=%.2f backup_mb=%.1f issued=%d leases_unique=%d after_restart=%d total_s=%.0f\n",
		r.Family, r.N, r.Stormed, r.Failed, r.StormS, r.P50ms, r.P99ms, r.AnonMB, r.RSSMB, r.CPUS, 1000*r.cpuPerDevice(),
		r.FleetCPUS, (r.CPUS+r.FleetCPUS)/float64(runtime.NumCPU()),
		float64(r.StoreBytes)/(1<<20), r.bytesPerDevice(), float64(r.SeededBytes)/(1<<20), r.StormEvents, r.Events, r.StopS, r.RestartS, r.RestartAnonMB, r.RestartRSSMB,
		r.BackupS, float64(r.BackupBytes)/(1<<20), r.Issued, r.LeasesChecked, r.Restored, r.TotalS)
	if r.BackupErr != "" {
		fmt.Printf("  backup FAILED: %s\n", r.BackupErr)
	}
	rn := r.Renew
	fmt.Printf("  renewals devices=%d window_s=%.0f acked=%d naks=%d drops=%d failed=%d retransmits=%d p50_ms=%.1f p99_ms=%.1f max_ms=%.1f rate_per_s=%.0f cpu_s=%.1f idle_cpu_s=%.1f extended_in_store=%d "+
		"(T1 compressed: a real fleet renews at T1 = 30 min of a 1h lease; here lease_time=%s and each switch renews once its lease is past ztpd's DHCPv4 lease cache, %.0f-%.0f s old; over DHCPv6 every Renew is written)\n",
		rn.Devices, rn.Window.Seconds(), rn.Acked, rn.NAKs, rn.Drops, rn.Failed, rn.Retransmits, ms(rn.P50), ms(rn.P99), ms(rn.Max), rn.Rate(), rn.CPUS, rn.IdleCPUS, rn.Extended,
		rn.Lease, rn.Waited.Seconds(), (rn.Waited+rn.Window).Seconds()+r.StormS)
	for _, e := range rn.Errors {
		fmt.Println("  renewal error:", e)
	}
	if rn.ExpiredEarly {
		fmt.Println("  note: renewed leases expired before the API measurement ended (their expiry writes fell into it); raise -lease-time")
	}
	fmt.Printf("  api devices=%d events=%d: healthz(floor, HTTP listener) %.0f req/s p99 %.2f ms cpu ztpd %.0f%% wrk %.0f%%",
		r.N, r.Events, r.Floor.RPS, r.Floor.P99ms, r.Floor.ServerCPU, r.Floor.ClientCPU)
	for _, name := range apiNames {
		a := r.API[name]
		if a.Completed() {
			fmt.Printf("; %s %.1f req/s p99 %.2f ms alone %.2f ms %d B (%d B on the wire: %.0f MB/s) cpu ztpd %.0f%% wrk %.0f%%", name, a.RPS, a.P99ms, a.Singlems, a.Bytes,
				a.WireBytes, a.RPS*float64(a.WireBytes)/1e6, a.ServerCPU, a.ClientCPU)
		} else {
			fmt.Printf("; %s: no request completed under wrk, alone %.2f ms %d B", name, a.Singlems, a.Bytes)
		}
		if a.Timeouts > 0 {
			fmt.Printf(" (%d timed out)", a.Timeouts)
		}
	}
	fmt.Println()
}

// bench is one size's namespaces and appliance.
type bench struct {
	o        options
	n        int
	clusters int // the storm's
	// stormed is the devices the storm onboards, extraClusters the
	// clusters of the rest (extend.go).
	stormed, extraClusters int
	nsPrefix               string // of the namespaces <prefix>-srv and <prefix>-cli; "" is "sc"
	work                   string
	srv, cli               *netns.NS
	app                    *lab.Appliance
	key                    string
	secret                 []byte
	api                    *http.Client
}

func runSize(o options, n int) (sizeResult, error) {
	began := time.Now()
	ctx := context.Background()
	b := &bench{o: o, n: n, work: filepath.Join(o.work, strconv.Itoa(n))}
	b.stormed, b.clusters, b.extraClusters = split(n, o.maxStormed)
	res := sizeResult{N: n, Stormed: b.stormed, API: map[string]wrkResult{}, Family: "ipv4"}
	if o.ipv6 {
		res.Family = "ipv6"
	}
	if err := os.MkdirAll(b.work, 0o755); err != nil {
		return res, err
	}
	defer os.RemoveAll(b.work)
	if o.profileDir != "" { // ztpd's log beside its profiles
		defer func() {
			if raw, err := os.ReadFile(filepath.Join(b.work, "ztpd.out")); err == nil {
				_ = os.WriteFile(filepath.Join(o.profileDir, fmt.Sprintf("ztpd-%d.out", n)), raw, 0o644)
			}
		}()
	}
	if err := b.network(); err != nil {
		return res, err
	}
	defer b.cli.Close()
	defer b.srv.Close()
	if err := stormlab.WriteProfiles(b.work, b.clusters); err != nil {
		return res, err
	}
	var err error
	if b.app, err = b.start(ctx); err != nil {
		return res, err
	}
	defer func() { b.app.Close() }()
	if err := b.apiKey(ctx); err != nil {
		return res, err
	}
	if err := b.app.CreateStormClusters(ctx, b.clusters+b.extraClusters, (b.stormed+b.clusters-1)/b.clusters); err != nil {
		return res, err
	}

	// The storm, with ztpd's CPU time and peak RSS around it.
	pid := b.app.Proc.Cmd.Process.Pid
	// `ip netns exec` execs ztpd in place: the pid is ztpd's own.
	if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err != nil || strings.TrimSpace(string(comm)) != filepath.Base(o.bin) {
		return res, fmt.Errorf("pid %d is %q, not %s: %v", pid, comm, filepath.Base(o.bin), err)
	}
	cpu0, err := cpuSeconds(pid)
	if err != nil {
		return res, err
	}
	fmt.Fprintf(os.Stderr, "scalebench: %d devices, %d clusters: boot storm of %d ...\n", n, b.clusters, b.stormed)
	stopProf := b.profile(ctx, fmt.Sprintf("storm-%d", n))
	stopAnon := sampleAnon(pid, &res.AnonMB)
	storm, fleetCPU, err := b.storm(ctx)
	stopAnon()
	stopProf()
	b.heapProfile(fmt.Sprintf("heap-storm-%d", n))
	res.FleetCPUS = fleetCPU
	stormEnd := time.Now()
	if err != nil {
		return res, err
	}
	cpu1, err := cpuSeconds(pid)
	if err != nil {
		return res, err
	}
	res.CPUS = cpu1 - cpu0
	if res.RSSMB, err = peakRSSMB(pid); err != nil {
		return res, err
	}
	res.Failed, res.StormS = storm.Failed, storm.Elapsed.Seconds()
	res.P50ms, res.P99ms = ms(storm.P50), ms(storm.P99)
	// The storm's figures now, so a size that fails a later check still
	// reports them.
	fmt.Fprintf(os.Stderr, "scalebench: %d devices: storm %.1f s, %d failed, to joined p50 %.0f ms p99 %.0f ms, ztpd CPU %.1f s (%.3f ms per device), fleet CPU %.1f s, ztpd anon %.0f MB, VmHWM %.0f MB\n",
		n, res.StormS, res.Failed, res.P50ms, res.P99ms, res.CPUS, 1000*res.cpuPerDevice(), res.FleetCPUS, res.AnonMB, res.RSSMB)
	if res.Issued, err = b.app.CountDevices(ctx, "join-issued"); err != nil {
		return res, err
	}
	if storm.Failed > 0 || res.Issued != b.stormed {
		return res, fmt.Errorf("storm: %d failed, %d of %d with their bundle issued; first errors %v", storm.Failed, res.Issued, b.stormed, storm.Errors)
	}
	if res.LeasesChecked, err = b.checkAddressesUnique(ctx, storm); err != nil {
		return res, err
	}

	// The fleet renews at T1; the store must hold every renewal.
	renewed, err := b.renew(ctx, storm, stormEnd, pid, &res.Renew)
	if err != nil {
		return res, err
	}

	// Stop, fill the event log up to -events, start again on the same data.
	t0 := time.Now()
	b.app.Close()
	res.StopS = time.Since(t0).Seconds()
	if err := b.extendFleet(); err != nil {
		return res, fmt.Errorf("extending the fleet to %d: %w", n, err)
	}
	if res.StoreBytes, err = fileSize(filepath.Join(b.app.DataDir, boltstore.FileName)); err != nil {
		return res, err
	}
	if res.StormEvents, res.Events, err = b.seedEvents(); err != nil {
		return res, err
	}
	if res.SeededBytes, err = fileSize(filepath.Join(b.app.DataDir, boltstore.FileName)); err != nil {
		return res, err
	}
	fmt.Fprintf(os.Stderr, "scalebench: %d devices: restart with %d device events ...\n", n, res.Events)
	t0 = time.Now()
	if b.app, err = b.start(ctx); err != nil {
		return res, err
	}
	if err := b.firstDevicesPage(ctx); err != nil {
		return res, err
	}
	res.RestartS = time.Since(t0).Seconds()
	if res.RestartRSSMB, err = peakRSSMB(b.app.Proc.Cmd.Process.Pid); err != nil {
		return res, err
	}
	if res.RestartAnonMB, err = procstat.StatusMB(b.app.Proc.Cmd.Process.Pid, "RssAnon"); err != nil {
		return res, err
	}
	if err := b.app.UseAdminKey(ctx); err != nil {
		return res, err
	}
	if res.Restored, err = b.app.CountDevices(ctx, "join-issued"); err != nil {
		return res, err
	}
	if res.Restored != n {
		return res, fmt.Errorf("after the restart %d of %d devices are join-issued", res.Restored, n)
	}
	if err := b.checkLeasesKept(ctx, renewed); err != nil {
		return res, err
	}

	if err := b.measureAPI(ctx, &res); err != nil {
		return res, err
	}
	for _, l := range renewed {
		if !l.Expiry.After(time.Now()) {
			res.Renew.ExpiredEarly = true
			break
		}
	}
	// A failed backup is a finding of the run, not the end of it.
	if res.BackupS, res.BackupBytes, err = b.backup(ctx); err != nil {
		res.BackupErr = err.Error()
	}
	res.TotalS = time.Since(began).Seconds()
	return res, nil
}

func fileSize(path string) (int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// network makes <prefix>-srv and <prefix>-cli (stormlab's set-up; "sc"
// unless a test picks its own prefix).
func (b *bench) network() error {
	prefix := "sc"
	if b.o.ipv6 {
		prefix = "sc6" // beside an IPv4 run's namespaces
	}
	n, err := stormlab.NewNet(stormlab.NetOptions{Prefix: cmp.Or(b.nsPrefix, prefix), ServerAddr: srvAddr, PoolFirst: poolFirst, PoolLast: poolLast, IPv6: b.o.ipv6})
	if err != nil {
		return err
	}
	b.srv, b.cli = n.Srv, n.Cli
	return nil
}

func (b *bench) start(ctx context.Context) (*lab.Appliance, error) {
	return lab.StartAppliance(ctx, b.srv, b.o.bin, b.work, b.config(), "http://"+b.host()+":8080")
}

// host is ztpd's address as a URL's host.
func (b *bench) host() string {
	if b.o.ipv6 {
		return "[" + stormlab.ServerAddr6 + "]"
	}
	return srvAddr
}

// config is the storm's, with the whole /16 as the pool, events.keep
// large enough for -events, the pprof listener and -lease-time.
func (b *bench) config() string {
	return stormlab.Config(stormlab.ConfigOptions{Work: b.work, ServerAddr: srvAddr, PoolFirst: poolFirst, PoolLast: poolLast,
		LeaseTime: b.o.leaseTime, Pprof: true, EventsKeep: max(defaultEventsKeep, b.o.events), IPv6: b.o.ipv6})
}

// apiKey creates the admin key the appliance's own calls use and a second
// one whose secret signs the wrk requests.
func (b *bench) apiKey(ctx context.Context) error {
	if err := b.app.UseAdminKey(ctx); err != nil {
		return err
	}
	key, secret, err := b.app.CreateAPIKey(ctx, "admin", "scalebench")
	if err != nil {
		return err
	}
	b.key, b.secret = key, []byte(secret)
	return nil
}

// storm runs bootstorm's fleet mode inside sc-cli and reads its result.
// It also returns the fleet process's CPU seconds.
func (b *bench) storm(ctx context.Context) (fleet.StormResult, float64, error) {
	var res fleet.StormResult
	out := filepath.Join(b.work, "fleet.json")
	cmd := b.cli.Command(ctx, b.o.storm, b.familyArgs("-fleet", "-n", strconv.Itoa(b.stormed), "-clusters", strconv.Itoa(b.clusters),
		"-concurrency", strconv.Itoa(b.o.conc), "-fleet-out", out)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return res, 0, fmt.Errorf("fleet: %w", err)
	}
	cpu := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	raw, err := os.ReadFile(out)
	if err != nil {
		return res, cpu, err
	}
	return res, cpu, json.Unmarshal(raw, &res)
}

// familyArgs are bootstorm's arguments args, with -ipv6 over IPv6.
func (b *bench) familyArgs(args ...string) []string {
	if b.o.ipv6 {
		return append(args, "-ipv6")
	}
	return args
}

// checkAddressesUnique: after the storm, no address was given twice. The
// store's active leases are one per switch, each the address its DORA got,
// and no two switches got the same address.
func (b *bench) checkAddressesUnique(ctx context.Context, storm fleet.StormResult) (int, error) {
	leases, err := b.leases(ctx)
	if err != nil {
		return 0, err
	}
	holder := map[string]string{} // MAC -> IP
	for ip, l := range leases {
		if l.State != core.LeaseActive {
			continue
		}
		if other, ok := holder[l.MAC]; ok {
			return 0, fmt.Errorf("switch %s holds two active leases: %s and %s", l.MAC, other, ip)
		}
		holder[l.MAC] = ip
	}
	if len(holder) != b.stormed {
		return 0, fmt.Errorf("%d active leases after a storm of %d switches", len(holder), b.stormed)
	}
	got := map[string]bool{}
	for _, ip := range storm.Leases {
		if got[ip] {
			return 0, fmt.Errorf("address %s was given to two switches", ip)
		}
		got[ip] = true
		if leases[ip].State != core.LeaseActive {
			return 0, fmt.Errorf("address %s, given to a switch, has no active lease", ip)
		}
	}
	return len(holder), nil
}

// storedLease is what GET /api/v1/leases says of one address.
type storedLease struct {
	IP     string          `json:"ip"`
	MAC    string          `json:"mac"`
	State  core.LeaseState `json:"state"`
	Expiry time.Time       `json:"expiry"`
}

// leases pages through GET /api/v1/leases: the API reads the store, so
// what it lists is committed.
func (b *bench) leases(ctx context.Context) (map[string]storedLease, error) {
	out := map[string]storedLease{}
	cursor := ""
	for {
		q := url.Values{"limit": {"1000"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Items      []storedLease `json:"items"`
			NextCursor string        `json:"next_cursor"`
		}
		if err := b.app.REST(ctx, "/api/v1/leases", q, &page); err != nil {
			return nil, err
		}
		for _, l := range page.Items {
			out[l.IP] = l
		}
		if page.NextCursor == "" {
			return out, nil
		}
		cursor = page.NextCursor
	}
}

// renew has the storm's fleet renew at T1 (bootstorm -renew in sc-cli) and
// checks the store: every ACKed renewal must have moved its lease's expiry
// to a full lease time from the renewal, owned by the same switch. ztpd
// answers a REQUEST for a lease younger than a quarter of the lease time
// from its lease cache, without a write; at a real T1 (half the lease) no
// lease is that young, so the fleet waits until every lease of the storm
// is past that quarter. It returns the renewed leases as stored.
func (b *bench) renew(ctx context.Context, storm fleet.StormResult, stormEnd time.Time, pid int, res *renewResult) (map[string]storedLease, error) {
	lease := b.o.leaseTime
	res.Lease = lease
	before, err := b.leases(ctx)
	if err != nil {
		return nil, err
	}
	for i, ip := range storm.Leases {
		if l, ok := before[ip]; !ok || l.MAC != fleet.MAC(i).String() || l.State != core.LeaseActive {
			return nil, fmt.Errorf("after the storm the store has no active lease of %s for %s: %+v", ip, fleet.MAC(i), l)
		}
	}
	// The storm's first lease began no earlier than the storm; its last
	// renewal must come before T2 (7/8 of the lease), when a real client
	// would have stopped renewing and rebound.
	wait := lease/4 + 2*time.Second
	if b.o.ipv6 {
		// The DHCPv6 server keeps no lease cache: every Renew is written,
		// however young its lease.
		wait = 2 * time.Second
	}
	firstRenewal := stormEnd.Add(wait)
	if oldest := firstRenewal.Add(b.o.window).Sub(stormEnd) + storm.Elapsed; oldest >= lease*7/8 {
		return nil, fmt.Errorf("the oldest lease would be %s old at its renewal, past T2 of a %s lease: raise -lease-time", oldest.Round(time.Second), lease)
	}
	fmt.Fprintf(os.Stderr, "scalebench: %d stormed devices: renewals in %s, over %s ...\n", b.n, time.Until(firstRenewal).Round(time.Second), b.o.window)
	idle0, idleFrom := 0.0, time.Now()
	if idle0, err = cpuSeconds(pid); err != nil {
		return nil, err
	}
	time.Sleep(time.Until(firstRenewal))
	res.Waited = time.Since(stormEnd)
	cpu0, err := cpuSeconds(pid)
	if err != nil {
		return nil, err
	}
	idleRate := (cpu0 - idle0) / time.Since(idleFrom).Seconds()
	out := filepath.Join(b.work, "renew.json")
	cmd := b.cli.Command(ctx, b.o.storm, b.familyArgs("-renew", "-n", strconv.Itoa(b.stormed), "-clusters", strconv.Itoa(b.clusters),
		"-renew-leases", filepath.Join(b.work, "fleet.json"), "-renew-window", b.o.window.String(), "-fleet-out", out)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("renewals: %w", err)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &res.RenewResult); err != nil {
		return nil, err
	}
	cpu1, err := cpuSeconds(pid)
	if err != nil {
		return nil, err
	}
	res.CPUS = cpu1 - cpu0
	res.IdleCPUS = idleRate * res.Elapsed.Seconds()
	after, err := b.leases(ctx)
	if err != nil {
		return nil, err
	}
	renewed := map[string]storedLease{}
	// A renewal sent at t is stored with expiry t + lease; the earliest
	// was sent at Started.
	floor := res.Started.Add(lease).Add(-time.Second)
	for i, ip := range storm.Leases {
		l := after[ip]
		if l.MAC == fleet.MAC(i).String() && l.State == core.LeaseActive && l.Expiry.After(before[ip].Expiry) && !l.Expiry.Before(floor) {
			res.Extended++
			renewed[ip] = l
		}
	}
	if res.Extended != res.Acked || res.LeaseMin != lease {
		return nil, fmt.Errorf("renewals: %d ACKed (lease %s-%s), but %d leases extended by a full %s in the store",
			res.Acked, res.LeaseMin, res.LeaseMax, res.Extended, lease)
	}
	return renewed, nil
}

// checkLeasesKept compares the renewed leases with the store after the
// restart: a renewal that was ACKed must have been durable.
func (b *bench) checkLeasesKept(ctx context.Context, renewed map[string]storedLease) error {
	now, err := b.leases(ctx)
	if err != nil {
		return err
	}
	for ip, l := range renewed {
		if got := now[ip]; got.MAC != l.MAC || !got.Expiry.Equal(l.Expiry) {
			return fmt.Errorf("after the restart the lease of %s is %+v, before it %+v", ip, got, l)
		}
	}
	return nil
}

// heapProfile writes ztpd's heap profile (in use and allocated since
// start) as <name>.pprof beside the CPU profiles; nothing without
// -cpuprofile-dir.
func (b *bench) heapProfile(name string) {
	if b.o.profileDir == "" {
		return
	}
	hc := lab.NSClient(b.srv)
	hc.Timeout = time.Minute
	if err := fetchTo(hc, "http://"+b.host()+":6060/debug/pprof/heap", filepath.Join(b.o.profileDir, name+".pprof")); err != nil {
		fmt.Fprintln(os.Stderr, "scalebench: heap profile:", err)
	}
}

// profile records ztpd's CPU profile in back-to-back 5 s pieces until the
// returned stop is called, then merges them into storm-<n>.pprof (go tool
// pprof -proto). It does nothing without -cpuprofile-dir.
func (b *bench) profile(ctx context.Context, name string) (stop func()) {
	if b.o.profileDir == "" {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var parts []string
	wg.Add(1)
	go func() {
		defer wg.Done()
		hc := lab.NSClient(b.srv)
		hc.Timeout = time.Minute
		for i := 0; ctx.Err() == nil; i++ {
			p := filepath.Join(b.work, fmt.Sprintf("cpu-%s-%d.pprof", name, i))
			if err := fetchTo(hc, "http://"+b.host()+":6060/debug/pprof/profile?seconds=5", p); err != nil {
				fmt.Fprintln(os.Stderr, "scalebench: cpu profile:", err)
				return
			}
			parts = append(parts, p)
		}
	}()
	return func() {
		cancel()
		wg.Wait()
		if len(parts) == 0 {
			return
		}
		dst := filepath.Join(b.o.profileDir, name+".pprof")
		cmd := exec.Command("go", append([]string{"tool", "pprof", "-proto", "-output", dst}, parts...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "scalebench: merging profiles: %v %s\n", err, out)
		}
	}
}

func fetchTo(hc *http.Client, u, path string) error {
	resp, err := hc.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: HTTP %d", u, resp.StatusCode)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

// seedEvents appends device events (alternating dhcp.ack and ztp.served,
// spread round-robin over the fleet's MACs) until the device stream holds
// -events. ztpd must be stopped: it opens the store directly.
func (b *bench) seedEvents() (storm, total int, err error) {
	st, err := boltstore.Open(b.app.DataDir, boltstore.Options{})
	if err != nil {
		return 0, 0, err
	}
	defer st.Close()
	err = st.View(func(tx core.Tx) error {
		storm, err = tx.Events().Count(core.DeviceEvents)
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	macs := make([]string, b.n)
	for i := range macs {
		macs[i] = fleet.MAC(i).String()
	}
	const batch = 20000
	now := time.Now().UTC()
	for done := storm; done < b.o.events; {
		end := min(done+batch, b.o.events)
		err := st.Update(func(tx core.Tx) error {
			// fn may run again: it counts from done, which moves on only
			// once the batch has committed.
			for i := done; i < end; i++ {
				e := core.Event{Time: now, Type: "dhcp.ack", Device: macs[i%b.n], Message: "scalebench seeded event",
					Fields: map[string]string{"ip": "10.99.1.1"}}
				if i%2 == 1 {
					e.Type, e.Fields = "ztp.served", map[string]string{"path": "/ztp/ztp.json"}
				}
				if _, err := tx.Events().Append(e); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return 0, 0, err
		}
		done = end
	}
	return storm, max(storm, b.o.events), nil
}

// firstDevicesPage waits until the REST API lists a page of the storm's
// devices (the restart's end: the store is open and the API answers from
// it).
func (b *bench) firstDevicesPage(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	q := url.Values{"state": {"join-issued"}, "limit": {"100"}}
	for {
		body, code, err := b.get(ctx, "/api/v1/devices", q)
		if err == nil && code == 200 && strings.Contains(string(body), `"items":[{`) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no devices listed a minute after the restart: HTTP %d %v %.200s", code, err, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// get does a GET on the API signed with the bench key.
func (b *bench) get(ctx context.Context, path string, q url.Values) ([]byte, int, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", b.app.APIBase+path+"?"+q.Encode(), nil)
	req.Header.Set("Authorization", b.restAuth(path, q))
	resp, err := b.apiClient().Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return body, resp.StatusCode, err
}

func (b *bench) restAuth(path string, q url.Values) string {
	// Signatures may lie at most api.max_signature_lifetime (20 minutes by
	// default) ahead; wrk repeats one for its whole run.
	return b.signer().RESTAuthorization("GET", path, q, nil, time.Now().Add(15*time.Minute))
}

// signer is a client of the appliance's API with the bench key.
func (b *bench) signer() *client.Client {
	return client.New(b.app.APIBase, b.key, b.secret, b.apiClient())
}

// apiClient reaches the API listener from the root namespace, trusting
// the appliance's self-signed certificate (<data dir>/api-tls/cert.pem).
func (b *bench) apiClient() *http.Client {
	if b.api != nil {
		return b.api
	}
	roots := x509.NewCertPool()
	if pem, err := os.ReadFile(filepath.Join(b.app.DataDir, "api-tls", "cert.pem")); err == nil {
		roots.AppendCertsFromPEM(pem)
	}
	b.api = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := b.srv.Do(func() error {
				var d net.Dialer
				var err error
				c, err = d.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		}}}
	return b.api
}

// measureAPI runs wrk (inside sc-srv, on CPU 0, ztpd on CPU 1 as
// bench/api.sh does) on /healthz (the floor; it is on the HTTP listener,
// the API on its own TLS one) and the three queries.
func (b *bench) measureAPI(ctx context.Context, res *sizeResult) error {
	if out, err := lab.Pin(b.app.Proc, "1"); err != nil {
		return fmt.Errorf("taskset: %v %s", err, out)
	}
	mac := fleet.MAC(b.n / 2).String()
	cs := b.app.APIBase + "/client/api?" + b.signer().SignCS(url.Values{"command": {"listKubernetesClusters"}, "response": {"json"}},
		time.Now().Add(15*time.Minute))
	dq := url.Values{"state": {"join-issued"}, "limit": {"100"}}
	eq := url.Values{"device": {mac}}
	type query struct {
		name, url, auth, want string
	}
	queries := []query{
		{"clusters", cs, "", fmt.Sprintf(`"count":%d`, b.clusters+b.extraClusters)},
		{"devices", b.app.APIBase + "/api/v1/devices?" + dq.Encode(), b.restAuth("/api/v1/devices", dq), `"next_cursor"`},
		{"events", b.app.APIBase + "/api/v1/events?" + eq.Encode(), b.restAuth("/api/v1/events", eq), `"device":"` + mac + `"`},
	}
	// Each query is checked once first: signed right, and answering what
	// is measured.
	hc := b.apiClient()
	// get fetches q; with acceptEncoding set by hand Go's client leaves the
	// body as sent, as wrk gets it.
	get := func(q query, acceptEncoding string) ([]byte, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", q.url, nil)
		if acceptEncoding != "" {
			req.Header.Set("Accept-Encoding", acceptEncoding)
		}
		if q.auth != "" {
			req.Header.Set("Authorization", q.auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", q.name, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 {
			return nil, fmt.Errorf("%s: HTTP %d %v %.300s", q.name, resp.StatusCode, err, body)
		}
		return body, nil
	}
	alone, size, wire := map[string]float64{}, map[string]int{}, map[string]int{}
	for _, q := range queries {
		t0 := time.Now()
		body, err := get(q, "")
		if err != nil {
			return err
		}
		if !strings.Contains(string(body), q.want) {
			return fmt.Errorf("%s: no %s in %.300s", q.name, q.want, body)
		}
		alone[q.name], size[q.name] = ms(time.Since(t0)), len(body)
		// Again as wrk asks, for the bytes on the wire.
		if body, err = get(q, "gzip"); err != nil {
			return err
		}
		wire[q.name] = len(body)
	}
	var err error
	if res.Floor, err = b.wrk(ctx, b.app.Base+"/healthz", ""); err != nil {
		return fmt.Errorf("healthz: %w", err)
	}
	for _, q := range queries {
		fmt.Fprintf(os.Stderr, "scalebench: %d devices: wrk %s ...\n", b.n, q.name)
		stopProf := b.profile(ctx, fmt.Sprintf("api-%d-%s", b.n, q.name))
		r, err := b.wrk(ctx, q.url, q.auth)
		stopProf()
		if err != nil {
			return fmt.Errorf("%s: %w", q.name, err)
		}
		r.Singlems, r.Bytes, r.WireBytes = alone[q.name], size[q.name], wire[q.name]
		res.API[q.name] = r
	}
	b.heapProfile(fmt.Sprintf("heap-api-%d", b.n))
	return nil
}

func (b *bench) wrk(ctx context.Context, u, auth string) (wrkResult, error) {
	// Accept-Encoding as the API's clients send it (Go's transport, so the
	// cloudstack-go SDK and ztpd's CLI; browsers; CloudMonkey's requests).
	args := []string{"-c", "0", "wrk", "-t2", "-c" + strconv.Itoa(b.o.conns), "-d" + b.o.duration, "--timeout", "30s", "--latency",
		"-H", "Accept-Encoding: gzip"}
	if auth != "" {
		args = append(args, "-H", "Authorization: "+auth)
	}
	cmd := b.srv.Command(ctx, "taskset", append(args, u)...)
	cpu0, cpuErr := cpuSeconds(b.app.Proc.Cmd.Process.Pid)
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk: %v: %s", err, out)
	}
	wall := time.Since(t0).Seconds()
	r, err := parseWrk(string(out))
	if err != nil {
		return r, err
	}
	// ip netns exec and taskset exec in place: the process waited for is wrk.
	r.ClientCPU = 100 * (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds() / wall
	if cpu1, err := cpuSeconds(b.app.Proc.Cmd.Process.Pid); err == nil && cpuErr == nil {
		r.ServerCPU = 100 * (cpu1 - cpu0) / wall
	}
	return r, nil
}

// parseWrk reads Requests/sec, the 99% latency and the timeouts of wrk
// --latency output; non-2xx answers or other socket errors fail the run.
func parseWrk(out string) (wrkResult, error) {
	var r wrkResult
	var haveRPS, haveP99 bool
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "Requests/sec:":
			v, err := strconv.ParseFloat(f[1], 64)
			r.RPS, haveRPS = v, err == nil
		case len(f) >= 2 && f[0] == "99%":
			d, err := wrkDuration(f[1])
			r.P99ms, haveP99 = d, err == nil
		case strings.Contains(line, "Socket errors:"):
			// Socket errors: connect 0, read 0, write 0, timeout 12
			var c, rd, w int
			if _, err := fmt.Sscanf(strings.TrimSpace(line), "Socket errors: connect %d, read %d, write %d, timeout %d", &c, &rd, &w, &r.Timeouts); err != nil {
				return r, fmt.Errorf("wrk: %q: %v", line, err)
			}
			if c+rd+w > 0 {
				return r, fmt.Errorf("wrk: %s", strings.TrimSpace(line))
			}
		case strings.Contains(line, "Non-2xx"):
			return r, fmt.Errorf("wrk: %s", strings.TrimSpace(line))
		}
	}
	if !haveRPS || !haveP99 {
		return r, fmt.Errorf("unreadable wrk output: %s", out)
	}
	return r, nil
}

// wrkDuration converts wrk's "812.00us", "3.21ms", "1.02s", "2.00m" to ms.
func wrkDuration(s string) (float64, error) {
	for _, u := range []struct {
		suffix string
		ms     float64
	}{{"us", 0.001}, {"ms", 1}, {"s", 1000}, {"m", 60000}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f * u.ms, err
		}
	}
	return 0, fmt.Errorf("wrk duration %q", s)
}

// backup times `ztpd backup` of the running appliance's store.
func (b *bench) backup(ctx context.Context) (float64, int64, error) {
	dst := filepath.Join(b.work, "scale.ztpdbak")
	pass := filepath.Join(b.work, "backup.pass")
	if err := os.WriteFile(pass, []byte("scalebench-passphrase\n"), 0o600); err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	if _, err := b.app.CLI(ctx, "backup", dst, "--passphrase-file", pass); err != nil {
		return 0, 0, err
	}
	secs := time.Since(t0).Seconds()
	st, err := os.Stat(dst)
	if err != nil {
		return 0, 0, err
	}
	return secs, st.Size(), nil
}

// cpuSeconds is utime+stime of pid in seconds.
func cpuSeconds(pid int) (float64, error) {
	d, err := procstat.CPU(pid)
	return d.Seconds(), err
}

// sampleAnon keeps *peak at the highest RssAnon of pid, sampled every
// 200 ms until the returned stop is called: VmHWM counts the store's
// mapped file pages too (page cache the kernel may drop), RssAnon is
// ztpd's own memory.
func sampleAnon(pid int, peak *float64) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			if mb, err := procstat.StatusMB(pid, "RssAnon"); err == nil && mb > *peak {
				*peak = mb
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-exited }
}

// peakRSSMB is VmHWM of pid, in MiB.
func peakRSSMB(pid int) (float64, error) { return procstat.StatusMB(pid, "VmHWM") }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
