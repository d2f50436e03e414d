package tftp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ztpd/ztpd/internal/ratelimit"
)

// engineConfig is what the transfer engine takes from config.TFTP.
type engineConfig struct {
	metrics      *metrics // nil: kept, not exported
	singlePort   bool
	window       int           // largest windowsize granted; <= 1 never negotiates
	timeout      time.Duration // retransmit timeout before an RTT is measured, and its ceiling
	retransmits  int           // retransmissions without progress before a transfer is abandoned
	maxTransfers int           // concurrent transfers, all clients together
	maxPerSource int           // concurrent transfers per client address
	// blkCap is the largest blksize granted to a request that arrived on
	// interface ifindex (0 = unknown) from an IPv4 (v6 false) or IPv6 peer.
	blkCap func(ifindex int, v6 bool) int
}

// Defaults for fields left zero (config.Default sets the same).
const (
	defaultTimeout      = time.Second
	defaultRetransmits  = 5
	defaultMaxTransfers = 256
	defaultMaxPerSource = 4
)

func (c *engineConfig) fill() {
	if c.metrics == nil {
		c.metrics = newMetrics(nil)
	}
	if c.timeout <= 0 {
		c.timeout = defaultTimeout
	}
	if c.retransmits <= 0 {
		c.retransmits = defaultRetransmits
	}
	if c.maxTransfers <= 0 {
		c.maxTransfers = defaultMaxTransfers
	}
	if c.maxPerSource <= 0 {
		c.maxPerSource = defaultMaxPerSource
	}
	if c.blkCap == nil {
		c.blkCap = func(int, bool) int { return 1468 }
	}
}

// refusal is a request refused with a TFTP error: code and text for the
// client, reason for the metric and the log, and the log level.
type refusal struct {
	code   uint16
	msg    string
	detail string // for the log only, never sent
	reason string
	level  slog.Level
}

// logArgs are the refusal's log attributes.
func (r *refusal) logArgs(peer any, file string) []any {
	args := []any{"client", peer, "file", file, "reason", r.reason, "error", r.msg}
	if r.detail != "" {
		args = append(args, "detail", r.detail)
	}
	return args
}

func (r *refusal) Error() string { return r.msg }

// opener resolves a read request to its payload. A *refusal is sent to the
// client as it is; any other error as "internal error" (and logged).
type opener func(ctx context.Context, t *transfer) (*payload, error)

// Transfer results (label of ztpd_tftp_transfers_total).
const (
	resultOK          = "ok"
	resultUnconfirmed = "unconfirmed" // every block sent, the last never acknowledged
	resultAborted     = "aborted"     // the client sent an ERROR
	resultFailed      = "failed"
)

// engine serves read requests arriving on one UDP socket. In the default
// mode each transfer gets a socket of its own (a new port: RFC 1350's
// transfer identifier), connected to the client, so the kernel filters
// foreign packets and an ICMP port unreachable ends the transfer at once.
// In single-port mode every transfer runs on the listening socket, told
// apart by the client's address and port; ACKs are handled inline by the
// reader and retransmissions by a timer per transfer.
type engine struct {
	cfg  engineConfig
	open opener
	log  *slog.Logger
	conn *sock
	v6   bool // conn is an IPv6 (dual-stack) socket
	// wildcard: conn is bound to an unspecified address, so replies sent on
	// it name their source (IP_PKTINFO): the address the client asked.
	wildcard bool
	logs     *ratelimit.Keyed

	mu        sync.Mutex
	closing   bool
	active    map[netip.AddrPort]*transfer // by client address and port as received
	perSource map[netip.Addr]int
	// unheardActive counts the transfers awaiting the first ACK of an
	// address not heard from lately; at most 3/4 of max_transfers, so
	// requests with forged sources cannot take every slot from the
	// devices that answer.
	unheardActive int
	wg            sync.WaitGroup

	heard heardSources
}

// unheardRetransmits is how many times a transfer to a client address that
// has not acknowledged anything lately is sent again before its first ACK.
// Such an address may be forged: the request then makes ztpd send two
// datagrams to whoever holds it, not max_retransmits+1. A client that lost
// both asks again, and a client heard before keeps max_retransmits.
const unheardRetransmits = 1

// heardSources remembers the client addresses that acknowledged a transfer
// within heardFor, at most heardMax of them.
type heardSources struct {
	mu sync.Mutex
	m  map[netip.Addr]time.Time
}

const (
	heardFor = time.Hour
	heardMax = 1 << 16
)

func (h *heardSources) known(a netip.Addr, now time.Time) bool {
	h.mu.Lock()
	at, ok := h.m[a]
	h.mu.Unlock()
	return ok && now.Sub(at) < heardFor
}

func (h *heardSources) note(a netip.Addr, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[netip.Addr]time.Time{}
	}
	if _, ok := h.m[a]; !ok && len(h.m) >= heardMax {
		for k, at := range h.m {
			if now.Sub(at) >= heardFor {
				delete(h.m, k)
			}
		}
		if len(h.m) >= heardMax {
			return // full of recent clients: this one stays unheard until they age out
		}
	}
	h.m[a] = now
}

func newEngine(cfg engineConfig, open opener, log *slog.Logger) *engine {
	cfg.fill()
	return &engine{cfg: cfg, open: open, log: log, active: map[netip.AddrPort]*transfer{},
		perSource: map[netip.Addr]int{}, logs: ratelimit.New(logBurst, time.Second/logPerSecond, 256)}
}

// serve reads conn until ctx ends, then stops taking requests, lets running
// transfers finish for up to grace and abandons the rest. It closes conn.
func (e *engine) serve(ctx context.Context, conn *net.UDPConn, grace time.Duration) error {
	la, _ := conn.LocalAddr().(*net.UDPAddr)
	if la == nil {
		conn.Close()
		return errors.New("tftp: not a UDP socket")
	}
	e.wildcard = la.IP.IsUnspecified()
	s, err := sockFromConn(conn)
	if err != nil {
		return fmt.Errorf("tftp: %w", err)
	}
	e.conn, e.v6 = s, s.v6
	if err := setPktinfo(s.fd, s.v6); err != nil {
		s.close()
		return fmt.Errorf("tftp: enable IP_PKTINFO: %w", err)
	}
	errc := make(chan error, 1)
	go func() { errc <- e.readLoop() }()
	select {
	case err = <-errc:
		errc <- nil
	case <-ctx.Done():
	}
	e.mu.Lock()
	e.closing = true
	e.mu.Unlock()
	if !e.cfg.singlePort {
		s.shutdown() // running transfers have sockets of their own
	}
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		e.log.Warn("tftp transfers still running at shutdown; abandoning them")
		e.abortAll("server shutting down")
		<-done
	}
	s.shutdown()
	<-errc
	return err
}

// readLoop receives on the listening socket until it is shut down; it
// closes the socket.
func (e *engine) readLoop() error {
	defer e.conn.close()
	buf := make([]byte, 4096)
	oob := make([]byte, 256)
	for {
		n, oobn, truncated, from, err := e.conn.recvmsg(buf, oob, maxWait, e.spin())
		switch {
		case err == errDown:
			return nil
		case err == errTimeout, err == unix.ECONNREFUSED, err == unix.ENOMEM:
			continue
		case err != nil:
			return fmt.Errorf("tftp: receive: %w", err)
		}
		local, ifindex := parsePktinfo(oob[:oobn])
		e.handle(buf[:n], truncated, from, local, ifindex, arrival(oob[:oobn]))
	}
}

// spin is how long the single-port reader busy-polls before blocking:
// while one or two transfers run (a device fetching its files, the
// benchmark) ACKs come back within a round trip; with more, blocking is
// cheaper than guessing.
func (e *engine) spin() time.Duration {
	if !e.cfg.singlePort {
		return 0
	}
	e.mu.Lock()
	n := len(e.active)
	e.mu.Unlock()
	if n == 0 || n > 2 {
		return 0
	}
	return maxSpin
}

// handle dispatches one datagram that arrived on the listening socket.
func (e *engine) handle(p []byte, truncated bool, peer netip.AddrPort, local netip.Addr, ifindex int, at time.Time) {
	if len(p) >= 2 {
		switch binary.BigEndian.Uint16(p) {
		case opRRQ, opWRQ:
			e.request(p, truncated, peer, local, ifindex)
			return
		case opACK, opERROR:
			if e.cfg.singlePort {
				e.mu.Lock()
				t := e.active[peer]
				e.mu.Unlock()
				if t != nil {
					t.mu.Lock()
					t.onPacketLocked(p, at)
					t.mu.Unlock()
					return
				}
			}
		}
	}
	// Not a request, and no transfer of ours: a late duplicate after a
	// transfer ended, or noise. No answer (it could be forged).
	e.cfg.metrics.refused.WithLabelValues("stray").Inc()
}

// request starts a transfer for an RRQ, or refuses it.
func (e *engine) request(p []byte, truncated bool, peer netip.AddrPort, local netip.Addr, ifindex int) {
	req, err := parseRequest(p)
	if err != nil || truncated {
		e.refuse(peer, local, "", &refusal{code: errIllegalOp, msg: "malformed request", reason: "malformed"})
		return
	}
	if req.op == opWRQ {
		e.refuse(peer, local, req.filename, &refusal{code: errAccess, reason: "write",
			msg: "access violation: ztpd serves TFTP read-only; write requests are refused"})
		return
	}
	if req.mode != "octet" && req.mode != "netascii" {
		e.refuse(peer, local, req.filename, &refusal{code: errIllegalOp, reason: "mode",
			msg: fmt.Sprintf("unsupported transfer mode %q (octet or netascii)", req.mode)})
		return
	}
	client := peer.Addr().Unmap()
	unheard := !e.heard.known(client, time.Now())
	e.mu.Lock()
	if old := e.active[peer]; old != nil {
		if bytes.Equal(old.raw, p) {
			// The client asked again before our first answer reached it;
			// the running transfer's retransmissions answer it.
			e.mu.Unlock()
			return
		}
		// A new request from the same port: the client gave up on the
		// old transfer (or a boot ROM probed tsize and now asks for real).
		e.mu.Unlock()
		old.abort(resultAborted, "superseded by a new request from the same client port")
		e.mu.Lock()
	}
	var busy *refusal
	switch {
	case e.closing:
		busy = &refusal{code: errUndefined, msg: "server shutting down; try again later", reason: "shutdown"}
	case e.active[peer] != nil:
		e.mu.Unlock()
		return
	case e.perSource[client] >= e.cfg.maxPerSource:
		busy = &refusal{code: errUndefined, reason: "busy_source",
			msg: fmt.Sprintf("too many transfers: %d running for %s (tftp.max_transfers_per_source); try again later", e.perSource[client], client)}
	case len(e.active) >= e.cfg.maxTransfers:
		busy = &refusal{code: errUndefined, reason: "busy_global",
			msg: fmt.Sprintf("server busy: %d transfers running (tftp.max_transfers); try again later", len(e.active))}
	case unheard && e.unheardActive >= e.cfg.maxTransfers-e.cfg.maxTransfers/4:
		busy = &refusal{code: errUndefined, reason: "busy_unheard",
			msg: fmt.Sprintf("server busy: %d transfers await a first ACK (3/4 of tftp.max_transfers); try again later", e.unheardActive)}
	}
	if busy != nil {
		e.mu.Unlock()
		e.refuse(peer, local, req.filename, busy)
		return
	}
	t := &transfer{e: e, peer: peer, client: client, local: local, ifindex: ifindex,
		raw: bytes.Clone(p), req: req, started: time.Now(), unheard: unheard}
	e.active[peer] = t
	e.perSource[client]++
	if unheard {
		e.unheardActive++
	}
	e.wg.Add(1)
	e.mu.Unlock()
	e.cfg.metrics.activeTransfers.Inc()
	go t.start()
}

// refuse answers a request with an ERROR from the listening socket.
func (e *engine) refuse(peer netip.AddrPort, local netip.Addr, file string, r *refusal) {
	e.cfg.metrics.refused.WithLabelValues(r.reason).Inc()
	e.conn.sendTo(appendError(nil, r.code, r.msg), e.sourceOOB(local), peer)
	e.logf(r.level, "refused:"+r.reason, "tftp request refused", r.logArgs(peer, file)...)
}

// A burst of logBurst log lines per key, then logPerSecond a second.
const (
	logBurst     = 10
	logPerSecond = 2
)

// logf logs at level, at most a few lines a second per key (a flood of
// forged requests must not flood the log); the next line that gets through
// says how many were left out.
func (e *engine) logf(level slog.Level, key, msg string, args ...any) {
	if !e.log.Enabled(context.Background(), level) {
		return
	}
	ok, suppressed := e.logs.Allow(key, time.Now())
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	e.log.Log(context.Background(), level, msg, args...)
}

// heardFrom records t's first ACK: its address is known to answer.
// Called with t.mu held.
func (e *engine) heardFrom(t *transfer) {
	e.heard.note(t.client, time.Now())
	e.mu.Lock()
	t.unheard = false
	e.unheardActive--
	e.mu.Unlock()
}

func (e *engine) release(t *transfer) {
	e.mu.Lock()
	if e.active[t.peer] == t {
		delete(e.active, t.peer)
	}
	if t.unheard {
		t.unheard = false
		e.unheardActive--
	}
	if n := e.perSource[t.client] - 1; n > 0 {
		e.perSource[t.client] = n
	} else {
		delete(e.perSource, t.client)
	}
	e.mu.Unlock()
	e.cfg.metrics.activeTransfers.Dec()
	e.wg.Done()
}

func (e *engine) abortAll(reason string) {
	e.mu.Lock()
	ts := make([]*transfer, 0, len(e.active))
	for _, t := range e.active {
		ts = append(ts, t)
	}
	e.mu.Unlock()
	for _, t := range ts {
		t.abort(resultFailed, reason)
	}
}

// sourceOOB is the control message that makes a reply on a wildcard
// socket leave from local.
func (e *engine) sourceOOB(local netip.Addr) []byte {
	if !e.wildcard || !local.IsValid() || local.IsUnspecified() {
		return nil
	}
	return pktinfoOOB(local, e.v6)
}

// transfer is one read transfer.
type transfer struct {
	e       *engine
	peer    netip.AddrPort // client address and port as received
	client  netip.Addr     // client address (IPv4-mapped addresses unmapped)
	local   netip.Addr     // address the request was sent to; invalid if unknown
	ifindex int            // interface it arrived on; 0 if unknown
	raw     []byte         // the request, to recognise a retransmitted one
	req     request
	started time.Time

	mu       sync.Mutex
	finished bool
	conn     *sock       // own socket, default mode (closed by start's goroutine)
	oob      []byte      // single-port mode: reply source address
	timer    *time.Timer // single-port mode: retransmit timer
	timerAt  time.Time   // when timer fires; zero if unknown
	pl       *payload
	src      blockSource
	w        *window
	blksize  int
	buf      []byte // DATA packet being sent
	oack     []byte
	// unheard: the client address had not acknowledged anything lately
	// when the transfer was requested, until its first ACK here (set and
	// cleared under e.mu; it counts in e.unheardActive).
	unheard bool
}

// Name is the requested file name as the client sent it.
func (t *transfer) Name() string { return t.req.filename }

func (t *transfer) start() {
	e := t.e
	if e.cfg.singlePort {
		t.oob = e.sourceOOB(t.local)
	} else {
		conn, err := dialSock(t.local, netip.AddrPortFrom(t.client, t.peer.Port()))
		if err != nil {
			e.conn.sendTo(appendError(nil, errUndefined, "internal error"), e.sourceOOB(t.local), t.peer)
			t.abort(resultFailed, "cannot open a transfer socket: "+err.Error())
			return
		}
		defer conn.close()
		t.mu.Lock()
		t.conn = conn
		if t.finished { // aborted meanwhile
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	pl, err := e.open(ctx, t)
	cancel()
	t.mu.Lock()
	if t.finished {
		t.mu.Unlock()
		pl.close()
		return
	}
	if err != nil {
		var r *refusal
		if !errors.As(err, &r) {
			r = &refusal{code: errUndefined, msg: "internal error", reason: "error", level: slog.LevelWarn}
			e.log.Warn("tftp request failed", "client", t.peer, "file", t.req.filename, "err", err)
		} else {
			e.logf(r.level, "refused:"+r.reason, "tftp request refused", r.logArgs(t.peer, t.req.filename)...)
		}
		t.e.cfg.metrics.refused.WithLabelValues(r.reason).Inc()
		t.send(appendError(nil, r.code, r.msg))
		t.finishLocked("", "")
		t.mu.Unlock()
		return
	}
	t.pl = pl
	v6 := !t.client.Is4()
	p := negotiate(&t.req, pl.size, e.cfg.blkCap(t.ifindex, v6), e.cfg.window)
	t.blksize = p.blksize
	t.buf = make([]byte, 4+p.blksize)
	var last int64
	if p.netascii {
		t.src = newStreamSource(newNetasciiReader(io.NewSectionReader(pl.readerAt(), 0, pl.size)), p.blksize, p.window)
	} else {
		t.src = octetSource{r: pl.readerAt(), size: pl.size}
		last = pl.size/int64(p.blksize) + 1
	}
	if p.oack != nil {
		t.oack = appendOACK(nil, p.oack)
	}
	t.w = newWindow(p.window, p.oack != nil, last, e.cfg.timeout, e.cfg.retransmits)
	if t.unheard {
		t.w.unheardTries = unheardRetransmits
	}
	t.pumpLocked(time.Now())
	if t.finished || e.cfg.singlePort {
		if !t.finished {
			t.armTimerLocked()
		}
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	t.readLoop()
}

// readLoop receives on the transfer's own socket (default mode) and runs
// the window's timers.
func (t *transfer) readLoop() {
	buf := make([]byte, 1024)
	for {
		t.mu.Lock()
		if t.finished {
			t.mu.Unlock()
			return
		}
		dl, spin := t.w.deadline(), t.w.spinBudget()
		t.mu.Unlock()
		now := time.Now()
		wait := maxWait
		if !dl.IsZero() {
			wait = dl.Sub(now)
		}
		var n int
		var at time.Time
		err := errTimeout
		if wait > 0 {
			n, at, err = t.conn.read(buf, wait, spin)
			now = time.Now()
		}
		t.mu.Lock()
		switch {
		case t.finished:
		case err == nil:
			t.onPacketLocked(buf[:n], at)
		case err == errTimeout:
			if dl := t.w.deadline(); !dl.IsZero() && !now.Before(dl) {
				t.expireLocked(now)
			}
		case err == unix.ECONNREFUSED:
			t.finishLocked(t.giveUpResult(), "client port unreachable (ICMP)")
		default:
			t.finishLocked(resultFailed, "receive: "+err.Error())
		}
		t.mu.Unlock()
	}
}

// onPacketLocked handles a datagram from the client that arrived at at:
// the window judges ACKs by when they arrived (the kernel's timestamp) and
// blocks by when they left, not by when a busy server got to either.
func (t *transfer) onPacketLocked(p []byte, at time.Time) {
	if t.finished || len(p) < 4 {
		return
	}
	switch binary.BigEndian.Uint16(p) {
	case opACK:
		if t.w == nil {
			return // nothing sent yet
		}
		r := t.w.ack(binary.BigEndian.Uint16(p[2:]), at)
		if t.unheard && t.w.heard {
			t.e.heardFrom(t)
		}
		switch r {
		case ackDone:
			t.finishLocked(resultOK, "")
			return
		case ackProgress, ackRetransmit:
			t.pumpLocked(time.Now())
		}
	case opERROR:
		code, msg := errorMessage(p)
		t.finishLocked(resultAborted, fmt.Sprintf("client sent error %d %s", code, msg))
		return
	default:
		return
	}
	if t.timer != nil && !t.finished {
		t.armTimerLocked()
	}
}

func (t *transfer) expireLocked(now time.Time) {
	if !t.w.expire(now) {
		if t.unheard {
			t.e.cfg.metrics.unanswered.Inc()
		}
		t.finishLocked(t.giveUpResult(), fmt.Sprintf("no ACK after %d retransmissions", t.w.triesLimit()))
		return
	}
	t.pumpLocked(now)
}

func (t *transfer) giveUpResult() string {
	if t.w != nil && t.w.last > 0 && t.w.maxSent >= t.w.last {
		return resultUnconfirmed
	}
	return resultFailed
}

// pumpLocked sends every block the window says is due.
func (t *transfer) pumpLocked(now time.Time) {
	for !t.finished {
		k, ok := t.w.due()
		if !ok {
			return
		}
		var pkt []byte
		final := false
		if k == 0 {
			pkt = t.oack
		} else {
			n, err := t.src.block(k, t.buf[4:4+t.blksize])
			if err != nil {
				t.send(appendError(nil, errUndefined, "read error"))
				t.finishLocked(resultFailed, fmt.Sprintf("reading block %d: %v", k, err))
				return
			}
			binary.BigEndian.PutUint16(t.buf, opDATA)
			binary.BigEndian.PutUint16(t.buf[2:], uint16(k))
			pkt, final = t.buf[:4+n], n < t.blksize
		}
		if k <= t.w.maxSent {
			t.e.cfg.metrics.retransmissions.Inc()
		}
		if err := t.send(pkt); err == unix.ECONNREFUSED {
			t.finishLocked(t.giveUpResult(), "client port unreachable (ICMP)")
			return
		}
		// Other send errors (a full queue) count as a loss: the timer
		// sends the block again.
		t.e.cfg.metrics.datagrams.Inc()
		t.w.sent(k, final, now)
	}
}

func (t *transfer) send(pkt []byte) error {
	if t.conn != nil {
		return t.conn.write(pkt)
	}
	return t.e.conn.sendTo(pkt, t.oob, t.peer)
}

// armTimerLocked keeps the single-port retransmit timer no later than the
// window's deadline. It is not moved on every ACK: when it fires early it
// re-arms itself for the current deadline.
func (t *transfer) armTimerLocked() {
	dl := t.w.deadline()
	if dl.IsZero() {
		return
	}
	if t.timer == nil {
		t.timer, t.timerAt = time.AfterFunc(time.Until(dl), t.onTimer), dl
		return
	}
	if t.timerAt.IsZero() || dl.Before(t.timerAt) {
		t.timer.Reset(time.Until(dl))
		t.timerAt = dl
	}
}

func (t *transfer) onTimer() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.timerAt = time.Time{}
	if t.finished {
		return
	}
	now := time.Now()
	if dl := t.w.deadline(); !dl.IsZero() && now.Before(dl) {
		t.timer.Reset(dl.Sub(now))
		t.timerAt = dl
		return
	}
	t.expireLocked(now)
	if !t.finished {
		t.armTimerLocked()
	}
}

func (t *transfer) abort(result, reason string) {
	t.mu.Lock()
	t.finishLocked(result, reason)
	t.mu.Unlock()
}

// finishLocked ends the transfer once: frees its socket, timer, payload and
// slot, and counts and logs the result ("" for a refused request, already
// counted as refused).
func (t *transfer) finishLocked(result, reason string) {
	if t.finished {
		return
	}
	t.finished = true
	if t.conn != nil {
		t.conn.shutdown() // wakes the receive; start's goroutine closes it
	}
	if t.timer != nil {
		t.timer.Stop()
	}
	t.pl.close()
	t.e.release(t)
	if result == "" {
		return
	}
	t.e.cfg.metrics.transfers.WithLabelValues(result).Inc()
	d := time.Since(t.started)
	args := []any{"client", t.peer, "file", t.req.filename, "blksize", t.blksize, "duration", d.Round(time.Millisecond)}
	if t.w != nil {
		args = append(args, "window", t.w.size, "blocks", max(t.w.acked, 0), "retransmissions", t.w.retransmissions)
	}
	if result == resultOK {
		t.e.cfg.metrics.transferSeconds.Observe(d.Seconds())
		t.e.log.Debug("tftp transfer done", args...)
		return
	}
	t.e.logf(slog.LevelInfo, "transfer:"+result, "tftp transfer "+result, append(args, "reason", reason)...)
}
