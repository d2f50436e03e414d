package api

import (
	"container/heap"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var replayEntries = promauto.NewGauge(prometheus.GaugeOpts{
	Name: "ztpd_api_replay_memory_entries", Help: "Signatures of recent API writes remembered to refuse replays.",
})

// errReplayed: the same signed write was accepted before, within its
// validity. errReplayFull: the memory holds as many unexpired signatures as
// it may, so a new write cannot be remembered and is refused rather than
// letting an older one be forgotten (and replayable).
var (
	errReplayed   = errors.New("request signature already used")
	errReplayFull = errors.New("too many signed writes within the signature lifetime")
)

// replayGuard remembers the signatures of accepted writes until they
// expire, so a captured write cannot be sent again while its signature is
// still valid. Reads are not remembered: repeating a read changes nothing,
// and clients poll.
type replayGuard struct {
	max  int
	mu   sync.Mutex
	seen map[string]time.Time // api key + signature -> forget after
	exp  expiryHeap
}

func newReplayGuard(max int) *replayGuard {
	return &replayGuard{max: max, seen: map[string]time.Time{}}
}

// admit records key until until, or refuses it when it is remembered or
// the memory is full of unexpired entries.
func (g *replayGuard) admit(key string, until, now time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for len(g.exp) > 0 && !g.exp[0].until.After(now) {
		e := heap.Pop(&g.exp).(expiry)
		if t, ok := g.seen[e.key]; ok && !t.After(now) {
			delete(g.seen, e.key)
		}
	}
	defer func() { replayEntries.Set(float64(len(g.seen))) }()
	if t, ok := g.seen[key]; ok && t.After(now) {
		return errReplayed
	}
	if len(g.seen) >= g.max {
		return errReplayFull
	}
	g.seen[key] = until
	heap.Push(&g.exp, expiry{until: until, key: key})
	return nil
}

func (g *replayGuard) len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.seen)
}

type expiry struct {
	until time.Time
	key   string
}

// expiryHeap orders entries by expiry, soonest first.
type expiryHeap []expiry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].until.Before(h[j].until) }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(expiry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
