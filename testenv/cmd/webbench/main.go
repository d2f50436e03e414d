// Command webbench is the web console's benchmark (bench/webui.sh): a real
// `ztpd serve` in namespace wb-srv takes a boot storm of N simulated SONiC
// switches (the bootstorm fleet, run in wb-cli through the relay address)
// while Debian's chromium, headless on the host, keeps the devices page
// open through a forwarder into wb-srv. It reports
//
//   - what the page's EventSource received during the storm: SSE messages
//     per second and device updates per second (counted by a wrapper
//     installed before the page's scripts);
//   - the tab's memory while the storm streams in: the largest JavaScript
//     heap (Performance.getMetrics JSHeapUsedSize) and renderer RSS (/proc);
//   - then, with the N devices stored, the time from navigation start to the
//     devices table's first page rendered (body[data-loaded] with rows),
//     median of 5 fresh loads;
//   - the storm's own time (the fleet's clock) and its p99 time to the
//     accepted report, so a page-less run gives the reference.
//
// With -page=false the setup is the same (fresh ztpd, config, clusters,
// console key, fleet) but no browser starts: only the storm is timed, the
// reference the console's cost on onboarding is measured against.
//
// The last line is
//
//	RESULT webui first_page_ms=<n> devices=<n> sse_msgs_per_s=<x> sse_device_updates_per_s=<x> tab_mb=<n> storm_s=<x> p99_ms=<x>
//
// or, page-less,
//
//	RESULT webui_ref devices=<n> storm_s=<x> p99_ms=<x>
//
// tab_mb is the renderer's largest RSS (the JS heap when /proc has none).
// It needs root (namespaces) and, with the page, chromium.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ztpd/ztpd/testenv/browser"
	"github.com/ztpd/ztpd/testenv/fleet"
	"github.com/ztpd/ztpd/testenv/lab"
	"github.com/ztpd/ztpd/testenv/netns"
	"github.com/ztpd/ztpd/testenv/stormlab"
)

// The bootstorm fleet's fixed plan: ztpd at 10.99.0.1, relay 10.99.0.2,
// leases from 10.99.<1..200>.0/24, switches STORM-<cluster>-<n> in
// clusters storm-<cluster>.
const poolFirst, poolLast = 1, 200

type options struct {
	n, clusters, conc int
	bin, storm, work  string
	loads             int
	page              bool // the devices page open in chromium during the storm
}

func main() {
	var o options
	flag.IntVar(&o.n, "n", 10000, "switches in the storm")
	flag.IntVar(&o.clusters, "clusters", 10, "clusters (at most 1000 switches each)")
	flag.IntVar(&o.conc, "concurrency", 256, "switches onboarding at the same time")
	flag.IntVar(&o.loads, "loads", 5, "fresh loads of the devices page to take the median of")
	flag.StringVar(&o.bin, "ztpd", "bin/ztpd", "ztpd binary")
	flag.StringVar(&o.storm, "bootstorm", "bin/bootstorm", "the bootstorm binary (its -fleet mode is the fleet)")
	flag.StringVar(&o.work, "work", "", "work directory (default: a temp dir, removed)")
	flag.BoolVar(&o.page, "page", true, "keep the devices page open in chromium (false: only time the storm, the reference)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "webbench:", err)
		os.Exit(1)
	}
}

// sseCounter wraps EventSource before the page's scripts run and counts
// the console stream's update messages and the devices they carry.
const sseCounter = `(() => {
  const ES = window.EventSource;
  if (!ES) return;
  const s = window.__sse = {msgs: 0, devices: 0, bytes: 0, more: 0, last: 0};
  function Counted(url, opts) {
    const es = new ES(url, opts);
    es.addEventListener('update', (e) => {
      s.msgs++; s.bytes += e.data.length; s.last = performance.now();
      try { const m = JSON.parse(e.data); s.devices += (m.devices || []).length; if (m.more) s.more++; } catch (_) {}
    });
    return es;
  }
  Counted.prototype = ES.prototype;
  Counted.CONNECTING = 0; Counted.OPEN = 1; Counted.CLOSED = 2;
  window.EventSource = Counted;
})();`

// firstPage records, relative to navigation start, when the devices table
// first shows rows with body[data-loaded] set.
const firstPage = `(() => {
  const done = () => document.body && document.body.dataset.loaded && document.querySelector('table#devices tbody tr[data-id]');
  const obs = new MutationObserver(() => { if (window.__firstPage === undefined && done()) { window.__firstPage = performance.now(); obs.disconnect(); } });
  obs.observe(document, {subtree: true, childList: true, attributes: true, attributeFilter: ['data-loaded']});
})();`

type sseCount struct {
	Msgs    int     `json:"msgs"`
	Devices int     `json:"devices"`
	Bytes   int64   `json:"bytes"`
	More    int     `json:"more"`
	Last    float64 `json:"last"` // ms since the page's navigation start
}

func run(o options) error {
	if err := netns.Check(); err != nil {
		return err
	}
	if o.page {
		if _, err := browser.Path(); err != nil {
			return err
		}
	}
	if o.n/o.clusters > 1000 {
		return fmt.Errorf("%d switches in %d clusters is more than 1000 per cluster", o.n, o.clusters)
	}
	o.bin, _ = filepath.Abs(o.bin)
	o.storm, _ = filepath.Abs(o.storm)
	if o.work == "" {
		d, err := os.MkdirTemp("", "webbench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		o.work = d
	}
	ctx := context.Background()
	st, err := stormlab.Start(ctx, stormlab.StormOptions{
		Net: stormlab.NetOptions{Prefix: "wb", PoolFirst: poolFirst, PoolLast: poolLast},
		Bin: o.bin, Work: o.work,
		Clusters: o.clusters, PerCluster: (o.n + o.clusters - 1) / o.clusters,
	})
	if err != nil {
		return err
	}
	defer st.Close()
	srv, cli, app := st.Srv, st.Cli, st.App
	key, secret, err := consoleKey(ctx, app)
	if err != nil {
		return err
	}
	if !o.page {
		fmt.Fprintf(os.Stderr, "boot storm: %d SONiC switches, %d clusters, concurrency %d, no browser\n", o.n, o.clusters, o.conc)
		res, err := runStorm(ctx, cli, o)
		if err != nil {
			return err
		}
		stored, err := app.CountDevices(ctx, "")
		if err != nil {
			return err
		}
		fmt.Printf("RESULT webui_ref devices=%d storm_s=%.2f p99_ms=%.1f\n", stored, res.Elapsed.Seconds(), ms(res.P99))
		if res.Failed > 0 {
			return fmt.Errorf("%d switches failed to onboard", res.Failed)
		}
		return nil
	}

	// The browser reaches the API listener (the console's) through a
	// forwarder into wb-srv.
	api, err := url.Parse(app.APIBase)
	if err != nil {
		return err
	}
	fw, err := browser.ForwardNS(srv, api.Host)
	if err != nil {
		return err
	}
	defer fw.Close()
	base := api.Scheme + "://" + fw.Addr
	b, err := browser.Launch(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	tab, err := b.NewTab()
	if err != nil {
		return err
	}
	tab.Timeout = time.Minute
	if err := tab.OnNewDocument(sseCounter); err != nil {
		return err
	}
	if err := tab.OnNewDocument(firstPage); err != nil {
		return err
	}
	if err := tab.SignIn(base, key, secret); err != nil {
		return err
	}
	if err := tab.Navigate(base + "/devices"); err != nil {
		return err
	}
	if err := tab.WaitFor("body[data-loaded]"); err != nil {
		return err
	}
	if _, err := tab.WaitJS(`window.__sse ? "y" : ""`, "the EventSource wrapper"); err != nil {
		return err
	}
	idle, err := tab.Memory()
	if err != nil {
		return err
	}
	loadedAt, _ := tab.LoadedAt()
	fmt.Printf("devices page open before the storm: JS heap %.1f MB, renderer RSS %.1f MB\n", mb(idle.JSHeapUsed), mb(idle.RendererRSS))

	// The storm, with the page watching: sample the tab's memory every
	// second.
	fmt.Fprintf(os.Stderr, "boot storm: %d SONiC switches, %d clusters, concurrency %d, the devices page open\n", o.n, o.clusters, o.conc)
	var peak browser.Memory
	var mu sync.Mutex
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if m, err := tab.Memory(); err == nil {
				mu.Lock()
				peak.JSHeapUsed = max(peak.JSHeapUsed, m.JSHeapUsed)
				peak.RendererRSS = max(peak.RendererRSS, m.RendererRSS)
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
		}
	}()
	pageStart, err := browser.Eval[float64](tab, `performance.now()`)
	if err != nil {
		return err
	}
	stormStart := time.Now()
	stormRes, stormErr := runStorm(ctx, cli, o)
	stormTime := time.Since(stormStart)
	// The last coalesced messages arrive within a second.
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	<-sampled
	if stormErr != nil {
		return stormErr
	}
	sse, err := browser.Eval[sseCount](tab, `window.__sse`)
	if err != nil {
		return err
	}
	if at, _ := tab.LoadedAt(); at != loadedAt {
		return fmt.Errorf("the devices page reloaded during the storm")
	}
	// The rates are over the time from the storm's start to the last
	// message the page received (the stream trails the storm by up to one
	// coalescing interval).
	secs := max((sse.Last-pageStart)/1000, stormTime.Seconds())
	fmt.Printf("the page's EventSource over %.1f s: %d update messages (%.2f/s), %d device records (%.0f/s), %.1f MB, %d with more=true (table refetched)\n",
		secs, sse.Msgs, float64(sse.Msgs)/secs, sse.Devices, float64(sse.Devices)/secs, mb(sse.Bytes), sse.More)
	fmt.Printf("tab memory during the storm: JS heap peak %.1f MB, renderer RSS peak %.1f MB\n", mb(peak.JSHeapUsed), mb(peak.RendererRSS))

	// First page with every device stored: fresh loads, median.
	stored, err := app.CountDevices(ctx, "")
	if err != nil {
		return err
	}
	var times []float64
	for i := 0; i < o.loads; i++ {
		if err := tab.Navigate("about:blank"); err != nil {
			return err
		}
		if err := tab.Navigate(base + "/devices"); err != nil {
			return err
		}
		v, err := tab.WaitJS(`window.__firstPage === undefined ? "" : String(window.__firstPage)`, "the devices table's first page")
		if err != nil {
			return err
		}
		ms, _ := strconv.ParseFloat(v, 64)
		rows, _ := browser.Eval[int](tab, `document.querySelectorAll('table#devices tbody tr[data-id]').length`)
		fmt.Printf("load %d: first page (%d rows of %d devices) rendered %.0f ms after navigation start\n", i+1, rows, stored, ms)
		times = append(times, ms)
	}
	slices.Sort(times)
	median := times[len(times)/2]
	after, _ := tab.Memory()
	fmt.Printf("devices page with %d devices: first page median %.0f ms (min %.0f, max %.0f); JS heap %.1f MB, renderer RSS %.1f MB\n",
		stored, median, times[0], times[len(times)-1], mb(after.JSHeapUsed), mb(after.RendererRSS))
	if errs := tab.Errors(); len(errs) > 0 {
		fmt.Printf("browser console errors: %s\n", strings.Join(errs, "; "))
	}
	tabMB := mb(peak.RendererRSS)
	if tabMB == 0 {
		tabMB = mb(peak.JSHeapUsed)
	}
	fmt.Printf("RESULT webui first_page_ms=%.0f devices=%d sse_msgs_per_s=%.2f sse_device_updates_per_s=%.0f tab_mb=%.0f storm_s=%.2f p99_ms=%.1f\n",
		median, stored, float64(sse.Msgs)/secs, float64(sse.Devices)/secs, tabMB, stormRes.Elapsed.Seconds(), ms(stormRes.P99))
	if stormRes.Failed > 0 {
		return fmt.Errorf("%d switches failed to onboard", stormRes.Failed)
	}
	return nil
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// runStorm runs the bootstorm fleet in cli and returns its result; the
// storm's time is the fleet's own clock (from its first switch to its last
// report), so the fleet process's start is not in it.
func runStorm(ctx context.Context, cli *netns.NS, o options) (fleet.StormResult, error) {
	resPath := filepath.Join(o.work, "fleet.json")
	cmd := cli.Command(ctx, o.storm, "-fleet", "-n", strconv.Itoa(o.n), "-clusters", strconv.Itoa(o.clusters),
		"-concurrency", strconv.Itoa(o.conc), "-fleet-out", resPath)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fleet.StormResult{}, fmt.Errorf("fleet: %w", err)
	}
	var res fleet.StormResult
	raw, err := os.ReadFile(resPath)
	if err == nil {
		err = json.Unmarshal(raw, &res)
	}
	if err != nil {
		return res, fmt.Errorf("fleet result: %w", err)
	}
	fmt.Printf("storm: %d switches (%d failed) in %.2f s, time to the accepted report p50 %.1f ms p99 %.1f ms\n",
		res.Devices, res.Failed, res.Elapsed.Seconds(), ms(res.P50), ms(res.P99))
	for _, e := range res.Errors {
		fmt.Println("  fleet error:", e)
	}
	return res, nil
}

// consoleKey creates the admin key the browser signs in with.
func consoleKey(ctx context.Context, app *lab.Appliance) (string, string, error) {
	return app.CreateAPIKey(ctx, "admin", "webbench")
}
