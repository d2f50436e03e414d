package httpserve

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of BodyBudget, also the defaults of the http: configuration keys.
// 64 MiB holds 64 API bodies at their 1 MiB cap or a thousand device
// reports at once; 8 MiB lets one address send 8 API bodies at the cap
// concurrently.
const (
	DefaultMaxBodyBytesInFlight  = 64 << 20
	DefaultMaxBodyBytesPerSource = 8 << 20
)

// BodyBudget bounds the request body bytes that requests being served may
// hold, in total and per client address: a request reserves its body's
// size before any of it is read, and a request that does not fit is
// refused unread. One budget is shared by every listener of a process.
type BodyBudget struct {
	total, perSource int64

	mu       sync.Mutex
	used     int64
	bySource map[string]int64

	lastLog atomic.Int64 // unix nanos of the last refusal logged

	metrics *Metrics
}

// NewBodyBudget is a budget of total bytes, perSource of them per client
// address; zero means the default. What it holds and refuses is counted
// in m (nil: kept, not exported).
func NewBodyBudget(total, perSource int64, m *Metrics) *BodyBudget {
	if total <= 0 {
		total = DefaultMaxBodyBytesInFlight
	}
	if perSource <= 0 {
		perSource = DefaultMaxBodyBytesPerSource
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	return &BodyBudget{total: total, perSource: min(perSource, total), bySource: map[string]int64{}, metrics: m}
}

// take reserves n bytes for src; the reason is "" when they were
// reserved, else which bound refused them.
func (b *BodyBudget) take(src string, n int64) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	have := b.bySource[src]
	switch {
	case have+n > b.perSource:
		return "per_source"
	case b.used+n > b.total:
		return "total"
	}
	b.bySource[src] = have + n
	b.used += n
	b.metrics.bodyBytesInFlight.Add(float64(n))
	return ""
}

func (b *BodyBudget) give(src string, n int64) {
	b.mu.Lock()
	if left := b.bySource[src] - n; left > 0 {
		b.bySource[src] = left
	} else {
		delete(b.bySource, src)
	}
	b.used -= n
	b.mu.Unlock()
	b.metrics.bodyBytesInFlight.Sub(float64(n))
}

// reserve takes what r's body may hold from the guard's budget, or answers
// 429 (this address has too much in flight) or 503 (every address together
// has) and reports false. The body is not read either way.
func (g *guard) reserve(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	b := g.Budget
	if b == nil {
		return func() {}, true
	}
	n := r.ContentLength
	if n < 0 { // chunked: as much as the cap lets it send
		n = g.MaxBody
	}
	src := r.RemoteAddr
	if host, _, err := net.SplitHostPort(src); err == nil {
		src = host
	}
	reason := b.take(src, n)
	if reason == "" {
		return func() { b.give(src, n) }, true
	}
	b.metrics.bodyRefused.WithLabelValues(g.Listener, reason).Inc()
	code, text, limit := http.StatusTooManyRequests, "too many request bytes in flight from "+src+"; retry shortly", b.perSource
	if reason == "total" {
		code, text, limit = http.StatusServiceUnavailable, "too many request bytes in flight; retry shortly", b.total
	}
	if now := time.Now().UnixNano(); now-b.lastLog.Load() > int64(10*time.Second) {
		b.lastLog.Store(now)
		g.Log.Info("request refused before reading its body: body budget exhausted", "listener", g.Listener,
			"path", r.URL.Path, "client", src, "status", code, "reason", reason, "body_bytes", n, "limit", limit)
	}
	h := w.Header()
	h.Set("Connection", "close") // the body is never read
	h.Set("Retry-After", strconv.Itoa(1))
	writeBody(w, code, ErrorBodyOf(code, text))
	return nil, false
}
