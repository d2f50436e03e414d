package peerblobs

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/core"
)

// Results of one attempt at a peer, the result label of
// ztpd_peer_blob_fetches_total.
const (
	ResultOK           = "ok"            // verified and installed
	ResultNotFound     = "not_found"     // the peer does not hold the blob
	ResultSizeMismatch = "size_mismatch" // the peer announced or sent another size
	ResultSHAMismatch  = "sha_mismatch"  // the peer sent other content
	ResultError        = "error"         // unreachable, TLS refused, timeout, bad answer
)

// Defaults of Fetcher's timeouts.
const (
	DefaultTimeout      = 30 * time.Minute // a 4 GB ISO at ~20 Mbit/s
	DefaultStallTimeout = 30 * time.Second
)

// errStalled ends a peer's attempt that sent nothing for StallTimeout.
var errStalled = errors.New("the peer sent nothing for too long")

// Fetcher brings image blobs this appliance lacks from peer appliances.
// Set its fields before the first Ensure; do not copy it afterwards.
type Fetcher struct {
	// Store is this appliance's image store; fetched blobs are installed
	// into it (imagestore.InstallBlob).
	Store *imagestore.Store
	// Peers returns the other appliances' blob base URLs (not this one's),
	// in the order to try them (https://10.99.0.3:8444). It is called once
	// per download.
	Peers func() []string
	// TLS is the client side of mutual TLS: Certificates (or
	// GetClientCertificate) this appliance's certificate, RootCAs the
	// appliances' CA. ServerName is ignored: each peer's certificate is
	// verified against the host of its URL (appliance certificates carry
	// their IP addresses as SANs).
	TLS *tls.Config
	// Log receives the fetches (default slog.Default()).
	Log *slog.Logger
	// Timeout bounds one peer's whole attempt (default DefaultTimeout).
	Timeout time.Duration
	// StallTimeout ends a peer's attempt once its body sends nothing for
	// this long (default DefaultStallTimeout).
	StallTimeout time.Duration
	// Registerer takes the fetcher's metrics (nil: kept, not exported).
	Registerer prometheus.Registerer

	metrics *metrics
	once    sync.Once
	client  *http.Client
	initErr error

	mu      sync.Mutex
	flights map[string]*flight // by sha256: the download in progress
}

// flight is one download that every concurrent Ensure of its blob waits for.
type flight struct {
	done    chan struct{}
	err     error
	waiters int // guarded by Fetcher.mu
	cancel  context.CancelFunc
}

// Ensure makes im's blob present on this appliance. It returns nil at once
// when the blob is in place with the record's size (a blob is put in place
// only after its sha256 was verified); otherwise it downloads it from the
// peers in order, skipping a peer that is unreachable, does not hold it or
// sends other content, and installs the first copy whose sha256 and size
// match the record. Concurrent calls for one blob share one download, which
// stops when every caller has given up. An error of kind unavailable means
// no peer gave the blob.
func (f *Fetcher) Ensure(ctx context.Context, im core.Image) error {
	if !isSHA256(im.SHA256) {
		return core.Errorf(core.KindInvalid, "image %s: digest %q is not a sha256", im.Name, im.SHA256)
	}
	if im.Size < 0 {
		return core.Errorf(core.KindInvalid, "image %s: size %d is negative", im.Name, im.Size)
	}
	if f.Store == nil {
		return errors.New("peer blob fetcher: no image store")
	}
	if f.present(im) {
		return nil
	}
	f.mu.Lock()
	fl := f.flights[im.SHA256]
	if fl == nil {
		// The download outlives the caller that started it while others
		// wait for it; the last one to give up cancels it.
		dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		fl = &flight{done: make(chan struct{}), cancel: cancel}
		if f.flights == nil {
			f.flights = make(map[string]*flight)
		}
		f.flights[im.SHA256] = fl
		go func() {
			fl.err = f.download(dctx, im)
			cancel()
			f.mu.Lock()
			if f.flights[im.SHA256] == fl {
				delete(f.flights, im.SHA256)
			}
			f.mu.Unlock()
			close(fl.done)
		}()
	}
	fl.waiters++
	f.mu.Unlock()
	select {
	case <-fl.done:
		return fl.err
	case <-ctx.Done():
		f.mu.Lock()
		if fl.waiters--; fl.waiters == 0 {
			fl.cancel()
			// A later Ensure starts afresh rather than joining a cancelled one.
			if f.flights[im.SHA256] == fl {
				delete(f.flights, im.SHA256)
			}
		}
		f.mu.Unlock()
		return ctx.Err()
	}
}

// present reports whether im's blob is in place with the record's size.
func (f *Fetcher) present(im core.Image) bool {
	st, err := os.Stat(f.Store.BlobPath(im.SHA256))
	return err == nil && st.Mode().IsRegular() && st.Size() == im.Size
}

func (f *Fetcher) log() *slog.Logger {
	if f.Log != nil {
		return f.Log
	}
	return slog.Default()
}

// init builds the HTTP client once from TLS.
func (f *Fetcher) init() error {
	f.once.Do(func() {
		f.metrics = newMetrics(f.Registerer)
		switch {
		case f.TLS == nil:
			f.initErr = errors.New("peer blob fetcher: no TLS configuration")
		case f.TLS.InsecureSkipVerify:
			f.initErr = errors.New("peer blob fetcher: peers' certificates must be verified (InsecureSkipVerify is set)")
		case f.TLS.RootCAs == nil:
			f.initErr = errors.New("peer blob fetcher: RootCAs must hold the appliances' CA")
		case len(f.TLS.Certificates) == 0 && f.TLS.GetClientCertificate == nil:
			f.initErr = errors.New("peer blob fetcher: no client certificate; peers require one")
		}
		if f.initErr != nil {
			return
		}
		cfg := f.TLS.Clone()
		cfg.ServerName = "" // each peer is verified against its own address
		tr := &http.Transport{
			TLSClientConfig:       cfg,
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: 15 * time.Second,
			IdleConnTimeout:       90 * time.Second,
			MaxIdleConnsPerHost:   2,
			ForceAttemptHTTP2:     true,
			DisableCompression:    true, // the bytes as stored, so Content-Length is the blob's size
			// No Proxy: peers are reached directly, whatever the environment says.
		}
		f.client = &http.Client{
			Transport: tr,
			// A peer answers for itself; it cannot send us elsewhere.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	})
	return f.initErr
}

// download tries the peers in order until one gives a verified copy.
func (f *Fetcher) download(ctx context.Context, im core.Image) error {
	if f.present(im) { // a download that just ended brought it
		return nil
	}
	if err := f.init(); err != nil {
		return core.WrapError(core.KindUnavailable, err.Error(), err)
	}
	var peers []string
	if f.Peers != nil {
		peers = f.Peers()
	}
	if len(peers) == 0 {
		return core.Errorf(core.KindUnavailable, "image %s (sha256 %s) is not on this appliance and there are no peers to fetch it from", im.Name, im.SHA256)
	}
	var reasons []string
	for _, peer := range peers {
		result, err := f.fromPeer(ctx, peer, im)
		f.metrics.fetchesTotal.WithLabelValues(result).Inc()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, core.ErrNotFound) { // the record went while we fetched
			return fmt.Errorf("image %s: %w", im.Name, err)
		}
		reasons = append(reasons, peer+": "+err.Error())
	}
	return core.Errorf(core.KindUnavailable, "image %s (sha256 %s) is not on this appliance and no peer gave it (%s)",
		im.Name, im.SHA256, strings.Join(reasons, "; "))
}

// fromPeer fetches im's blob from one peer and installs it when verified.
func (f *Fetcher) fromPeer(ctx context.Context, peer string, im core.Image) (string, error) {
	log := f.log().With("peer", peer, "image", im.Name, "sha256", im.SHA256)
	u, err := blobURL(peer, im.SHA256)
	if err != nil {
		log.Warn("peer blob fetch: bad peer address", "err", err)
		return ResultError, err
	}
	timeout, stall := f.Timeout, f.StallTimeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if stall <= 0 {
		stall = DefaultStallTimeout
	}
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	pctx, cancelTimeout := context.WithTimeout(pctx, timeout)
	defer cancelTimeout()
	req, err := http.NewRequestWithContext(pctx, http.MethodGet, u, nil)
	if err != nil {
		return ResultError, err
	}
	log.Info("fetching image blob from peer", "size", im.Size)
	start := time.Now()
	resp, err := f.client.Do(req)
	if err != nil {
		log.Warn("peer blob fetch: no answer from the peer", "err", err)
		return ResultError, err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		log.Info("peer does not hold the image blob")
		return ResultNotFound, errors.New("does not hold the blob")
	case resp.StatusCode != http.StatusOK:
		err := fmt.Errorf("answered %s", resp.Status)
		log.Warn("peer blob fetch: unexpected answer", "status", resp.StatusCode)
		return ResultError, err
	case resp.ContentLength >= 0 && resp.ContentLength != im.Size:
		err := fmt.Errorf("announced %d bytes, the image has %d: %w", resp.ContentLength, im.Size, imagestore.ErrSizeMismatch)
		log.Warn("peer announced an image blob of the wrong size", "announced", resp.ContentLength, "size", im.Size)
		return ResultSizeMismatch, err
	}
	watchdog := time.AfterFunc(stall, func() { cancel(errStalled) })
	defer watchdog.Stop()
	n, err := f.Store.InstallBlob(pctx, stallReader{resp.Body, watchdog, stall}, im.SHA256, im.Size)
	f.metrics.fetchedBytes.Add(float64(n))
	switch {
	case err == nil:
		log.Info("fetched image blob from peer", "bytes", n, "seconds", time.Since(start).Seconds())
		return ResultOK, nil
	case errors.Is(err, imagestore.ErrDigestMismatch):
		log.Warn("peer served an image blob whose sha256 is wrong; skipping that peer", "err", err)
		return ResultSHAMismatch, err
	case errors.Is(err, imagestore.ErrSizeMismatch):
		log.Warn("peer served an image blob of the wrong size; skipping that peer", "err", err)
		return ResultSizeMismatch, err
	case errors.Is(err, core.ErrNotFound):
		log.Info("image record removed during its blob fetch", "err", err)
		return ResultError, err
	}
	if cause := context.Cause(pctx); cause != nil && ctx.Err() == nil {
		err = fmt.Errorf("%w (after %d bytes)", cause, n)
	}
	log.Warn("peer blob fetch failed", "bytes", n, "err", err)
	return ResultError, err
}

// stallReader pushes the watchdog back whenever the body delivers bytes.
type stallReader struct {
	r     io.Reader
	timer *time.Timer
	d     time.Duration
}

func (s stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.timer.Reset(s.d)
	}
	return n, err
}

// metrics are a fetcher's metrics.
type metrics struct {
	fetchesTotal *prometheus.CounterVec
	fetchedBytes prometheus.Counter
}

// newMetrics registers the metrics on reg (nil: kept, not exported).
func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		fetchesTotal: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_peer_blob_fetches_total",
			Help: "Attempts to fetch an image blob from a peer appliance, by result (ok, not_found, size_mismatch, sha_mismatch, error).",
		}, []string{"result"}),
		fetchedBytes: f.NewCounter(prometheus.CounterOpts{
			Name: "ztpd_peer_blob_fetch_bytes_total",
			Help: "Bytes of image blobs received from peer appliances, including downloads rejected by verification.",
		}),
	}
}
