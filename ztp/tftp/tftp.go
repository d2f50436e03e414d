// Package tftp serves ZTP content read-only over TFTP (pin/tftp v3): the
// same ztp.json and config_db.json as HTTP, identified by the client's
// address (its DHCP lease), ONIE installers by their waterfall file names,
// stored images by name or sha256, and the files directory.
//
// File names:
//
//	ztp.json, ztp/ztp.json                 ztp.json of the lease owner of the client address
//	ztp/config/<device-id>/config_db.json  that device's config, only to that device
//	onie-installer[-<platform>]            ONIE installer (platform from the name or the lease)
//	images/<name|sha256>, <name>           a stored image
//	isos/<name>                            a stored binaries ISO
//	<path>                                 a file under <data-dir>/files
//
// Names are relative; absolute names, ".." elements and symlinks leaving the
// files directory are refused with a TFTP error, as are write requests.
//
// blksize and tsize are negotiated (RFC 2348/2349). blksize is capped at
// MTU − 32 (IP 20 + UDP 8 + TFTP 4 bytes of headers), so a DATA packet never
// fragments; pin/tftp's own cap (MTU − 28) forgets the TFTP header. The MTU
// is the smallest of the interfaces the listener serves (re-read every
// minute), or tftp.max_block_size when set.
//
// Single-port mode (tftp.single_port) runs on ztpd's own socket under
// pin/tftp (see portConn): one port for every transfer (NAT and firewall
// friendly), blksize capped per arrival interface, and the faster data path:
// after each DATA block the reader polls for the ACK for up to 200µs before
// it sleeps (environment ZTPD_TFTP_SPIN=0s turns that off).
package tftp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	pin "github.com/pin/tftp/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"golang.org/x/sys/unix"

	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/safepath"
	"github.com/ztpd/ztpd/ztp/content"
)

var (
	transfers = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "ztpd_tftp_transfers_total", Help: "TFTP transfers by result (ok, failed).",
	}, []string{"result"})
	transferSeconds = promauto.NewHistogram(prometheus.HistogramOpts{
		Name: "ztpd_tftp_transfer_seconds", Help: "Duration of successful TFTP transfers.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	})
	datagrams = promauto.NewCounter(prometheus.CounterOpts{
		Name: "ztpd_tftp_datagrams_sent_total", Help: "TFTP DATA/OACK datagrams sent, retransmissions included.",
	})
	refused = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "ztpd_tftp_refused_total", Help: "TFTP requests refused, by reason.",
	}, []string{"reason"})
)

// Server is the TFTP listener; it implements the app's Runner.
type Server struct {
	svc   *content.Service
	cfg   config.TFTP
	log   *slog.Logger
	grace time.Duration
	pc    *portConn // single-port fast path, when in use
}

// New returns a TFTP server for svc configured by cfg.
func New(svc *content.Service, cfg config.TFTP, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	return &Server{svc: svc, cfg: cfg, log: log, grace: 10 * time.Second}
}

// Name implements the app's Runner.
func (s *Server) Name() string { return "tftp" }

// Run serves until ctx ends, then lets running transfers finish (bounded).
func (s *Server) Run(ctx context.Context) error {
	// An empty or 0.0.0.0 host means IPv4 only: ZTP runs over DHCPv4, and an
	// IPv4 socket is what the single-port fast path reads IP_PKTINFO from.
	network := "udp"
	if h, _, err := net.SplitHostPort(s.cfg.Addr); err == nil {
		if a, err := netip.ParseAddr(h); h == "" || err == nil && a.Is4() {
			network = "udp4"
		}
	}
	ua, err := net.ResolveUDPAddr(network, s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("tftp address %q: %w", s.cfg.Addr, err)
	}
	conn, err := net.ListenUDP(network, ua)
	if err != nil {
		return err
	}
	srv := pin.NewServer(s.read, s.write)
	srv.SetHook(hook{s.log})
	// Lock-step TFTP stalls for the whole timeout on one lost packet: retry
	// after 1 s, at once (no extra random backoff), several times.
	srv.SetTimeout(time.Second)
	srv.SetRetries(8)
	srv.SetBackoff(func(int) time.Duration { return 0 })
	srv.SetBlockSizeNegotiation(false)
	blk := BlockSizeCap(s.cfg, s.cfg.Addr)
	var serveConn net.PacketConn = conn
	fast := false
	if s.cfg.SinglePort {
		mc := &mtuCache{limit: s.cfg.MaxBlockSize, fixed: s.cfg.MaxBlockSize > 0}
		if !mc.fixed {
			mc.limit = maxServedCap(s.cfg.Addr)
		}
		if pc, err := newPortConn(conn, mc.capFor); err == nil {
			serveConn, fast, blk = pc, true, mc.limit
			s.pc = pc
		} else {
			s.log.Warn("tftp single-port fast path unavailable; using pin/tftp's own", "err", err)
		}
		srv.SetBlockSize(blk)
		srv.EnableSinglePort()
	} else {
		srv.SetBlockSize(blk)
		// Blocks sent ahead of the ACKs (pin/tftp's anticipate mode). A
		// lock-step client takes them in order as it acks; a lost block
		// costs the same retransmit timeout as lock-step. Single-port mode
		// stays lock-step: its shared socket serves many transfers.
		srv.SetAnticipate(uint(s.cfg.Window))
	}
	s.log.Info("listening", "listener", "tftp", "addr", conn.LocalAddr().String(), "single_port", s.cfg.SinglePort,
		"fast_path", fast, "max_blksize", blk, "window", s.cfg.Window)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(serveConn) }()
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case err := <-errc:
			return err
		case <-tick.C:
			if fast {
				continue // per-interface caps are applied per request
			}
			if n := BlockSizeCap(s.cfg, s.cfg.Addr); n != blk {
				blk = n
				srv.SetBlockSize(n)
				s.log.Info("tftp blksize cap changed", "max_blksize", n)
			}
			continue
		case <-ctx.Done():
		}
		break
	}
	done := make(chan struct{})
	go func() { srv.Shutdown(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.grace):
		s.log.Warn("tftp transfers still running at shutdown; abandoning them")
		conn.Close()
	}
	return nil
}

// BlockSizeCap is the largest blksize granted: tftp.max_block_size, else the
// smallest MTU − 32 of the interfaces addr serves (all up, non-loopback
// interfaces for a wildcard address; loopback only if there is nothing else).
func BlockSizeCap(cfg config.TFTP, addr string) int {
	if cfg.MaxBlockSize > 0 {
		return cfg.MaxBlockSize
	}
	host, _, _ := net.SplitHostPort(addr)
	want, _ := netip.ParseAddr(host)
	ifs, err := net.Interfaces()
	if err != nil {
		return 1468
	}
	minMTU, loMTU := 0, 0
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.MTU <= 0 {
			continue
		}
		if want.IsValid() && !want.IsUnspecified() {
			addrs, _ := ifc.Addrs()
			for _, a := range addrs {
				if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Unmap() == want.Unmap() {
					return clampBlk(ifc.MTU - 32)
				}
			}
			continue
		}
		if ifc.Flags&net.FlagLoopback != 0 {
			loMTU = ifc.MTU
			continue
		}
		if minMTU == 0 || ifc.MTU < minMTU {
			minMTU = ifc.MTU
		}
	}
	if minMTU == 0 {
		minMTU = loMTU
	}
	if minMTU == 0 {
		return 1468
	}
	return clampBlk(minMTU - 32)
}

// maxServedCap is the largest MTU − 32 among the interfaces addr serves: the
// single-port fast path caps each request by its own interface below it.
func maxServedCap(addr string) int {
	host, _, _ := net.SplitHostPort(addr)
	want, _ := netip.ParseAddr(host)
	if want.IsValid() && !want.IsUnspecified() {
		return BlockSizeCap(config.TFTP{}, addr)
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return 1468
	}
	best := 0
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp != 0 && ifc.Flags&net.FlagLoopback == 0 && ifc.MTU > best {
			best = ifc.MTU
		}
	}
	if best == 0 {
		return 1468
	}
	return clampBlk(best - 32)
}

func clampBlk(n int) int {
	return max(513, min(n, 65464))
}

// request is one read request: the client and its cleaned file name.
type request struct {
	c    *content.Client
	name string
}

func (s *Server) read(filename string, rf io.ReaderFrom) error {
	ot, _ := rf.(pin.OutgoingTransfer)
	c := &content.Client{Transport: "tftp"}
	if ot != nil {
		ra := ot.RemoteAddr()
		if a, ok := netip.AddrFromSlice(ra.IP); ok {
			c.Addr = a.Unmap()
		}
	}
	if pi, ok := rf.(pin.RequestPacketInfo); ok {
		if a, ok := netip.AddrFromSlice(pi.LocalIP()); ok {
			c.Local = a.Unmap()
		}
	}
	if !c.Local.IsValid() && s.pc != nil && ot != nil {
		ra := ot.RemoteAddr()
		if a, ok := netip.AddrFromSlice(ra.IP); ok {
			if src, ok := s.pc.source(netip.AddrPortFrom(a.Unmap(), uint16(ra.Port))); ok {
				c.Local = netip.AddrFrom4(src)
			} else if la, ok := s.pc.orig.LocalAddr().(*net.UDPAddr); ok {
				if l, ok := netip.AddrFromSlice(la.IP); ok && !l.IsUnspecified() {
					c.Local = l.Unmap()
				}
			}
		}
	}
	name, err := safepath.Clean(filename)
	if err != nil {
		refused.WithLabelValues("path").Inc()
		s.log.Warn("tftp request refused", "file", filename, "client", c.Addr, "err", err)
		return fmt.Errorf("access violation: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = s.serve(ctx, request{c: c, name: name}, rf, ot)
	if err != nil {
		var ce *content.Error
		if errors.As(err, &ce) {
			refused.WithLabelValues(fmt.Sprint(ce.Status)).Inc()
			s.log.Debug("tftp request refused", "file", name, "client", c.Addr, "reason", ce.Reason)
		} else {
			s.log.Warn("tftp transfer failed", "file", name, "client", c.Addr, "err", err)
		}
	}
	return err
}

func (s *Server) serve(ctx context.Context, req request, rf io.ReaderFrom, ot pin.OutgoingTransfer) error {
	name, c := req.name, req.c
	onieHint, isONIE := content.ONIEInstallerName(name)
	switch {
	case name == "ztp.json" || name == "ztp/ztp.json":
		doc, err := s.svc.ZTPJSON(ctx, c)
		if err != nil {
			return err
		}
		return sendBytes(rf, ot, doc.Body)
	case strings.HasPrefix(name, "ztp/config/") && strings.HasSuffix(name, "/config_db.json"):
		id := strings.TrimSuffix(strings.TrimPrefix(name, "ztp/config/"), "/config_db.json")
		doc, err := s.svc.ConfigDB(ctx, c, id)
		if err != nil {
			return err
		}
		return sendBytes(rf, ot, doc.Body)
	case isONIE:
		im, _, err := s.svc.ONIEInstaller(ctx, c, onieHint)
		if err != nil {
			return err
		}
		return s.sendImage(rf, ot, im.SHA256, "", nil)
	case strings.HasPrefix(name, "images/"):
		return s.sendImage(rf, ot, strings.TrimPrefix(name, "images/"), "", c)
	case strings.HasPrefix(name, "isos/"):
		return s.sendImage(rf, ot, strings.TrimPrefix(name, "isos/"), "binaries-iso", c)
	}
	if !strings.Contains(name, "/") {
		err := s.sendImage(rf, ot, name, "", c)
		var ce *content.Error
		if !errors.As(err, &ce) || ce.Status != 404 {
			return err
		}
	}
	f, err := s.svc.OpenFile(name)
	if err != nil {
		return err
	}
	defer f.Close()
	return sendFile(rf, ot, f)
}

// sendImage sends a stored image; c, when set, gets the fetch recorded.
func (s *Server) sendImage(rf io.ReaderFrom, ot pin.OutgoingTransfer, ref, kind string, c *content.Client) error {
	if strings.Contains(ref, "/") {
		return &content.Error{Status: 404, Reason: "no image " + ref}
	}
	im, f, err := s.svc.Image(ref, kind)
	if err != nil {
		return err
	}
	defer f.Close()
	if c != nil {
		s.svc.RecordImage(c, im)
	}
	return sendFile(rf, ot, f)
}

func sendBytes(rf io.ReaderFrom, ot pin.OutgoingTransfer, b []byte) error {
	if ot != nil {
		ot.SetSize(int64(len(b)))
	}
	_, err := rf.ReadFrom(bytes.NewReader(b))
	return err
}

// sendFile hands pin/tftp an in-memory view of f: with the file mapped, each
// DATA block is a copy from the page cache instead of a read system call,
// and the reader still seeks, so tsize is answered.
func sendFile(rf io.ReaderFrom, ot pin.OutgoingTransfer, f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	if ot != nil {
		ot.SetSize(size)
	}
	if size > 0 && size < 1<<40 {
		data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
		if err == nil {
			defer unix.Munmap(data)
			_ = unix.Madvise(data, unix.MADV_SEQUENTIAL)
			_ = unix.Madvise(data, unix.MADV_WILLNEED)
			_, err = rf.ReadFrom(bytes.NewReader(data))
			return err
		}
	}
	_, err = rf.ReadFrom(bufio.NewReaderSize(f, 1<<20))
	return err
}

func (s *Server) write(filename string, _ io.WriterTo) error {
	refused.WithLabelValues("write").Inc()
	s.log.Warn("tftp write request refused", "file", filename)
	return errors.New("access violation: ztpd serves TFTP read-only; write requests are refused")
}

type hook struct{ log *slog.Logger }

func (h hook) OnSuccess(st pin.TransferStats) {
	transfers.WithLabelValues("ok").Inc()
	transferSeconds.Observe(st.Duration.Seconds())
	datagrams.Add(float64(st.DatagramsSent))
}

func (h hook) OnFailure(st pin.TransferStats, err error) {
	if st.Filename == "" {
		// Not a transfer: a stray or malformed packet (e.g. a late
		// duplicate ACK after a transfer ended).
		refused.WithLabelValues("stray").Inc()
		return
	}
	transfers.WithLabelValues("failed").Inc()
	datagrams.Add(float64(st.DatagramsSent))
	h.log.Debug("tftp transfer failed", "file", st.Filename, "client", st.RemoteAddr, "err", err)
}
