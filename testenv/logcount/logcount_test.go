package logcount

import (
	"log/slog"
	"sync"
	"testing"
)

// TestCountsByMessage: records are counted by message whatever their level,
// attributes and group, from several goroutines.
func TestCountsByMessage(t *testing.T) {
	h := &Handler{}
	log := slog.New(h).With("cluster", "k").WithGroup("g")
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			log.Debug("retry", "n", 1)
			log.Warn("retry")
		})
	}
	wg.Wait()
	log.Info("changed")
	if got := h.Count("retry"); got != 20 {
		t.Fatalf("retry counted %d times, want 20", got)
	}
	if got := h.Count("changed"); got != 1 {
		t.Fatalf("changed counted %d times, want 1", got)
	}
	if got := h.Count("never"); got != 0 {
		t.Fatalf("never counted %d times", got)
	}
}
