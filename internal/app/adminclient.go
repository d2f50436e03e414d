package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/ztpd/ztpd/internal/config"
)

// AdminClient returns an HTTP client for admin operations on the data
// directory of cfg. When a server is running it talks to its admin socket;
// otherwise it opens the store itself and serves the same admin routes
// in-process, so every CLI operation has exactly one implementation.
// Requests use the host "ztpd", e.g. http://ztpd/admin/backup.
func AdminClient(cfg config.Config, log *slog.Logger) (*http.Client, func() error, error) {
	sock := filepath.Join(cfg.DataDir, AdminSocketName)
	if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
		c.Close()
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}
		return &http.Client{Transport: tr}, func() error { tr.CloseIdleConnections(); return nil }, nil
	}
	a, err := New(cfg, log)
	if err != nil {
		return nil, nil, err
	}
	ln := newPipeListener()
	srv := &http.Server{Handler: a.AdminMux}
	go srv.Serve(ln)
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return ln.dial() }}
	closeFn := func() error {
		tr.CloseIdleConnections()
		srv.Close()
		return a.Close()
	}
	return &http.Client{Transport: tr}, closeFn, nil
}

// AdminError turns a non-2xx admin response into an error with its message
// (httpserve's error body), else the body itself.
func AdminError(resp *http.Response, body []byte) error {
	if resp.StatusCode/100 == 2 {
		return nil
	}
	if msg, ok := adminErrorMessage(body); ok {
		return errors.New(msg)
	}
	msg := string(body)
	if msg == "" {
		msg = resp.Status
	}
	return errors.New(msg)
}

// pipeListener is an in-memory net.Listener fed by net.Pipe connections.
type pipeListener struct {
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) dial() (net.Conn, error) {
	c, s := net.Pipe()
	select {
	case l.conns <- s:
		return c, nil
	case <-l.done:
		return nil, fmt.Errorf("admin listener closed")
	}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "in-process" }
