package kv

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/ztpd/ztpd/internal/core"
)

// CommitMetrics are a store's commit metrics, whichever engine it runs.
type CommitMetrics struct {
	commits prometheus.Counter
	batch   prometheus.Histogram
	seconds prometheus.Histogram
}

// NewCommitMetrics registers the commit metrics on reg (nil: kept, not
// exported).
func NewCommitMetrics(reg prometheus.Registerer) *CommitMetrics {
	f := promauto.With(reg)
	return &CommitMetrics{
		commits: f.NewCounter(prometheus.CounterOpts{
			Name: "ztpd_store_commits_total", Help: "Durable store commits.",
		}),
		batch: f.NewHistogram(prometheus.HistogramOpts{
			Name: "ztpd_store_batch_size", Help: "Callers joined per group commit.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024},
		}),
		seconds: f.NewHistogram(prometheus.HistogramOpts{
			Name: "ztpd_store_commit_seconds", Help: "Time to commit one transaction durably.",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 14),
		}),
	}
}

// ObserveCommit counts one durable commit of n callers that began at start.
func (m *CommitMetrics) ObserveCommit(n int, start time.Time) {
	m.commits.Inc()
	m.batch.Observe(float64(n))
	m.seconds.Observe(time.Since(start).Seconds())
}

// ErrTxnTooLarge is an engine's error for a transaction over its size
// limits (etcd's --max-txn-ops and --max-request-bytes): the group commits
// such a batch in halves.
var ErrTxnTooLarge = errors.New("transaction too large for the store")

// ErrClosed is the error of a Batch on a closed store.
var ErrClosed = errors.New("store is closed")

// CommitFunc runs fns, in order, in one write transaction of the engine and
// makes it durable. failed is the index of the fn that returned err, or -1
// when the commit itself failed (everyone hears err).
type CommitFunc func(fns []func(core.Tx) error) (failed int, err error)

// Group is the group committer both engines share (core.Store's Batch):
// one loop takes whatever callers are queued when it becomes free and
// commits them as one transaction. An idle store commits a lone caller at
// once and throughput grows with concurrency; only commits that run back
// to back wait a little for more callers (lingerMax).
type Group struct {
	commit   CommitFunc
	metrics  *CommitMetrics
	maxBatch int
	linger   time.Duration // lingerMax, longer in tests
	reqs     chan *batchReq
	quit     chan struct{}
	stopped  chan struct{} // closed once the loop has drained and returned
	wg       sync.WaitGroup
	stop     sync.Once
}

type batchReq struct {
	fn   func(core.Tx) error
	done chan error
}

// NewGroup starts the loop; maxBatch bounds callers per commit, and each
// commit is counted in metrics (nil: kept, not exported).
func NewGroup(maxBatch int, commit CommitFunc, metrics *CommitMetrics) *Group {
	return newGroup(maxBatch, commit, metrics, lingerMax)
}

func newGroup(maxBatch int, commit CommitFunc, metrics *CommitMetrics, linger time.Duration) *Group {
	if maxBatch <= 0 {
		maxBatch = 4096
	}
	if metrics == nil {
		metrics = NewCommitMetrics(nil)
	}
	g := &Group{commit: commit, metrics: metrics, maxBatch: maxBatch, linger: linger, reqs: make(chan *batchReq, maxBatch),
		quit: make(chan struct{}), stopped: make(chan struct{})}
	g.wg.Add(1)
	go g.loop()
	return g
}

// Batch queues fn for the next commit and waits for its outcome. On a
// closed group it returns ErrClosed: a caller racing Close never waits
// for a loop that has already returned.
func (g *Group) Batch(fn func(core.Tx) error) error {
	r := &batchReq{fn: fn, done: make(chan error, 1)}
	select {
	case <-g.quit:
		return ErrClosed
	default:
	}
	select {
	case g.reqs <- r:
	case <-g.quit:
		return ErrClosed
	}
	select {
	case err := <-r.done:
		return err
	case <-g.stopped:
		select { // drained before the loop stopped, or never seen
		case err := <-r.done:
			return err
		default:
			return ErrClosed
		}
	}
}

// Close commits what is queued and stops the loop.
func (g *Group) Close() {
	g.stop.Do(func() { close(g.quit) })
	g.wg.Wait()
}

// Lingering: when a commit ends with callers already queued, commits are
// running back to back, and the next one waits up to lingerMax for more
// callers (or until lingerFill are queued) before it starts. A commit's
// fixed cost (two fdatasyncs, the meta and branch pages) then carries more
// callers: in a boot storm, fewer commits for the same writes. A store
// that is not that busy commits a lone caller at once, as before.
const (
	lingerMax  = 2 * time.Millisecond
	lingerFill = 256
)

func (g *Group) loop() {
	defer g.wg.Done()
	defer close(g.stopped)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	busy := false
	for {
		var first *batchReq
		select {
		case first = <-g.reqs:
		case <-g.quit:
			g.drain()
			return
		}
		batch := []*batchReq{first}
	fill:
		for len(batch) < g.maxBatch {
			select {
			case r := <-g.reqs:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		if busy && len(batch) < min(lingerFill, g.maxBatch) {
			linger.Reset(g.linger)
		wait:
			for len(batch) < min(lingerFill, g.maxBatch) {
				select {
				case r := <-g.reqs:
					batch = append(batch, r)
				case <-linger.C:
					break wait
				case <-g.quit:
					break wait
				}
			}
			linger.Stop()
		}
		g.run(batch)
		busy = len(g.reqs) > 0
	}
}

func (g *Group) drain() {
	for {
		select {
		case r := <-g.reqs:
			g.run([]*batchReq{r})
		default:
			return
		}
	}
}

// run commits batch. A caller whose fn fails is taken out and run alone, so
// its error is its own and the others still commit.
func (g *Group) run(batch []*batchReq) {
	for len(batch) > 0 {
		fns := make([]func(core.Tx) error, len(batch))
		for i, r := range batch {
			fns[i] = r.fn
		}
		start := time.Now()
		failed, err := g.commit(fns)
		if err == nil {
			g.metrics.ObserveCommit(len(batch), start)
			for _, r := range batch {
				r.done <- nil
			}
			return
		}
		if failed < 0 && errors.Is(err, ErrTxnTooLarge) && len(batch) > 1 {
			mid := len(batch) / 2
			g.run(batch[:mid])
			g.run(batch[mid:])
			return
		}
		if failed < 0 { // the commit itself failed (disk full, quorum lost): everyone hears it
			for _, r := range batch {
				r.done <- err
			}
			return
		}
		bad := batch[failed]
		batch = append(batch[:failed:failed], batch[failed+1:]...)
		start = time.Now()
		if _, err := g.commit(fns[failed : failed+1]); err != nil {
			bad.done <- err
		} else {
			g.metrics.ObserveCommit(1, start)
			bad.done <- nil
		}
	}
}
