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
// it may (in all, or of this API key: one key may fill a sixteenth, so a
// busy or hostile key cannot block every other key's writes), so a new
// write cannot be remembered and is refused rather than letting an older
// one be forgotten (and replayable).
var (
	errReplayed   = errors.New("request signature already used")
	errReplayFull = errors.New("too many signed writes within the signature lifetime")
)

// replayGuard remembers the signatures of accepted writes until they
// expire, so a captured write cannot be sent again while its signature is
// still valid. Reads are not remembered: repeating a read changes nothing,
// and clients poll.
type replayGuard struct {
	max    int
	perKey int
	mu     sync.Mutex
	seen   map[string]time.Time // api key + signature -> forget after
	byKey  map[string]int       // api key -> entries in seen
	exp    expiryHeap
}

func newReplayGuard(size int) *replayGuard {
	return &replayGuard{max: size, perKey: max(1, size/16), seen: map[string]time.Time{}, byKey: map[string]int{}}
}

// admit records the signature sig of apiKey until until, or refuses it when
// it is remembered or the memory (or the key's share of it) is full of
// unexpired entries.
func (g *replayGuard) admit(apiKey, sig string, until, now time.Time) error {
	key := apiKey + "\x00" + sig
	g.mu.Lock()
	defer g.mu.Unlock()
	for len(g.exp) > 0 && !g.exp[0].until.After(now) {
		e := heap.Pop(&g.exp).(expiry)
		if t, ok := g.seen[e.key]; ok && !t.After(now) {
			delete(g.seen, e.key)
			if g.byKey[e.apiKey]--; g.byKey[e.apiKey] <= 0 {
				delete(g.byKey, e.apiKey)
			}
		}
	}
	defer func() { replayEntries.Set(float64(len(g.seen))) }()
	if t, ok := g.seen[key]; ok && t.After(now) {
		return errReplayed
	}
	if len(g.seen) >= g.max || g.byKey[apiKey] >= g.perKey {
		return errReplayFull
	}
	g.seen[key] = until
	g.byKey[apiKey]++
	heap.Push(&g.exp, expiry{until: until, key: key, apiKey: apiKey})
	return nil
}

func (g *replayGuard) len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.seen)
}

type expiry struct {
	until  time.Time
	key    string
	apiKey string
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
