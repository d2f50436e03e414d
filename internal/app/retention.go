package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/ztpd/ztpd/internal/core"
)

var eventsPruned = promauto.NewCounterVec(prometheus.CounterOpts{
	Name: "ztpd_events_pruned_total", Help: "Events deleted by retention, by stream (device, audit).",
}, []string{"stream"})

// retentionEvery paces event retention: often enough that a boot storm's
// events are trimmed within minutes, rarely enough to cost nothing.
const retentionEvery = time.Minute

// eventRetention keeps each event stream within its bound (events.keep,
// events.audit_keep; 0 keeps everything), whatever else runs: device noise
// never evicts the audit trail, and with DHCP off the log still stays
// bounded. Each round trims in bounded transactions until both fit.
func eventRetention(st core.Store, keep, auditKeep int, log *slog.Logger) Runner {
	return runnerFunc{"event-retention", func(ctx context.Context) error {
		t := time.NewTicker(retentionEvery)
		defer t.Stop()
		for {
			pruneEvents(ctx, st, keep, auditKeep, log)
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	}}
}

func pruneEvents(ctx context.Context, st core.Store, keep, auditKeep int, log *slog.Logger) {
	for _, s := range []struct {
		b      core.Bucket
		keep   int
		stream string
	}{{core.BucketEvents, keep, "device"}, {core.BucketAudit, auditKeep, "audit"}} {
		if s.keep <= 0 {
			continue
		}
		for more := true; more && ctx.Err() == nil; {
			var n int
			err := st.Update(func(tx core.Tx) error {
				var err error
				n, more, err = core.PruneEvents(tx, s.b, s.keep)
				return err
			})
			if err != nil {
				log.Warn("pruning events failed", "stream", s.stream, "err", err)
				break
			}
			eventsPruned.WithLabelValues(s.stream).Add(float64(n))
		}
	}
}
