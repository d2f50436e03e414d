package content

// Refusals: metrics, rate-limited logs and events for requests that get no
// content.

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
)

// refused accounts for a request that got no content: a metric by reason,
// an info log (at most one per address every refuseLogEvery), and an event
// on the device's record when the device is known (it holds the address).
// A request from an address nobody holds is counted and logged, never
// stored: made-up devices must not fill the store or push out events.
func (s *Service) refused(c *Client, dev core.Device, what string, reason error) {
	var e *Error
	if !errors.As(reason, &e) || e.Status >= 500 {
		return
	}
	why := e.Kind
	if why == "" {
		why = "forbidden"
		if e.Status == 404 {
			why = "no-profile"
		}
	}
	s.metrics.refused.WithLabelValues(what, why).Inc()
	now := s.now()
	if ok, _ := s.logRefusal.Allow(c.Addr.String(), now); ok {
		s.log.Info("device refused", "what", what, "addr", addrString(c.Addr), "transport", c.Transport,
			"device", dev.ID, "reason", e.Reason)
	}
	if dev.ID == "" || why == RefusedNoHolder {
		s.recent.add(c, what, why, e.Reason, now)
		return
	}
	typ := "ztp.refused"
	if e.Status == 404 {
		typ = "ztp.unknown"
	}
	ev := core.Event{Time: now, Type: typ, Device: dev.ID, Message: e.Reason,
		Fields: map[string]string{"what": what, "transport": c.Transport, "addr": addrString(c.Addr)}}
	// The device holds its address: the refusal stays on its record
	// ("device list --state unmatched") until it is served.
	s.opt.Devices.Progress(devices.Progress{Device: dev, Facts: c.stated, Event: ev,
		Refusal: core.Refusal{What: what, Kind: why, Reason: e.Reason, At: now}})
}

// RecentRefusals is what a running server refused to addresses that hold
// no lease (never stored), newest first, and since when it records them
// (zero when it does not: profiles never loaded, as in offline CLI use).
func (s *Service) RecentRefusals() (since time.Time, list []core.AddressRefusal) {
	return s.recent.list()
}

// recentRefusalsMax bounds the refused addresses kept in memory.
const recentRefusalsMax = 1024

// refusalTable is the recent refusals of addresses that hold no lease, by
// address, at most recentRefusalsMax: a new address replaces the one
// refused longest ago.
type refusalTable struct {
	mu    sync.Mutex
	since time.Time
	m     map[netip.Addr]*core.AddressRefusal
	max   int // 0: recentRefusalsMax
}

// start begins recording (the first time only).
func (t *refusalTable) start(now time.Time) {
	t.mu.Lock()
	if t.since.IsZero() {
		t.since = now
	}
	t.mu.Unlock()
}

func (t *refusalTable) add(c *Client, what, kind, reason string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[netip.Addr]*core.AddressRefusal{}
	}
	r := t.m[c.Addr]
	if r == nil {
		limit := t.max
		if limit <= 0 {
			limit = recentRefusalsMax
		}
		if len(t.m) >= limit {
			var oldest netip.Addr
			var at time.Time
			for a, r := range t.m {
				if at.IsZero() || r.Last.Before(at) {
					oldest, at = a, r.Last
				}
			}
			delete(t.m, oldest)
		}
		r = &core.AddressRefusal{Addr: addrString(c.Addr), First: now}
		t.m[c.Addr] = r
	}
	r.What, r.Kind, r.Reason, r.Transport, r.Last = what, kind, reason, c.Transport, now
	r.Count++
}

func (t *refusalTable) list() (time.Time, []core.AddressRefusal) {
	t.mu.Lock()
	list := make([]core.AddressRefusal, 0, len(t.m))
	for _, r := range t.m {
		list = append(list, *r)
	}
	since := t.since
	t.mu.Unlock()
	slices.SortFunc(list, func(a, b core.AddressRefusal) int {
		if c := b.Last.Compare(a.Last); c != 0 {
			return c
		}
		return strings.Compare(a.Addr, b.Addr)
	})
	return since, list
}

// refuseLogEvery is how often one address may log a refusal: a device that
// retries every few seconds is visible without flooding the log.
const refuseLogEvery = 30 * time.Second
