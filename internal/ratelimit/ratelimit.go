// Package ratelimit holds the one per-key limiter that keeps what a
// stranger can trigger (refusals, drops, unknown clients) from flooding the
// log or the event trail: a token bucket per key, bounded in keys.
package ratelimit

import (
	"sync"
	"time"
)

// Keyed lets through, per key, burst events at once and then one
// every interval (a token bucket per key). It remembers at most maxKeys
// keys: when full, it forgets the keys whose bucket has refilled, and if
// none has, all of them (a flood of new keys must not grow it).
type Keyed struct {
	burst    float64
	interval time.Duration
	maxKeys  int

	mu sync.Mutex
	m  map[string]*keyBucket
}

type keyBucket struct {
	tokens     float64
	last       time.Time
	suppressed int
}

// New returns a limiter of burst events per key, refilled one
// every interval.
func New(burst int, interval time.Duration, maxKeys int) *Keyed {
	return &Keyed{burst: float64(max(burst, 1)), interval: interval, maxKeys: max(maxKeys, 1), m: map[string]*keyBucket{}}
}

// Allow reports whether key may have an event at now and, when it may, how
// many of its events were refused since its last allowed one.
func (k *Keyed) Allow(key string, now time.Time) (ok bool, suppressed int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	b := k.m[key]
	if b == nil {
		if len(k.m) >= k.maxKeys {
			k.sweep(now)
		}
		b = &keyBucket{tokens: k.burst, last: now}
		k.m[key] = b
	}
	if el := now.Sub(b.last); el > 0 {
		b.tokens = min(k.burst, b.tokens+float64(el)/float64(k.interval))
		b.last = now
	}
	if b.tokens < 1 {
		b.suppressed++
		return false, 0
	}
	b.tokens--
	suppressed, b.suppressed = b.suppressed, 0
	return true, suppressed
}

// Len is the number of keys remembered.
func (k *Keyed) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.m)
}

func (k *Keyed) sweep(now time.Time) {
	full := time.Duration(k.burst * float64(k.interval))
	for key, b := range k.m {
		if now.Sub(b.last) >= full && b.suppressed == 0 {
			delete(k.m, key)
		}
	}
	if len(k.m) >= k.maxKeys {
		clear(k.m)
	}
}
