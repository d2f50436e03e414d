package content

import (
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/ztpd/ztpd/internal/core"
)

var (
	recordQueue = promauto.NewGauge(prometheus.GaugeOpts{
		Name: "ztpd_ztp_progress_queue", Help: "Device progress records waiting for their group commit.",
	})
	recordErrors = promauto.NewCounter(prometheus.CounterOpts{
		Name: "ztpd_ztp_progress_errors_total", Help: "Device progress records that could not be stored.",
	})
	refusedTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "ztpd_ztp_refused_total",
		Help: "ZTP content requests refused, by document and reason (no-holder, mismatch, bad-fact, no-profile, forbidden).",
	}, []string{"what", "reason"})
)

// refuseLogEvery is how often one address may log a refusal: a device that
// retries every few seconds is visible without flooding the log.
const refuseLogEvery = 30 * time.Second

// rateLimit lets one event per key through every refuseLogEvery.
type rateLimit struct {
	mu   sync.Mutex
	last map[netip.Addr]time.Time
}

func (l *rateLimit) allow(a netip.Addr, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.last[a]; ok && now.Sub(t) < refuseLogEvery {
		return false
	}
	if l.last == nil || len(l.last) >= 4096 {
		l.last = make(map[netip.Addr]time.Time) // bounded: forget everyone at once
	}
	l.last[a] = now
	return true
}

// record is one fetch to note: the device moves forward and an event is
// appended.
type record struct {
	c       Client
	dev     core.Device
	profile string
	next    core.DeviceState // "" = event only (refused requests)
	ev      core.Event
}

// recorder writes progress records in group commits, off the request path:
// a switch gets its document at render speed, and the store sees one
// transaction per batch of fetches instead of one fsync per request.
// Records are durable within one commit (milliseconds); a crash loses at
// most that window of progress, never content. When the queue is full the
// request waits (backpressure) rather than dropping a record.
type recorder struct {
	store   core.Store
	devices *deviceCache
	log     func(msg string, args ...any)
	queue   chan record
	done    chan struct{}
	once    sync.Once
	idle    sync.WaitGroup // records enqueued and not yet committed
}

const (
	recordQueueLen = 16384
	recordBatchMax = 256
	// lastSeenStep: a device record whose state and facts did not change is
	// rewritten only when its last-seen time is older than this, so repeated
	// fetches append events without rewriting device pages.
	lastSeenStep = 30 * time.Second
)

func newRecorder(store core.Store, devices *deviceCache, log func(string, ...any)) *recorder {
	r := &recorder{store: store, devices: devices, log: log, queue: make(chan record, recordQueueLen), done: make(chan struct{})}
	go r.loop()
	return r
}

func (r *recorder) add(rec record) {
	select {
	case <-r.done:
		return // shut down: nothing records any more
	default:
	}
	r.idle.Add(1)
	select {
	case r.queue <- rec:
	case <-r.done:
		r.idle.Done()
	}
	recordQueue.Set(float64(len(r.queue)))
}

// flush waits until every record added so far is committed.
func (r *recorder) flush() { r.idle.Wait() }

// close commits what is queued and stops the loop.
func (r *recorder) close() {
	r.once.Do(func() {
		r.flush()
		close(r.done)
	})
}

func (r *recorder) loop() {
	for {
		var first record
		select {
		case first = <-r.queue:
		case <-r.done:
			return
		}
		batch := []record{first}
	fill:
		for len(batch) < recordBatchMax {
			select {
			case rec := <-r.queue:
				batch = append(batch, rec)
			default:
				break fill
			}
		}
		recordQueue.Set(float64(len(r.queue)))
		if err := r.store.Batch(func(tx core.Tx) error { return r.apply(tx, batch) }); err != nil {
			// One bad record must not lose the others: retry them one by one.
			for _, rec := range batch {
				if err := r.store.Batch(func(tx core.Tx) error { return r.apply(tx, []record{rec}) }); err != nil {
					recordErrors.Inc()
					r.log("recording device progress failed", "device", rec.dev.ID, "event", rec.ev.Type, "err", err)
				}
			}
		}
		for range batch {
			r.idle.Done()
		}
	}
}

func (r *recorder) apply(tx core.Tx, batch []record) error {
	for i := range batch {
		rec := &batch[i]
		if rec.next != "" {
			state, err := r.advance(tx, rec)
			if err != nil {
				return err
			}
			rec.ev.Fields["state"] = string(state)
		}
		if _, err := core.AppendEvent(tx, rec.ev); err != nil {
			return err
		}
	}
	return nil
}

// advance applies one fetch to the device record and returns its state.
func (r *recorder) advance(tx core.Tx, rec *record) (core.DeviceState, error) {
	now := rec.ev.Time
	cur, err := r.devices.get(tx, rec.dev.ID)
	isNew := errors.Is(err, core.ErrNotFound)
	switch {
	case isNew:
		cur = rec.dev
		cur.State = core.StateDiscovered
		cur.FirstSeen = now
	case err != nil:
		return "", err
	}
	before := cur
	learn(&cur, &rec.c)
	cur.State = core.Advance(cur.State, rec.next)
	if rec.profile != "" {
		cur.Profile = rec.profile
	}
	if !isNew && sameDevice(&before, &cur) && now.Sub(cur.LastSeen) < lastSeenStep {
		return cur.State, nil
	}
	cur.LastSeen, cur.UpdatedAt = now, now
	return cur.State, core.PutDevice(tx, cur)
}

func sameDevice(a, b *core.Device) bool {
	return a.State == b.State && a.Kind == b.Kind && a.Serial == b.Serial && a.Product == b.Product &&
		a.Platform == b.Platform && a.SONiCVer == b.SONiCVer && a.IP == b.IP && a.Profile == b.Profile
}
