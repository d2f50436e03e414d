package content

import (
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

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
