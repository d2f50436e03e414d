package content

import (
	"sync"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// imageCache remembers image lookups by name for a moment: a profile's
// firmware image is resolved on every ztp.json, and images change rarely.
type imageCache struct {
	mu sync.Mutex
	m  map[string]cachedImage
}

type cachedImage struct {
	im core.Image
	at time.Time
}

const imageCacheTTL = 2 * time.Second

func (c *imageCache) resolve(images Images, ref string) (core.Image, error) {
	now := time.Now()
	c.mu.Lock()
	e, ok := c.m[ref]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < imageCacheTTL {
		return e.im, nil
	}
	im, err := images.Resolve(ref)
	if err != nil {
		return im, err
	}
	c.mu.Lock()
	if c.m == nil || len(c.m) > 1024 {
		c.m = map[string]cachedImage{}
	}
	c.m[ref] = cachedImage{im: im, at: now}
	c.mu.Unlock()
	return im, nil
}
