package content

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// deviceCache reads device records through a core.DecodeCache: never
// stale, decoded only when the stored bytes changed. Cached devices are
// shared and must be treated as read-only (copy before changing Labels).
type deviceCache struct {
	core.DecodeCache[core.Device]
}

func (c *deviceCache) get(tx core.Tx, id string) (core.Device, error) {
	d, ok, err := c.Get(tx, core.BucketDevices, id)
	if err == nil && !ok {
		err = fmt.Errorf("device %s: %w", id, core.ErrNotFound)
	}
	return d, err
}

// bySerial follows the serial-number index maintained by core.PutDevice.
func (c *deviceCache) bySerial(tx core.Tx, serial string) (core.Device, error) {
	raw, err := core.RawGet(tx, core.BucketIndex, "serial/"+serial)
	if err != nil {
		return core.Device{}, err
	}
	if raw == nil {
		return core.Device{}, fmt.Errorf("device with serial %q: %w", serial, core.ErrNotFound)
	}
	var id string
	if err := json.Unmarshal(raw, &id); err != nil {
		return core.Device{}, fmt.Errorf("corrupt serial index %q: %w", serial, err)
	}
	return c.get(tx, id)
}

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
