package clusters

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// fakeApplier records what it was asked to apply and fails while fail is set.
type fakeApplier struct {
	mu        sync.Mutex
	manifests []string
	fail      error
}

func (f *fakeApplier) ApplyManifest(_ context.Context, cluster string, m []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.manifests = append(f.manifests, string(m))
	if f.fail != nil {
		return 0, f.fail
	}
	return strings.Count(string(m), "kind:"), nil
}

func (f *fakeApplier) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.manifests...)
}

func cniOutcome(t *testing.T, s *Service, id string, want func(*core.CNIOutcome) bool) *core.CNIOutcome {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var out *core.CNIOutcome
		s.st.View(func(tx core.Tx) error {
			c, err := tx.Clusters().Get(id)
			if err == nil && c.Observed != nil {
				out = c.Observed.CNI
			}
			return err
		})
		if want(out) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("CNI outcome: %+v", out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCNIAppliedOnceTheControlPlaneAnswers: a cluster created with a
// registered configuration gets it, its parameters substituted, once its
// API server answers with a control plane's Node registered (not before);
// the outcome is in its observed state and an event; it is applied once;
// a failure is tried again after a pause, not at every observation.
func TestCNIAppliedOnceTheControlPlaneAnswers(t *testing.T) {
	clock := &fakeClock{t: time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)}
	ap := &fakeApplier{}
	s, err := New(storetest.Rerunning(storetest.Store(t)), &recorder{}, Options{Now: clock.Now, CNI: ap})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	ctx := context.Background()
	manifest := "kind: ConfigMap\ndata:\n  mtu: \"{{ ds.meta_data.mtu }}\"\n  cidr: {{ds.meta_data.PodCIDR}}\n  other: '{{ not.a.param }}'\n"
	if _, err := s.RegisterCNI(ctx, user, CNISpec{Name: "x", Content: base64.StdEncoding.EncodeToString([]byte(manifest))}); core.KindOf(err) != core.KindPermission {
		t.Fatalf("a user registered: %v", err)
	}
	cfg, err := s.RegisterCNI(ctx, LocalAdmin, CNISpec{Name: "calico", Content: base64.StdEncoding.EncodeToString([]byte(manifest)), Params: "mtu, PodCIDR"})
	if err != nil {
		t.Fatal(err)
	}
	v := addVersion(t, s, "1.31.4")
	c, j, err := s.CreateCluster(ctx, user, ClusterSpec{Name: "net", ZoneID: s.Zone().ID, VersionID: v.ID,
		ServiceOfferingID: Offerings[0].ID, Size: 1, CNIConfigID: "calico", CNIDetails: map[string]string{"MTU": "1450", "podcidr": "10.1.0.0/16"}})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, s, j)

	// The API server answers, no control plane registered yet: nothing.
	if err := s.ObserveHealth(c.ID, Health{APIReachable: true}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if n := len(ap.calls()); n != 0 {
		t.Fatalf("applied before a control plane registered: %d", n)
	}
	// Its first control plane registered (NotReady: no CNI yet).
	h := Health{APIReachable: true, Nodes: 1, ControlPlanes: 1}
	if err := s.ObserveHealth(c.ID, h); err != nil {
		t.Fatal(err)
	}
	out := cniOutcome(t, s, c.ID, func(o *core.CNIOutcome) bool { return o != nil })
	if out.State != CNIStateApplied || out.Objects != 1 || out.Attempts != 1 {
		t.Fatalf("outcome: %+v", out)
	}
	want := "kind: ConfigMap\ndata:\n  mtu: \"1450\"\n  cidr: 10.1.0.0/16\n  other: '{{ not.a.param }}'\n"
	if got := ap.calls(); len(got) != 1 || got[0] != want {
		t.Fatalf("applied %q", got)
	}
	for range 3 {
		s.ObserveHealth(c.ID, h)
	}
	time.Sleep(50 * time.Millisecond)
	if n := len(ap.calls()); n != 1 {
		t.Fatalf("applied %d times", n)
	}
	var evs []string
	s.st.View(func(tx core.Tx) error {
		return tx.Events().List(core.StreamOf("cluster.cni"), 0, func(e core.Event) (bool, error) {
			if e.Type == "cluster.cni" && e.Cluster == c.ID {
				evs = append(evs, e.Message)
			}
			return true, nil
		})
	})
	if len(evs) != 1 || !strings.Contains(evs[0], "CNI configuration calico applied (1 objects)") {
		t.Fatalf("events: %q", evs)
	}
	if _, err := s.DeleteCNI(ctx, LocalAdmin, cfg.ID); core.KindOf(err) != core.KindInUse {
		t.Fatalf("deleted in use: %v", err)
	}

	// A failure is recorded and tried again after a pause.
	ap.mu.Lock()
	ap.fail = errors.New("connection refused")
	ap.mu.Unlock()
	c2, j2, err := s.CreateCluster(ctx, user, ClusterSpec{Name: "net2", ZoneID: s.Zone().ID, VersionID: v.ID,
		ServiceOfferingID: Offerings[0].ID, Size: 1, CNIConfigID: cfg.ID, CNIDetails: map[string]string{"mtu": "1450", "PodCIDR": "10.2.0.0/16"}})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, s, j2)
	s.ObserveHealth(c2.ID, h)
	out = cniOutcome(t, s, c2.ID, func(o *core.CNIOutcome) bool { return o != nil })
	if out.State != CNIStateFailed || out.Attempts != 1 || !strings.Contains(out.Message, "connection refused") {
		t.Fatalf("failed outcome: %+v", out)
	}
	s.ObserveHealth(c2.ID, h)
	time.Sleep(50 * time.Millisecond)
	if n := len(ap.calls()); n != 2 {
		t.Fatalf("retried at once: %d calls", n)
	}
	ap.mu.Lock()
	ap.fail = nil
	ap.mu.Unlock()
	clock.Add(cniApplyBackoff)
	s.ObserveHealth(c2.ID, h)
	out = cniOutcome(t, s, c2.ID, func(o *core.CNIOutcome) bool { return o != nil && o.State == CNIStateApplied })
	if out.Attempts != 2 {
		t.Fatalf("after the retry: %+v", out)
	}
}

func TestCNIDetailsAndPlaceholders(t *testing.T) {
	params, err := ParseCNIParams("mtu,PodCIDR")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		details map[string]string
		text    string
	}{
		{map[string]string{"mtu": "1450"}, "PodCIDR has no value"},
		{map[string]string{"mtu": "1450", "PodCIDR": "x", "z": "1"}, `names "z"`},
		{map[string]string{"mtu": "1450\nkind: Secret", "PodCIDR": "x"}, "a value is"},
		{map[string]string{"mtu": "'x'", "PodCIDR": "x"}, "a value is"},
		{map[string]string{"mtu": "a: b", "PodCIDR": "x"}, "a value is"},
		{map[string]string{"mtu": "{x}", "PodCIDR": "x"}, "a value is"},
	} {
		if _, err := RenderCNI("", params, c.details); err == nil || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%v: %v", c.details, err)
		}
	}
	if err := CheckCNIPlaceholders("{{ ds.meta_data.other }}", params); err == nil {
		t.Fatal("an undeclared placeholder was accepted")
	}
	if _, err := ParseCNIParams("a,a"); err == nil {
		t.Fatal("a parameter declared twice was accepted")
	}
}

func FuzzCNIRender(f *testing.F) {
	f.Add(base64.StdEncoding.EncodeToString([]byte("a: {{ ds.meta_data.x }}")), "x", "v1")
	f.Add("e30", "x,y", "1.2.3.4/24")
	f.Add("!!", "", "")
	f.Fuzz(func(t *testing.T, content, params, value string) {
		m, err := DecodeCNIContent(content)
		if err != nil {
			return
		}
		ps, err := ParseCNIParams(params)
		if err != nil {
			return
		}
		if err := CheckCNIPlaceholders(m, ps); err != nil {
			return
		}
		details := map[string]string{}
		for _, p := range ps {
			details[p] = value
		}
		out, err := RenderCNI(m, ps, details)
		if err != nil {
			return
		}
		// A value only ever adds plain scalar characters: no new line,
		// quote, comment or flow character than the manifest had.
		for _, ch := range []string{"\n", "'", "\"", "#", "{", "}", "[", "]", " "} {
			if strings.Count(out, ch) > strings.Count(m, ch) {
				t.Fatalf("rendering added %q: %q -> %q", ch, m, out)
			}
		}
	})
}
