package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/kv"
)

// LeaseFeed is the leases bucket as a stream, for the DHCP servers of
// appliances sharing the store: Load reads every lease at one revision,
// Follow delivers every change after it in commit order, and CaughtUp
// tells when everything committed up to a revision has been delivered.
type LeaseFeed struct {
	s *Store

	mu       sync.Mutex
	applied  int64 // every change up to here has been delivered
	waiters  chan struct{}
	watchCtx context.Context // the running Follow's watch stream (progress requests go there)
}

// LeaseFeed returns the store's lease feed.
func (s *Store) LeaseFeed() *LeaseFeed { return &LeaseFeed{s: s, waiters: make(chan struct{})} }

func (f *LeaseFeed) advance(rev int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if rev > f.applied {
		f.applied = rev
		close(f.waiters)
		f.waiters = make(chan struct{})
	}
}

// Load visits every stored lease as of one revision and returns it.
func (f *LeaseFeed) Load(fn func(core.Lease)) (int64, error) {
	ctx, cancel := context.WithCancel(f.s.ctx)
	defer cancel()
	raw := f.s.newRaw(ctx, false)
	// The first read fixes the snapshot (an empty bucket still has one).
	if _, err := raw.Get(kv.BucketMeta, schemaKey); err != nil {
		return 0, err
	}
	bad := 0
	err := raw.Scan(kv.BucketLeases, "", func(k string, v []byte) (bool, error) {
		var l core.Lease
		if json.Unmarshal(v, &l) != nil {
			bad++
			return true, nil
		}
		fn(l)
		return true, nil
	})
	if err != nil {
		return 0, err
	}
	if bad > 0 {
		f.s.log.Warn("unreadable lease records skipped by the lease feed", "count", bad)
	}
	f.advance(raw.rev)
	return raw.rev, nil
}

// Follow calls fn for every lease written or deleted after rev, in commit
// order, until ctx ends or the feed loses its place (then it returns the
// error, and the caller loads again).
func (f *LeaseFeed) Follow(ctx context.Context, rev int64, fn func(l core.Lease, deleted bool)) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	f.mu.Lock()
	f.watchCtx = wctx
	f.mu.Unlock()
	prefix := f.s.key(kv.BucketLeases, "")
	wch := f.s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithProgressNotify())
	for resp := range wch {
		if err := resp.Err(); err != nil {
			return fmt.Errorf("lease feed: %w", err)
		}
		for _, ev := range resp.Events {
			ip := strings.TrimPrefix(string(ev.Kv.Key), prefix)
			if ev.Type == clientv3.EventTypeDelete {
				fn(core.Lease{IP: ip}, true)
				continue
			}
			var l core.Lease
			if json.Unmarshal(ev.Kv.Value, &l) != nil {
				continue
			}
			fn(l, false)
		}
		f.advance(resp.Header.Revision)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("lease feed: watch ended")
}

// CaughtUp returns once every change up to rev has been delivered by the
// running Follow (asking etcd for a progress notification meanwhile).
func (f *LeaseFeed) CaughtUp(ctx context.Context, rev int64) error {
	for {
		f.mu.Lock()
		done, wait, wctx := f.applied >= rev, f.waiters, f.watchCtx
		f.mu.Unlock()
		if done {
			return nil
		}
		if wctx != nil && wctx.Err() == nil {
			_ = f.s.cli.RequestProgress(wctx)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lease feed at revision %d, not yet at %d: %w", f.applied, rev, ctx.Err())
		case <-wait:
		case <-time.After(100 * time.Millisecond):
		}
	}
}
