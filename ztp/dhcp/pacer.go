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
	mu      sync.Mutex
	q       []pendingAck
	rate    float64 // packets per second to aim for
	last    time.Time
	wake    chan struct{}
	stopped bool
}

const (
	paceChunk = 8                      // packets sent back to back
	paceMin   = 200 * time.Microsecond // spread over at least this
)

func newPacer() *pacer { return &pacer{wake: make(chan struct{}, 1)} }

// push queues the ACKs of one commit. The rate is chosen so that what is
// queued goes out within ~80% of the time since the previous commit.
func (p *pacer) push(acks []pendingAck, now time.Time) {
	p.mu.Lock()
	p.q = append(p.q, acks...)
	cycle := max(now.Sub(p.last), paceMin)
	p.last = now
	p.rate = float64(len(p.q)) / (cycle.Seconds() * 0.8)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run sends until stop is closed, then sends what is left at once.
func (p *pacer) run(s *Server, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	w := &sender{}
	var batch []pendingAck
	for {
		select {
		case <-p.wake:
		case <-stop:
			p.mu.Lock()
			batch = append(batch[:0], p.q...)
			clear(p.q)
			p.q = p.q[:0]
			p.mu.Unlock()
			for i := range batch {
				w.send(s, batch[i].ifc, batch[i].dst, batch[i].pkt, msgAck)
			}
			return
		}
		// Token bucket: sleeps overshoot, so what is due by the clock goes
		// out, never less than a chunk and never more than a few.
		tokens, t0 := float64(paceChunk), time.Now()
		for {
			p.mu.Lock()
			n := min(len(p.q), int(tokens))
			batch = append(batch[:0], p.q[:n]...)
			p.q = dropFront(p.q, n)
			left, rate := len(p.q), p.rate
			p.mu.Unlock()
			for i := range batch {
				w.send(s, batch[i].ifc, batch[i].dst, batch[i].pkt, msgAck)
				batch[i] = pendingAck{}
			}
			if left == 0 {
				break
			}
			time.Sleep(time.Duration(paceChunk / rate * float64(time.Second)))
			now := time.Now()
			tokens = min(tokens-float64(n)+now.Sub(t0).Seconds()*rate, 4*paceChunk)
			tokens = max(tokens, paceChunk)
			t0 = now
		}
	}
}
