package fleet

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// relaySocket is what the DHCPv4 and DHCPv6 relays share: the relay's UDP
// socket, a read loop that hands each reply to the client waiting for it
// (by K: the DHCPv4 transaction id, the DHCPv6 client's peer address), and
// a client's retransmissions with backoff.
type relaySocket[K comparable, M any] struct {
	conn   *net.UDPConn
	server *net.UDPAddr
	// route reads a datagram from the server: the reply it carries and
	// whose it is; ok is false for anything else, which is dropped.
	route   func(b []byte) (key K, reply M, ok bool)
	mu      sync.Mutex
	waiting map[K]chan M
	closed  chan struct{}
}

// listenRelay binds laddr and starts routing what server answers.
func listenRelay[K comparable, M any](network string, laddr, server *net.UDPAddr, route func([]byte) (K, M, bool)) (*relaySocket[K, M], error) {
	conn, err := net.ListenUDP(network, laddr)
	if err != nil {
		return nil, err
	}
	// A storm's replies arrive in bursts of thousands.
	_ = conn.SetReadBuffer(8 << 20)
	_ = conn.SetWriteBuffer(8 << 20)
	s := &relaySocket[K, M]{conn: conn, server: server, route: route, waiting: map[K]chan M{}, closed: make(chan struct{})}
	go s.readLoop()
	return s, nil
}

func (s *relaySocket[K, M]) close() error {
	close(s.closed)
	return s.conn.Close()
}

func (s *relaySocket[K, M]) readLoop() {
	buf := make([]byte, 4096)
	for {
		n, _, err := s.conn.ReadFromUDP(buf)
		if err != nil {
			return
		}
		key, reply, ok := s.route(buf[:n])
		if !ok {
			continue
		}
		s.mu.Lock()
		ch := s.waiting[key]
		s.mu.Unlock()
		if ch != nil {
			select {
			case ch <- reply:
			default:
			}
		}
	}
}

// errTriesOut is an exchange whose every try went unanswered.
var errTriesOut = errors.New("no answer")

// exchange sends raw to the server for the client waiting under key and
// waits for a reply accept ends the exchange with (done: that reply and
// accept's error), sending raw again after wait, then after twice as
// long, tries times in all (errTriesOut), as a client retransmits.
func (s *relaySocket[K, M]) exchange(ctx context.Context, key K, raw []byte, tries int, wait time.Duration,
	accept func(M) (done bool, err error)) (M, error) {
	var none M
	ch := make(chan M, 4)
	s.mu.Lock()
	s.waiting[key] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.waiting, key)
		s.mu.Unlock()
	}()
	for try := 0; try < tries; try++ {
		if _, err := s.conn.WriteToUDP(raw, s.server); err != nil {
			return none, err
		}
		timer := time.NewTimer(wait)
	recv:
		for {
			select {
			case p := <-ch:
				if done, err := accept(p); done {
					timer.Stop()
					return p, err
				}
			case <-timer.C:
				break recv
			case <-ctx.Done():
				timer.Stop()
				return none, ctx.Err()
			case <-s.closed:
				timer.Stop()
				return none, errors.New("relay closed")
			}
		}
		wait *= 2
	}
	return none, errTriesOut
}
