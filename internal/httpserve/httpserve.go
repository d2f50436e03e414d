// Package httpserve runs an http.Server for the life of a context: every
// listener of ztpd (ZTP content, metadata, API, admin socket, pprof) starts
// and stops the same way.
package httpserve

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// Serve serves srv on ln until ctx ends, then shuts it down, letting
// in-flight requests finish within grace before closing what remains.
func Serve(ctx context.Context, srv *http.Server, ln net.Listener, grace time.Duration) error {
	if srv.ReadHeaderTimeout == 0 {
		srv.ReadHeaderTimeout = 10 * time.Second
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	if grace <= 0 {
		grace = 5 * time.Second
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
