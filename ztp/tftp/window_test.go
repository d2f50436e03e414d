package tftp

import (
	"math/rand"
	"slices"
	"testing"
	"time"
)

// sim runs a window (the server side) against a model receiver over a
// simulated FIFO link with a fake clock. The receiver behaves as atftp's
// RFC 7440 one (measured): it takes blocks in order and acknowledges every
// window-th block and the last; at the first block out of order it
// acknowledges the last block it has and ignores further ones until the
// next in-order block; an old duplicate gets an ACK of its position; its
// window count restarts after every ACK. With a window of one this is an
// RFC 1350 receiver. everyStray makes it acknowledge every block out of
// order, a more talkative receiver.
type sim struct {
	t       *testing.T
	w       *window
	now     time.Time
	oneWay  time.Duration
	oack    bool
	winSize int64

	// Link faults: called for the n-th datagram (from 0) in each direction.
	dropData   func(block int64, n int) bool
	dropAck    func(ack uint16, n int) bool
	delayData  func(block int64, n int) time.Duration
	dupAcks    bool // the receiver sends every ACK twice
	everyStray bool // the receiver acknowledges every block out of order

	rttJitter     bool         // one-way delays vary by up to 0.3 ms (order kept)
	lastArrive    [2]time.Time // per direction, to keep the link FIFO
	jit           uint32
	clientTimeout time.Duration // 0: the receiver never retransmits its ACK
	clientDead    bool          // the receiver never answers at all

	queue   []simPkt
	nData   int
	nAck    int
	sends   map[int64]int // block -> transmissions
	sendAt  map[int64][]time.Time
	got     []int64 // blocks the receiver accepted, in order
	exp     int64   // next block the receiver expects
	inWin   int64
	gapped  bool
	lastAck uint16
	cTimer  time.Time
	oacked  bool
	done    bool // receiver has the last block
	gaveUp  bool
	endedAt time.Time
}

type simPkt struct {
	at    time.Time
	late  bool // delayed on another path: overtaken, holds nothing up
	toCli bool
	block int64 // absolute block number (0 = OACK); the receiver sees only its low 16 bits
	ack   uint16
}

func newSim(t *testing.T, size int, oack bool, last int64, timeout time.Duration, maxTries int) *sim {
	s := &sim{t: t, now: time.Unix(1000, 0), oneWay: time.Millisecond, oack: oack, winSize: int64(size),
		sends: map[int64]int{}, sendAt: map[int64][]time.Time{}, exp: 1}
	s.w = newWindow(size, oack, last, timeout, maxTries)
	return s
}

func (s *sim) pump() {
	for {
		k, ok := s.w.due()
		if !ok {
			return
		}
		s.sends[k]++
		s.sendAt[k] = append(s.sendAt[k], s.now)
		n := s.nData
		s.nData++
		s.w.sent(k, false, s.now)
		if s.dropData != nil && s.dropData(k, n) {
			continue
		}
		var late time.Duration
		if s.delayData != nil {
			late = s.delayData(k, n)
		}
		s.push(simPkt{at: s.now.Add(s.oneWay + late), late: late > 0, toCli: true, block: k})
	}
}

func (s *sim) push(p simPkt) {
	dir := 0
	if p.toCli {
		dir = 1
	}
	if s.rttJitter {
		s.jit = s.jit*1103515245 + 12345
		p.at = p.at.Add(time.Duration(s.jit>>16%300) * time.Microsecond)
	}
	if !p.late {
		if p.at.Before(s.lastArrive[dir]) {
			p.at = s.lastArrive[dir]
		}
		s.lastArrive[dir] = p.at
	}
	i, _ := slices.BinarySearchFunc(s.queue, p.at, func(q simPkt, at time.Time) int {
		if q.at.After(at) {
			return 1
		}
		return -1
	})
	s.queue = slices.Insert(s.queue, i, p)
}

func (s *sim) sendAck(n uint16) {
	s.lastAck = n
	s.inWin = 0
	if s.clientTimeout > 0 {
		s.cTimer = s.now.Add(s.clientTimeout)
	}
	for range 1 + map[bool]int{true: 1}[s.dupAcks] {
		i := s.nAck
		s.nAck++
		if s.dropAck != nil && s.dropAck(n, i) {
			continue
		}
		s.push(simPkt{at: s.now.Add(s.oneWay), ack: n})
	}
}

// client handles a datagram arriving at the receiver.
func (s *sim) client(p simPkt) {
	if s.clientDead {
		return
	}
	if p.block == 0 {
		if s.exp == 1 {
			s.oacked = true
			s.sendAck(0) // again if the OACK came again
		}
		return
	}
	if uint16(p.block) == uint16(s.exp) && (!s.oack || s.oacked) {
		if p.block != s.exp {
			s.t.Fatalf("receiver would take block %d as %d", p.block, s.exp)
		}
		s.got = append(s.got, s.exp)
		s.exp++
		s.inWin++
		s.gapped = false
		last := s.w.last > 0 && p.block == s.w.last
		if s.inWin == s.winSize || last {
			s.sendAck(uint16(s.exp - 1))
		}
		if last {
			s.done = true
		}
		return
	}
	if int16(uint16(p.block)-uint16(s.exp)) < 0 {
		s.sendAck(uint16(s.exp - 1)) // an old duplicate: say where we are
		return
	}
	if !s.gapped || s.everyStray {
		s.gapped = true
		s.sendAck(uint16(s.exp - 1))
	}
}

// run drives the simulation until the server is done or gives up, or
// limit of simulated time passes.
func (s *sim) run(limit time.Duration) {
	end := s.now.Add(limit)
	s.pump()
	for s.now.Before(end) {
		if s.w.done() {
			s.endedAt = s.now
			return
		}
		next := end
		kind := 0
		if len(s.queue) > 0 && s.queue[0].at.Before(next) {
			next, kind = s.queue[0].at, 1
		}
		if dl := s.w.deadline(); !dl.IsZero() && dl.Before(next) {
			next, kind = dl, 2
		}
		if !s.cTimer.IsZero() && s.cTimer.Before(next) && !s.done {
			next, kind = s.cTimer, 3
		}
		s.now = next
		switch kind {
		case 0:
			return
		case 1:
			p := s.queue[0]
			s.queue = s.queue[1:]
			if p.toCli {
				s.client(p)
			} else if r := s.w.ack(p.ack, s.now); r == ackProgress || r == ackRetransmit {
				s.pump()
			}
		case 2:
			if !s.w.expire(s.now) {
				s.gaveUp, s.endedAt = true, s.now
				return
			}
			s.pump()
		case 3:
			s.cTimer = time.Time{}
			s.sendAck(uint16(s.exp - 1))
		}
	}
	s.t.Fatalf("simulation did not end within %v (acked %d of %d)", limit, s.w.acked, s.w.last)
}

func (s *sim) checkDelivered(n int64) {
	s.t.Helper()
	if !s.w.done() || !s.done {
		s.t.Fatalf("not done: server acked %d, receiver at %d", s.w.acked, s.exp-1)
	}
	if int64(len(s.got)) != n {
		s.t.Fatalf("receiver took %d blocks, want %d", len(s.got), n)
	}
	for i, k := range s.got {
		if k != int64(i+1) {
			s.t.Fatalf("block %d at position %d", k, i+1)
		}
	}
}

func (s *sim) sentOnce(except ...int64) {
	s.t.Helper()
	for k, n := range s.sends {
		if n != 1 && !slices.Contains(except, k) {
			s.t.Errorf("block %d sent %d times", k, n)
		}
	}
}

func TestWindowLockStepWaitsForEachAck(t *testing.T) {
	w := newWindow(1, false, 3, time.Second, 5)
	now := time.Unix(0, 0)
	if k, ok := w.due(); !ok || k != 1 {
		t.Fatalf("first due %d %v", k, ok)
	}
	w.sent(1, false, now)
	if k, ok := w.due(); ok {
		t.Fatalf("block %d due before ACK 1 (send-ahead)", k)
	}
	if r := w.ack(1, now.Add(time.Millisecond)); r != ackProgress {
		t.Fatalf("ACK 1: %v", r)
	}
	if k, _ := w.due(); k != 2 {
		t.Fatalf("after ACK 1 due %d", k)
	}
}

func TestWindowOACKWaitsForAck0(t *testing.T) {
	w := newWindow(8, true, 100, time.Second, 5)
	now := time.Unix(0, 0)
	if k, ok := w.due(); !ok || k != 0 {
		t.Fatalf("first due %d %v, want the OACK", k, ok)
	}
	w.sent(0, false, now)
	if k, ok := w.due(); ok {
		t.Fatalf("block %d due before ACK 0", k)
	}
	if r := w.ack(0, now.Add(time.Millisecond)); r != ackProgress {
		t.Fatalf("ACK 0: %v", r)
	}
	var due []int64
	for k, ok := w.due(); ok; k, ok = w.due() {
		due = append(due, k)
		w.sent(k, false, now)
	}
	if !slices.Equal(due, []int64{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("window after ACK 0: %v", due)
	}
}

func TestWindowNoLoss(t *testing.T) {
	for _, c := range []struct {
		win  int
		oack bool
	}{{1, false}, {1, true}, {8, true}, {64, true}} {
		s := newSim(t, c.win, c.oack, 1000, time.Second, 5)
		s.run(time.Minute)
		s.checkDelivered(1000)
		s.sentOnce()
		if s.w.retransmissions != 0 {
			t.Errorf("window %d: %d retransmissions", c.win, s.w.retransmissions)
		}
	}
}

func TestWindowLockStepLostData(t *testing.T) {
	// Lost once: the tail probe sends it again a few round trips later.
	s := newSim(t, 1, false, 20, time.Second, 5)
	s.dropData = func(k int64, n int) bool { return k == 5 && s.sends[5] == 1 }
	s.run(time.Minute)
	s.checkDelivered(20)
	s.sentOnce(5)
	if gap := s.sendAt[5][1].Sub(s.sendAt[5][0]); s.sends[5] != 2 || gap > 20*time.Millisecond {
		t.Fatalf("block 5 sent %d times, again after %v", s.sends[5], gap)
	}
	// Lost twice (the probe too): then the timeout, 200 ms after the
	// first transmission, not 1 s.
	s = newSim(t, 1, false, 20, time.Second, 5)
	s.dropData = func(k int64, n int) bool { return k == 5 && s.sends[5] <= 2 }
	s.run(time.Minute)
	s.checkDelivered(20)
	if s.sends[5] != 3 || s.sendAt[5][2].Sub(s.sendAt[5][0]) != minRTO {
		t.Fatalf("block 5 sent %d times at %v", s.sends[5], s.sendAt[5])
	}
}

func TestWindowLockStepLostAck(t *testing.T) {
	s := newSim(t, 1, true, 20, time.Second, 5)
	s.dropAck = func(a uint16, n int) bool { return a == 5 && n == 5 } // ACK 0 is n=0
	s.run(time.Minute)
	s.checkDelivered(20)
	s.sentOnce(5)
	if s.sends[5] != 2 || s.sends[6] != 1 {
		t.Fatalf("block 5 sent %d, block 6 %d times", s.sends[5], s.sends[6])
	}
}

// A lost block in a window: in the middle or first, the receiver reports
// the gap and the window starts again at the lost block; last, nothing
// reveals it and the tail probe sends it. Either way within a few round
// trips, far below the 200 ms timeout, and at most a window goes twice.
func TestWindowLostDataInWindow(t *testing.T) {
	for _, lost := range []int64{13, 9, 16} { // window 9..16
		s := newSim(t, 8, true, 40, time.Second, 5)
		s.rttJitter = true
		s.dropData = func(k int64, n int) bool { return k == lost && s.sends[k] == 1 }
		s.run(time.Minute)
		s.checkDelivered(40)
		extra := 0
		for k, n := range s.sends {
			extra += n - 1
			if n > 2 || n > 1 && k < lost {
				t.Errorf("lost %d: block %d sent %d times", lost, k, n)
			}
		}
		if extra > 8 {
			t.Errorf("lost %d: %d blocks sent again", lost, extra)
		}
		if gap := s.sendAt[lost][1].Sub(s.sendAt[lost][0]); gap > 20*time.Millisecond {
			t.Errorf("lost %d: recovery took %v", lost, gap)
		}
	}
}

// The ACK of a whole window is lost: the tail probe (the window's last
// block, one datagram) makes the receiver say where it is, and the next
// window follows.
func TestWindowLostAckProbesTail(t *testing.T) {
	s := newSim(t, 8, true, 40, time.Second, 5)
	s.dropAck = func(a uint16, n int) bool { return a == 8 && n == 1 }
	s.run(time.Minute)
	s.checkDelivered(40)
	s.sentOnce(8)
	if s.sends[8] != 2 || s.sendAt[8][1].Sub(s.sendAt[8][0]) > 20*time.Millisecond {
		t.Fatalf("block 8 sent at %v", s.sendAt[8])
	}
}

func TestWindowDuplicateAcksIgnored(t *testing.T) {
	for _, win := range []int{1, 8} {
		s := newSim(t, win, true, 200, time.Second, 5)
		s.dupAcks = true
		s.run(time.Minute)
		s.checkDelivered(200)
		s.sentOnce()
	}
}

// The Sorcerer's Apprentice (RFC 1123 4.2.3.1): DATA 5 is late, not lost,
// so a timer sends it again and the receiver acknowledges both copies.
// Whenever the late copy arrives, the second ACK must not send block 6
// again, nor anything after it.
func TestWindowSorcerersApprentice(t *testing.T) {
	for late := 500 * time.Microsecond; late < 300*time.Millisecond; late += 500 * time.Microsecond {
		s := newSim(t, 1, false, 50, time.Second, 5)
		s.delayData = func(k int64, n int) time.Duration {
			if k == 5 && s.sends[5] == 1 {
				return late
			}
			return 0
		}
		s.run(time.Minute)
		s.checkDelivered(50)
		s.sentOnce(5)
		if s.sends[5] > 3 {
			t.Fatalf("late by %v: block 5 sent %d times", late, s.sends[5])
		}
	}
}

// Lock-step ignores duplicate ACKs, even late ones from a receiver with a
// short timer (busybox: 50 ms): only the timers send a block again, so a
// duplicate can never turn into a stream of duplicates.
func TestWindowLockStepIgnoresDuplicateAcks(t *testing.T) {
	s := newSim(t, 1, false, 20, time.Second, 5)
	s.clientTimeout = 50 * time.Millisecond
	s.dropData = func(k int64, n int) bool { return k == 7 && s.sends[7] <= 2 } // and its tail probe
	s.run(time.Minute)
	s.checkDelivered(20)
	s.sentOnce(7)
	if s.sends[7] != 3 || s.sendAt[7][2].Sub(s.sendAt[7][0]) != minRTO {
		t.Fatalf("block 7 sent at %v; want the probe, then the %v timeout", s.sendAt[7], minRTO)
	}
}

func TestWindowAckOutsideWindowIgnored(t *testing.T) {
	now := time.Unix(0, 0)
	w := newWindow(4, true, 100, time.Second, 5)
	w.sent(0, false, now)
	w.ack(0, now)
	for k, ok := w.due(); ok; k, ok = w.due() {
		w.sent(k, false, now)
	}
	// In flight: 1..4. ACKs for blocks never sent, from long ago, or
	// wrapped around are ignored and change nothing.
	for _, n := range []uint16{5, 9, 60000, 65535, 0} {
		if r := w.ack(n, now); r != ackIgnored {
			t.Fatalf("ACK %d: %v", n, r)
		}
	}
	if w.acked != 0 || w.maxSent != 4 {
		t.Fatalf("acked %d maxSent %d", w.acked, w.maxSent)
	}
	if r := w.ack(4, now); r != ackProgress || w.acked != 4 {
		t.Fatalf("ACK 4: %v acked %d", r, w.acked)
	}
	if r := w.ack(2, now); r != ackIgnored {
		t.Fatalf("stale ACK 2 after ACK 4: %v", r)
	}
}

func TestWindowBlockNumbersWrap(t *testing.T) {
	const n = 3*65536 + 100
	for _, win := range []int{1, 8} {
		s := newSim(t, win, true, n, time.Second, 5)
		// Losses on both sides of each wrap, in both directions.
		near := func(k int64) bool { return k%65536 == 65535 || k%65536 == 0 || k%65536 == 1 }
		s.dropData = func(k int64, i int) bool { return near(k) && s.sends[k] == 1 }
		s.dropAck = func(a uint16, i int) bool { return (a == 65534 || a == 2) && i%2 == 0 }
		s.run(2 * time.Hour)
		s.checkDelivered(n)
	}
}

func TestWindowRandomLoss(t *testing.T) {
	for seed := int64(1); seed <= 30; seed++ {
		for _, win := range []int{1, 4, 16} {
			rng := rand.New(rand.NewSource(seed))
			s := newSim(t, win, win > 1 || seed%2 == 0, 3000, time.Second, 8)
			s.rttJitter = seed%2 == 1
			s.clientTimeout = time.Duration(seed%3) * 300 * time.Millisecond
			s.dupAcks = seed%5 == 0
			s.everyStray = seed%7 < 3
			lost := 0
			s.dropData = func(int64, int) bool { l := rng.Intn(100) == 0; lost += map[bool]int{true: 1}[l]; return l }
			s.dropAck = func(uint16, int) bool { l := rng.Intn(100) == 0; lost += map[bool]int{true: 1}[l]; return l }
			s.run(time.Hour)
			s.checkDelivered(3000)
			// Each loss costs at most a window or two of duplicates: no
			// duplicate stream, whatever the receiver repeats.
			if extra := s.nData - 3000 - map[bool]int{true: 1}[s.oack]; extra > (lost+1)*win*2 {
				t.Errorf("seed %d window %d: %d extra datagrams for %d losses", seed, win, extra, lost)
			}
		}
	}
}

// A client that never answers gets one datagram per timeout (the OACK or
// block 1, whatever the window) and the transfer ends after
// maxTries+1 timeouts.
func TestWindowNeverAckingClient(t *testing.T) {
	for _, c := range []struct {
		win  int
		oack bool
	}{{1, false}, {8, true}} {
		s := newSim(t, c.win, c.oack, 100, time.Second, 5)
		s.clientDead = true
		start := s.now
		s.run(time.Minute)
		if !s.gaveUp {
			t.Fatal("transfer did not give up")
		}
		first := int64(1)
		if c.oack {
			first = 0
		}
		if len(s.sends) != 1 || s.sends[first] != 6 {
			t.Fatalf("window %d: sends %v, want 6 x block %d", c.win, s.sends, first)
		}
		for i, at := range s.sendAt[first] {
			if want := start.Add(time.Duration(i) * time.Second); !at.Equal(want) {
				t.Fatalf("datagram %d at %v, want %v", i, at.Sub(start), want.Sub(start))
			}
		}
		if d := s.endedAt.Sub(start); d != 6*time.Second {
			t.Fatalf("ended after %v, want 6s", d)
		}
	}
}

// After ACK 0 a window client that goes silent gets the window, one tail
// probe, then one datagram per timeout (the first unacknowledged block).
func TestWindowSilentAfterAck0(t *testing.T) {
	s := newSim(t, 8, true, 100, time.Second, 3)
	s.dropData = func(k int64, n int) bool { return k > 0 } // the client never sees data
	s.run(time.Minute)
	if !s.gaveUp {
		t.Fatal("did not give up")
	}
	if s.sends[1] != 4 || s.sends[2] != 1 || s.sends[8] != 2 || s.sends[9] != 0 {
		t.Fatalf("sends %v", s.sends)
	}
	for i := 1; i < 4; i++ {
		if d := s.sendAt[1][i].Sub(s.sendAt[1][i-1]); d < minRTO {
			t.Fatalf("block 1 again after %v", d)
		}
	}
}

func TestWindowTimeoutFollowsRoundTrip(t *testing.T) {
	now := time.Unix(0, 0)
	w := newWindow(1, false, 1000, 2*time.Second, 5)
	if w.rto != 2*time.Second {
		t.Fatalf("initial timeout %v", w.rto)
	}
	for k := int64(1); k <= 10; k++ {
		w.sent(k, false, now)
		now = now.Add(time.Millisecond)
		w.ack(uint16(k), now)
	}
	if w.rto != minRTO {
		t.Fatalf("timeout after 1 ms round trips: %v, want the %v floor", w.rto, minRTO)
	}
	w.sent(11, false, now)
	// First the tail probe, a few round trips later; then the timeout,
	// doubling up to the ceiling.
	if d := w.deadline().Sub(now); d > minRoundTrip {
		t.Fatalf("tail probe due after %v", d)
	}
	if !w.expire(w.deadline()) || w.rto != minRTO {
		t.Fatalf("tail probe changed the timeout to %v", w.rto)
	}
	if k, _ := w.due(); k != 11 {
		t.Fatalf("probe %d", k)
	}
	w.sent(11, false, w.deadline())
	for _, want := range []time.Duration{400, 800, 1600, 2000, 2000} {
		now = w.deadline()
		if !w.expire(now) {
			t.Fatal("gave up early")
		}
		if w.rto != want*time.Millisecond {
			t.Fatalf("backoff %v, want %v", w.rto, want*time.Millisecond)
		}
		k, _ := w.due()
		w.sent(k, false, now)
	}
	// Karn: the ACK of a retransmitted block is no sample.
	srtt := w.srtt
	w.ack(11, now.Add(5*time.Second))
	if w.srtt != srtt {
		t.Fatalf("sampled a retransmitted block: srtt %v -> %v", srtt, w.srtt)
	}
	// A slow client's round trip raises the timeout.
	for k := int64(12); k <= 30; k++ {
		w.sent(k, false, now)
		now = now.Add(300 * time.Millisecond)
		w.ack(uint16(k), now)
	}
	if w.rto < 300*time.Millisecond || w.rto > 2*time.Second {
		t.Fatalf("timeout %v for a 300 ms round trip", w.rto)
	}
}

// A payload of unknown size (netascii) ends at the first short block.
func TestWindowUnknownSize(t *testing.T) {
	now := time.Unix(0, 0)
	w := newWindow(4, true, 0, time.Second, 5)
	w.sent(0, false, now)
	w.ack(0, now)
	for k := int64(1); k <= 3; k++ {
		kk, ok := w.due()
		if !ok || kk != k {
			t.Fatalf("due %d %v", kk, ok)
		}
		w.sent(k, k == 3, now)
	}
	if k, ok := w.due(); ok {
		t.Fatalf("block %d due after the last", k)
	}
	if r := w.ack(3, now); r != ackDone {
		t.Fatalf("ACK of the last block: %v", r)
	}
}
