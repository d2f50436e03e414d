// Package tftp serves ZTP content read-only over TFTP: the same ztp.json
// and config_db.json as HTTP, identified by the client's address (its DHCP
// lease), ONIE installers by their waterfall file names, stored images by
// name or sha256, and the files directory.
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
// The transfer engine is this package's own (engine.go, window.go):
//
//   - Lock-step (RFC 1350) for every client that does not negotiate
//     windowsize; a window (RFC 7440) only for one that asks, granted up to
//     tftp.window. Nothing is sent ahead of the first ACK.
//   - blksize (RFC 2348) is capped at the MTU of the interface the request
//     arrived on minus 32 (IP 20 + UDP 8 + TFTP 4 bytes of headers; 52 over
//     IPv6), so a DATA packet never fragments, or at tftp.max_block_size.
//     tsize (RFC 2349) is answered in octet mode.
//   - Retransmission: the timeout follows the measured round trip (floor
//     200 ms) up to tftp.retransmit_timeout, which is also the timeout
//     before the first ACK; one datagram per timeout; a transfer that gets
//     no ACK for tftp.max_retransmits retransmissions is abandoned. Before
//     its first ACK, a transfer to an address that acknowledged nothing in
//     the last hour is sent once more only: a never-answering (or forged)
//     client gets at most 2 datagrams over 2 x timeout.
//   - At most tftp.max_transfers concurrent transfers, and
//     tftp.max_transfers_per_source per client address; the next request
//     gets a TFTP ERROR.
//   - Default mode: a new port per transfer (a socket connected to the
//     client). Single-port mode (tftp.single_port): every transfer on the
//     listening port, NAT and firewall friendly; on a wildcard address
//     replies leave from the address the client asked (IP_PKTINFO).
package tftp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/ztpd/ztpd/internal/safepath"
	"github.com/ztpd/ztpd/ztp/content"
)

// peerFetchWait bounds how long a TFTP read waits for an image blob this
// appliance fetches from a peer appliance first (several appliances).
const peerFetchWait = time.Minute

// Options are the TFTP listener's resolved settings (the tftp: section and
// --shutdown-grace).
type Options struct {
	Addr       string // UDP host:port
	SinglePort bool
	// MaxBlockSize caps negotiated blksize; 0 derives MTU-32 from the
	// interface a request arrives on.
	MaxBlockSize int
	// Window is the largest windowsize (RFC 7440) granted.
	Window                int
	RetransmitTimeout     time.Duration
	MaxRetransmits        int
	MaxTransfers          int
	MaxTransfersPerSource int
	// Grace is how long running transfers may finish on shutdown
	// (--shutdown-grace); 0 means 10s.
	Grace time.Duration
	Log   *slog.Logger
	// Registerer takes the listener's metrics (nil: kept, not exported).
	Registerer prometheus.Registerer
}

// Server is the TFTP listener; it implements the app's Runner.
type Server struct {
	svc     *content.Service
	cfg     Options
	log     *slog.Logger
	metrics *metrics
}

// New returns a TFTP server for svc.
func New(svc *content.Service, opt Options) *Server {
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	if opt.Grace <= 0 {
		opt.Grace = 10 * time.Second
	}
	return &Server{svc: svc, cfg: opt, log: opt.Log, metrics: newMetrics(opt.Registerer)}
}

// Name implements the app's Runner.
func (s *Server) Name() string { return "tftp" }

// Run listens on tftp.addr and serves until ctx ends, then lets running
// transfers finish (bounded).
func (s *Server) Run(ctx context.Context) error {
	conn, err := Listen(s.cfg.Addr)
	if err != nil {
		return err
	}
	return s.Serve(ctx, conn)
}

// Listen opens the TFTP socket on addr (tftp.addr) for Serve, so a caller
// can bind it before creating anything else.
func Listen(addr string) (*net.UDPConn, error) {
	// An empty or 0.0.0.0 host means IPv4 only: ZTP runs over DHCPv4.
	network := "udp"
	if h, _, err := net.SplitHostPort(addr); err == nil {
		if a, err := netip.ParseAddr(h); h == "" || err == nil && a.Is4() {
			network = "udp4"
		}
	}
	ua, err := net.ResolveUDPAddr(network, addr)
	if err != nil {
		return nil, fmt.Errorf("tftp address %q: %w", addr, err)
	}
	return net.ListenUDP(network, ua)
}

// Serve serves on conn, which it closes, until ctx ends.
func (s *Server) Serve(ctx context.Context, conn *net.UDPConn) error {
	addr := conn.LocalAddr().String()
	mc := &mtuCache{limit: s.cfg.MaxBlockSize, fixed: s.cfg.MaxBlockSize > 0}
	if !mc.fixed {
		mc.limit = maxServedCap(addr)
	}
	ec := engineConfig{
		singlePort:   s.cfg.SinglePort,
		window:       s.cfg.Window,
		timeout:      s.cfg.RetransmitTimeout,
		retransmits:  s.cfg.MaxRetransmits,
		maxTransfers: s.cfg.MaxTransfers,
		maxPerSource: s.cfg.MaxTransfersPerSource,
		blkCap:       mc.capFor,
		metrics:      s.metrics,
	}
	e := newEngine(ec, s.open, s.log)
	s.log.Info("listening", "listener", "tftp", "addr", addr, "single_port", ec.singlePort,
		"max_blksize", mc.limit, "max_window", max(1, ec.window), "retransmit_timeout", e.cfg.timeout,
		"max_retransmits", e.cfg.retransmits, "max_transfers", e.cfg.maxTransfers, "max_transfers_per_source", e.cfg.maxPerSource)
	return e.serve(ctx, conn, s.cfg.Grace)
}

// BlockSizeCap is the largest blksize granted: maxBlockSize
// (tftp.max_block_size) when set, else the smallest MTU − 32 of the
// interfaces addr serves (all up, non-loopback interfaces for a wildcard
// address; loopback only if there is nothing else).
func BlockSizeCap(maxBlockSize int, addr string) int {
	if maxBlockSize > 0 {
		return maxBlockSize
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
		return BlockSizeCap(0, addr)
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
	return max(defaultBlockSize, min(n, maxBlockSize))
}

// open resolves a read request to its content.
func (s *Server) open(ctx context.Context, t *transfer) (*payload, error) {
	c := &content.Client{Transport: "tftp", Addr: t.client, Local: t.local}
	name, err := safepath.Clean(t.Name())
	if err != nil {
		return nil, &refusal{code: errAccess, msg: "access violation: " + err.Error(), reason: "path", level: slog.LevelWarn}
	}
	pl, err := s.resolve(ctx, c, name)
	var ce *content.Error
	if errors.As(err, &ce) {
		// The device reads ce.Reason only; server detail (a path) goes to
		// the log, at error for a server-side fault.
		r := &refusal{code: errUndefined, msg: ce.Reason, detail: ce.Detail, reason: fmt.Sprint(ce.Status), level: slog.LevelDebug}
		switch ce.Status {
		case 404:
			r.code = errNotFound
		case 403:
			r.code = errAccess
		}
		if ce.Status >= 500 {
			r.level = slog.LevelError
		}
		return nil, r
	}
	return pl, err
}

func (s *Server) resolve(ctx context.Context, c *content.Client, name string) (*payload, error) {
	onieHint, isONIE := content.ONIEInstallerName(name)
	switch {
	case name == "ztp.json" || name == "ztp/ztp.json":
		doc, err := s.svc.ZTPJSON(ctx, c)
		if err != nil {
			return nil, err
		}
		return &payload{data: doc.Body, size: int64(len(doc.Body))}, nil
	case strings.HasPrefix(name, "ztp/config/") && strings.HasSuffix(name, "/config_db.json"):
		id := strings.TrimSuffix(strings.TrimPrefix(name, "ztp/config/"), "/config_db.json")
		doc, err := s.svc.ConfigDB(ctx, c, id)
		if err != nil {
			return nil, err
		}
		return &payload{data: doc.Body, size: int64(len(doc.Body))}, nil
	case isONIE:
		im, _, err := s.svc.ONIEInstaller(ctx, c, onieHint)
		if err != nil {
			return nil, err
		}
		return s.image(im.SHA256, "", nil)
	case strings.HasPrefix(name, "images/"):
		return s.image(strings.TrimPrefix(name, "images/"), "", c)
	case strings.HasPrefix(name, "isos/"):
		return s.image(strings.TrimPrefix(name, "isos/"), "binaries-iso", c)
	}
	if !strings.Contains(name, "/") {
		pl, err := s.image(name, "", c)
		var ce *content.Error
		if !errors.As(err, &ce) || ce.Status != 404 {
			return pl, err
		}
	}
	f, err := s.svc.OpenFile(name)
	if err != nil {
		return nil, err
	}
	return filePayload(f)
}

// image opens a stored image; c, when set, gets the fetch recorded.
func (s *Server) image(ref, kind string, c *content.Client) (*payload, error) {
	if strings.Contains(ref, "/") {
		return nil, &content.Error{Status: 404, Reason: "no image " + ref}
	}
	// A TFTP read has no context of its own: a blob fetched from a peer
	// appliance first is waited for at most peerFetchWait (the client
	// retransmits its request meanwhile; repeats join the same fetch).
	ctx, cancel := context.WithTimeout(context.Background(), peerFetchWait)
	defer cancel()
	im, f, err := s.svc.Image(ctx, ref, kind)
	if err != nil {
		return nil, err
	}
	if c != nil {
		s.svc.RecordImage(c, im)
	}
	return filePayload(f)
}

func filePayload(f *os.File) (*payload, error) {
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &payload{file: f, size: st.Size()}, nil
}

// metrics are the TFTP listener's metrics.
type metrics struct {
	transfers       *prometheus.CounterVec
	transferSeconds prometheus.Histogram
	datagrams       prometheus.Counter
	retransmissions prometheus.Counter
	refused         *prometheus.CounterVec
	unanswered      prometheus.Counter
	activeTransfers prometheus.Gauge
}

// newMetrics registers the metrics on reg (nil: kept, not exported).
func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		transfers: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_tftp_transfers_total",
			Help: "TFTP transfers by result: ok, unconfirmed (every block sent, the last never acknowledged), aborted (the client sent an ERROR), failed.",
		}, []string{"result"}),
		transferSeconds: f.NewHistogram(prometheus.HistogramOpts{
			Name: "ztpd_tftp_transfer_seconds", Help: "Duration of successful TFTP transfers.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		datagrams: f.NewCounter(prometheus.CounterOpts{
			Name: "ztpd_tftp_datagrams_sent_total", Help: "TFTP DATA/OACK datagrams sent, retransmissions included.",
		}),
		retransmissions: f.NewCounter(prometheus.CounterOpts{
			Name: "ztpd_tftp_retransmissions_total", Help: "TFTP DATA/OACK datagrams sent again (timeouts, late duplicate ACKs, RFC 7440 window restarts).",
		}),
		refused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_tftp_refused_total",
			Help: "TFTP requests refused, by reason (path, write, malformed, mode, busy_source, busy_global, busy_unheard, shutdown, error, a content status such as 404), and stray datagrams (stray).",
		}, []string{"reason"}),
		unanswered: f.NewCounter(prometheus.CounterOpts{
			Name: "ztpd_tftp_unanswered_total",
			Help: "TFTP transfers abandoned without any ACK from a client address not heard from lately, after one retransmission (a forged or dead source).",
		}),
		activeTransfers: f.NewGauge(prometheus.GaugeOpts{
			Name: "ztpd_tftp_active_transfers", Help: "TFTP transfers running (requests being resolved included).",
		}),
	}
}
