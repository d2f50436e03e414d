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
// the client negotiated windowsize (RFC 7440). Rules, for both:
//
//   - Nothing but the OACK goes out until ACK 0 has come back; without an
//     OACK, block 1 goes out alone.
//   - An ACK for a block in flight moves the window to the block after it,
//     resending from there if the client acknowledged short of the window's
//     end (RFC 7440: it saw a gap). An ACK for a block not in flight (stale,
//     or never sent) is ignored.
//   - A duplicate ACK (the block already acknowledged) is ignored when it
//     arrives within one measured round trip of the next block's
//     transmission: it was sent before that block arrived, which is the
//     Sorcerer's Apprentice case (RFC 1123 4.2.3.1). Later than that it can
//     only mean the next block was lost and the client's own timer fired, so
//     the block is sent again at once instead of after the full timeout.
//   - On timeout only the first unacknowledged block is sent again (one
//     datagram per timeout, whatever the window), and the timeout doubles up
//     to its ceiling. After maxTries retransmissions without progress the
//     transfer is abandoned.
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

	maxRTO, rto  time.Duration
	srtt, rttvar time.Duration
	haveRTT      bool

	armed bool // the retransmit timer runs (from armAt)
	armAt time.Time

	// By block number modulo len: time of the first and the latest
	// transmission, and whether it was sent more than once.
	firstTx, lastTx []time.Time
	resent          []bool

	retransmissions int
}

type ackResult int

const (
	ackIgnored    ackResult = iota // stale, duplicate or outside the window
	ackProgress                    // the window moved; send what is due
	ackRetransmit                  // a late duplicate: send what is due again
	ackDone                        // the final block is acknowledged
)

// newWindow starts a transfer: with oack, block 0 (the OACK) goes first
// and the window opens with ACK 0. last is the final block when the
// payload size is known (size/blksize + 1), else 0.
func newWindow(size int, oack bool, last int64, timeout time.Duration, maxTries int) *window {
	w := &window{size: int64(max(1, size)), last: last, maxTries: maxTries, maxRTO: timeout, rto: timeout, maxSent: -1}
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
	w.next = k + 1
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
	if d == 0 {
		// Duplicate. Late enough after the next block's last transmission,
		// it means that block was lost (see the type's comment).
		if w.haveRTT && w.maxSent > w.acked && w.tries < w.maxTries &&
			now.Sub(w.lastTx[w.slot(w.acked+1)]) >= w.dupGuard() {
			w.tries++
			w.next, w.probing, w.armed = w.acked+1, false, false
			return ackRetransmit
		}
		return ackIgnored
	}
	if d > w.maxSent-w.acked {
		return ackIgnored // not in flight: stale, or a block never sent
	}
	k := w.acked + d
	if i := w.slot(k); !w.resent[i] {
		w.sample(now.Sub(w.firstTx[i]))
	}
	w.acked, w.next = k, k+1
	w.probing, w.tries, w.armed = false, 0, false
	if w.last > 0 && k >= w.last {
		return ackDone
	}
	return ackProgress
}

// dupGuard is how long after a block's transmission a duplicate ACK of
// the block before it still counts as sent before the block arrived.
func (w *window) dupGuard() time.Duration {
	return max(w.srtt+4*w.rttvar, 2*time.Millisecond)
}

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

// deadline is when the retransmit timer fires; zero when it does not run.
func (w *window) deadline() time.Time {
	if !w.armed {
		return time.Time{}
	}
	return w.armAt.Add(w.rto)
}

// expire handles the retransmit timer firing at now (callers check
// deadline first). It reports false when the transfer is to be abandoned;
// otherwise due returns the block to send again.
func (w *window) expire(now time.Time) bool {
	if !w.armed || now.Before(w.deadline()) {
		return true
	}
	w.tries++
	if w.tries > w.maxTries {
		return false
	}
	w.rto = min(2*w.rto, w.maxRTO)
	w.next, w.probing, w.armed = w.acked+1, true, false
	return true
}

// done reports whether the final block has been acknowledged.
func (w *window) done() bool { return w.last > 0 && w.acked >= w.last }
