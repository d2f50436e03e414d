// Package logcount is a slog.Handler that counts records by message, for
// tests that assert how often something is logged (once per change, not
// once per retry).
package logcount

import (
	"context"
	"log/slog"
	"sync"
)

// Handler counts the records it handles by message, at every level; its
// zero value is ready to use. Attributes and groups are ignored.
type Handler struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *Handler) Enabled(context.Context, slog.Level) bool { return true }
func (h *Handler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *Handler) WithGroup(string) slog.Handler            { return h }

func (h *Handler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int{}
	}
	h.n[r.Message]++
	return nil
}

// Count is how many records with message msg were handled.
func (h *Handler) Count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[msg]
}
