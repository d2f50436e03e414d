package wirecapture

import (
	"net/netip"
	"sort"
)

// Flow is one direction of a conversation.
type Flow struct {
	Src, Dst netip.AddrPort
}

func (f Flow) String() string { return f.Src.String() + "→" + f.Dst.String() }

// Reverse is the flow the other way.
func (f Flow) Reverse() Flow { return Flow{Src: f.Dst, Dst: f.Src} }

// Stream is what one direction of a TCP connection carried, in sequence
// order. Pieces are the contiguous runs: a segment the capture missed
// splits the stream, so nothing is ever matched across a hole.
type Stream struct {
	Flow   Flow
	Pieces [][]byte
	// Missing counts the bytes between pieces the capture did not hold.
	Missing int64
}

// Len is the bytes the stream holds.
func (s *Stream) Len() int {
	n := 0
	for _, p := range s.Pieces {
		n += len(p)
	}
	return n
}

// Conn is one TCP connection: the client's stream (who sent the SYN, or
// the higher port when the capture missed the handshake) and the server's.
type Conn struct {
	Client, Server *Stream
}

func (c *Conn) String() string { return c.Client.Flow.String() }

// segment is one TCP segment's payload at its sequence number.
type segment struct {
	seq     uint32
	payload []byte
}

// direction collects one direction's segments until the connection ends.
type direction struct {
	flow    Flow
	isn     uint32 // the SYN's sequence number, when synSeen
	synSeen bool
	segs    []segment
}

func (d *direction) add(seq uint32, payload []byte) {
	if len(payload) > 0 {
		d.segs = append(d.segs, segment{seq, payload})
	}
}

// assemble orders the segments by sequence number and stitches them:
// retransmitted and duplicated bytes (a forwarded packet is seen twice on
// a bridge) are kept once, the first copy winning, and a hole starts a new
// piece. Sequence numbers wrap: offsets are taken relative to the first
// byte after the SYN, or else to the first segment seen.
func (d *direction) assemble() *Stream {
	s := &Stream{Flow: d.flow}
	if len(d.segs) == 0 {
		return s
	}
	base := d.segs[0].seq
	if d.synSeen {
		base = d.isn + 1
	} else {
		// Without the SYN the earliest segment (by sequence, not by
		// arrival) is the start.
		for _, sg := range d.segs[1:] {
			if int32(sg.seq-base) < 0 {
				base = sg.seq
			}
		}
	}
	type placed struct {
		off     int64
		payload []byte
	}
	ps := make([]placed, 0, len(d.segs))
	for _, sg := range d.segs {
		off := int64(int32(sg.seq - base))
		p := sg.payload
		if off < 0 {
			// Bytes before the start (a segment before the SYN's
			// retransmission was seen): keep what falls after it.
			if -off >= int64(len(p)) {
				continue
			}
			p = p[-off:]
			off = 0
		}
		ps = append(ps, placed{off, p})
	}
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].off < ps[j].off })
	var cur []byte
	var next int64 = -1
	for _, p := range ps {
		end := p.off + int64(len(p.payload))
		switch {
		case next < 0:
			cur = append([]byte(nil), p.payload...)
		case p.off > next:
			s.Pieces = append(s.Pieces, cur)
			s.Missing += p.off - next
			cur = append([]byte(nil), p.payload...)
		case end <= next:
			continue
		default:
			cur = append(cur, p.payload[next-p.off:]...)
		}
		next = end
	}
	s.Pieces = append(s.Pieces, cur)
	if !d.synSeen && ps[0].off > 0 {
		s.Missing += ps[0].off
	}
	return s
}

// connKey names a connection by its two ends, ordered.
type connKey struct{ a, b netip.AddrPort }

func keyOf(f Flow) connKey {
	if f.Src.Addr().Less(f.Dst.Addr()) || (f.Src.Addr() == f.Dst.Addr() && f.Src.Port() < f.Dst.Port()) {
		return connKey{f.Src, f.Dst}
	}
	return connKey{f.Dst, f.Src}
}

// tcpConn is a connection being collected.
type tcpConn struct {
	dirs   map[Flow]*direction
	client Flow // the SYN's sender's flow, once seen
	syn    bool
	order  int // first seen, for a stable output order
}

// Assembler collects TCP segments into connections. It keeps every
// payload until Finish: the lab's captures are tens of megabytes.
type Assembler struct {
	open  map[connKey]*tcpConn
	done  []*tcpConn
	count int
}

// NewAssembler is an empty assembler.
func NewAssembler() *Assembler { return &Assembler{open: map[connKey]*tcpConn{}} }

// Add takes one segment of flow.
func (a *Assembler) Add(flow Flow, seq uint32, syn, ack bool, payload []byte) {
	k := keyOf(flow)
	c := a.open[k]
	if c != nil && syn {
		// A SYN with another ISN on a known 4-tuple is a new connection
		// reusing the ports; the same ISN is the SYN retransmitted.
		if d := c.dirs[flow]; d != nil && (!d.synSeen || d.isn != seq) && (d.synSeen || len(d.segs) > 0) {
			a.done = append(a.done, c)
			c = nil
		}
	}
	if c == nil {
		c = &tcpConn{dirs: map[Flow]*direction{}, order: a.count}
		a.count++
		a.open[k] = c
	}
	d := c.dirs[flow]
	if d == nil {
		d = &direction{flow: flow}
		c.dirs[flow] = d
	}
	if syn && !d.synSeen {
		d.synSeen, d.isn = true, seq
		if !ack {
			c.client, c.syn = flow, true
		} else if !c.syn {
			c.client, c.syn = flow.Reverse(), true
		}
	}
	if syn {
		// A SYN's payload (TCP fast open) starts after its ISN.
		seq++
	}
	d.add(seq, payload)
}

// Finish returns every connection, in the order each was first seen.
func (a *Assembler) Finish() []*Conn {
	all := append([]*tcpConn(nil), a.done...)
	for _, c := range a.open {
		all = append(all, c)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].order < all[j].order })
	out := make([]*Conn, 0, len(all))
	for _, c := range all {
		client := c.client
		if !c.syn {
			client = guessClient(c)
		}
		cd := c.dirs[client]
		if cd == nil {
			cd = &direction{flow: client}
		}
		sd := c.dirs[client.Reverse()]
		if sd == nil {
			sd = &direction{flow: client.Reverse()}
		}
		out = append(out, &Conn{Client: cd.assemble(), Server: sd.assemble()})
	}
	a.open, a.done = map[connKey]*tcpConn{}, nil
	return out
}

// guessClient picks the client of a connection whose handshake the
// capture missed: the end with the higher (ephemeral) port.
func guessClient(c *tcpConn) Flow {
	var f Flow
	for f = range c.dirs {
		break
	}
	if f.Src.Port() > f.Dst.Port() {
		return f
	}
	return f.Reverse()
}
