package tftp

import "time"

// minRTO is the floor of the adaptive retransmit timeout (Linux TCP uses
// the same): below it a client that pauses briefly (a flash write, a busy
// boot loader) would get needless duplicates.
const minRTO = 200 * time.Millisecond

// window is the sending side of one read transfer, without I/O: it says
// which block goes out next, what an ACK means and when to retransmit or
// give up. Block 0 is the OACK; DATA blocks count from 1 without wrapping
// (the 16-bit block number on the wire is the low half).
//
// Lock-step (RFC 1350) is a window of one. A larger window exists only when
// the client negotiated windowsize (RFC 7440). Rules:
//
//   - Nothing but the OACK goes out until ACK 0 has come back; without an
//     OACK, block 1 goes out alone.
//   - An ACK for a block in flight slides the window past it. An ACK for a
//     block not in flight (stale, or never sent) is ignored.
//   - Lock-step: a duplicate ACK (of the block already acknowledged) is
//     ignored; only the timer sends a block again. Answering duplicates is
//     the Sorcerer's Apprentice (RFC 1123 4.2.3.1).
//   - Window: an ACK short of the highest block sent (a duplicate or a
//     partial ACK) is how an RFC 7440 receiver reports a gap: atftp sends
//     one at the first block out of order and ignores the rest, so the
//     window starts again after the acknowledged block. At once if the
//     next block went out at least a round trip (2 srtt + 4 rttvar, at
//     least 10 ms) before the ACK arrived: the client cannot have had it
//     when it answered. Sooner
//     than that the ACK may predate the block's arrival (or answer a
//     duplicate of ours; receivers acknowledge their position then), and
//     going back on it can send every window twice from then on; so the
//     window only slides, and goes back one round trip later if the client
//     has still not moved past the block.
//   - Tail probe (TCP's TLP, RFC 8985): when no ACK has come a round trip
//     (2 srtt + 4 rttvar, at least 10 ms) after the timer started, the
//     highest block sent goes again, once: it completes the receiver's
//     window if that block was lost, or, if the receiver has it (its ACK was
//     lost), makes it say where it is. Without this a lost last block of a
//     window, or any lost block in lock-step, waits for the timeout. Once
//     per ACK that moved the window, so never before the first ACK (a
//     client that never answers gets one datagram per timeout) nor after
//     a timeout.
//   - On timeout only the first unacknowledged block is sent again (one
//     datagram per timeout, whatever the window), and the timeout doubles up
//     to its ceiling. After maxTries retransmissions without progress the
//     transfer is abandoned; before the first ACK, after unheardTries (a
//     source never heard from may be forged: see unheardRetransmits).
//   - The timeout follows the measured round trip (RFC 6298 estimator, no
//     samples from retransmitted blocks), between minRTO and the configured
//     ceiling, which is also the timeout before any round trip is measured.
type window struct {
	size     int64 // blocks in flight at most
	last     int64 // number of the final block; 0 while unknown
	acked    int64 // highest acknowledged block; -1 while the OACK waits for ACK 0
	next     int64 // next block to send
	maxSent  int64 // highest block sent so far; -1 before the first
	probing  bool  // after a timeout: one block until an ACK arrives
	tries    int   // retransmissions since the last progress
	maxTries int
	// unheardTries replaces maxTries until the first ACK that moves the
	// window: a source not known to answer (possibly forged) gets fewer.
	unheardTries int
	heard        bool // an ACK has moved the window

	maxRTO, rto  time.Duration
	srtt, rttvar time.Duration
	haveRTT      bool

	armed bool // the retransmit timer runs (from armAt)
	armAt time.Time

	gapAt   time.Time // go back after gapFrom then, unless the client moved on
	gapFrom int64

	probe    int64 // block to send before anything else; -1 none
	tlpArmed bool  // a tail probe is due at armAt + roundTrip

	// By block number modulo len: time of the first and the latest
	// transmission, and whether it was sent more than once.
	firstTx, lastTx []time.Time
	resent          []bool

	retransmissions int
}

type ackResult int

const (
	ackIgnored    ackResult = iota // stale, duplicate or outside the window
	ackProgress                    // the window slid; send what is due
	ackRetransmit                  // a gap: the window starts again after the acknowledged block
	ackDone                        // the final block is acknowledged
)

// newWindow starts a transfer: with oack, block 0 (the OACK) goes first
// and the window opens with ACK 0. last is the final block when the
// payload size is known (size/blksize + 1), else 0.
func newWindow(size int, oack bool, last int64, timeout time.Duration, maxTries int) *window {
	w := &window{size: int64(max(1, size)), last: last, maxTries: maxTries, unheardTries: maxTries,
		maxRTO: timeout, rto: timeout, maxSent: -1, probe: -1}
	if oack {
		w.acked, w.next = -1, 0
	} else {
		w.acked, w.next = 0, 1
	}
	n := int(w.size) + 1
	w.firstTx, w.lastTx, w.resent = make([]time.Time, n), make([]time.Time, n), make([]bool, n)
	return w
}

func (w *window) slot(k int64) int { return int(k % int64(len(w.firstTx))) }

// due returns the block to send now, if any.
func (w *window) due() (int64, bool) {
	if w.probe >= 0 {
		return w.probe, true
	}
	limit := w.acked + w.size
	switch {
	case w.acked < 0:
		limit = 0 // only the OACK until ACK 0
	case w.probing:
		limit = w.acked + 1
	}
	if w.last > 0 {
		limit = min(limit, w.last)
	}
	if w.next <= limit {
		return w.next, true
	}
	return 0, false
}

// sent records that block k went out at now; final marks it as the last
// block (a short one), which is how a payload of unknown size ends.
func (w *window) sent(k int64, final bool, now time.Time) {
	if final {
		w.last = k
	}
	i := w.slot(k)
	if k > w.maxSent {
		w.maxSent = k
		w.firstTx[i], w.resent[i] = now, false
	} else {
		w.resent[i] = true
		w.retransmissions++
	}
	w.lastTx[i] = now
	if k == w.probe {
		w.probe = -1 // a probe leaves the window where it is
	} else {
		w.next = k + 1
	}
	if !w.armed {
		w.armed, w.armAt = true, now
	}
}

// ack handles ACK n received at now.
func (w *window) ack(n uint16, now time.Time) ackResult {
	if w.done() {
		return ackIgnored
	}
	d := int64(n - uint16(w.acked))
	if d > w.maxSent-w.acked {
		return ackIgnored // not in flight: stale, or a block never sent
	}
	k := w.acked + d
	if d > 0 {
		if i := w.slot(k); !w.resent[i] {
			w.sample(now.Sub(w.firstTx[i]))
		}
		w.acked, w.next = k, max(w.next, k+1)
		w.probing, w.tries, w.heard = false, 0, true
		// The timer restarts with progress and runs on while blocks are
		// in flight.
		w.armed, w.armAt = w.maxSent > k, now
		w.tlpArmed = true // once per progress: never after a timeout
		if !w.gapAt.IsZero() && k > w.gapFrom {
			w.gapAt = time.Time{}
		}
		if w.last > 0 && k >= w.last {
			return ackDone
		}
	}
	if w.size > 1 && k < w.maxSent {
		if now.Sub(w.lastTx[w.slot(k+1)]) >= w.roundTrip() {
			return w.goBack(d == 0)
		}
		if w.gapAt.IsZero() {
			w.gapAt, w.gapFrom = now.Add(w.roundTrip()), k
		}
	}
	if d == 0 {
		return ackIgnored
	}
	return ackProgress
}

// goBack starts the window again after the acknowledged block.
func (w *window) goBack(repeat bool) ackResult {
	if repeat {
		if w.tries >= w.maxTries {
			return ackIgnored // a client repeating itself is left to the timer
		}
		w.tries++
	}
	w.next, w.probing, w.armed, w.gapAt, w.probe = w.acked+1, false, false, time.Time{}, -1
	return ackRetransmit
}

// roundTrip is how long after a block's transmission an ACK can still
// have been sent before the block arrived: a round trip with a wide
// margin. On a steady link rttvar decays to nothing, and an ACK that
// predates the block arrives just short of one round trip; a duplicate
// stream started by mistaking one keeps its timing, so the margin must
// hold against that, not just against noise.
func (w *window) roundTrip() time.Duration {
	if !w.haveRTT {
		return w.maxRTO
	}
	return max(2*w.srtt+4*w.rttvar, minRoundTrip)
}

// minRoundTrip is the floor of roundTrip (Linux's tail probe has the same):
// on a LAN the round trip is a fraction of a millisecond, but a receiver,
// or this server, descheduled for a few milliseconds must not draw
// duplicates.
const minRoundTrip = 10 * time.Millisecond

func (w *window) sample(r time.Duration) {
	if !w.haveRTT {
		w.srtt, w.rttvar, w.haveRTT = r, r/2, true
	} else {
		d := w.srtt - r
		if d < 0 {
			d = -d
		}
		w.rttvar = (3*w.rttvar + d) / 4
		w.srtt = (7*w.srtt + r) / 8
	}
	w.rto = min(max(w.srtt+max(4*w.rttvar, time.Millisecond), min(minRTO, w.maxRTO)), w.maxRTO)
}

// deadline is when expire is to be called next; zero when no timer runs.
func (w *window) deadline() time.Time {
	var t time.Time
	early := func(at time.Time) {
		if t.IsZero() || at.Before(t) {
			t = at
		}
	}
	if w.armed {
		early(w.armAt.Add(w.rto))
		if at, ok := w.tailProbeAt(); ok {
			early(at)
		}
	}
	if !w.gapAt.IsZero() {
		early(w.gapAt)
	}
	return t
}

// expire handles the timers at now (callers wait for deadline). It reports
// false when the transfer is to be abandoned; otherwise due returns what
// to send again.
func (w *window) expire(now time.Time) bool {
	if !w.gapAt.IsZero() && !now.Before(w.gapAt) {
		// The client did not move past the block it reported: a gap.
		w.gapAt = time.Time{}
		if w.acked == w.gapFrom && w.maxSent > w.acked {
			w.goBack(true)
		}
		return w.tries <= w.maxTries
	}
	if !w.armed {
		return true
	}
	if at, ok := w.tailProbeAt(); ok && !now.Before(at) {
		w.tlpArmed = false
		if w.maxSent > w.acked {
			w.probe = w.maxSent
		}
		return true
	}
	if now.Before(w.armAt.Add(w.rto)) {
		return true
	}
	w.tries++
	if w.tries > w.triesLimit() {
		return false
	}
	w.rto = min(2*w.rto, w.maxRTO)
	w.next, w.probing, w.armed, w.gapAt, w.probe = w.acked+1, true, false, time.Time{}, -1
	return true
}

// triesLimit is how many retransmissions without progress are allowed now.
func (w *window) triesLimit() int {
	if !w.heard {
		return min(w.maxTries, w.unheardTries)
	}
	return w.maxTries
}

// maxSpin bounds busy-polling for an ACK (see sock).
const maxSpin = 200 * time.Microsecond

// spinBudget is how long to busy-poll for the next ACK: about two round
// trips when the client answers that fast, else nothing.
func (w *window) spinBudget() time.Duration {
	if !w.haveRTT || w.srtt > maxSpin/2 {
		return 0
	}
	return min(2*w.srtt+20*time.Microsecond, maxSpin)
}

// tailProbeAt is when the tail probe is due, if one is: not while a gap is
// known, and not when it would coincide with the timeout.
func (w *window) tailProbeAt() (time.Time, bool) {
	if !w.tlpArmed || !w.gapAt.IsZero() || !w.haveRTT || w.roundTrip() >= w.rto {
		return time.Time{}, false
	}
	return w.armAt.Add(w.roundTrip()), true
}

// done reports whether the final block has been acknowledged.
func (w *window) done() bool { return w.last > 0 && w.acked >= w.last }
