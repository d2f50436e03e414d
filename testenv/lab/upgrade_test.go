package lab

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/testenv/browser"
	"github.com/ztpd/ztpd/testenv/kubebin"
)

// TestConsoleLiveUpgrade is the lab's upgrade (Scenario.Upgrade) watched
// as a person would with ztpd-lab --upgrade --console: 2 SONiC switches
// and 2 VMs join one real cluster at the Kubernetes version before the
// newest, then upgradeKubernetesCluster rolls the newest out one node at a
// time, carried out by ztpd's engine against the real API server and by
// each device's real agent (simulated kubeadm, systemctl and kubelet).
// Chromium keeps the Rollouts page open from before the first device
// boots: the rollout appears there without a reload, and on its page,
// opened from the list, every node goes from pending through its phases
// to done, one after the other, without a reload. The lab checks every
// Node Ready at the new version in the API server and ztpd showing the
// cluster at it.
func TestConsoleLiveUpgrade(t *testing.T) {
	if _, err := browser.Path(); err != nil {
		t.Skip(err)
	}
	bin, ksim := requireLabFleet(t)
	from, to, err := UpgradeVersions()
	if err != nil {
		t.Skip(err)
	}
	kubebin.Require(t, from)
	shots := t.TempDir()
	if d := os.Getenv("ZTPD_SCREENSHOTS"); d != "" {
		if shots, err = filepath.Abs(d); err != nil {
			t.Fatal(err)
		}
	}
	b := browser.New(t)
	var w *rolloutWatch
	var log strings.Builder
	work := t.TempDir()
	l, err := Open(context.Background(), Scenario{Switches: 2, VMs: 2, Clusters: 1, Upgrade: true},
		Options{Prefix: "zlu", Octet: 154, WorkDir: work, Bin: bin, Kubeletsim: ksim, Out: &log, Timeout: 6 * time.Minute,
			OnStarted: func(l *Lab) error {
				var err error
				w, err = watchRollouts(t, b, l)
				return err
			}})
	// The tab closes before the lab (see TestConsoleLiveOnboarding).
	defer func() {
		if w != nil {
			w.close()
		}
		if l != nil {
			l.Close()
		}
	}()
	t.Log("progress:\n" + tail(log.String(), 6000))
	if err != nil {
		for _, f := range []string{"ztpd.out", "agent-vm1.out", "agent-sw1.out"} {
			if b, rerr := os.ReadFile(filepath.Join(work, f)); rerr == nil {
				t.Logf("%s (tail):\n%s", f, tail(string(b), 3000))
			}
		}
		if w != nil {
			w.stop()
			t.Logf("the rollout's page saw: %s", w.summary())
		}
		t.Fatal(err)
	}
	res := l.Result
	if res.UpgradedTo != to || len(res.Rollouts) != 1 || res.Rollouts[0].State != string(core.RolloutSucceeded) {
		t.Fatalf("upgraded to %q, rollouts %+v", res.UpgradedTo, res.Rollouts)
	}
	r := res.Rollouts[0]
	// The page shows the end without a reload (it samples every 200 ms).
	for start := time.Now(); !w.ended() && time.Since(start) < 20*time.Second; {
		time.Sleep(200 * time.Millisecond)
	}
	w.stop()
	t.Logf("the rollout's page saw, live: %s", w.summary())
	if w.listErr != nil {
		t.Fatalf("the rollouts list: %v", w.listErr)
	}
	if w.rolloutID != r.ID {
		t.Fatalf("the rollouts list showed %q live, the lab's rollout is %s", w.rolloutID, r.ID)
	}
	if at, _ := w.tab.LoadedAt(); at != w.loadedAt {
		t.Errorf("the rollout's page reloaded while the rollout ran")
	}
	if w.state() != string(core.RolloutSucceeded) {
		t.Errorf("the rollout's page shows it %q, want succeeded", w.state())
	}
	// Device by device on the page: every node after the first was shown
	// pending, then done, each done later than the one before it (the page
	// refetches at most once a second, so a phase shorter than that may go
	// unseen, but most nodes show one); none was shown underway before the
	// one before it was done.
	seen := w.seenByDevice()
	var lastDone time.Time
	between := 0
	for i, n := range r.Nodes {
		id := l.device(t, n.Device)
		ph := seen[id]
		names := make([]string, len(ph))
		for k, p := range ph {
			names[k] = p.phase
		}
		if len(ph) == 0 || ph[len(ph)-1].phase != core.NodeDone {
			t.Errorf("node %d (%s): the page showed %v, not done at the end", i+1, n.Device, names)
			continue
		}
		if slices.ContainsFunc(names, func(p string) bool {
			return p == core.NodeCordoned || p == core.NodeDrained || p == core.NodeAgent || p == core.NodeWaiting
		}) {
			between++
		}
		if i > 0 && names[0] != core.NodePending {
			t.Errorf("node %d (%s): the page showed %v, want pending first", i+1, n.Device, names)
		}
		done := ph[len(ph)-1].at
		if i > 0 && !done.After(lastDone) {
			t.Errorf("node %d (%s) was shown done no later than the node before it (%s, %s): not device by device", i+1, n.Device, done, lastDone)
		}
		for _, p := range ph {
			if p.phase != core.NodePending && p.phase != core.NodeDone && !lastDone.IsZero() && p.at.Before(lastDone) {
				t.Errorf("node %d (%s) was %s on the page before the node before it was done", i+1, n.Device, p.phase)
			}
		}
		lastDone = done
	}
	if between*2 < len(r.Nodes) {
		t.Errorf("only %d of %d nodes were shown in a phase between pending and done", between, len(r.Nodes))
	}
	for _, wd := range []int{1280, 390} {
		if err := w.tab.Screenshot(filepath.Join(shots, fmt.Sprintf("lab-rollout-done-%d.png", wd)), wd); err != nil {
			t.Error(err)
		}
	}
	t.Logf("rollout %s: %s in %s; the lab saw %+v; screenshots in %s", r.ID, r.State, r.Elapsed.Round(100*time.Millisecond), r.Nodes, shots)
}

// rolloutWatch keeps the Rollouts page open from before the first device
// boots: it waits for a rollout to appear there, opens it from the list and
// samples each node's phase.
type rolloutWatch struct {
	fw       *browser.Forwarder
	tab      *browser.Tab
	base     string
	cancel   context.CancelFunc
	done     sync.WaitGroup
	stopOnce sync.Once

	mu        sync.Mutex
	listErr   error
	rolloutID string
	loadedAt  float64 // the rollout page's
	phases    map[string][]phaseSeen
	shown     string // #rollout-state
}

type phaseSeen struct {
	phase string
	at    time.Time
}

func watchRollouts(t *testing.T, b *browser.Browser, l *Lab) (*rolloutWatch, error) {
	api, err := url.Parse(l.App.APIBase)
	if err != nil {
		return nil, err
	}
	fw, err := browser.ForwardNS(l.Topo.App, api.Host)
	if err != nil {
		return nil, err
	}
	w := &rolloutWatch{fw: fw, base: api.Scheme + "://" + fw.Addr, phases: map[string][]phaseSeen{}}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	key, secret, err := l.App.CreateAPIKey(ctx, "admin", "console-rollouts")
	if err != nil {
		fw.Close()
		return nil, err
	}
	w.tab = b.Tab(t)
	if err := w.tab.SignIn(w.base, key, secret); err != nil {
		fw.Close()
		return nil, err
	}
	if err := w.tab.Navigate(w.base + "/rollouts"); err != nil {
		fw.Close()
		return nil, err
	}
	if err := w.tab.WaitFor("body[data-loaded]"); err != nil {
		fw.Close()
		return nil, err
	}
	w.done.Add(1)
	go w.watch(ctx)
	return w, nil
}

func (w *rolloutWatch) watch(ctx context.Context) {
	defer w.done.Done()
	tab := w.tab
	listLoaded, err := tab.LoadedAt()
	if err != nil {
		w.fail(err)
		return
	}
	// The rollout appears on the list, live.
	var id string
	for ctx.Err() == nil && id == "" {
		id, _ = browser.Eval[string](tab, `(document.querySelector("table#rollouts tbody tr[data-id]") || {dataset: {}}).dataset.id || ""`)
		if id == "" {
			time.Sleep(200 * time.Millisecond)
		}
	}
	if ctx.Err() != nil {
		return
	}
	if at, _ := tab.LoadedAt(); at != listLoaded {
		w.fail(fmt.Errorf("the rollouts list reloaded before showing %s", id))
		return
	}
	w.mu.Lock()
	w.rolloutID = id
	w.mu.Unlock()
	if err := tab.Do(chromedp.Click(chromedp.CSS(`table#rollouts tbody tr[data-id="` + id + `"] a[href^="/rollouts/"]`))); err != nil {
		w.fail(err)
		return
	}
	if _, err := tab.WaitJS(`location.pathname.startsWith("/rollouts/ro-") && document.body.dataset.loaded ? "y" : ""`, "the rollout's page"); err != nil {
		w.fail(err)
		return
	}
	loaded, _ := tab.LoadedAt()
	w.mu.Lock()
	w.loadedAt = loaded
	w.mu.Unlock()
	type sample struct {
		State string      `json:"state"`
		Rows  [][2]string `json:"rows"`
	}
	for ctx.Err() == nil {
		s, err := browser.Eval[sample](tab, `({state: (document.querySelector("#rollout-state") || {textContent: ""}).textContent.trim(),
		  rows: [...document.querySelectorAll("#rollout-nodes tbody tr[data-device]")].map(r => [r.dataset.device, r.querySelector("td.phase .badge").textContent])})`)
		if err == nil {
			now := time.Now()
			w.mu.Lock()
			w.shown = s.State
			for _, r := range s.Rows {
				p := w.phases[r[0]]
				if len(p) == 0 || p[len(p)-1].phase != r[1] {
					w.phases[r[0]] = append(p, phaseSeen{r[1], now})
				}
			}
			w.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (w *rolloutWatch) fail(err error) {
	w.mu.Lock()
	w.listErr = err
	w.mu.Unlock()
}

func (w *rolloutWatch) state() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.shown
}

func (w *rolloutWatch) ended() bool {
	s := core.RolloutState(w.state())
	return s.Ended()
}

func (w *rolloutWatch) seenByDevice() map[string][]phaseSeen {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string][]phaseSeen{}
	for k, v := range w.phases {
		out[k] = slices.Clone(v)
	}
	return out
}

func (w *rolloutWatch) summary() string {
	var parts []string
	for id, ps := range w.seenByDevice() {
		var names []string
		for _, p := range ps {
			names = append(names, p.phase)
		}
		parts = append(parts, id+": "+strings.Join(names, " > "))
	}
	slices.Sort(parts)
	w.mu.Lock()
	id := w.rolloutID
	w.mu.Unlock()
	return fmt.Sprintf("rollout %s, state %q; %s", id, w.state(), strings.Join(parts, "; "))
}

func (w *rolloutWatch) stop() {
	w.stopOnce.Do(func() {
		w.cancel()
		w.done.Wait()
	})
}

func (w *rolloutWatch) close() {
	w.stop()
	w.tab.Close()
	w.fw.Close()
}
