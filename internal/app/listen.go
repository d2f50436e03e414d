package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/ztp/dhcp"
	ztptftp "github.com/ztpd/ztpd/ztp/tftp"
)

// Listeners are the network sockets a server needs, bound before anything
// else is created: a port another process holds then fails serve before it
// makes a data directory, an at-rest key or an admin API key, and before it
// says it started. Serve hands them to the runners.
type Listeners struct {
	HTTP, Metadata, API, Pprof net.Listener
	// DeviceTLS is the device HTTPS listener (http.tls).
	DeviceTLS net.Listener
	// Peer serves image blobs to the other appliances of a group
	// (store.peer_addr; see peerListenAddr).
	Peer net.Listener
	// LinkLocal answer ONIE's link-local discovery on port 80 of each
	// link-local address of http.onie_link_local's interfaces.
	LinkLocal []net.Listener
	TFTP      *net.UDPConn
}

// Bind opens every TCP and UDP listener cfg asks for and checks that each
// DHCP interface can be served (it exists, no other ztpd or DHCP server has
// it); on any failure it closes what it opened and names the listener.
// DHCP's own sockets open in Serve, which checks again.
func Bind(cfg config.Config) (*Listeners, error) {
	// The operator's API certificate too: a bad one fails before anything
	// is created, like a busy port. (The self-signed one is made in the
	// data directory, so it comes later.)
	if _, useTLS := cfg.APIListener(); useTLS && cfg.API.TLS.CertFile != "" {
		if _, err := tls.LoadX509KeyPair(cfg.API.TLS.CertFile, cfg.API.TLS.KeyFile); err != nil {
			return nil, fmt.Errorf("api.tls: %w", err)
		}
	}
	if cfg.DeviceTLSListener() != "" && cfg.HTTP.TLS.CertFile != "" {
		if _, err := tls.LoadX509KeyPair(cfg.HTTP.TLS.CertFile, cfg.HTTP.TLS.KeyFile); err != nil {
			return nil, fmt.Errorf("http.tls: %w", err)
		}
	}
	l := &Listeners{}
	if err := l.bind(cfg, true); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func (l *Listeners) bind(cfg config.Config, checkDHCP bool) error {
	// DHCP first, as Serve opens it first: a second ztpd on the same
	// interface is refused by name, not by a port.
	if checkDHCP {
		for _, name := range cfg.DHCP.Interfaces {
			if err := dhcp.CheckInterface(name); err != nil {
				return fmt.Errorf("dhcp: %w", err)
			}
		}
	}
	tcp := func(ln *net.Listener, name, field, addr string) error {
		if addr == "" || *ln != nil {
			return nil
		}
		var err error
		if *ln, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("%s listener (%s) %s: %w", name, field, addr, err)
		}
		return nil
	}
	apiAddr, _ := cfg.APIListener()
	for _, b := range []struct {
		ln                *net.Listener
		name, field, addr string
	}{
		{&l.HTTP, "http", "http.addr, --http-addr", cfg.HTTP.Addr},
		{&l.Metadata, "metadata", "http.metadata_addr, --metadata-addr", cfg.HTTP.MetadataAddr},
		{&l.DeviceTLS, "device https", "http.tls.addr", cfg.DeviceTLSListener()},
		{&l.API, "api", "api.addr, --api-addr", apiAddr},
		{&l.Pprof, "pprof", "debug.pprof_addr, --pprof-addr", cfg.Debug.PprofAddr},
		{&l.Peer, "peer", "store.peer_addr", peerListenAddr(cfg)},
	} {
		if err := tcp(b.ln, b.name, b.field, b.addr); err != nil {
			return err
		}
	}
	if len(cfg.HTTP.ONIELinkLocal) > 0 && l.LinkLocal == nil {
		for _, name := range cfg.HTTP.ONIELinkLocal {
			addrs, err := linkLocalAddrs(name)
			if err != nil {
				return fmt.Errorf("onie link-local listener (http.onie_link_local) %s: %w", name, err)
			}
			for _, a := range addrs {
				ln, err := listenLinkLocal(a)
				if err != nil {
					return fmt.Errorf("onie link-local listener (http.onie_link_local) %s: %w", name, err)
				}
				l.LinkLocal = append(l.LinkLocal, ln)
			}
		}
	}
	if cfg.TFTP.Enabled && l.TFTP == nil {
		conn, err := ztptftp.Listen(cfg.TFTP.Addr)
		if err != nil {
			return fmt.Errorf("tftp listener (tftp.addr, --tftp-addr) %s: %w", cfg.TFTP.Addr, err)
		}
		l.TFTP = conn
	}
	return nil
}

// Close closes every listener not yet handed to a runner.
func (l *Listeners) Close() error {
	if l == nil {
		return nil
	}
	var errs []error
	for _, ln := range []*net.Listener{&l.HTTP, &l.Metadata, &l.DeviceTLS, &l.API, &l.Pprof, &l.Peer} {
		if *ln != nil {
			errs = append(errs, (*ln).Close())
			*ln = nil
		}
	}
	for _, ln := range l.LinkLocal {
		errs = append(errs, ln.Close())
	}
	l.LinkLocal = nil
	if l.TFTP != nil {
		errs = append(errs, l.TFTP.Close())
		l.TFTP = nil
	}
	return errors.Join(errs...)
}

// UseListeners gives Serve listeners bound by Bind. Without them Serve binds
// its own, all of them before any runner starts.
func (a *App) UseListeners(l *Listeners) { a.bound = l }

// OnServing registers f to run once Serve has every listener open, before
// it serves (serve logs "ztpd started" there).
func (a *App) OnServing(f func()) { a.serving = append(a.serving, f) }

// tftpRunner serves TFTP on a bound socket.
type tftpRunner struct {
	srv  *ztptftp.Server
	conn *net.UDPConn
}

func (t tftpRunner) Name() string { return t.srv.Name() }
func (t tftpRunner) Run(ctx context.Context) error {
	return t.srv.Serve(ctx, t.conn)
}

// linkLocalAddrs are the IPv6 link-local addresses of interface name, each
// with its zone.
func linkLocalAddrs(name string) ([]netip.Addr, error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		if missing := config.InterfaceExists(name); missing != nil {
			return nil, missing
		}
		return nil, err
	}
	as, err := ifc.Addrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range as {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is6() && p.Addr().IsLinkLocalUnicast() {
			out = append(out, p.Addr().WithZone(name))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("interface %s has no IPv6 link-local address (is IPv6 on and the link up?)", name)
	}
	return out, nil
}

// listenLinkLocal listens on port 80 of a. IPV6_FREEBIND lets it bind while
// the address is still tentative (duplicate address detection runs for a
// second or so after the link comes up, as at boot).
func listenLinkLocal(a netip.Addr) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_FREEBIND, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	return lc.Listen(context.Background(), "tcp6", netip.AddrPortFrom(a, 80).String())
}
