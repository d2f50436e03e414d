package auth

import (
	"container/heap"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ztpd/ztpd/api/signing"
	"github.com/ztpd/ztpd/internal/apikeys"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// newReplayEntries is the gauge of the replay memory's size, registered
// on reg.
func newReplayEntries(reg prometheus.Registerer) prometheus.Gauge {
	return promauto.With(reg).NewGauge(prometheus.GaugeOpts{
		Name: "ztpd_api_replay_memory_entries", Help: "Signatures of recent API writes remembered to refuse replays.",
	})
}

// ErrReplayed: the same signed write was accepted before, within its
// validity. ErrReplayFull: the memory holds as many unexpired signatures as
// it may (in all, or of this API key: one key may fill a sixteenth, so a
// busy or hostile key cannot block every other key's writes), so a new
// write cannot be remembered and is refused rather than letting an older
// one be forgotten (and replayable).
var (
	ErrReplayed   = errors.New("request signature already used")
	ErrReplayFull = errors.New("too many signed writes within the signature lifetime")
)

// ErrUnversionedWrite: a CloudStack write signed without signatureversion=3
// and expires, refused by default. ErrUnversionedFull: the API key made as
// many unversioned writes as ztpd remembers for one key.
var (
	ErrUnversionedWrite = errors.New("CloudStack write signed without signatureversion=3 and expires; such a signature never expires, " +
		"so it could be replayed at any time later: sign with signatureversion=3 and expires, " +
		"or allow old clients with api.cloudstack_unversioned_writes: allow")
	ErrUnversionedFull = fmt.Errorf("this API key made %d unversioned CloudStack writes, as many as ztpd remembers for one key "+
		"(a forgotten one could be replayed): sign with signatureversion=3 and expires, or use a new API key", UnversionedWritesPerKey)
)

// UnversionedWritesPerKey is how many unversioned CloudStack write
// signatures ztpd remembers for one API key; beyond it that key's
// unversioned writes are refused, never an older one forgotten.
const UnversionedWritesPerKey = 4096

// UnversionedSetting is the setting that holds an API key's remembered
// unversioned write signatures: each a fixed-width digest
// (unversionedDigestLen characters), concatenated.
func UnversionedSetting(apiKey string) string { return apikeys.RememberedSignaturesSetting(apiKey) }

const unversionedDigestLen = 22 // 16 bytes of SHA-256, unpadded base64url

// UnversionedDigest is how one remembered signature is stored.
func UnversionedDigest(sig string) string {
	h := sha256.Sum256([]byte(signing.NormalizeSignature(sig)))
	return base64.RawURLEncoding.EncodeToString(h[:16])
}

// rememberForGood records an accepted unversioned write's signature in the
// store (so it outlives a restart, and every appliance sharing the store
// sees it), or refuses it when it is recorded already or the key's share
// is full. A signature without expiry stays valid as long as its key, so
// it is never forgotten.
func (s *Verifier) rememberForGood(apiKey, signature string) error {
	err := s.keys.RememberSignature(apiKey, UnversionedDigest(signature), unversionedDigestLen, UnversionedWritesPerKey)
	switch {
	case errors.Is(err, apikeys.ErrSignatureSeen):
		return &Error{Reason: "replayed unversioned signature: this signed write was already accepted",
			Hint: "request signature already used; sign every write afresh"}
	case errors.Is(err, apikeys.ErrSignaturesFull):
		return ErrUnversionedFull
	case err != nil:
		return err
	}
	return nil
}

// UnversionedRemembered is how many unversioned write signatures of apiKey
// the store holds.
func (s *Verifier) UnversionedRemembered(apiKey string) (int, error) {
	return s.keys.RememberedSignatures(apiKey, unversionedDigestLen)
}

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
	// entries is the gauge of len(seen); nil: not measured.
	entries prometheus.Gauge
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
	defer func() {
		if g.entries != nil {
			g.entries.Set(float64(len(g.seen)))
		}
	}()
	if t, ok := g.seen[key]; ok && t.After(now) {
		return ErrReplayed
	}
	if len(g.seen) >= g.max || g.byKey[apiKey] >= g.perKey {
		return ErrReplayFull
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
