package content

// Refusals: metrics, rate-limited logs and events for requests that get no
// content.

import (
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
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
	refusedTotal.WithLabelValues(what, why).Inc()
	if s.logRefusal.allow(c.Addr, s.now()) {
		s.log.Info("device refused", "what", what, "addr", addrString(c.Addr), "transport", c.Transport,
			"device", dev.ID, "reason", e.Reason)
	}
	if dev.ID == "" || why == RefusedNoHolder {
		return
	}
	typ := "ztp.refused"
	if e.Status == 404 {
		typ = "ztp.unknown"
	}
	ev := core.Event{Time: s.now(), Type: typ, Device: dev.ID, Message: e.Reason,
		Fields: map[string]string{"what": what, "transport": c.Transport, "addr": addrString(c.Addr)}}
	s.opt.Devices.Progress(devices.Progress{Event: ev})
}

var (
	refusedTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "ztpd_ztp_refused_total",
		Help: "ZTP content requests refused, by document and reason (no-holder, mismatch, bad-fact, no-profile, forbidden).",
	}, []string{"what", "reason"})
)

// refuseLogEvery is how often one address may log a refusal: a device that
// retries every few seconds is visible without flooding the log.
const refuseLogEvery = 30 * time.Second

// rateLimit lets one event per key through every refuseLogEvery.
type rateLimit struct {
	mu   sync.Mutex
	last map[netip.Addr]time.Time
}

func (l *rateLimit) allow(a netip.Addr, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.last[a]; ok && now.Sub(t) < refuseLogEvery {
		return false
	}
	if l.last == nil || len(l.last) >= 4096 {
		l.last = make(map[netip.Addr]time.Time) // bounded: forget everyone at once
	}
	l.last[a] = now
	return true
}
