package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/api/rest"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/rollout"
)

// TestConsoleRolloutPages: the rollouts list and a rollout's page are
// shells with the hooks app.js fills (the nav links them); Pause, Resume
// and Abort are on an admin's page only, and a user's has none.
func TestConsoleRolloutPages(t *testing.T) {
	e := newEnv(t, envOpts{})
	admin := pgClient(t, e)
	pgSignIn(t, e, admin, e.admin.APIKey, e.adminSec)
	for path, hooks := range map[string][]string{
		"/rollouts":          {`<table id="rollouts"`, `id="rollout-filter"`, `name="cluster"`, `name="state"`, `id="page-next"`},
		"/rollouts/ro-x":     {`data-id="ro-x"`, `id="rollout-facts"`, `id="rollout-progress"`, `id="rollout-counts"`, `<table id="rollout-nodes"`, `id="rollout-events"`, `id="rollout-pause"`, `id="rollout-resume"`, `id="rollout-abort"`},
		"/clusters/c-1":      {`<table id="cluster-rollouts"`, `id="cluster-rollouts-all"`},
		"/devices?from=page": {`<a href="/rollouts">Rollouts</a>`},
	} {
		resp, body := pgGet(t, admin, e.ts.URL+path)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d", path, resp.StatusCode)
		}
		for _, h := range hooks {
			if !strings.Contains(body, h) {
				t.Errorf("%s lacks %s", path, h)
			}
		}
	}
	if _, body := pgGet(t, admin, e.ts.URL+"/rollouts/ro-x"); !strings.Contains(body, `<a href="/rollouts" aria-current="page">Rollouts</a>`) {
		t.Errorf("a rollout's page does not mark Rollouts current in the nav")
	}
	user := pgClient(t, e)
	pgSignIn(t, e, user, e.user.APIKey, e.userSec)
	resp, body := pgGet(t, user, e.ts.URL+"/rollouts/ro-x")
	if resp.StatusCode != http.StatusOK || pgPageOf(t, body) != "rollout" {
		t.Fatalf("a user's rollout page: %d %s", resp.StatusCode, pgPageOf(t, body))
	}
	for _, b := range []string{"rollout-pause", "rollout-resume", "rollout-abort"} {
		if strings.Contains(body, b) {
			t.Errorf("a user's rollout page has %s", b)
		}
	}
}

// sessRolloutUpdates reads updates until stop says so or d passes, and
// returns them.
func sessRolloutUpdates(t *testing.T, s *sessStream, d time.Duration, stop func([]sessUpdate) bool) []sessUpdate {
	t.Helper()
	var out []sessUpdate
	deadline := time.Now().Add(d)
	for !stop(out) {
		u, ok := s.update(t, time.Until(deadline))
		if !ok {
			break
		}
		out = append(out, u)
	}
	return out
}

// TestConsoleStreamRollouts: a rollout running over a cluster's nodes (the
// real engine, fake Nodes and agent loops) reaches an admin's stream as
// its ID in "rollouts" while its nodes move, with its rollout.progress
// events; what the page refetches (GET /rollouts/{id} with the session)
// then shows every node done.
func TestConsoleStreamRollouts(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.fabric()
	b := sessNewBrowser(t, e)
	b.mustSignIn(e, e.admin.APIKey, e.adminSec)
	s := b.stream(t)
	s.hello(t)
	// Quiet before any rollout: an update names none.
	sessPutDevices(t, e.st, 1, sessMAC(0x50), "", core.StateLeased)
	if u, ok := s.update(t, 3*time.Second); !ok || u.Rollouts == nil || len(u.Rollouts) != 0 || u.RolloutsMore {
		t.Fatalf("an update without rollout events: %v rollouts %v more %v", ok, u.Rollouts, u.RolloutsMore)
	}

	e.runAgents(dayDevice(0), dayDevice(1), dayDevice(2))
	r, err := e.rollouts.Start(t.Context(), rollout.Spec{Cluster: labID, Kind: core.RolloutKubernetes, Target: "v1.37.2", TargetID: "ver-1372", By: "ops"})
	if err != nil {
		t.Fatal(err)
	}
	named, progress := 0, 0
	ended := func(us []sessUpdate) bool {
		for _, u := range us {
			for _, ev := range u.Events {
				if ev.Type == "rollout.progress" && ev.Fields["rollout"] == r.ID && ev.Fields["state"] == string(core.RolloutSucceeded) {
					return true
				}
			}
		}
		return false
	}
	us := sessRolloutUpdates(t, s, 20*time.Second, ended)
	if !ended(us) {
		t.Fatalf("no update with the rollout succeeded in %d updates", len(us))
	}
	for _, u := range us {
		if slices.Contains(u.Rollouts, r.ID) {
			named++
		}
		for _, ev := range u.Events {
			if ev.Type == "rollout.progress" && ev.Fields["rollout"] == r.ID {
				progress++
				if !slices.Contains(u.Rollouts, r.ID) {
					t.Errorf("an update carries rollout.progress of %s but does not name it: %v", r.ID, u.Rollouts)
				}
			}
		}
	}
	if named == 0 || progress < 3 {
		t.Fatalf("%d updates named the rollout, %d rollout.progress events came", named, progress)
	}
	got := b.do(http.MethodGet, rest.Path+"rollouts/"+r.ID, nil)
	var view client.Rollout
	if err := json.Unmarshal(got.body, &view); err != nil || got.status != http.StatusOK {
		t.Fatalf("GET the rollout with the session: %d %v %s", got.status, err, got.body)
	}
	if view.State != core.RolloutSucceeded || view.Counts[core.NodeDone] != 3 {
		t.Fatalf("the rollout the page refetches: %s %v", view.State, view.Counts)
	}
	t.Logf("%d updates, %d naming %s, %d rollout.progress events", len(us), named, r.ID, progress)
}

// TestConsoleStreamRolloutsTenancy: a user key's stream names only the
// rollouts of its account's clusters.
func TestConsoleStreamRolloutsTenancy(t *testing.T) {
	e, _, _, mine, theirs, _ := tenancyEnv(t)
	b := sessNewBrowser(t, e)
	b.mustSignIn(e, e.user.APIKey, e.userSec)
	s := b.stream(t)
	s.hello(t)
	err := e.st.Update(func(tx core.Tx) error {
		for _, ev := range []core.Event{
			{Type: "rollout.progress", Cluster: theirs.ID, Message: "rollout ro-theirs: node-1 cordoned", Fields: map[string]string{"rollout": "ro-theirs", "state": "running"}},
			{Type: "rollout.started", Cluster: mine.ID, Message: "rollout ro-mine started", Fields: map[string]string{"rollout": "ro-mine"}},
			{Type: "rollout.progress", Message: "rollout ro-standalone: sw-1 done", Fields: map[string]string{"rollout": "ro-standalone", "state": "running"}},
			// Not a rollout's event, though it names one.
			{Type: "agent.step", Cluster: mine.ID, Device: "02:00:00:00:0a:01", Fields: map[string]string{"rollout": "ro-fake", "operation": "op-1"}},
		} {
			if _, err := tx.Events().Append(ev); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	u, ok := s.update(t, 3*time.Second)
	if !ok {
		t.Fatal("no update")
	}
	if !slices.Equal(u.Rollouts, []string{"ro-mine"}) || u.RolloutsMore {
		t.Fatalf("a user key's stream names rollouts %v (more %v), want only ro-mine", u.Rollouts, u.RolloutsMore)
	}
	admin := sessNewBrowser(t, e)
	admin.mustSignIn(e, e.admin.APIKey, e.adminSec)
	as := admin.stream(t)
	as.hello(t)
	if err := e.st.Update(func(tx core.Tx) error {
		_, err := tx.Events().Append(core.Event{Type: "rollout.progress", Message: "rollout ro-standalone: sw-1 done", Fields: map[string]string{"rollout": "ro-standalone"}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if u, ok := as.update(t, 3*time.Second); !ok || !slices.Equal(u.Rollouts, []string{"ro-standalone"}) {
		t.Fatalf("the admin's stream: %v %v, want ro-standalone", ok, u.Rollouts)
	}
}

// TestConsoleStreamRolloutsBounded: however many rollouts progress while a
// subscriber does not read, its pending update names at most 100 and says
// rollouts_more.
func TestConsoleStreamRolloutsBounded(t *testing.T) {
	var pending streamUpdate
	seq := uint64(0)
	for poll := range 30 {
		var u streamUpdate
		for i := range 10 {
			seq++
			id := fmt.Sprintf("ro-%02d-%02d", poll, i)
			ev := core.Event{Seq: seq, Type: "rollout.progress", Cluster: "c", Fields: map[string]string{"rollout": id}}
			u.addEvent(ev)
			u.addRollout(rolloutOf(ev))
			u.addRollout(id) // named twice, counted once
		}
		u.lastSeq = seq
		pending.merge(u)
		if len(pending.rollouts) > streamMaxRollouts {
			t.Fatalf("poll %d: %d rollouts pending", poll, len(pending.rollouts))
		}
	}
	if len(pending.rollouts) != streamMaxRollouts || !pending.rolloutsMore {
		t.Fatalf("%d rollouts, more %v", len(pending.rollouts), pending.rolloutsMore)
	}
	msg, err := appendStreamUpdate(nil, pending)
	if err != nil || !strings.Contains(string(msg), `"rollouts_more":true`) || !strings.Contains(string(msg), `"ro-00-00"`) {
		t.Fatalf("message: %v %.200s", err, msg)
	}
	if rolloutOf(core.Event{Type: "agent.step", Fields: map[string]string{"rollout": "x"}}) != "" {
		t.Fatal("an agent.step event named a rollout")
	}
}
