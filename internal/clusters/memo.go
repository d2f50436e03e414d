package clusters

import (
	"bytes"
	"sync"
	"sync/atomic"

	"github.com/ztpd/ztpd/internal/core"
)

// memo caches decoded records by key, valid only while the stored bytes are
// unchanged: every lookup compares the current raw value with the cached
// one, so a record changed by any writer (another part of ztpd, a restore)
// is decoded afresh and the cache can never serve stale data. It saves the
// JSON decoding that dominates listing clusters with many members.
type memo[T any] struct {
	mu  sync.Mutex
	m   map[string]memoEntry[T]
	max int
}

type memoEntry[T any] struct {
	raw []byte
	v   *T // shared: callers must not modify it
	gen uint64
}

// generation numbers every decode process-wide: equal generations mean the
// very same stored bytes, which lets views carry cheap fingerprints.
var generation atomic.Uint64

func newMemo[T any](max int) *memo[T] { return &memo[T]{m: map[string]memoEntry[T]{}, max: max} }

// decode returns raw decoded, from the cache when raw is what was cached,
// with the generation of that decode. raw may be store memory valid only
// during the transaction; it is copied.
func (c *memo[T]) decode(key string, raw []byte) (*T, uint64, error) {
	c.mu.Lock()
	e, ok := c.m[key]
	c.mu.Unlock()
	if ok && bytes.Equal(e.raw, raw) {
		return e.v, e.gen, nil
	}
	v := new(T)
	if err := core.Decode(raw, v); err != nil {
		return nil, 0, err
	}
	gen := generation.Add(1)
	c.mu.Lock()
	if len(c.m) >= c.max {
		clear(c.m) // bounded: start over rather than track recency
	}
	c.m[key] = memoEntry[T]{raw: bytes.Clone(raw), v: v, gen: gen}
	c.mu.Unlock()
	return v, gen, nil
}
