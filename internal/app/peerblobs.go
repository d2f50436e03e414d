package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/ztpd/ztpd/images/peerblobs"
	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// Image blobs in a group of appliances: records are in the shared store, blobs
// on each appliance's disk. Each appliance serves its blobs to the others
// on its peer listener (store.peer_addr, mutual TLS under store.tls), and
// fetches a blob it lacks from them before serving it (imagestore.Fetch)
// and in the background (blobPrefetch).

// defaultPeerPort is the peer listener's port when store.peer_addr is not set.
const defaultPeerPort = "8444"

// peerListenAddr is where this appliance serves image blobs to the others of
// its group: store.peer_addr, else <advertise_addr>:8444 (App.peerAddr, the
// address its ha.Info.PeerURL names). It is "" when it serves none: one
// box, no store.tls (appliances talk only with mutual TLS), or no address
// configured. Bind needs it from the configuration alone.
func peerListenAddr(cfg config.Config) string {
	if cfg.Store.Group() == nil || !cfg.Store.TLS.Enabled() {
		return ""
	}
	if cfg.Store.PeerAddr != "" {
		return cfg.Store.PeerAddr
	}
	ip, err := netip.ParseAddr(cfg.AdvertiseAddr)
	if err != nil {
		return ""
	}
	return net.JoinHostPort(ip.Unmap().String(), defaultPeerPort)
}

// peerServe is the peer listener's part of the app: its TLS (the server
// side of mutual TLS) and handler, built with the group; Serve runs it on
// the listener bound for it.
type peerServe struct {
	addr    string
	tls     *tls.Config
	handler http.Handler
}

// storeTLS loads store.tls: this appliance's certificate and the
// appliances' CA.
func storeTLS(sc config.Store) (tls.Certificate, *x509.CertPool, error) {
	cert, err := tls.LoadX509KeyPair(sc.TLS.CertFile, sc.TLS.KeyFile)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("store.tls: %w", err)
	}
	pem, err := os.ReadFile(sc.TLS.CAFile)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("store.tls.ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return tls.Certificate{}, nil, fmt.Errorf("store.tls.ca_file %s holds no PEM certificate", sc.TLS.CAFile)
	}
	return cert, pool, nil
}

// buildPeerBlobs wires image blobs between the appliances of a group with
// store.tls: the peer listener (served by Serve when it has an address), the
// fetcher that Images.Open calls on a missing blob, and the background
// prefetch. Without store.tls appliances have no way to authenticate each
// other, so nothing is fetched (a missing blob is 503, as on one box).
func (a *App) buildPeerBlobs() error {
	if a.Group == nil || !a.Cfg.Store.TLS.Enabled() {
		return nil
	}
	cert, pool, err := storeTLS(a.Cfg.Store)
	if err != nil {
		return err
	}
	log := a.Log.With("part", "peerblobs")
	if addr := peerListenAddr(a.Cfg); addr != "" {
		lim := a.Cfg.HTTP.Limits()
		a.peer = &peerServe{addr: addr,
			tls: &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert,
				ClientCAs: pool, MinVersion: tls.VersionTLS12},
			// Peers send no bodies: the device cap and body timeout.
			handler: httpserve.Guard{Listener: "peer", MaxBody: httpserve.DeviceMaxBody, BodyTimeout: lim.ReadBodyTimeout,
				Budget: a.bodies(), Log: a.Log}.Wrap(peerblobs.Handler(a.Images))}
	} else {
		log.Warn("this appliance serves no image blobs to the others: set store.peer_addr or advertise_addr")
	}
	group := a.Group
	f := &peerblobs.Fetcher{Store: a.Images, Log: log, Registerer: a.Metrics,
		TLS: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12},
		Peers: func() []string {
			var urls []string
			for _, p := range group.Peers() {
				if p.PeerURL != "" {
					urls = append(urls, p.PeerURL)
				}
			}
			return urls
		}}
	// A download outlives the request that started it (a device that gives
	// up and asks again finds it done, rather than starting over), but not
	// the app.
	life, stop := context.WithCancel(context.Background())
	a.OnClose(func() error { stop(); return nil })
	a.Images.Fetch = func(ctx context.Context, im core.Image) error {
		done := make(chan error, 1)
		go func() { done <- f.Ensure(life, im) }()
		select {
		case err := <-done:
			if err != nil {
				log.Warn("image blob missing on this appliance and not fetched from the peer appliances",
					"image", im.Name, "sha256", im.SHA256, "err", err)
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	a.AddRunner(&blobPrefetch{a: a, fetcher: f, log: log})
	return nil
}

// peerRunner is the peer listener on ln (nil when this appliance serves no
// blobs, ln then closed).
func (a *App) peerRunner(ln net.Listener, lim httpserve.Limits, grace time.Duration) Runner {
	if a.peer == nil || ln == nil {
		if ln != nil {
			ln.Close()
		}
		return nil
	}
	return &httpRunner{httpserve.Listener{Name: "peer", Addr: a.peer.addr, Ln: ln, Handler: a.peer.handler, TLS: a.peer.tls, Metrics: a.httpMetrics,
		Limits: lim, Log: a.Log, Grace: grace}}
}

// Prefetch pacing: a pass every prefetchEvery; an image whose blob no peer
// gave waits prefetchRetry, doubling up to prefetchRetryMax, before the
// next try (it is still fetched on demand meanwhile).
var (
	prefetchFirst    = 2 * time.Second
	prefetchEvery    = time.Minute
	prefetchRetry    = time.Minute
	prefetchRetryMax = time.Hour
)

// blobPrefetch brings, one at a time, the blob of every image this appliance
// lacks: at start (a new or restored appliance) and as images are added on
// the others, so a device seldom waits for a fetch.
type blobPrefetch struct {
	a       *App
	fetcher *peerblobs.Fetcher
	log     *slog.Logger
	retry   map[string]prefetchRetryState
}

type prefetchRetryState struct {
	next  time.Time
	delay time.Duration
}

func (p *blobPrefetch) Name() string { return "peer-prefetch" }

func (p *blobPrefetch) Run(ctx context.Context) error {
	p.retry = map[string]prefetchRetryState{}
	t := time.NewTimer(prefetchFirst)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		p.pass(ctx)
		t.Reset(prefetchEvery)
	}
}

// pass fetches the missing blobs due now.
func (p *blobPrefetch) pass(ctx context.Context) {
	list, err := p.a.Images.List("")
	if err != nil {
		p.log.Warn("image blob prefetch: cannot list the images", "err", err)
		return
	}
	now := time.Now()
	var due []core.Image
	for _, im := range list {
		if st, err := os.Stat(p.a.Images.BlobPath(im.SHA256)); err == nil && st.Mode().IsRegular() && st.Size() == im.Size {
			delete(p.retry, im.SHA256)
			continue
		}
		if r, ok := p.retry[im.SHA256]; ok && now.Before(r.next) {
			continue
		}
		due = append(due, im)
	}
	if len(due) == 0 || len(p.fetcher.Peers()) == 0 {
		return // nothing to do, or no peer alive yet: next pass
	}
	p.log.Info("image blob prefetch: fetching image blobs this appliance lacks from the peer appliances", "count", len(due))
	fetched := 0
	for i, im := range due {
		err := p.fetcher.Ensure(ctx, im)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			r := p.retry[im.SHA256]
			r.delay = min(max(2*r.delay, prefetchRetry), prefetchRetryMax)
			r.next = time.Now().Add(r.delay)
			p.retry[im.SHA256] = r
			if !errors.Is(err, core.ErrNotFound) { // not a record removed meanwhile
				p.log.Warn("image blob prefetch: not fetched; a device asking for it has it fetched then, and the prefetch tries again later",
					"image", im.Name, "sha256", im.SHA256, "retry_in", r.delay.String(), "err", err)
			}
			continue
		}
		delete(p.retry, im.SHA256)
		fetched++
		p.log.Info("image blob prefetch: fetched", "image", im.Name, "size", im.Size, "done", i+1, "of", len(due))
	}
	p.log.Info("image blob prefetch: pass done", "fetched", fetched, "failed", len(due)-fetched)
}
