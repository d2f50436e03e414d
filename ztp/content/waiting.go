package content

// Waits: a device told to come back later (its cluster does not exist yet,
// it awaits approval, its image is not stored yet) is not refused and is no
// server error. What it waits for is its current reason on its record, and
// an event and an INFO line once per change, however often it retries.

import (
	"errors"
	"sync"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
)

// recordedWait is a wait whose decider (the joiner's admission) has already
// put it on the device's record and in the event log.
type recordedWait interface {
	error
	Recorded() bool
}

// waited reports whether err is a wait (core.KindWaiting) and, when what
// dev waits for changed, records it: the device's reason
// (core.RefusalWaiting), a device.waiting event and an INFO line. A wait
// of a device with no record (an address nobody holds) is only answered.
func (s *Service) waited(c *Client, dev core.Device, what string, err error) bool {
	if core.KindOf(err) != core.KindWaiting {
		return false
	}
	s.metrics.waits.WithLabelValues(what).Inc()
	var ce *core.Error
	if dev.ID == "" || !errors.As(err, &ce) {
		return true
	}
	reason := ce.Msg
	if rw, ok := errors.AsType[recordedWait](err); ok && rw.Recorded() {
		s.waits.told(dev.ID, reason)
		return true
	}
	stored := dev.Refusal.Kind == core.RefusalWaiting && dev.Refusal.Reason == reason
	if !s.waits.told(dev.ID, reason) || stored {
		return true // no news: the device asks again
	}
	now := s.now()
	s.log.Info("device waiting", "what", what, "device", dev.ID, "addr", addrString(c.Addr), "reason", reason)
	ev := core.Event{Time: now, Type: "device.waiting", Device: dev.ID, Message: reason,
		Fields: map[string]string{"what": what, "transport": c.Transport, "addr": addrString(c.Addr)}}
	s.opt.Devices.Progress(devices.Progress{Device: dev, Event: ev,
		Refusal: core.Refusal{What: what, Kind: core.RefusalWaiting, Reason: reason, At: now}})
	return true
}

// waitTableMax bounds the waiting devices remembered; beyond it one is
// forgotten, whose next retry is recorded again only if its stored reason
// differs.
const waitTableMax = 4096

// waitTable is what each waiting device was last told.
type waitTable struct {
	mu sync.Mutex
	m  map[string]string
}

// told notes that device id was told to wait for reason and reports
// whether that is news (a first wait, or a different one).
func (t *waitTable) told(id, reason string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]string{}
	}
	if prev, ok := t.m[id]; ok && prev == reason {
		return false
	}
	if _, ok := t.m[id]; !ok && len(t.m) >= waitTableMax {
		for k := range t.m { // any one: a forgotten wait costs one more event at most
			delete(t.m, k)
			break
		}
	}
	t.m[id] = reason
	return true
}

// over forgets device id's wait: it was served.
func (t *waitTable) over(id string) {
	t.mu.Lock()
	if t.m != nil {
		delete(t.m, id)
	}
	t.mu.Unlock()
}
