package rest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
)

// eventsAnswer is a page of /api/v1/events as a follower reads it.
type eventsAnswer struct {
	Items      []client.Event `json:"items"`
	NextCursor string         `json:"next_cursor"`
	LastSeq    *uint64        `json:"last_seq"`
}

func getEvents(t *testing.T, base string, q url.Values) eventsAnswer {
	t.Helper()
	resp, err := http.Get(base + "/api/v1/events?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET events %s: HTTP %d", q.Encode(), resp.StatusCode)
	}
	var a eventsAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	return a
}

// TestEventsFollowLosesAndRepeatsNothing: a follower that polls with
// since=<last_seq> (following next_cursor within a poll) while events of
// both streams are appended concurrently sees every matching event exactly
// once, in order, and its position moves past events it does not want.
func TestEventsFollowLosesAndRepeatsNothing(t *testing.T) {
	e := newEnv(t, envOpts{})
	srv := httptest.NewServer(e.srv.LocalHandler())
	defer srv.Close()
	const total = 600
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < total; i += 6 {
			err := e.st.Update(func(tx core.Tx) error {
				for j := i; j < i+6; j++ {
					typ, dev := "ztp.json.served", fmt.Sprintf("02:00:00:00:00:%02x", j%4)
					if j%5 == 0 {
						typ = "device.approved" // the audit stream
					}
					if _, err := tx.Events().Append(core.Event{Type: typ, Device: dev, Message: fmt.Sprint(j)}); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	const want = "02:00:00:00:00:01"
	var got []string
	var since uint64
	poll := func() {
		q := url.Values{"device": {want}, "limit": {"7"}, "since": {fmt.Sprint(since)}}
		for {
			a := getEvents(t, srv.URL, q)
			for _, ev := range a.Items {
				got = append(got, ev.Message)
			}
			if a.NextCursor != "" {
				q.Set("cursor", a.NextCursor)
				continue
			}
			if a.LastSeq == nil {
				t.Fatal("a page without next_cursor has no last_seq")
			}
			if *a.LastSeq < since {
				t.Fatalf("last_seq went back from %d to %d", since, *a.LastSeq)
			}
			since = *a.LastSeq
			return
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for polling := true; polling; {
		select {
		case <-done:
			polling = false
		default:
		}
		poll()
	}
	poll()
	var expect []string
	for j := range total {
		if j%4 == 1 {
			expect = append(expect, fmt.Sprint(j))
		}
	}
	if !slices.Equal(got, expect) {
		t.Fatalf("the follower saw %d events, want %d:\n got %v\nwant %v", len(got), len(expect), got, expect)
	}
	if since != newestSeq(t, e.st) {
		t.Errorf("last_seq %d after the last poll, newest event %d", since, newestSeq(t, e.st))
	}
}

// TestEventsTailAndFrom: tail=n answers the newest n matching events,
// oldest first, with last_seq; from drops older events.
func TestEventsTailAndFrom(t *testing.T) {
	e := newEnv(t, envOpts{})
	srv := httptest.NewServer(e.srv.LocalHandler())
	defer srv.Close()
	t0 := time.Now().UTC().Add(time.Hour).Truncate(time.Second) // after the API keys' events
	base := newestSeq(t, e.st)
	err := e.st.Update(func(tx core.Tx) error {
		for j := range 50 {
			typ := "ztp.json.served"
			if j%2 == 0 {
				typ = "device.approved"
			}
			if _, err := tx.Events().Append(core.Event{Time: t0.Add(time.Duration(j) * time.Minute), Type: typ,
				Device: "02:00:00:00:00:01", Message: fmt.Sprint(j)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	msgs := func(a eventsAnswer) []string {
		var out []string
		for _, ev := range a.Items {
			out = append(out, ev.Message)
		}
		return out
	}
	a := getEvents(t, srv.URL, url.Values{"tail": {"5"}})
	if got := msgs(a); !slices.Equal(got, []string{"45", "46", "47", "48", "49"}) || a.NextCursor != "" || a.LastSeq == nil || *a.LastSeq != base+50 {
		t.Errorf("tail 5: %v cursor %q last_seq %v", got, a.NextCursor, a.LastSeq)
	}
	a = getEvents(t, srv.URL, url.Values{"tail": {"3"}, "type": {"ztp"}})
	if got := msgs(a); !slices.Equal(got, []string{"45", "47", "49"}) {
		t.Errorf("tail 3 of ztp events: %v", got)
	}
	a = getEvents(t, srv.URL, url.Values{"from": {t0.Add(47 * time.Minute).Format(time.RFC3339)}})
	if got := msgs(a); !slices.Equal(got, []string{"47", "48", "49"}) {
		t.Errorf("from minute 47: %v", got)
	}
	a = getEvents(t, srv.URL, url.Values{"tail": {"100"}, "since": {fmt.Sprint(base + 48)}})
	if got := msgs(a); !slices.Equal(got, []string{"48", "49"}) {
		t.Errorf("tail after seq 48: %v", got)
	}
	for _, bad := range []url.Values{{"tail": {"0"}}, {"tail": {"x"}}, {"from": {"yesterday"}}} {
		resp, err := http.Get(srv.URL + "/api/v1/events?" + bad.Encode())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("%s: HTTP %d, want 400", bad.Encode(), resp.StatusCode)
		}
	}
}
