package devices

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// logBuffer is a concurrency-safe log sink.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) lines(sub string) []string {
	var out []string
	for _, ln := range strings.Split(l.String(), "\n") {
		if strings.Contains(ln, sub) {
			out = append(out, ln)
		}
	}
	return out
}

// TestStateChangesLoggedAfterCommit: every committed change of a device's
// state is logged at info once, with its cluster's name, from the write
// behind (DHCP-style and content progress) and from a transaction of the
// Recorder's (the joiner's) through Service.Store, and a transaction that
// fails logs nothing. A device flapping between joined and not-ready is
// limited; the next line counts what was left out.
func TestStateChangesLoggedAfterCommit(t *testing.T) {
	st := storetest.Store(t)
	var buf logBuffer
	s := New(Options{Store: st, Log: slog.New(slog.NewTextHandler(&buf, nil))})
	storetest.Update(t, st, func(tx core.Tx) error {
		return tx.Clusters().Put(core.Cluster{ID: "c-1", Name: "edge-1"})
	})
	const id = "02:00:00:00:00:01"
	now := time.Now().UTC()
	s.ObserveDHCP(core.Device{ID: id, MAC: id, Kind: core.KindSONiC, IP: "10.99.1.5", FirstSeen: now, LastSeen: now}, true)
	s.Flush()
	s.Progress(Progress{Device: core.Device{ID: id, MAC: id}, Profile: "leaf", Next: core.StateZTPServed,
		Event: core.Event{Time: now, Type: "ztp.json.served", Device: id}})
	s.Progress(Progress{Device: core.Device{ID: id, MAC: id}, Profile: "leaf", Next: core.StateZTPServed,
		Event: core.Event{Time: now.Add(time.Second), Type: "ztp.json.served", Device: id}}) // no change: no line
	s.Flush()

	joiner := s.Store(st)
	err := joiner.Update(func(tx core.Tx) error {
		if _, err := s.Change(tx, id, now, func(d *core.Device) error {
			d.Cluster, d.State = "c-1", core.StateJoinIssued
			return nil
		}); err != nil {
			return err
		}
		return s.Record(tx, core.Event{Time: now, Type: "join.issued", Device: id, Cluster: "c-1", Message: "join bundle issued"})
	})
	if err != nil {
		t.Fatal(err)
	}
	failed := errors.New("later step failed")
	err = joiner.Update(func(tx core.Tx) error {
		if _, err := s.Change(tx, id, now, func(d *core.Device) error { d.State = core.StateFailed; return nil }); err != nil {
			return err
		}
		return failed // rolled back: the change never happened
	})
	if !errors.Is(err, failed) {
		t.Fatal(err)
	}
	// Flapping, through Batch (run again by the store if need be).
	for i := range 2 * stateLogBurst {
		next := core.StateJoined
		if i%2 == 1 {
			next = core.StateNotReady
		}
		if err := joiner.Batch(func(tx core.Tx) error {
			_, err := s.Change(tx, id, now, func(d *core.Device) error { d.State = next; return nil })
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()

	lines := buf.lines("device state changed")
	want := []string{
		"from=new to=leased ip=10.99.1.5 event=dhcp",
		"from=leased to=ztp-served ip=10.99.1.5 event=ztp.json.served reason=\"profile leaf\"",
		"from=ztp-served to=join-issued ip=10.99.1.5 cluster=edge-1 event=join.issued reason=\"join bundle issued\"",
	}
	if len(lines) < len(want) {
		t.Fatalf("%d state lines, want at least %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		if !strings.Contains(lines[i], "level=INFO") || !strings.Contains(lines[i], "device="+id) || !strings.Contains(lines[i], w) {
			t.Errorf("line %d: %s\nwant it to contain %s", i, lines[i], w)
		}
	}
	if strings.Contains(buf.String(), "to=failed") {
		t.Error("a change of a transaction that failed was logged")
	}
	// 3 lines above, then the burst's rest of the flapping, then nothing
	// until the interval passes.
	if got := len(lines); got != stateLogBurst {
		t.Errorf("%d state lines for 3 changes and %d flaps, want the burst of %d:\n%s", got, 2*stateLogBurst, stateLogBurst, strings.Join(lines, "\n"))
	}
}

// TestRefusalKeptOnTheRecordUntilServed: a refused request of a device
// that holds its address creates or updates its record with the refusal
// (state untouched), and the next served fetch clears it.
func TestRefusalKeptOnTheRecordUntilServed(t *testing.T) {
	st := storetest.Store(t)
	s := New(Options{Store: st, Log: quiet()})
	defer s.Close()
	const id = "02:00:00:00:00:02"
	now := time.Now().UTC()
	get := func() core.Device {
		t.Helper()
		var d core.Device
		storetest.View(t, st, func(tx core.Tx) error {
			var err error
			d, err = tx.Devices().Get(id)
			return err
		})
		return d
	}
	ref := core.Refusal{What: "ztp.json", Kind: "no-profile", Reason: "no profile matches device " + id, At: now}
	s.Progress(Progress{Device: core.Device{ID: id, MAC: id, Kind: core.KindSONiC, IP: "127.0.0.2"}, Refusal: ref,
		Event: core.Event{Time: now, Type: "ztp.unknown", Device: id, Message: ref.Reason}})
	s.Flush()
	d := get()
	if d.Refusal != ref || d.State != core.StateDiscovered || d.IP != "127.0.0.2" || d.Kind != core.KindSONiC {
		t.Fatalf("after the refusal: %+v", d)
	}
	s.Progress(Progress{Device: core.Device{ID: id, MAC: id}, Profile: "leaf", Next: core.StateZTPServed,
		Event: core.Event{Time: now.Add(time.Second), Type: "ztp.json.served", Device: id}})
	s.Flush()
	if d := get(); d.Refusal.Refused() || d.State != core.StateZTPServed {
		t.Fatalf("after being served: %+v", d)
	}
	if n := count(t, st, core.DeviceEvents); n != 2 {
		t.Errorf("%d device events, want the refusal and the fetch", n)
	}
}
