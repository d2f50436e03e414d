package console

import (
	"cmp"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/caller"
	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/api/rest"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
)

// The console's live stream (GET /ui/stream, Server-Sent Events). One hub
// per Door reads the event log every streamInterval while anyone is
// subscribed, and merges what changed into each subscriber's pending
// update: the current records of the devices the new events name (at most
// streamMaxDevices, else more=true and the page refetches its table), the
// newest streamMaxEvents events, the device counts, and the IDs of the
// rollouts whose progress the new events record (at most
// streamMaxRollouts, else rollouts_more=true): a rollout's page refetches
// it from REST when its ID comes, so its progress reaches the page even
// when a storm of device events pushes the rollout.* events themselves out
// of the newest 50. A subscriber's
// handler sends its pending update at most once per streamInterval; while
// it is slow to write, new changes merge into the pending update instead of
// queueing, so memory per subscriber stays bounded however loud the storm.
// Each subscriber sees what REST shows its key: a user key only the devices
// of its account's clusters and the events REST's listEvents keeps.

const (
	streamInterval   = 500 * time.Millisecond
	streamKeepalive  = 15 * time.Second
	streamMaxDevices = 500
	streamMaxEvents  = 50
	// streamMaxRollouts bounds the rollout IDs an update names.
	streamMaxRollouts = 100
	// streamMaxLoads bounds the device records read per poll; past it every
	// subscriber is told more=true (refetch) instead.
	streamMaxLoads = 2000
)

// streamHub is the one poller of the event log for every subscriber.
type streamHub struct {
	s *Door
	// pollMu is held through a poll, so a subscriber joins between polls
	// and misses nothing after the last_seq of its hello.
	pollMu  sync.Mutex
	mu      sync.Mutex
	subs    map[*streamSub]struct{}
	running bool // the poller goroutine is alive
	closed  bool
	done    chan struct{} // closed by Close: every stream ends
	lastSeq uint64        // the newest event polled
	// recent are the events already delivered within the store's late
	// window (lateEvents): on a store shared by several appliances an
	// event can appear a little below the newest read, so each poll reads
	// back that far and skips what it delivered.
	recent map[uint64]struct{}
	// servers whose Shutdown ends their streams (RegisterOnShutdown).
	servers map[*http.Server]bool
}

func newStreamHub(s *Door) *streamHub {
	return &streamHub{s: s, subs: map[*streamSub]struct{}{}, done: make(chan struct{}), servers: map[*http.Server]bool{}}
}

// streamSub is one connected stream: its filter and its pending update.
type streamSub struct {
	sid    sessionID
	cred   apikeys.Credential
	srv    *http.Server // the server the stream came through; nil unknown
	notify chan struct{}
	stop   chan struct{} // closed when the hub or the server ends the stream
	once   sync.Once

	mu      sync.Mutex
	pending streamUpdate
	dirty   bool
}

// streamUpdate is what a subscriber has not been sent yet.
type streamUpdate struct {
	lastSeq uint64
	devices map[string]core.Device
	more    bool
	events  []core.Event // newest streamMaxEvents, in seq order once trimmed
	counts  *client.DeviceCounts
	// rollouts are the rollouts whose progress was recorded (rollout.*
	// events); rolloutsMore says more than streamMaxRollouts were.
	rollouts     map[string]struct{}
	rolloutsMore bool
}

func (u *streamUpdate) addEvent(e core.Event) {
	u.events = append(u.events, e)
	if len(u.events) >= 2*streamMaxEvents {
		u.trimEvents()
	}
}

// trimEvents keeps the newest streamMaxEvents, oldest first. The two
// streams are read one after the other, so events arrive out of order.
func (u *streamUpdate) trimEvents() {
	slices.SortFunc(u.events, func(a, b core.Event) int { return cmp.Compare(a.Seq, b.Seq) })
	if n := len(u.events); n > streamMaxEvents {
		u.events = slices.Delete(u.events, 0, n-streamMaxEvents)
	}
}

func (u *streamUpdate) addDevice(d core.Device) {
	if u.devices == nil {
		u.devices = map[string]core.Device{}
	}
	if _, ok := u.devices[d.ID]; !ok && len(u.devices) >= streamMaxDevices {
		u.more = true
		return
	}
	u.devices[d.ID] = d
}

func (u *streamUpdate) addRollout(id string) {
	if u.rollouts == nil {
		u.rollouts = map[string]struct{}{}
	}
	if _, ok := u.rollouts[id]; !ok && len(u.rollouts) >= streamMaxRollouts {
		u.rolloutsMore = true
		return
	}
	u.rollouts[id] = struct{}{}
}

// rolloutOf is the rollout an event records the progress of ("" none):
// rollout.started, rollout.progress and any later rollout.* event that
// names its rollout.
func rolloutOf(e core.Event) string {
	if !strings.HasPrefix(e.Type, "rollout.") {
		return ""
	}
	return e.Fields["rollout"]
}

func (u *streamUpdate) empty() bool {
	return len(u.devices) == 0 && len(u.events) == 0 && !u.more && len(u.rollouts) == 0 && !u.rolloutsMore
}

// merge folds a poll's update into the pending one.
func (u *streamUpdate) merge(v streamUpdate) {
	u.lastSeq = max(u.lastSeq, v.lastSeq)
	u.more = u.more || v.more
	for _, d := range v.devices {
		u.addDevice(d)
	}
	for _, e := range v.events {
		u.addEvent(e)
	}
	u.trimEvents()
	u.rolloutsMore = u.rolloutsMore || v.rolloutsMore
	for id := range v.rollouts {
		u.addRollout(id)
	}
	if v.counts != nil {
		u.counts = v.counts
	}
}

func (sub *streamSub) end() { sub.once.Do(func() { close(sub.stop) }) }

// take returns the pending update and starts a new one.
func (sub *streamSub) take() (streamUpdate, bool) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if !sub.dirty {
		return streamUpdate{}, false
	}
	u := sub.pending
	sub.pending, sub.dirty = streamUpdate{lastSeq: u.lastSeq}, false
	return u, true
}

// subscribe adds sub, starting the poller when it is the first, and
// returns the sequence number the stream starts after.
func (h *streamHub) subscribe(sub *streamSub) (uint64, error) {
	h.pollMu.Lock()
	defer h.pollMu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return 0, core.Errorf(core.KindUnavailable, "the server is shutting down")
	}
	if !h.running {
		seq, err := h.s.latestSeq()
		if err != nil {
			return 0, err
		}
		h.lastSeq, h.running = seq, true
		go h.run()
	}
	if srv := sub.srv; srv != nil && !h.servers[srv] {
		h.servers[srv] = true
		srv.RegisterOnShutdown(func() { h.shutdown(srv) })
	}
	h.subs[sub] = struct{}{}
	return h.lastSeq, nil
}

func (h *streamHub) unsubscribe(sub *streamSub) {
	h.mu.Lock()
	delete(h.subs, sub)
	h.mu.Unlock()
}

// shutdown ends the streams served by srv (its Shutdown waits for them).
func (h *streamHub) shutdown(srv *http.Server) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for sub := range h.subs {
		if sub.srv == srv {
			sub.end()
		}
	}
}

// close ends every stream and the poller; later streams are refused.
func (h *streamHub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	close(h.done)
	for sub := range h.subs {
		sub.end()
	}
}

// Close ends the console's live streams and stops their poller. A server
// shutting down through http.Server.Shutdown ends the streams it serves
// by itself; Close is for the API going away while its listener stays.
func (s *Door) Close() {
	if s.hub != nil {
		s.hub.close()
	}
}

// run polls every streamInterval until no one is subscribed or the hub
// closes.
func (h *streamHub) run() {
	t := time.NewTicker(streamInterval)
	defer t.Stop()
	for {
		select {
		case <-h.done:
			return
		case <-t.C:
		}
		h.pollMu.Lock()
		h.mu.Lock()
		if len(h.subs) == 0 || h.closed {
			h.running = false
			h.mu.Unlock()
			h.pollMu.Unlock()
			return
		}
		all := slices.Collect(maps.Keys(h.subs))
		after := h.lastSeq
		h.mu.Unlock()
		// A stream ends within an interval of its session: signed out,
		// expired, or its key revoked.
		subs := all[:0]
		for _, sub := range all {
			if _, _, ok := h.s.sessionByID(sub.sid, false); ok {
				subs = append(subs, sub)
			} else {
				sub.end()
			}
		}
		last, err := h.poll(after, subs)
		if err != nil {
			h.s.log.Error("console stream: reading the event log", "err", err)
		}
		h.mu.Lock()
		h.lastSeq = last
		h.mu.Unlock()
		h.pollMu.Unlock()
	}
}

// streamView is one filter the poll serves: admins (own nil) or the
// subscribers of one account.
type streamView struct {
	scope  devices.Scope
	counts *client.DeviceCounts
}

// poll reads the events after seq after, merges each subscriber's share
// into its pending update and wakes it. It returns the newest sequence
// number read.
// lateEvents is a store whose events may appear up to LateWindow sequence
// numbers below the newest one (etcdstore: several appliances append).
type lateEvents interface{ LateWindow() uint64 }

func (h *streamHub) poll(after uint64, subs []*streamSub) (uint64, error) {
	s := h.s
	views := map[string]*streamView{} // by account; "" for admins
	viewOf := make([]*streamView, len(subs))
	for i, sub := range subs {
		key := ""
		if !sub.cred.IsAdmin() {
			key = "account:" + caller.Of(sub.cred).AccountName()
		}
		v := views[key]
		if v == nil {
			v = &streamView{scope: devices.AllScope}
			if key != "" {
				sc, err := s.queries.ScopeOf(caller.Of(sub.cred))
				if err != nil {
					return after, err
				}
				v.scope = sc
			}
			views[key] = v
		}
		viewOf[i] = v
	}
	updates := make([]streamUpdate, len(subs))
	changed := map[string]struct{}{}
	overflow := false
	last, read := after, 0
	from, window := after, uint64(0)
	if l, ok := s.st.(lateEvents); ok {
		window = l.LateWindow()
		from = after - min(after, window)
		if h.recent == nil {
			h.recent = map[uint64]struct{}{}
		}
	}
	err := s.queries.ReadScoped(devices.AllScope, func(r devices.Reader) error {
		for _, stream := range []core.EventStream{core.DeviceEvents, core.AuditEvents} {
			err := r.Events(stream, "", from, func(e core.Event) (bool, error) {
				if window > 0 {
					if _, done := h.recent[e.Seq]; done {
						return true, nil
					}
					h.recent[e.Seq] = struct{}{}
				}
				read++
				last = max(last, e.Seq)
				if e.Device != "" {
					if _, ok := changed[e.Device]; !ok {
						if len(changed) < streamMaxLoads {
							changed[e.Device] = struct{}{}
						} else {
							overflow = true
						}
					}
				}
				ro := rolloutOf(e)
				for i, v := range viewOf {
					// listEvents' filter for user keys.
					if v.scope.SeesEvent(e) {
						updates[i].addEvent(e)
						if ro != "" {
							updates[i].addRollout(ro)
						}
					}
				}
				return true, nil
			})
			if err != nil {
				return err
			}
		}
		ids := slices.Sorted(maps.Keys(changed))
		for _, id := range ids {
			d, err := r.DeviceByID(id)
			if errors.Is(err, core.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			for i, v := range viewOf {
				if v.scope.SeesDevice(d) {
					updates[i].addDevice(d)
				}
			}
		}
		return nil
	})
	if err != nil {
		return after, err
	}
	for seq := range h.recent {
		if seq+window < last {
			delete(h.recent, seq)
		}
	}
	if read == 0 {
		return last, nil
	}
	for i, sub := range subs {
		u := &updates[i]
		u.lastSeq = last
		u.more = u.more || overflow
		if u.empty() {
			continue
		}
		v := viewOf[i]
		if v.counts == nil {
			c, err := s.counts(v.scope.Clusters())
			if err != nil {
				return last, err
			}
			v.counts = &c
		}
		u.counts = v.counts
		sub.mu.Lock()
		sub.pending.merge(*u)
		sub.dirty = true
		sub.mu.Unlock()
		select {
		case sub.notify <- struct{}{}:
		default:
		}
	}
	return last, nil
}

// latestSeq is the newest event's sequence number (0 for an empty log).
func (s *Door) latestSeq() (uint64, error) {
	var seq uint64
	err := s.queries.ReadScoped(devices.AllScope, func(r devices.Reader) error {
		for _, stream := range []core.EventStream{core.DeviceEvents, core.AuditEvents} {
			err := r.EventsBackward(stream, "", 0, func(e core.Event) (bool, error) {
				seq = max(seq, e.Seq)
				return false, nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	return seq, err
}

// consoleStream serves GET /ui/stream to a signed-in console.
func (s *Door) consoleStream(c *gin.Context) {
	c.Set("op", "console.stream")
	r := c.Request
	if !sameOriginFetch(r) {
		s.metrics.authFailures.WithLabelValues("console", "cross_site").Inc()
		rest.Refuse(c, core.KindPermission, "cross-site request refused")
		return
	}
	id, ok := sessionIDOf(r)
	if !ok {
		sessionRefuse(c)
		return
	}
	_, cred, ok := s.sessionByID(id, true)
	if !ok {
		sessionRefuse(c)
		return
	}
	sub := &streamSub{sid: id, cred: cred, notify: make(chan struct{}, 1), stop: make(chan struct{})}
	sub.srv, _ = r.Context().Value(http.ServerContextKey).(*http.Server)
	seq, err := s.hub.subscribe(sub)
	if err != nil {
		s.fail(c, err)
		return
	}
	defer s.hub.unsubscribe(sub)

	w := c.Writer
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	buf := append([]byte("event: hello\ndata: {\"last_seq\":"), strconv.FormatUint(seq, 10)...)
	buf = append(buf, "}\n\n"...)
	if !streamSend(w, buf) {
		return
	}
	keepalive := time.NewTicker(streamKeepalive)
	defer keepalive.Stop()
	var sent time.Time
	for {
		select {
		case <-r.Context().Done():
			return
		case <-sub.stop:
			return
		case <-keepalive.C:
			if _, _, ok := s.sessionByID(id, false); !ok {
				return // signed out, expired or its key revoked
			}
			if !streamSend(w, []byte(": keepalive\n\n")) {
				return
			}
		case <-sub.notify:
			// At most one update per interval: what arrives meanwhile
			// merges into the pending one.
			if wait := streamInterval - time.Since(sent); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-r.Context().Done():
					t.Stop()
					return
				case <-sub.stop:
					t.Stop()
					return
				case <-t.C:
				}
			}
			if _, _, ok := s.sessionByID(id, false); !ok {
				return
			}
			u, ok := sub.take()
			if !ok {
				continue
			}
			msg, err := appendStreamUpdate(buf[:0], u)
			if err != nil {
				s.log.Error("console stream: encoding an update", "err", err)
				return
			}
			buf = msg
			if !streamSend(w, buf) {
				return
			}
			sent = time.Now()
		}
	}
}

// streamSend writes one SSE message and flushes it; false when the client
// is gone. The API listener's write timeout moves with each write
// (httpserve.LimitListener), so a stream lives as long as its client reads.
func streamSend(w gin.ResponseWriter, msg []byte) bool {
	if _, err := w.Write(msg); err != nil {
		return false
	}
	w.Flush()
	return true
}

// appendStreamUpdate appends u as an SSE update message.
func appendStreamUpdate(buf []byte, u streamUpdate) ([]byte, error) {
	buf = append(buf, "event: update\ndata: {\"last_seq\":"...)
	buf = strconv.AppendUint(buf, u.lastSeq, 10)
	buf = append(buf, `,"devices":[`...)
	var err error
	for i, id := range slices.Sorted(maps.Keys(u.devices)) {
		if i > 0 {
			buf = append(buf, ',')
		}
		if buf, err = rest.AppendDeviceView(buf, u.devices[id]); err != nil {
			return buf, err
		}
	}
	buf = append(buf, `],"more":`...)
	buf = strconv.AppendBool(buf, u.more)
	buf = append(buf, `,"events":[`...)
	u.trimEvents()
	for i, e := range u.events {
		if i > 0 {
			buf = append(buf, ',')
		}
		if buf, err = rest.AppendEventView(buf, e); err != nil {
			return buf, err
		}
	}
	buf = append(buf, `],"counts":`...)
	counts := u.counts
	if counts == nil {
		counts = &client.DeviceCounts{ByState: map[string]int{}, ByKind: map[string]int{}}
	}
	raw, err := json.Marshal(counts)
	if err != nil {
		return buf, err
	}
	buf = append(buf, raw...)
	buf = append(buf, `,"rollouts":`...)
	ids := slices.Sorted(maps.Keys(u.rollouts))
	if ids == nil {
		ids = []string{}
	}
	if raw, err = json.Marshal(ids); err != nil {
		return buf, err
	}
	buf = append(buf, raw...)
	buf = append(buf, `,"rollouts_more":`...)
	buf = strconv.AppendBool(buf, u.rolloutsMore)
	return append(buf, "}\n\n"...), nil
}
