package browser

import (
	"context"
	"io"
	"net"
	"sync"

	"github.com/ztpd/ztpd/testenv/netns"
)

// Forwarder is a TCP forwarder on the host's loopback: each connection
// accepted on Addr is joined to a new connection Dial opens (inside a
// network namespace, for a server in the lab), so chromium, which runs on
// the host, reaches the appliance at http://<Addr>/.
type Forwarder struct {
	Addr string // 127.0.0.1:<port>
	ln   net.Listener
	dial func(ctx context.Context) (net.Conn, error)
	wg   sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  bool
}

// Forward listens on 127.0.0.1:0 and forwards every connection to what
// dial connects to.
func Forward(dial func(ctx context.Context) (net.Conn, error)) (*Forwarder, error) {
	return ForwardOn("127.0.0.1:0", dial)
}

// ForwardOn is Forward listening on listen (host:port; port 0 picks one):
// ztpd-lab serves the console to a person's browser at an address given.
func ForwardOn(listen string, dial func(ctx context.Context) (net.Conn, error)) (*Forwarder, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	f := &Forwarder{Addr: ln.Addr().String(), ln: ln, dial: dial, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

// ForwardNS forwards to addr (host:port) dialled inside ns.
func ForwardNS(ns *netns.NS, addr string) (*Forwarder, error) {
	return ForwardNSOn("127.0.0.1:0", ns, addr)
}

// ForwardNSOn is ForwardNS listening on listen.
func ForwardNSOn(listen string, ns *netns.NS, addr string) (*Forwarder, error) {
	return ForwardOn(listen, func(ctx context.Context) (net.Conn, error) {
		var c net.Conn
		err := ns.Do(func() error {
			var d net.Dialer
			var err error
			c, err = d.DialContext(ctx, "tcp", addr)
			return err
		})
		return c, err
	})
}

// URL is http://<Addr> (a forwarded TLS server is at https://<Addr>).
func (f *Forwarder) URL() string { return "http://" + f.Addr }

func (f *Forwarder) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.pipe(c)
		}()
	}
}

func (f *Forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *Forwarder) untrack(c net.Conn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
	c.Close()
}

func (f *Forwarder) pipe(c net.Conn) {
	if !f.track(c) {
		c.Close()
		return
	}
	defer f.untrack(c)
	up, err := f.dial(context.Background())
	if err != nil {
		return
	}
	if !f.track(up) {
		up.Close()
		return
	}
	defer f.untrack(up)
	var wg sync.WaitGroup
	wg.Add(2)
	half := func(dst, src net.Conn) {
		defer wg.Done()
		io.Copy(dst, src)
		// Pass the end of one direction on (an HTTP/1.1 client may close
		// its side first and still read the answer).
		if tc, ok := dst.(*net.TCPConn); ok {
			tc.CloseWrite()
		} else {
			dst.Close()
		}
	}
	go half(up, c)
	go half(c, up)
	wg.Wait()
}

// Close stops listening and closes every forwarded connection.
func (f *Forwarder) Close() {
	f.ln.Close()
	f.mu.Lock()
	f.done = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
