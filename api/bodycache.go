package api

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/internal/httpserve"
)

// bodyCache keeps whole response bodies of read-only requests, each tagged
// with the data generation it was rendered at (see
// clusters.Service.ViewsGeneration). A body is served only to a request
// that read a generation no newer than the body's, so every answer holds
// every write that had completed when its request arrived: the same
// guarantee as rendering afresh. Concurrent requests for the same key and
// generation share one rendering. Only answers that every caller allowed
// to make the request may see in full belong here, keyed by everything the
// answer depends on (including the caller's key: see cacheKey).
type bodyCache struct {
	mu    sync.Mutex
	m     map[string]*bodyEntry
	bytes int // sum of cached body and key sizes
	// maxBytes bounds the cache; when a new body would pass it, the cache
	// starts over (cheaper than tracking recency, and rare).
	maxBytes int
	renders  atomic.Uint64 // renderings started (tests)
	// hits and rendered count answers shared and rendered (nil: not
	// counted).
	hits, rendered prometheus.Counter
}

type bodyEntry struct {
	gen  uint64
	done chan struct{} // closed once the rendering or err is set
	rendering
	err  error
	size int // bytes counted in bodyCache.bytes (set under bodyCache.mu)

	gzOnce sync.Once
	gz     []byte // body gzip-compressed, made on the first request that accepts it
}

// rendering is what a cached answer's build returns: the body and, when it
// was assembled from parts that keep their compressed form, how to gzip it
// from those (nil: the body is compressed whole, once).
type rendering struct {
	body []byte
	gzip func() []byte
}

// cachedBody is a cached answer and, for clients that accept it, its
// gzip form (see httpserve.WriteCachedJSON).
type cachedBody struct {
	raw     []byte
	gzipped func() []byte
}

func newBodyCache(maxBytes int) *bodyCache {
	return &bodyCache{m: map[string]*bodyEntry{}, maxBytes: maxBytes}
}

// get returns the body for key at generation gen (or newer), rendering it
// with build when there is none. Errors are handed to the requests waiting
// for that rendering but not kept.
func (c *bodyCache) get(key string, gen uint64, build func() ([]byte, error)) ([]byte, error) {
	b, err := c.getBody(key, gen, build)
	return b.raw, err
}

// getBody is get with the body's gzip form, compressed once per body.
func (c *bodyCache) getBody(key string, gen uint64, build func() ([]byte, error)) (cachedBody, error) {
	return c.getRendering(key, gen, func() (rendering, error) {
		b, err := build()
		return rendering{body: b}, err
	})
}

// getRendering is getBody for a build that knows how to gzip its body.
func (c *bodyCache) getRendering(key string, gen uint64, build func() (rendering, error)) (cachedBody, error) {
	e, err := c.entry(key, gen, build)
	if err != nil {
		return cachedBody{}, err
	}
	return cachedBody{raw: e.body, gzipped: func() []byte { return c.gzipped(key, e) }}, nil
}

// gzipped compresses e's body once and counts it in the cache's size.
func (c *bodyCache) gzipped(key string, e *bodyEntry) []byte {
	e.gzOnce.Do(func() {
		if e.gzip != nil {
			e.gz = e.gzip()
		} else {
			e.gz = httpserve.Gzip(e.body)
		}
		c.mu.Lock()
		if c.m[key] == e && e.size > 0 {
			e.size += len(e.gz)
			c.bytes += len(e.gz)
		}
		c.mu.Unlock()
	})
	return e.gz
}

func (c *bodyCache) entry(key string, gen uint64, build func() (rendering, error)) (*bodyEntry, error) {
	c.mu.Lock()
	if e := c.m[key]; e != nil && e.gen >= gen {
		c.mu.Unlock()
		if c.hits != nil {
			c.hits.Inc()
		}
		<-e.done
		return e, e.err
	}
	e := &bodyEntry{gen: gen, done: make(chan struct{})}
	if old := c.m[key]; old != nil {
		c.forget(key, old)
	}
	c.m[key] = e
	c.mu.Unlock()
	if c.rendered != nil {
		c.rendered.Inc()
	}
	c.renders.Add(1)

	finished := false
	defer func() {
		if !finished { // build panicked: waiters get an error, not a hang
			e.err = errRenderPanic
			c.drop(key, e)
			close(e.done)
		}
	}()
	e.rendering, e.err = build()
	finished = true
	if e.err != nil {
		c.drop(key, e)
	} else {
		c.keep(key, e)
	}
	close(e.done)
	return e, e.err
}

// keep counts e's body if e is still key's entry, starting over when the
// cache would grow past maxBytes.
func (c *bodyCache) keep(key string, e *bodyEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[key] != e {
		return
	}
	size := len(e.body) + len(key)
	if c.bytes+size > c.maxBytes {
		for k, old := range c.m {
			if old != e {
				c.forget(k, old)
			}
		}
		if size > c.maxBytes {
			delete(c.m, key)
			return
		}
	}
	e.size = size
	c.bytes += e.size
}

var errRenderPanic = errors.New("internal error: rendering the answer failed")

// drop removes e if it is still the entry for key.
func (c *bodyCache) drop(key string, e *bodyEntry) {
	c.mu.Lock()
	if c.m[key] == e {
		c.forget(key, e)
	}
	c.mu.Unlock()
}

// forget removes key's entry e. Called with mu held.
func (c *bodyCache) forget(key string, e *bodyEntry) {
	c.bytes -= e.size
	e.size = 0
	delete(c.m, key)
}
