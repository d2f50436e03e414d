package httpserve

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the listeners' metrics: one set for all the listeners of
// an App (labelled by listener), its body budget and its guards.
type Metrics struct {
	connsOpen          *prometheus.GaugeVec
	connsHeld          *prometheus.CounterVec
	connsRefusedSource *prometheus.CounterVec
	writeTimeouts      *prometheus.CounterVec
	bodyBytesInFlight  prometheus.Gauge
	bodyRefused        *prometheus.CounterVec
}

// NewMetrics registers the listeners' metrics on reg (nil: kept, not
// exported).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	return &Metrics{
		connsOpen: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ztpd_http_connections_open", Help: "Connections being served, by listener.",
		}, []string{"listener"}),
		connsHeld: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_http_connections_held_total",
			Help: "Connections accepted while the listener was at http.max_conns, held unanswered until another closed, by listener.",
		}, []string{"listener"}),
		connsRefusedSource: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_http_connections_refused_total",
			Help: "Connections closed at accept because their client address already held http.max_conns_per_source, by listener.",
		}, []string{"listener"}),
		writeTimeouts: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_http_write_timeouts_total",
			Help: "Connections closed because the client took no data for http.write_timeout, by listener.",
		}, []string{"listener"}),
		bodyBytesInFlight: f.NewGauge(prometheus.GaugeOpts{
			Name: "ztpd_http_body_bytes_in_flight",
			Help: "Request body bytes reserved by requests being served (their Content-Length, or the listener's body cap when chunked).",
		}),
		bodyRefused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_http_body_refused_total",
			Help: "Requests refused before their body was read because the bodies in flight were at http.max_body_bytes_per_source (per_source, 429) or http.max_body_bytes_in_flight (total, 503), by listener.",
		}, []string{"listener", "reason"}),
	}
}

// WriteChunk is the most a single write on a connection sends under one
// write deadline: the client must take this much within the write timeout
// (4.3 KiB/s at the 60 s default) or the connection is closed.
const WriteChunk = 256 << 10

// LimitListener serves at most lim.MaxConns connections of ln at once and
// gives every connection a write deadline that moves with progress
// (lim.WriteTimeout per WriteChunk). A connection accepted at the limit is
// held, unanswered, until another closes (the kernel queues those behind
// it); each one held is counted in ztpd_http_connections_held_total. A TCP
// client address holding lim.MaxConnsPerSource connections has its next one
// closed at once (ztpd_http_connections_refused_total), before it can wait
// for a slot, so one host never holds the listener against the others.
// The counts go to m (nil: kept, not exported).
func LimitListener(ln net.Listener, name string, lim Limits, log *slog.Logger, m *Metrics) net.Listener {
	lim = lim.WithDefaults()
	if log == nil {
		log = slog.Default()
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	return &limitListener{Listener: ln, name: name, log: log, sem: make(chan struct{}, lim.MaxConns),
		done: make(chan struct{}), write: lim.WriteTimeout,
		perSourceMax: lim.MaxConnsPerSource, perSource: map[netip.Addr]int{},
		open: m.connsOpen.WithLabelValues(name), held: m.connsHeld.WithLabelValues(name),
		refused: m.connsRefusedSource.WithLabelValues(name), timeouts: m.writeTimeouts.WithLabelValues(name)}
}

type limitListener struct {
	net.Listener
	name      string
	log       *slog.Logger
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	write     time.Duration
	open      prometheus.Gauge
	held      prometheus.Counter
	refused   prometheus.Counter
	timeouts  prometheus.Counter
	lastWarn  atomic.Int64 // unix nanos of the last "at the limit" warning
	lastInfo  atomic.Int64 // unix nanos of the last "per-source limit" line

	perSourceMax int
	mu           sync.Mutex
	perSource    map[netip.Addr]int // connections open or held, by TCP client address
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src, counted := tcpSource(c)
		if counted && !l.admitSource(src) {
			l.refused.Inc()
			if now := time.Now().UnixNano(); now-l.lastInfo.Load() > int64(10*time.Second) {
				l.lastInfo.Store(now)
				l.log.Info("connection refused: its client address holds too many connections",
					"listener", l.name, "client", src.String(), "max_conns_per_source", l.perSourceMax)
			}
			c.Close()
			continue
		}
		select {
		case l.sem <- struct{}{}:
		default:
			l.held.Inc()
			if now := time.Now().UnixNano(); now-l.lastWarn.Load() > int64(10*time.Second) {
				l.lastWarn.Store(now)
				l.log.Warn("connection limit reached; new connections wait for a free slot",
					"listener", l.name, "max_conns", cap(l.sem), "client", c.RemoteAddr().String())
			}
			select {
			case l.sem <- struct{}{}:
			case <-l.done:
				c.Close()
				if counted {
					l.releaseSource(src)
				}
				return nil, net.ErrClosed
			}
		}
		l.open.Inc()
		lc := &limitConn{Conn: c, l: l, src: src, counted: counted}
		lc.rf, _ = c.(io.ReaderFrom)
		return lc, nil
	}
}

// tcpSource is c's client address; false for connections without one (the
// admin socket), which no per-source limit applies to.
func tcpSource(c net.Conn) (netip.Addr, bool) {
	a, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return netip.Addr{}, false
	}
	return a.AddrPort().Addr().Unmap(), true
}

// admitSource counts one more connection of src, or reports false when src
// already holds perSourceMax.
func (l *limitListener) admitSource(src netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.perSource[src]
	if n >= l.perSourceMax {
		return false
	}
	l.perSource[src] = n + 1
	return true
}

func (l *limitListener) releaseSource(src netip.Addr) {
	l.mu.Lock()
	if n := l.perSource[src] - 1; n > 0 {
		l.perSource[src] = n
	} else {
		delete(l.perSource, src)
	}
	l.mu.Unlock()
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn releases its slot on Close and keeps a write deadline of
// write-timeout ahead of every piece it sends.
type limitConn struct {
	net.Conn
	l         *limitListener
	rf        io.ReaderFrom // the TCP connection's sendfile/splice path
	src       netip.Addr
	counted   bool // src is counted in l.perSource
	closeOnce sync.Once
	armedAt   atomic.Int64 // unix nanos when the write deadline was last moved
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() {
		c.l.open.Dec()
		<-c.l.sem
		if c.counted {
			c.l.releaseSource(c.src)
		}
	})
	return err
}

// CloseWrite lets the server half-close before closing (net/http does so
// to deliver an error answer before a reset when a body was left unread).
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// arm moves the write deadline to now+timeout. To keep the cost off small
// answers it does so only when the deadline was last moved more than an
// eighth of the timeout ago, so every piece gets at least 7/8 of it.
func (c *limitConn) arm() {
	now := time.Now()
	if now.UnixNano()-c.armedAt.Load() < int64(c.l.write/8) {
		return
	}
	c.armedAt.Store(now.UnixNano())
	_ = c.Conn.SetWriteDeadline(now.Add(c.l.write))
}

func (c *limitConn) Write(b []byte) (int, error) {
	var n int
	for len(b) > 0 {
		piece := b[:min(len(b), WriteChunk)]
		c.arm()
		m, err := c.Conn.Write(piece)
		n += m
		if err != nil {
			c.countTimeout(err)
			return n, err
		}
		b = b[m:]
	}
	return n, nil
}

// ReadFrom keeps the TCP connection's sendfile path (http.ServeContent of
// an *os.File reaches it through the response's ReadFrom) while moving the
// write deadline per WriteChunk: the file is handed to sendfile one piece
// at a time. The *io.LimitedReader ServeContent passes is unwrapped so each
// piece is again a LimitedReader over the *os.File, which sendfile needs.
func (c *limitConn) ReadFrom(r io.Reader) (int64, error) {
	if c.rf == nil {
		return io.Copy(writerOnly{c}, r)
	}
	src, remain := r, int64(-1)
	lr, limited := r.(*io.LimitedReader)
	if limited {
		src, remain = lr.R, lr.N
	}
	if _, isFile := src.(*os.File); !isFile && !limited {
		// Not a file: the generic copy goes through Write, which moves the
		// deadline itself.
		return io.Copy(writerOnly{c}, r)
	}
	var total int64
	for remain != 0 {
		want := int64(WriteChunk)
		if remain > 0 && remain < want {
			want = remain
		}
		c.arm()
		n, err := c.rf.ReadFrom(&io.LimitedReader{R: src, N: want})
		total += n
		if remain > 0 {
			remain -= n
		}
		if limited {
			lr.N = remain
		}
		if err != nil {
			c.countTimeout(err)
			return total, err
		}
		if n < want { // end of src
			break
		}
	}
	return total, nil
}

func (c *limitConn) countTimeout(err error) {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.l.timeouts.Inc()
		c.l.log.Info("client stopped reading; connection closed", "listener", c.l.name,
			"client", c.RemoteAddr().String(), "write_timeout", c.l.write)
	}
}

// writerOnly hides ReadFrom so io.Copy does not recurse into it.
type writerOnly struct{ io.Writer }
