package dhcp

import (
	"sync"
	"time"
)

// pacer sends the ACKs a commit released spread over about the time the
// next commit takes, instead of in one burst. A burst of hundreds of
// replies overflows the socket buffer of a relay or a busy client (perfdhcp
// loses them at 212 KB), while the same packets as a steady stream pass.
type pacer struct {
	mu   sync.Mutex
	q    []pendingAck
	rate float64 // packets per second to aim for
	last time.Time
	wake chan struct{}
}

const (
	paceChunk = 4 // packets sent back to back
	// A batch is spread over ~80% of the time since the previous commit,
	// bounded so that an idle spell never makes the pacer slow.
	paceMinCycle = 200 * time.Microsecond
	paceMaxCycle = 20 * time.Millisecond
)

func newPacer() *pacer { return &pacer{wake: make(chan struct{}, 1)} }

// push queues the ACKs of one commit and sets the rate so that everything
// queued goes out before the next commit is likely to finish.
func (p *pacer) push(acks []pendingAck, now time.Time) {
	p.mu.Lock()
	p.q = append(p.q, acks...)
	cycle := min(max(now.Sub(p.last), paceMinCycle), paceMaxCycle)
	p.last = now
	p.rate = float64(len(p.q)) / (cycle.Seconds() * 0.8)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take removes up to n queued ACKs into batch.
func (p *pacer) take(batch []pendingAck, n int) ([]pendingAck, int, float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n = min(n, len(p.q))
	batch = append(batch[:0], p.q[:n]...)
	p.q = dropFront(p.q, n)
	return batch, len(p.q), p.rate
}

// run sends until stop is closed, then sends what is left at once.
func (p *pacer) run(s *Server, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	w := &sender{}
	var batch []pendingAck
	send := func() {
		for i := range batch {
			w.send(s, batch[i].ifc, batch[i].dst, batch[i].pkt, msgAck)
			batch[i] = pendingAck{}
		}
	}
	flushAll := func() {
		batch, _, _ = p.take(batch, 1<<30)
		send()
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-p.wake:
		case <-stop:
			flushAll()
			return
		}
		// Token bucket: timers overshoot, so what is due by the clock goes
		// out, at least a chunk and at most a few at a time.
		tokens, t0 := float64(paceChunk), time.Now()
		for {
			var left int
			var rate float64
			batch, left, rate = p.take(batch, int(tokens))
			send()
			if left == 0 {
				break
			}
			gap := time.Duration(float64(paceChunk) / rate * float64(time.Second))
			timer.Reset(min(gap, paceMaxCycle/10))
			select {
			case <-timer.C:
			case <-stop:
				flushAll()
				return
			}
			now := time.Now()
			tokens = min(max(tokens-float64(len(batch))+now.Sub(t0).Seconds()*rate, paceChunk), 2*paceChunk)
			t0 = now
		}
	}
}
