package fleet

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv6"
)

// Renewal is one client in RENEWING state: who it is and the address it
// holds.
type Renewal struct {
	ID  Identity
	ID6 Identity6 // over DHCPv6 (RenewStorm.Relay6)
	IP  netip.Addr
}

// RenewAck is what a renewal's DHCPACK granted.
type RenewAck struct {
	Lease       time.Duration // option 51
	Latency     time.Duration // first REQUEST -> ACK
	Retransmits int
}

// Renew is one client at T1 (RFC 2131 §4.4.5, RENEWING): it unicasts
// DHCPREQUEST from ip:68 straight to server:67 with ciaddr = ip, no giaddr,
// no requested-address and no server-identifier options, and the options
// it sent at DORA; the server answers unicast to ciaddr:68. ip must be a
// local address of the caller's namespace (a "local" route will do). It
// retransmits tries times, the wait doubling from wait; a server that never
// answers is an error, a DHCPNAK is ErrNAK, an ACK for another address an
// error.
func Renew(ctx context.Context, server netip.Addr, r Renewal, tries int, wait time.Duration) (RenewAck, error) {
	// A socket of its own, bound to the leased address, as the client's is:
	// the kernel delivers the unicast reply to the most specific binding.
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: r.IP.AsSlice(), Port: 68})
	if err != nil {
		return RenewAck{}, fmt.Errorf("%s: bind %s:68: %w", r.ID.MAC, r.IP, err)
	}
	defer conn.Close()
	mods := append(r.ID.modifiers(), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
		dhcpv4.WithHwAddr(r.ID.MAC), dhcpv4.WithClientIP(r.IP.AsSlice()))
	req, err := dhcpv4.New(mods...)
	if err != nil {
		return RenewAck{}, err
	}
	raw := req.ToBytes()
	dst := &net.UDPAddr{IP: server.AsSlice(), Port: 67}
	buf := make([]byte, 1500)
	start := time.Now()
	var res RenewAck
	for try := 0; try < tries; try++ {
		if try > 0 {
			res.Retransmits++
		}
		if _, err := conn.WriteToUDP(raw, dst); err != nil {
			return res, fmt.Errorf("%s: send from %s: %w", r.ID.MAC, r.IP, err)
		}
		deadline := time.Now().Add(wait)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		_ = conn.SetReadDeadline(deadline)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				if ctx.Err() != nil {
					return res, ctx.Err()
				}
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					break
				}
				return res, err
			}
			p, err := dhcpv4.FromBytes(buf[:n])
			if err != nil || p.OpCode != dhcpv4.OpcodeBootReply || p.TransactionID != req.TransactionID {
				continue
			}
			switch p.MessageType() {
			case dhcpv4.MessageTypeAck:
				res.Latency = time.Since(start)
				res.Lease = p.IPAddressLeaseTime(0)
				if got, _ := netip.AddrFromSlice(p.YourIPAddr.To4()); got != r.IP {
					return res, fmt.Errorf("%s: renewing %s, ACK for %s", r.ID.MAC, r.IP, got)
				}
				return res, nil
			case dhcpv4.MessageTypeNak:
				res.Latency = time.Since(start)
				return res, ErrNAK
			}
		}
		wait *= 2
	}
	return res, fmt.Errorf("%s: renewing %s: %w after %d tries", r.ID.MAC, r.IP, ErrNoAnswer, tries)
}

// ErrNoAnswer is a request the server never answered.
var ErrNoAnswer = errors.New("no answer")

// RenewStorm renews a whole fleet at T1: each client starts its RENEWING
// exchange at a time drawn uniformly from [0, Window), as a fleet that
// booted over a window renews over the same window half a lease later.
type RenewStorm struct {
	Server  netip.Addr
	Clients []Renewal
	Window  time.Duration
	// Tries and Wait are each client's retransmissions (default 4 and 2 s,
	// doubling: the last wait ends 30 s after the first REQUEST).
	Tries int
	Wait  time.Duration
	Seed  uint64
	// Relay6, when set, renews over DHCPv6: each client's Renew names
	// ServerDUID and goes through the relay, as a client behind a relay
	// renews (it multicasts; its link's relay forwards).
	Relay6     *Relay6
	ServerDUID dhcpv6.DUID
}

// RenewResult sums a renewal storm up. Every client ends in exactly one
// of Acked, NAKs, Drops (no answer after the retransmissions) and Failed
// (an error of its own: a socket, an ACK for another address).
type RenewResult struct {
	Devices     int
	Acked       int
	NAKs        int
	Drops       int
	Failed      int
	Retransmits int
	Window      time.Duration
	Elapsed     time.Duration // first REQUEST to the last client's end
	P50, P99    time.Duration // first REQUEST -> ACK, over the acked
	Max         time.Duration
	LeaseMin    time.Duration // the shortest lease an ACK granted
	LeaseMax    time.Duration
	Errors      []string // first few
	Started     time.Time
}

// Rate is the ACKs per second over the run.
func (r RenewResult) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Acked) / r.Elapsed.Seconds()
}

// Run starts every client at its time and waits for all of them.
func (s *RenewStorm) Run(ctx context.Context) RenewResult {
	tries, wait := s.Tries, s.Wait
	if tries < 1 {
		tries = 4
	}
	if wait <= 0 {
		wait = 2 * time.Second
	}
	rng := rand.New(rand.NewPCG(s.Seed, 0x72656e6577))
	at := make([]time.Duration, len(s.Clients))
	for i := range at {
		if s.Window > 0 {
			at[i] = time.Duration(rng.Int64N(int64(s.Window)))
		}
	}
	order := make([]int, len(at))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return at[order[a]] < at[order[b]] })

	res := RenewResult{Devices: len(s.Clients), Window: s.Window}
	lat := make([]time.Duration, 0, len(s.Clients))
	var mu sync.Mutex
	var retrans atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	res.Started = start
	for _, i := range order {
		if d := at[i] - time.Since(start); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func(c Renewal) {
			defer wg.Done()
			var ack RenewAck
			var err error
			if s.Relay6 != nil {
				ack, err = s.Relay6.Renew6(ctx, c.ID6, s.ServerDUID, c.IP, tries, wait)
			} else {
				ack, err = Renew(ctx, s.Server, c, tries, wait)
			}
			retrans.Add(int64(ack.Retransmits))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				res.Acked++
				lat = append(lat, ack.Latency)
				if res.LeaseMin == 0 || ack.Lease < res.LeaseMin {
					res.LeaseMin = ack.Lease
				}
				res.LeaseMax = max(res.LeaseMax, ack.Lease)
				return
			case errors.Is(err, ErrNAK):
				res.NAKs++
				if s.Relay6 == nil {
					err = fmt.Errorf("%s: renewing %s: %w", c.ID.MAC, c.IP, err)
				}
			case errors.Is(err, ErrNoAnswer):
				res.Drops++
			default:
				res.Failed++
			}
			if len(res.Errors) < 10 {
				res.Errors = append(res.Errors, err.Error())
			}
		}(s.Clients[i])
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.Retransmits = int(retrans.Load())
	// Clients never started (the context ended) count as failed.
	res.Failed += res.Devices - res.Acked - res.NAKs - res.Drops - res.Failed
	res.P50, res.P99, res.Max = quantiles(lat)
	return res
}

// quantiles sorts lat and returns its p50, p99 and maximum (0 when empty).
func quantiles(lat []time.Duration) (p50, p99, highest time.Duration) {
	if len(lat) == 0 {
		return 0, 0, 0
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)], lat[len(lat)-1]
}
