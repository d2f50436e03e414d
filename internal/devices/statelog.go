package devices

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/ratelimit"
)

// Every change of a device's state is logged at info once it is committed:
// by the writer (or DHCP's committer) after its group commit, and for the
// joiner's changes after its transaction commits (Service.Store). The lines
// are written by a goroutine of their own, so a commit (and the DHCP ACKs
// waiting for it) never waits for the log, and each device gets at most
// stateLogBurst lines at once, then one every stateLogEvery (states only
// advance, but joined and not-ready can flap): the next line says how many
// were left out.

const (
	stateLogBurst = 10
	stateLogEvery = 30 * time.Second
	// stateLogKeys bounds the devices the limiter remembers.
	stateLogKeys = 65536
	// stateLogQueue bounds the changes waiting for the logger; beyond it
	// they are counted, not logged.
	stateLogQueue = 1 << 17
)

// transition is one committed change of a device's state.
type transition struct {
	device   string
	from, to core.DeviceState
	ip       string
	cluster  string // the cluster's name (its ID if it has none)
	event    string // the event that came with the change, e.g. ztp.json.served
	reason   string // the event's message, or the profile served
}

// stateLog writes transitions at info.
type stateLog struct {
	log   *slog.Logger
	limit *ratelimit.Keyed
	// droppedTotal counts the changes left out because the log could not
	// keep up.
	droppedTotal prometheus.Counter

	mu      sync.Mutex
	queue   []transition
	dropped int
	kick    chan struct{}
	quit    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// newStateLog returns nil when info is not logged: then nothing is
// collected at all.
func newStateLog(log *slog.Logger, droppedTotal prometheus.Counter) *stateLog {
	if !log.Enabled(context.Background(), slog.LevelInfo) {
		return nil
	}
	l := &stateLog{log: log, droppedTotal: droppedTotal, limit: ratelimit.New(stateLogBurst, stateLogEvery, stateLogKeys),
		kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go l.run()
	return l
}

// add queues committed transitions for the logger.
func (l *stateLog) add(ts []transition) {
	if l == nil || len(ts) == 0 {
		return
	}
	l.mu.Lock()
	n := min(len(ts), max(0, stateLogQueue-len(l.queue)))
	l.queue = append(l.queue, ts[:n]...)
	l.dropped += len(ts) - n
	l.mu.Unlock()
	if n < len(ts) {
		l.droppedTotal.Add(float64(len(ts) - n))
	}
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

func (l *stateLog) run() {
	defer close(l.done)
	var batch []transition
	for {
		select {
		case <-l.kick:
		case <-l.quit:
			l.drain(&batch)
			return
		}
		l.drain(&batch)
	}
}

// drain logs what is queued.
func (l *stateLog) drain(batch *[]transition) {
	l.mu.Lock()
	*batch, l.queue = l.queue, (*batch)[:0]
	dropped := l.dropped
	l.dropped = 0
	l.mu.Unlock()
	if dropped > 0 {
		l.log.Warn("device state changes not logged: the log could not keep up", "count", dropped)
	}
	now := time.Now()
	for i := range *batch {
		t := &(*batch)[i]
		ok, suppressed := l.limit.Allow(t.device, now)
		if !ok {
			continue
		}
		attrs := make([]any, 0, 18)
		attrs = append(attrs, "device", t.device, "from", stateName(t.from), "to", string(t.to))
		if t.ip != "" {
			attrs = append(attrs, "ip", t.ip)
		}
		if t.cluster != "" {
			attrs = append(attrs, "cluster", t.cluster)
		}
		if t.event != "" {
			attrs = append(attrs, "event", t.event)
		}
		if t.reason != "" {
			attrs = append(attrs, "reason", t.reason)
		}
		if suppressed > 0 {
			attrs = append(attrs, "not_logged_before", suppressed)
		}
		l.log.Info("device state changed", attrs...)
	}
	clear(*batch)
}

// close logs what is left and stops the logger.
func (l *stateLog) close() {
	if l == nil {
		return
	}
	l.once.Do(func() {
		close(l.quit)
		<-l.done
	})
}

func stateName(s core.DeviceState) string {
	if s == "" {
		return "new"
	}
	return string(s)
}

// clusterName is the name of cluster id as tx sees it, else id.
func clusterName(tx core.Tx, id string) string {
	if id == "" {
		return ""
	}
	if c, err := tx.Clusters().Get(id); err == nil && c.Name != "" {
		return c.Name
	}
	return id
}
