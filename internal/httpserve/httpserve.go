// Package httpserve runs an http.Server for the life of a context: every
// listener of ztpd (ZTP content, metadata, API, admin socket, pprof) starts
// and stops the same way, with the same protections against clients that
// hold connections open (header, body, write and idle timeouts, a header
// size cap and a connection limit).
package httpserve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Limits protect a listener from clients that send slowly, read slowly or
// stay connected doing nothing. The zero value of a field means its default.
type Limits struct {
	// ReadHeaderTimeout bounds the time from the start of a request (or of
	// the TLS handshake) to the end of its headers: a slowloris client is
	// cut off after it.
	ReadHeaderTimeout time.Duration
	// ReadBodyTimeout bounds reading a request body (Guard reads it).
	ReadBodyTimeout time.Duration
	// WriteTimeout closes a connection on which a piece of the response
	// (at most WriteChunk bytes) could not be sent for this long. It moves
	// with progress, so a long download at any reasonable rate completes.
	WriteTimeout time.Duration
	// IdleTimeout closes a kept-alive connection with no next request.
	IdleTimeout time.Duration
	// MaxHeaderBytes caps the request line and headers.
	MaxHeaderBytes int
	// MaxConns is the number of connections served at once; a further
	// connection is held unanswered until one closes.
	MaxConns int
	// MaxConnsPerSource is the number of connections one client address
	// may hold at once; a further one is closed at accept, so one host
	// cannot take the whole listener from the others. Zero means
	// DefaultMaxConnsPerSource or half of MaxConns, whichever is smaller.
	MaxConnsPerSource int
}

// Defaults of Limits, also the defaults of the http: configuration keys.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadBodyTimeout   = 30 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	DefaultIdleTimeout       = 60 * time.Second
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultMaxConns          = 4096
	DefaultMaxConnsPerSource = 256
)

// WithDefaults fills every zero field with its default.
func (l Limits) WithDefaults() Limits {
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if l.ReadBodyTimeout <= 0 {
		l.ReadBodyTimeout = DefaultReadBodyTimeout
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = DefaultWriteTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultMaxConns
	}
	if l.MaxConnsPerSource <= 0 {
		l.MaxConnsPerSource = min(DefaultMaxConnsPerSource, max(1, l.MaxConns/2))
	}
	return l
}

// Listener is one HTTP(S) listener of ztpd. Run serves Handler until its
// context ends, then shuts down within Grace.
type Listener struct {
	Name    string       // "http", "metadata", "api", "pprof", "admin": the metrics label
	Addr    string       // TCP host:port; ignored when Ln is set
	Ln      net.Listener // an already open listener (the admin unix socket)
	Handler http.Handler
	TLS     *tls.Config // nil serves plain HTTP
	Limits  Limits
	Log     *slog.Logger
	Grace   time.Duration // --shutdown-grace
	// Metrics takes the listener's counts (nil: kept, not exported).
	Metrics *Metrics
}

// Run listens (unless Ln is set) and serves until ctx ends.
func (l *Listener) Run(ctx context.Context) error {
	log := l.Log
	if log == nil {
		log = slog.Default()
	}
	lim := l.Limits.WithDefaults()
	ln := l.Ln
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", l.Addr); err != nil {
			return err
		}
	}
	ln = LimitListener(ln, l.Name, lim, log, l.Metrics)
	scheme := "http"
	if l.TLS != nil {
		// HTTP/1.1 only: the write deadline that moves with progress is
		// per connection, which HTTP/2's multiplexing would defeat.
		cfg := l.TLS.Clone()
		cfg.NextProtos = []string{"http/1.1"}
		ln = tls.NewListener(ln, cfg)
		scheme = "https"
	}
	srv := NewServer(l.Handler, lim, log)
	log.Info("listening", "listener", l.Name, "addr", ln.Addr().String(), "scheme", scheme,
		"max_conns", lim.MaxConns, "max_conns_per_source", lim.MaxConnsPerSource, "idle_timeout", lim.IdleTimeout.String(), "write_timeout", lim.WriteTimeout.String())
	return Serve(ctx, srv, ln, l.Grace)
}

// NewServer is an http.Server with the header, idle and header-size limits
// of lim. Write progress and the connection cap live in LimitListener; body
// size and body time in Guard.
func NewServer(h http.Handler, lim Limits, log *slog.Logger) *http.Server {
	lim = lim.WithDefaults()
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
	}
	if log != nil {
		srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	}
	return srv
}

// Serve serves srv on ln until ctx ends, then shuts it down, letting
// in-flight requests finish within grace before closing what remains.
func Serve(ctx context.Context, srv *http.Server, ln net.Listener, grace time.Duration) error {
	if srv.ReadHeaderTimeout == 0 {
		srv.ReadHeaderTimeout = DefaultReadHeaderTimeout
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
		return fmt.Errorf("%s: %w", ln.Addr(), err)
	}
	return nil
}

// IsLoopback reports whether a host:port listens only on loopback. An empty
// or unspecified host (":8080", "0.0.0.0:8080") is every address, so it is
// not loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
