// Package devices owns device records: how what each part learns about a
// device is merged into its record, the one write-behind queue through
// which DHCP and content serving record devices and events in group
// commits, the retention of the event log (events.keep,
// events.audit_keep) and of records of devices that never got past a lease
// (devices.unleased_expiry, devices.max_unleased), whatever transports are
// enabled. The one merge rule (merge.go: Merge, MergeKind) decides what a
// device's statements may change: they fill in, refine a kind, never
// replace an identity fact and never take a serial another device holds;
// a contradiction is an event.
//
// Parts report Facts and never merge or write device records themselves:
//   - the DHCP server hands what each lease exchange stated
//     (ObserveLease) and its events (Event), and carries queued records in
//     its own lease commits (Take, Batch.Write, Done), so a device's record
//     usually lands in the commit of its lease;
//   - content serving reports each fetch with what it stated (Progress);
//   - the joiner changes records inside its own transactions (Recorder),
//     merging what a join request states with Merge, so a membership and
//     its device commit together.
package devices

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/internal/core"
)

const (
	// LazyFlush bounds how long a record waits when no other commit
	// carries it.
	LazyFlush = 100 * time.Millisecond
	// commitEvery is the shortest time between two commits of the writer.
	commitEvery = 8 * time.Millisecond
	// Records per commit of the writer; a new device dirties a page of its
	// own (MACs are scattered keys), events are appended in key order.
	DeviceChunk = 512
	EventChunk  = 512
	// maxPendingEvents bounds events kept while the store is failing:
	// Event drops beyond it, Progress waits (backpressure).
	maxPendingEvents = 100000
	// lastSeenStep: a device whose state and facts did not change is
	// rewritten by a fetch only when its last-seen time is older than this,
	// so repeated fetches append events without rewriting device pages.
	lastSeenStep = 30 * time.Second
	// RetentionEvery paces event retention: often enough that a boot
	// storm's events are trimmed within minutes, rarely enough to cost
	// nothing.
	RetentionEvery = time.Minute
)

// Options configure a Service.
type Options struct {
	Store core.Store
	Log   *slog.Logger
	// Keep and AuditKeep bound the device and audit event streams
	// (events.keep, events.audit_keep); 0 keeps everything.
	Keep, AuditKeep int
	// UnleasedExpiry and MaxUnleased bound the records of devices that
	// never got past a released or expired lease (devices.unleased_expiry,
	// devices.max_unleased; see PruneDevices); 0 disables a bound.
	UnleasedExpiry time.Duration
	MaxUnleased    int
	// RetentionEvery overrides RetentionEvery (tests).
	RetentionEvery time.Duration
	// Registerer gets the package's metrics; nil keeps them unexported.
	Registerer prometheus.Registerer
}

// Service owns device records and the event log's retention.
type Service struct {
	store     core.Store
	log       *slog.Logger
	keep      [2]int // by core.EventStream
	retention time.Duration
	metrics   *metrics

	unleasedExpiry time.Duration
	maxUnleased    int

	mu       sync.Mutex
	changed  sync.Cond // signalled when records are committed or dropped (Flush, backpressure)
	byID     map[string]*item
	order    []*item // devices in the order they were first queued
	free     []*item // committed items, reused (tens of thousands a second under DHCP load)
	events   []core.Event
	inflight int       // batches taken and not Done
	oldest   time.Time // when the oldest queued record arrived
	flushing int       // Flush callers waiting: commit at once
	closed   bool

	kick chan struct{}
	quit chan struct{}
	done chan struct{}
	once sync.Once

	// states logs committed state changes at info (nil when info is off).
	states *stateLog

	conflictLogged time.Time // last log of contradicting statements (rate limit)
	conflictsQuiet int       // contradictions not logged since
}

// item is one device's pending changes, merged into its record in order.
type item struct {
	id      string
	lease   Lease // what lease exchanges stated (cumulative: a newer report replaces it)
	hasDHCP bool
	leased  bool
	steps   []Progress
}

// New starts the Service's writer; Close stops it.
func New(opt Options) *Service {
	s := &Service{store: opt.Store, log: opt.Log, retention: opt.RetentionEvery, metrics: newMetrics(opt.Registerer),
		unleasedExpiry: opt.UnleasedExpiry, maxUnleased: opt.MaxUnleased,
		byID: map[string]*item{}, kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.retention <= 0 {
		s.retention = RetentionEvery
	}
	s.keep[core.DeviceEvents], s.keep[core.AuditEvents] = opt.Keep, opt.AuditKeep
	s.changed.L = &s.mu
	s.states = newStateLog(s.log, s.metrics.stateLogDropped)
	go s.writer()
	return s
}

// Close commits what is queued and stops the writer. Call it before the
// store closes; records reported afterwards are not stored.
func (s *Service) Close() error {
	s.once.Do(func() {
		s.Flush()
		close(s.quit)
		<-s.done
		s.mu.Lock()
		s.closed = true
		s.changed.Broadcast()
		s.mu.Unlock()
		s.states.close()
	})
	return nil
}

// Lease is what the DHCP server reports about a client's device from the
// exchanges that granted or renewed its lease.
type Lease struct {
	// Device is the device's ID, its MAC address.
	Device string
	// Facts is what the exchanges stated (cumulative: the DHCP server
	// keeps the latest statement of each), Source SourceDHCP.
	Facts Facts
	// FirstSeen and LastSeen bound the exchanges.
	FirstSeen, LastSeen time.Time
	// New: the lease is new (the device advances to leased).
	New bool
}

// ObserveLease records a lease report, written behind and merged into the
// device's record by the one rule (Merge).
func (s *Service) ObserveLease(l Lease) {
	s.mu.Lock()
	it := s.itemLocked(l.Device)
	leased := it.leased || l.New
	it.lease, it.hasDHCP, it.leased = l, true, leased
	s.queuedLocked()
	s.mu.Unlock()
}

// ObserveDHCP is ObserveLease for a lease exchange told as the device it
// describes (d's kind its own statement): for callers that hold a device
// rather than a report (tests, simulations).
func (s *Service) ObserveDHCP(d core.Device, leased bool) {
	s.ObserveLease(Lease{Device: d.ID, FirstSeen: d.FirstSeen, LastSeen: d.LastSeen, New: leased,
		Facts: FactsOf(&d, SourceDHCP)})
}

// Progress is one fetch of a device's content: what the request stated
// about the device, the state it reached and its event.
type Progress struct {
	// Device is the device as the request saw it (the record, or what
	// DHCP, the lease or a binding says of a device not stored yet): a
	// device without a record starts from it, a record lacking its facts
	// learns them (FactsOf, by the one rule). Written behind, it may be
	// older than the record by then: a fact that follows the device is
	// taken from it only where the record has none.
	Device core.Device
	// Facts is what the request stated (Source SourceContent), merged into
	// the record by the one rule; none for a request refused for them, or
	// one whose statements do not count (a VM's, known by its address).
	Facts   Facts
	Profile string
	// Next is the state the fetch moves the device to; "" records only the
	// event (a refused request).
	Next core.DeviceState
	// Refusal, for a refused request of a device that holds its address,
	// is kept on its record (core.Device.Refusal, created if need be)
	// until a later fetch is served.
	Refusal core.Refusal
	// Event is appended; its Fields get "state" when Next or Refusal is
	// set.
	Event core.Event
}

// Progress records a fetch, written behind. When too many events wait (the
// store failing), it waits for room rather than dropping the record.
func (s *Service) Progress(p Progress) {
	s.mu.Lock()
	for len(s.events) >= maxPendingEvents && !s.closed {
		s.changed.Wait()
	}
	if p.Next != "" || p.Refusal.Refused() {
		it := s.itemLocked(p.Device.ID)
		it.steps = append(it.steps, p)
	} else {
		s.events = append(s.events, p.Event)
	}
	s.queuedLocked()
	s.mu.Unlock()
}

// Event appends e to the event log, written behind; beyond the bound of
// waiting events it is dropped and counted (DHCP must not block).
func (s *Service) Event(e core.Event) {
	s.mu.Lock()
	if len(s.events) >= maxPendingEvents {
		s.mu.Unlock()
		s.metrics.eventsDropped.Inc()
		return
	}
	s.events = append(s.events, e)
	s.queuedLocked()
	s.mu.Unlock()
}

// Events is Event for several, under one lock.
func (s *Service) Events(es []core.Event) {
	s.mu.Lock()
	n := min(len(es), max(0, maxPendingEvents-len(s.events)))
	s.events = append(s.events, es[:n]...)
	if len(es) > 0 {
		s.queuedLocked()
	}
	s.mu.Unlock()
	if n < len(es) {
		s.metrics.eventsDropped.Add(float64(len(es) - n))
	}
}

func (s *Service) itemLocked(id string) *item {
	it := s.byID[id]
	if it == nil {
		if n := len(s.free); n > 0 {
			it, s.free = s.free[n-1], s.free[:n-1]
			it.id = id
		} else {
			it = &item{id: id}
		}
		s.byID[id] = it
		s.order = append(s.order, it)
	}
	return it
}

// queuedLocked notes new records: the writer commits them within
// LazyFlush, or at once when a commit's worth is waiting.
func (s *Service) queuedLocked() {
	if s.oldest.IsZero() {
		s.oldest = time.Now()
		s.wake()
	} else if len(s.order) >= DeviceChunk || len(s.events) >= EventChunk {
		s.wake()
	}
}

func (s *Service) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Flush waits until every record reported so far is committed (or
// dropped).
func (s *Service) Flush() {
	s.mu.Lock()
	s.flushing++
	s.wake()
	for (len(s.order) > 0 || len(s.events) > 0 || s.inflight > 0) && !s.closed {
		s.changed.Wait()
	}
	s.flushing--
	s.mu.Unlock()
}

// Batch is records taken for one commit.
type Batch struct {
	items  []*item
	events []core.Event
	now    time.Time
	// states and trans: the state changes Write made, logged once the
	// batch is committed (Done).
	states *stateLog
	trans  []transition
	// conflicts: the contradictions Write recorded, logged once the batch
	// is committed (Done).
	conflicts []core.Event
	// factConflicts counts them (the Service's metric, set by Take).
	factConflicts *prometheus.CounterVec
}

// Len is the number of device and event records in b.
func (b *Batch) Len() int { return len(b.items) + len(b.events) }

// Take moves up to maxDevices device records and maxEvents events into b
// (reusing its slices) for a commit the caller runs: b.Write in the
// transaction, then Done. It reports whether records are left.
func (s *Service) Take(b *Batch, maxDevices, maxEvents int) (more bool) {
	b.items, b.events = b.items[:0], b.events[:0]
	b.now = time.Now().UTC()
	b.states, b.factConflicts = s.states, s.metrics.factConflicts
	s.mu.Lock()
	defer s.mu.Unlock()
	n := min(len(s.order), maxDevices)
	for _, it := range s.order[:n] {
		delete(s.byID, it.id)
		b.items = append(b.items, it)
	}
	s.order = dropFront(s.order, n)
	n = min(len(s.events), maxEvents)
	b.events = append(b.events, s.events[:n]...)
	s.events = dropFront(s.events, n)
	if b.Len() > 0 {
		s.inflight++
	}
	more = len(s.order) > 0 || len(s.events) > 0
	if !more {
		s.oldest = time.Time{}
	}
	s.metrics.queued.Set(float64(len(s.order) + len(s.events)))
	return more
}

// dropFront removes the first n elements, keeping the backing array.
func dropFront[T any](q []T, n int) []T {
	m := copy(q, q[n:])
	clear(q[m:])
	return q[:m]
}

// Write applies b in tx: each device's changes merged into its record, then
// the events appended. It may run more than once (Store.Batch).
func (b *Batch) Write(tx core.Tx) error {
	b.trans = b.trans[:0] // a retried commit starts over
	b.conflicts = b.conflicts[:0]
	for _, it := range b.items {
		if err := it.write(tx, b.now, b); err != nil {
			return err
		}
	}
	for i := range b.events {
		if _, err := tx.Events().Append(b.events[i]); err != nil {
			return err
		}
	}
	return nil
}

// Done ends a Take: err nil means b is committed. Otherwise each of its
// records is committed on its own: one the store refuses is logged and
// dropped, one that fails for I/O (a full disk) is queued again.
func (s *Service) Done(b *Batch, err error) {
	if b.Len() == 0 {
		return
	}
	if err != nil {
		s.writeApart(b, err)
	} else {
		s.states.add(b.trans)
		s.logConflicts(b.conflicts)
	}
	clear(b.conflicts)
	b.conflicts = b.conflicts[:0]
	clear(b.trans)
	b.trans = b.trans[:0]
	s.mu.Lock()
	if err == nil && len(s.free) < DeviceChunk {
		for _, it := range b.items {
			clear(it.steps)
			*it = item{steps: it.steps[:0]}
			s.free = append(s.free, it)
		}
	}
	s.inflight--
	s.changed.Broadcast()
	s.mu.Unlock()
}

// Return ends a Take whose commit failed without trying its records one by
// one (the store cannot write at all, e.g. a full disk): they go back to
// the front of the queue for a later commit.
func (s *Service) Return(b *Batch) {
	if b.Len() == 0 {
		return
	}
	s.requeue(b)
	s.mu.Lock()
	s.inflight--
	s.changed.Broadcast()
	s.mu.Unlock()
}

func (s *Service) writeApart(b *Batch, cause error) {
	dropped := 0
	var retry Batch
	one := &Batch{now: b.now, states: b.states, factConflicts: b.factConflicts}
	for _, it := range b.items {
		one.items, one.events = []*item{it}, nil
		if err := s.store.Batch(one.Write); err != nil {
			if isIOError(err) {
				retry.items = append(retry.items, it)
				continue
			}
			dropped++
			s.metrics.recordErrors.Inc()
			s.log.Error("device record cannot be stored; dropped", "device", it.id, "err", err)
			continue
		}
		s.states.add(one.trans)
	}
	one.items = nil
	for i := range b.events {
		one.events = b.events[i : i+1]
		if err := s.store.Batch(one.Write); err != nil {
			if isIOError(err) {
				retry.events = append(retry.events, b.events[i])
				continue
			}
			dropped++
			s.metrics.recordErrors.Inc()
			s.log.Error("event record cannot be stored; dropped", "type", b.events[i].Type, "err", err)
		}
	}
	if retry.Len() > 0 {
		s.requeue(&retry)
	}
	s.log.Warn("group commit of device records failed; records committed one by one", "err", cause,
		"dropped", dropped, "requeued", retry.Len())
}

// requeue puts records back at the front of the queue, merged with what
// arrived for the same devices meanwhile.
func (s *Service) requeue(b *Batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var front []*item
	for _, it := range b.items {
		if cur := s.byID[it.id]; cur != nil {
			// Newer changes queued meanwhile apply after the old ones.
			if cur.hasDHCP {
				it.lease, it.hasDHCP = cur.lease, true
			}
			it.leased = it.leased || cur.leased
			it.steps = append(it.steps, cur.steps...)
			*cur = *it
			continue
		}
		s.byID[it.id] = it
		front = append(front, it)
	}
	s.order = append(front, s.order...)
	if room := maxPendingEvents - len(s.events); room > 0 {
		s.events = append(b.events[:min(room, len(b.events)):min(room, len(b.events))], s.events...)
	}
	if s.oldest.IsZero() {
		s.oldest = time.Now()
	}
}

// isIOError reports whether err comes from the file system (a full disk, an
// I/O error) rather than from the record itself.
func isIOError(err error) bool {
	var errno syscall.Errno
	var pe *fs.PathError
	return errors.As(err, &errno) || errors.As(err, &pe)
}

// writer commits what no other commit carried: within LazyFlush of its
// arrival, at once when a commit's worth is waiting or on Flush.
func (s *Service) writer() {
	defer close(s.done)
	tick := time.NewTicker(LazyFlush / 4)
	defer tick.Stop()
	b := &Batch{}
	var last time.Time
	for {
		select {
		case <-s.quit:
			return
		case <-s.kick:
		case <-tick.C:
		}
		for {
			s.mu.Lock()
			due := len(s.order) > 0 || len(s.events) > 0
			urgent := s.flushing > 0 || len(s.order) >= DeviceChunk || len(s.events) >= EventChunk
			due = due && (urgent || time.Since(s.oldest) >= LazyFlush)
			s.mu.Unlock()
			if !due {
				break
			}
			if since := time.Since(last); since < commitEvery {
				time.Sleep(commitEvery - since)
			}
			last = time.Now()
			s.Take(b, DeviceChunk, EventChunk)
			s.Done(b, s.store.Batch(b.Write))
		}
	}
}

// write merges it into its device's record; a change of its state is
// noted in b for the log.
func (it *item) write(tx core.Tx, now time.Time, b *Batch) error {
	cur, err := tx.Devices().Get(it.id)
	had := err == nil
	if err != nil && !errors.Is(err, core.ErrNotFound) {
		return err
	}
	logged := b != nil && b.states != nil
	// changed notes a change of state for the log, with what caused it.
	changed := func(from core.DeviceState, event, reason string) {
		if logged && cur.State != from {
			b.trans = append(b.trans, transition{device: it.id, from: from, to: cur.State, ip: cur.IP,
				cluster: clusterName(tx, cur.Cluster), event: event, reason: reason})
		}
	}
	dirty := false
	var conf conflicts
	if b != nil {
		conf.counted = b.factConflicts
	}
	serial := cur.Serial // what the record held: a serial stated now is settled below
	if it.hasDHCP {
		from := cur.State
		mergeLease(&cur, had, &it.lease, it.leased, &conf)
		had, dirty = true, true
		changed(from, "dhcp", "lease acknowledged")
	}
	for i := range it.steps {
		p := &it.steps[i]
		from := cur.State
		ch := mergeProgress(&cur, had, p, &conf)
		had, dirty = true, dirty || ch
		if p.Event.Fields == nil {
			p.Event.Fields = map[string]string{}
		}
		p.Event.Fields["state"] = string(cur.State)
		if logged && cur.State != from {
			reason := ""
			if p.Profile != "" {
				reason = "profile " + p.Profile
			}
			changed(from, p.Event.Type, reason)
		}
	}
	if dirty {
		if err := settleSerial(tx, &cur, serial, now, &conf); err != nil {
			return err
		}
		if it.hasDHCP {
			cur.UpdatedAt = now
		}
		if err := tx.Devices().Put(cur); err != nil {
			return err
		}
	}
	for i := range it.steps {
		if _, err := tx.Events().Append(it.steps[i].Event); err != nil {
			return err
		}
	}
	for i := range conf.events {
		if _, err := tx.Events().Append(conf.events[i]); err != nil {
			return err
		}
	}
	if b != nil {
		b.conflicts = append(b.conflicts, conf.events...)
	}
	return nil
}

// mergeLease folds a lease report into the stored device, keeping what
// other parts set (approval, cluster, profile, labels, later states): its
// facts by the one rule (a contradiction is noted in conf, the record
// kept).
func mergeLease(cur *core.Device, had bool, l *Lease, leased bool, conf *conflicts) {
	if !had {
		*cur = core.Device{ID: l.Device, FirstSeen: l.FirstSeen, State: core.StateDiscovered}
	}
	cur.MAC = l.Device
	conf.merge(cur, &l.Facts, l.LastSeen)
	if leased {
		cur.State = core.Advance(cur.State, core.StateLeased)
	}
	if cur.FirstSeen.IsZero() || (!l.FirstSeen.IsZero() && l.FirstSeen.Before(cur.FirstSeen)) {
		cur.FirstSeen = l.FirstSeen
	}
	if l.LastSeen.After(cur.LastSeen) {
		cur.LastSeen = l.LastSeen
	}
}

// mergeProgress applies one fetch to the record and reports whether it must
// be written.
func mergeProgress(cur *core.Device, had bool, p *Progress, conf *conflicts) bool {
	now := p.Event.Time
	if !had {
		// The serial of the view is settled as a statement of this merge.
		*cur = p.Device
		cur.State, cur.FirstSeen, cur.SerialConflict = core.StateDiscovered, now, nil
	}
	before := *cur
	seen := FactsOf(&p.Device, SourceContent).asViewOf(cur)
	conf.merge(cur, &seen, now)
	conf.merge(cur, &p.Facts, now)
	if p.Next != "" {
		cur.State = core.Advance(cur.State, p.Next)
		cur.Refusal = core.Refusal{} // served again
	}
	if p.Refusal.Refused() {
		cur.Refusal = p.Refusal
	}
	if p.Profile != "" {
		cur.Profile = p.Profile
	}
	if had && sameDevice(&before, cur) && now.Sub(cur.LastSeen) < lastSeenStep {
		return false
	}
	cur.LastSeen, cur.UpdatedAt = now, now
	return true
}

func sameDevice(a, b *core.Device) bool {
	return a.State == b.State && a.Kind == b.Kind && a.Serial == b.Serial && a.Product == b.Product &&
		a.Platform == b.Platform && a.SONiCVer == b.SONiCVer && a.IP == b.IP && a.Profile == b.Profile &&
		a.Refusal.What == b.Refusal.What && a.Refusal.Kind == b.Refusal.Kind && a.Refusal.Reason == b.Refusal.Reason
}

// Name implements the app's Runner: the Service's long-running part is
// retention of events and unleased device records.
func (s *Service) Name() string { return "event-retention" }

// Run keeps each event stream within its bound, and the records of
// devices that never got past a lease within theirs, until ctx ends:
// device noise never evicts the audit trail, and whatever transports run
// (DHCP or not) the log and the device records stay bounded.
func (s *Service) Run(ctx context.Context) error {
	t := time.NewTicker(s.retention)
	defer t.Stop()
	for {
		s.Prune(ctx)
		s.PruneDevices(ctx, time.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Prune trims each stream to its bound now, in bounded transactions.
func (s *Service) Prune(ctx context.Context) {
	for _, st := range []struct {
		stream core.EventStream
		name   string
	}{{core.DeviceEvents, "device"}, {core.AuditEvents, "audit"}} {
		keep := s.keep[st.stream]
		if keep <= 0 {
			continue
		}
		for more := true; more && ctx.Err() == nil; {
			var n int
			err := s.store.Update(func(tx core.Tx) error {
				var err error
				n, more, err = tx.Events().Prune(st.stream, keep)
				return err
			})
			if err != nil {
				s.log.Warn("pruning events failed", "stream", st.name, "err", err)
				break
			}
			s.metrics.eventsPruned.WithLabelValues(st.name).Add(float64(n))
		}
	}
}

// conflictLogEvery rate-limits the log of contradicting statements: a
// device (or an attacker quoting one) can repeat them at will; each is an
// event and counted (ztpd_device_fact_conflicts_total) anyway.
const conflictLogEvery = 10 * time.Second

// logConflicts logs committed contradictions at info, at most one line
// every conflictLogEvery with the count of those not logged.
func (s *Service) logConflicts(evs []core.Event) {
	if len(evs) == 0 {
		return
	}
	s.mu.Lock()
	now := time.Now()
	if now.Sub(s.conflictLogged) < conflictLogEvery {
		s.conflictsQuiet += len(evs)
		s.mu.Unlock()
		return
	}
	s.conflictLogged = now
	quiet := s.conflictsQuiet
	s.conflictsQuiet = 0
	s.mu.Unlock()
	e := evs[0]
	s.log.Info("a device statement contradicts a record; the record is kept", "device", e.Device, "event", e.Type,
		"reason", e.Message, "more", len(evs)-1+quiet)
}
