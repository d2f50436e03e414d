package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ztpd/ztpd/testenv/browser"
)

// TestConsoleLiveOnboarding watches the web console while the lab onboards
// 2 SONiC switches and 2 VMs into one real cluster: chromium (on the host,
// through a forwarder into the appliance's namespace) keeps the devices
// page open and every device's row reaches joined without a reload; sw1,
// which no auto_approve rule covers, waits, its row says so from the live
// stream (within 10 s of ztpd's REST API; no one acts before), it is
// approved from its device page, then joins; the kubeconfig downloaded
// from the cluster page lists the cluster's Nodes with kubectl against the
// real API server. With ZTPD_SCREENSHOTS the devices, cluster, overview
// and sw1's pages are photographed at 1280 and 390 px.
func TestConsoleLiveOnboarding(t *testing.T) {
	if _, err := browser.Path(); err != nil {
		t.Skip(err)
	}
	bin, ksim := requireLabFleet(t)
	var err error
	shots := t.TempDir()
	if d := os.Getenv("ZTPD_SCREENSHOTS"); d != "" {
		if shots, err = filepath.Abs(d); err != nil {
			t.Fatal(err)
		}
	}
	b := browser.New(t)

	scenario := Scenario{Switches: 2, VMs: 2, Clusters: 1}
	const waiter = "sw1"
	var waiterMAC string
	var approvedMACs []string
	for _, d := range scenario.Plan() {
		if d.Name == waiter {
			waiterMAC = d.MAC
		} else {
			approvedMACs = append(approvedMACs, `"`+d.MAC+`"`)
		}
	}
	// The lab's rule approves both subnets; naming every MAC but sw1's
	// leaves sw1 waiting for an operator.
	editConfig := func(cfg string) string {
		rule := "  auto_approve:\n    - {subnets: ["
		if !strings.Contains(cfg, rule) {
			t.Errorf("the lab configuration has no %q to narrow:\n%s", rule, cfg)
			return cfg
		}
		return strings.Replace(cfg, rule, "  auto_approve:\n    - {macs: ["+strings.Join(approvedMACs, ", ")+"], subnets: [", 1)
	}

	var w *consoleWatch
	work := t.TempDir()
	var log strings.Builder
	l, err := Open(context.Background(), scenario, Options{Prefix: "zlc", Octet: 150, WorkDir: work, Bin: bin, Kubeletsim: ksim,
		Out: &log, Timeout: 6 * time.Minute, EditConfig: editConfig,
		OnStarted: func(l *Lab) error {
			var err error
			w, err = watchConsole(t, b, l, waiterMAC)
			return err
		}})
	// The tabs close before the lab: a live stream cut by ztpd's shutdown
	// (or the EventSource's reconnects into a lab going away) is not an
	// error of the console.
	defer func() {
		if w != nil {
			w.close()
		}
		if l != nil {
			l.Close()
			if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), "zlc-") {
				t.Errorf("lab left namespaces behind:\n%s", out)
			}
		}
	}()
	t.Log("progress:\n" + log.String())
	if err != nil {
		if b, rerr := os.ReadFile(filepath.Join(work, "ztpd.out")); rerr == nil {
			t.Logf("ztpd.out (tail):\n%s", tail(string(b), 4000))
		}
		if w != nil {
			w.stop()
			t.Logf("the devices page saw: %s", w.seenSummary())
			t.Logf("approver: approved at %v (%s after ztpd said waiting), error %v; waiting shown on the devices page after %v",
				w.approvedAt.Format(time.RFC3339Nano), w.approvedAfter, w.approveErr, w.waitingShown)
		}
		t.Fatal(err)
	}
	// Every device's row reaches joined on the page that was opened before
	// the first device booted, without a reload (the sampler reads the rows
	// every 250 ms).
	ids := map[string]string{} // planned name -> device id
	for _, d := range l.Plan {
		ids[d.Name] = l.device(t, d.Name)
	}
	allJoined := func() bool {
		seen := w.seen()
		for _, id := range ids {
			if s := seen[id]; len(s) == 0 || s[len(s)-1] != "joined" {
				return false
			}
		}
		return true
	}
	for start := time.Now(); !allJoined() && time.Since(start) < 30*time.Second; {
		time.Sleep(250 * time.Millisecond)
	}
	w.stop()
	if w.approveErr != nil {
		t.Fatalf("approving %s from its page: %v", waiter, w.approveErr)
	}
	if w.approvedAt.IsZero() {
		t.Fatalf("%s never waited for approval, nothing to approve: %s", waiter, w.seenSummary())
	}
	if w.waitingShown < 0 {
		t.Errorf("%s waited in ztpd, but its row on the devices page did not say waiting within %s (not delivered live): %s", waiter, waitingShownWithin, w.seenSummary())
	} else {
		t.Logf("%s waiting: shown on the devices page %s after ztpd's REST API said so", waiter, w.waitingShown.Round(10*time.Millisecond))
	}
	t.Logf("%s approved from its device page in %s once it waited", waiter, w.approvedAfter.Round(100*time.Millisecond))
	tab := w.devices
	if at, err := tab.LoadedAt(); err != nil || at != w.loadedAt {
		t.Errorf("the devices page reloaded while the fleet onboarded: ztpdLoadedAt %v -> %v (%v)", w.loadedAt, at, err)
	}
	seen := w.seen()
	for name, id := range ids {
		states := seen[id]
		if len(states) < 2 || states[len(states)-1] != "joined" {
			t.Errorf("%s: its row on the devices page showed %v, not a progression to joined", name, states)
		}
		if name == waiter && !slices.Contains(states, "waiting") {
			t.Errorf("%s never showed waiting on the devices page: %v", name, states)
		}
	}
	t.Logf("the devices page saw, live: %s", w.seenSummary())
	for _, wd := range []int{1280, 390} {
		if err := tab.Screenshot(filepath.Join(shots, fmt.Sprintf("lab-devices-joined-%d.png", wd)), wd); err != nil {
			t.Error(err)
		}
	}

	// The kubeconfig from the cluster page works against the real API
	// server (kubectl from the appliance's namespace, where the lab's
	// clusters are reachable).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := l.Cluster(ctx, "lab-0")
	if err != nil {
		t.Fatal(err)
	}
	ct := w.other
	if err := ct.Navigate(w.base + "/clusters/" + c.ID); err != nil {
		t.Fatal(err)
	}
	if err := ct.WaitFor("body[data-loaded]"); err != nil {
		t.Fatal(err)
	}
	for _, wd := range []int{1280, 390} {
		if err := ct.Screenshot(filepath.Join(shots, fmt.Sprintf("lab-cluster-%d.png", wd)), wd); err != nil {
			t.Error(err)
		}
	}
	// The overview and the approved device's page, with the lab's data.
	for name, path := range map[string]string{"lab-overview": "/", "lab-device-" + waiter: "/devices/" + url.PathEscape(ids[waiter])} {
		if err := ct.Navigate(w.base + path); err != nil {
			t.Fatal(err)
		}
		if err := ct.WaitFor("body[data-loaded]"); err != nil {
			t.Fatal(err)
		}
		for _, wd := range []int{1280, 390} {
			if err := ct.Screenshot(filepath.Join(shots, fmt.Sprintf("%s-%d.png", name, wd)), wd); err != nil {
				t.Error(err)
			}
		}
	}
	if err := ct.Navigate(w.base + "/clusters/" + c.ID); err != nil {
		t.Fatal(err)
	}
	if err := ct.WaitFor("body[data-loaded]"); err != nil {
		t.Fatal(err)
	}
	kc, err := ct.Download("a#kubeconfig", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cmd := l.Topo.App.Command(ctx, "kubectl", "--kubeconfig", kc, "--request-timeout=10s", "get", "nodes", "-o", "json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl --kubeconfig <from the cluster page> get nodes: %v: %s", err, stderr.String())
	}
	nodes, err := ParseNodes(out)
	if err != nil {
		t.Fatal(err)
	}
	ready := 0
	for _, n := range nodes {
		if n.Ready == "True" {
			ready++
		}
	}
	if len(nodes) != len(l.Plan) || ready != len(nodes) {
		t.Fatalf("kubectl with the page's kubeconfig: %d Nodes, %d Ready, want %d: %+v", len(nodes), ready, len(l.Plan), nodes)
	}
	t.Logf("kubectl with the kubeconfig downloaded from the cluster page: %d Nodes, all Ready; screenshots in %s", len(nodes), shots)
}

// consoleWatch is the browser side of the live test: the devices page,
// open from before the first device boots, sampled for each row's state;
// and a second tab that approves the waiting device from its page.
type consoleWatch struct {
	base     string
	fw       *browser.Forwarder
	devices  *browser.Tab
	other    *browser.Tab
	loadedAt float64
	cancel   context.CancelFunc
	done     sync.WaitGroup
	stopOnce sync.Once

	mu     sync.Mutex
	states map[string][]string // device id -> distinct states its row showed, in order

	approveErr    error
	approvedAt    time.Time
	approvedAfter time.Duration
	// waitingShown is how long after ztpd's REST API said the device
	// waits its row on the devices page said so too; -1: not within
	// waitingShownWithin.
	waitingShown time.Duration
}

// waitingShownWithin is how long the devices page may take to show, from
// the live stream, a device that ztpd says waits (the stream sends at most
// every 500 ms; the sampler reads the page every 250 ms).
const waitingShownWithin = 10 * time.Second

// watchConsole signs in through a forwarder into the appliance's
// namespace, opens the devices page and starts the sampler and the
// approver. It runs inside Open (OnStarted), before the devices start.
func watchConsole(t *testing.T, b *browser.Browser, l *Lab, waiterMAC string) (*consoleWatch, error) {
	api, err := url.Parse(l.App.APIBase)
	if err != nil {
		return nil, err
	}
	fw, err := browser.ForwardNS(l.Topo.App, api.Host)
	if err != nil {
		return nil, err
	}
	w := &consoleWatch{base: api.Scheme + "://" + fw.Addr, fw: fw, states: map[string][]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	apiKey, secretKey, err := l.App.CreateAPIKey(ctx, "admin", "console-test")
	if err != nil {
		fw.Close()
		return nil, err
	}
	w.devices, w.other = b.Tab(t), b.Tab(t)
	for _, tab := range []*browser.Tab{w.devices, w.other} {
		if err := tab.SignIn(w.base, apiKey, secretKey); err != nil {
			fw.Close()
			return nil, err
		}
	}
	if err := w.devices.Navigate(w.base + "/devices"); err != nil {
		fw.Close()
		return nil, err
	}
	if err := w.devices.WaitFor("body[data-loaded]"); err != nil {
		fw.Close()
		return nil, err
	}
	if w.loadedAt, err = w.devices.LoadedAt(); err != nil || w.loadedAt == 0 {
		fw.Close()
		return nil, fmt.Errorf("window.ztpdLoadedAt on /devices: %v %v", w.loadedAt, err)
	}
	w.done.Add(2)
	go w.sample(ctx)
	go w.approve(ctx, waiterMAC)
	return w, nil
}

// sample records every state each row of the devices table shows.
func (w *consoleWatch) sample(ctx context.Context) {
	defer w.done.Done()
	for ctx.Err() == nil {
		rows, err := browser.Eval[[][2]string](w.devices, `[...document.querySelectorAll("table#devices tbody tr[data-id]")].map(r => [r.dataset.id, (r.querySelector("td.state") || {textContent: ""}).textContent.trim()])`)
		if err == nil {
			w.mu.Lock()
			for _, r := range rows {
				if s := w.states[r[0]]; r[1] != "" && (len(s) == 0 || s[len(s)-1] != r[1]) {
					w.states[r[0]] = append(s, r[1])
				}
			}
			w.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// approve waits for the device with mac to wait for approval (as ztpd's
// REST API shows it: the devices page is checked on its own), then
// approves it from its own page.
func (w *consoleWatch) approve(ctx context.Context, mac string) {
	defer w.done.Done()
	for ctx.Err() == nil {
		status, body, err := w.other.Fetch("/api/v1/devices?limit=1000", "{}")
		if err == nil && status == 200 {
			var page struct {
				Items []struct {
					ID    string `json:"id"`
					MAC   string `json:"mac"`
					State string `json:"state"`
				} `json:"items"`
			}
			json.Unmarshal([]byte(body), &page)
			for _, d := range page.Items {
				if strings.EqualFold(d.MAC, mac) && d.State == "waiting" {
					// Nobody acts before the devices page, open since
					// before the device booted, shows it waiting: that
					// transition must arrive live.
					since := time.Now()
					shown := w.waitShown(ctx, d.ID, "waiting", waitingShownWithin)
					err := w.approveFromPage(d.ID)
					w.mu.Lock()
					w.waitingShown = shown
					w.approveErr, w.approvedAt, w.approvedAfter = err, time.Now(), time.Since(since)
					w.mu.Unlock()
					return
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitShown waits until the devices page's row of id has shown state; it
// returns how long that took, or -1 when it did not within limit.
func (w *consoleWatch) waitShown(ctx context.Context, id, state string, limit time.Duration) time.Duration {
	start := time.Now()
	for ctx.Err() == nil && time.Since(start) < limit {
		if slices.Contains(w.seen()[id], state) {
			return time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return -1
}

func (w *consoleWatch) approveFromPage(id string) error {
	tab := w.other
	if err := tab.Navigate(w.base + "/devices/" + url.PathEscape(id)); err != nil {
		return err
	}
	// The device shown (#device-state) is when its actions are wired.
	if err := tab.WaitFor("#device-state"); err != nil {
		return err
	}
	if err := tab.Do(chromedp.Click(chromedp.CSS("#device-approve"))); err != nil {
		return err
	}
	// The REST answer is the device, approved.
	_, err := tab.WaitJS(fmt.Sprintf(`fetch("/api/v1/devices/%s").then(r => r.json()).then(d => d.approved ? "y" : "")`, url.PathEscape(id)), "device approved")
	return err
}

func (w *consoleWatch) seen() map[string][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string][]string{}
	for k, v := range w.states {
		out[k] = slices.Clone(v)
	}
	return out
}

func (w *consoleWatch) seenSummary() string {
	var parts []string
	for id, s := range w.seen() {
		parts = append(parts, id+": "+strings.Join(s, " > "))
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}

// stop ends the sampler and the approver; the tabs stay usable.
func (w *consoleWatch) stop() {
	w.stopOnce.Do(func() {
		w.cancel()
		w.done.Wait()
	})
}

// close stops watching and closes the forwarder.
func (w *consoleWatch) close() {
	w.stop()
	w.devices.Close()
	w.other.Close()
	w.fw.Close()
}
