// Package bodycache keeps whole rendered API answers by the data generation
// they were rendered at, shared by every door that serves cacheable reads.
package bodycache

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/internal/httpserve"
)

// Cache keeps whole response bodies of read-only requests, each tagged
// with the data generation it was rendered at (see
// clusters.Service.ViewsGeneration). A body is served only to a request
// that read a generation no newer than the body's, so every answer holds
// every write that had completed when its request arrived: the same
// guarantee as rendering afresh. Concurrent requests for the same key and
// generation share one rendering. Only answers that every caller allowed
// to make the request may see in full belong here, keyed by everything the
// answer depends on (including the caller's key: see Key).
type Cache struct {
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
	Rendering
	err  error
	size int // bytes counted in Cache.bytes (set under Cache.mu)

	gzOnce sync.Once
	gz     []byte // body gzip-compressed, made on the first request that accepts it
}

// Rendering is what a cached answer's build returns: the body and, when it
// was assembled from parts that keep their compressed form, how to gzip it
// from those (nil: the body is compressed whole, once).
type Rendering struct {
	Body []byte
	Gzip func() []byte
}

// Body is a cached answer and, for clients that accept it, its
// gzip form (see httpserve.WriteCachedJSON).
type Body struct {
	Raw     []byte
	Gzipped func() []byte
}

// New is an empty cache that holds at most maxBytes of bodies and keys;
// hits and rendered count answers shared and rendered (nil: not counted).
func New(maxBytes int, hits, rendered prometheus.Counter) *Cache {
	return &Cache{m: map[string]*bodyEntry{}, maxBytes: maxBytes, hits: hits, rendered: rendered}
}

// Get returns the body for key at generation gen (or newer), rendering it
// with build when there is none. Errors are handed to the requests waiting
// for that rendering but not kept.
func (c *Cache) Get(key string, gen uint64, build func() ([]byte, error)) ([]byte, error) {
	b, err := c.GetBody(key, gen, build)
	return b.Raw, err
}

// GetBody is Get with the body's gzip form, compressed once per body.
func (c *Cache) GetBody(key string, gen uint64, build func() ([]byte, error)) (Body, error) {
	return c.GetRendering(key, gen, func() (Rendering, error) {
		b, err := build()
		return Rendering{Body: b}, err
	})
}

// GetRendering is GetBody for a build that knows how to gzip its body.
func (c *Cache) GetRendering(key string, gen uint64, build func() (Rendering, error)) (Body, error) {
	e, err := c.entry(key, gen, build)
	if err != nil {
		return Body{}, err
	}
	return Body{Raw: e.Body, Gzipped: func() []byte { return c.gzipped(key, e) }}, nil
}

// gzipped compresses e's body once and counts it in the cache's size.
func (c *Cache) gzipped(key string, e *bodyEntry) []byte {
	e.gzOnce.Do(func() {
		if e.Gzip != nil {
			e.gz = e.Gzip()
		} else {
			e.gz = httpserve.Gzip(e.Body)
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

func (c *Cache) entry(key string, gen uint64, build func() (Rendering, error)) (*bodyEntry, error) {
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
	e.Rendering, e.err = build()
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
func (c *Cache) keep(key string, e *bodyEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m[key] != e {
		return
	}
	size := len(e.Body) + len(key)
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
func (c *Cache) drop(key string, e *bodyEntry) {
	c.mu.Lock()
	if c.m[key] == e {
		c.forget(key, e)
	}
	c.mu.Unlock()
}

// forget removes key's entry e. Called with mu held.
func (c *Cache) forget(key string, e *bodyEntry) {
	c.bytes -= e.size
	e.size = 0
	delete(c.m, key)
}

// Renders is how many renderings the cache has started.
func (c *Cache) Renders() uint64 { return c.renders.Load() }

// Key joins parts unambiguously (each length-prefixed), for a cache key
// made of everything an answer depends on.
func Key(parts ...string) string {
	n := 0
	for _, p := range parts {
		n += len(p) + 4
	}
	b := make([]byte, 0, n)
	for _, p := range parts {
		b = strconv.AppendInt(b, int64(len(p)), 10)
		b = append(b, ':')
		b = append(b, p...)
	}
	return string(b)
}
