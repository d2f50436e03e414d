// Package app wires the domain services and the transports together. It is
// the only place that knows every part; the parts do not know each other.
package app

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
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/ztpd/ztpd/api"
	"github.com/ztpd/ztpd/api/console"
	"github.com/ztpd/ztpd/api/rest"
	"github.com/ztpd/ztpd/images/binaries"
	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/backup"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/desired"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/devicetls"
	"github.com/ztpd/ztpd/internal/ha"
	"github.com/ztpd/ztpd/internal/httpserve"
	"github.com/ztpd/ztpd/internal/kubewatch"
	"github.com/ztpd/ztpd/internal/positions"
	"github.com/ztpd/ztpd/internal/profile"
	"github.com/ztpd/ztpd/internal/rollout"
	"github.com/ztpd/ztpd/internal/secretbox"
	"github.com/ztpd/ztpd/internal/store"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/internal/store/etcdstore"
	"github.com/ztpd/ztpd/joiner"
	"github.com/ztpd/ztpd/ztp/content"
	"github.com/ztpd/ztpd/ztp/dhcp"
	"github.com/ztpd/ztpd/ztp/dhcp6"
	"github.com/ztpd/ztpd/ztp/endpoints"
	ztphttp "github.com/ztpd/ztpd/ztp/http"
	ztptftp "github.com/ztpd/ztpd/ztp/tftp"
)

// AdminSocketName is the unix socket in the data directory through which CLI
// commands reach a running server. Its mode (0600) is its access control.
const AdminSocketName = "ztpd.sock"

// SecretKeyFile is the at-rest key (cluster CA keys, certificate keys,
// token seeds, API secrets) when key_file is not set. Back it up apart from
// the store: without it a restored store can issue no credentials.
const SecretKeyFile = "secret.key"

// Runner is a long-running part (a listener). Run blocks until ctx is done,
// then shuts down gracefully and returns.
type Runner interface {
	Name() string
	Run(ctx context.Context) error
}

// App holds the opened store, the domain services and the transports.
type App struct {
	Cfg config.Config
	Log *slog.Logger
	// Metrics is this App's metrics registry (newMetricsRegistry): every
	// part registers its metrics on it, and /metrics serves it.
	Metrics *prometheus.Registry
	// httpMetrics are the listeners', the body budget's and the guards'
	// metrics, on Metrics.
	httpMetrics *httpserve.Metrics
	Store       store.Store
	// healthWarn rate-limits /healthz's warning that the store cannot be
	// read (it is polled every few seconds).
	healthWarn rate.Sometimes

	// Keys seals secrets at rest: cluster CA keys, token seeds, API secrets.
	Keys *secretbox.Keyring
	// DeviceTLS is the device HTTPS listener's key pair and pins (nil
	// when http.tls is off).
	DeviceTLS *devicetls.Service

	// Images is the content-addressed artifact store.
	Images *imagestore.Store
	// Binaries are Kubernetes versions' kubeadm, kubelet and kubectl read
	// from their ISOs in Images (served to devices, named in rollouts).
	Binaries *binaries.Service

	// Endpoints are every device-facing URL, resolved once from
	// advertise_addr and http.addr: DHCP, content, the joiner and the API
	// hand out these and no others.
	Endpoints endpoints.Endpoints
	// bindings are the configured reservations as identity bindings
	// (core.HolderOf), resolved once.
	bindings core.Bindings

	// Devices owns device records (merging, the write-behind queue) and
	// event retention; DHCP, content and the joiner report to it.
	Devices *devices.Service

	// DHCP is the DHCP server when dhcp.interfaces is set (it opens its
	// sockets when served).
	DHCP *dhcp.Server
	// DHCP6 is the DHCPv6 server when dhcp.subnets has an IPv6 subnet.
	DHCP6 *dhcp6.Server

	// ZTP renders per-device ZTP content for the HTTP and TFTP transports.
	ZTP *content.Service
	// Positions owns the cabling plan (positions: and the API's), which
	// DHCP and content serve by.
	Positions *positions.Service

	// Clusters is the Kubernetes versions and clusters service; the joiner
	// is passed to it when built. APIKeys holds API credentials.
	Clusters *clusters.Service
	APIKeys  *apikeys.Service

	// Joiner owns cluster PKI, join credentials, admission and membership.
	Joiner *joiner.Service
	// Watch observes every cluster's API server and Nodes (kubewatch).
	Watch *kubewatch.Manager
	// Desired owns devices' desired states and answers their agents;
	// Rollouts operates clusters' nodes (upgrades, scale-down, delete).
	Desired  *desired.Service
	Rollouts *rollout.Engine
	nodeOps  *rollout.KubeNodes

	// HTTPMux is the ZTP content listener's router; transports mount on it.
	HTTPMux *http.ServeMux
	// AdminMux serves the admin socket: local CLI operations.
	AdminMux *http.ServeMux

	// metadata serves the cloud-init paths on http.metadata_addr.
	metadata http.Handler
	// linkLocal answers ONIE's link-local discovery (http.onie_link_local).
	linkLocal http.Handler
	// apiOnMain is the API when it is served on the main listener (http.addr
	// on loopback, or api.insecure_plain_http); apiOwn when it has its own
	// (api.addr, or <http.addr host>:8443 with TLS).
	apiOnMain http.Handler
	apiOwn    *apiListen
	// apiDevice is the API's handler for its agent door on the device
	// HTTPS listener.
	apiDevice http.Handler
	// apiLocal is the same API for the admin socket, acting as the local
	// administrator (api.Server.LocalHandler).
	apiLocal http.Handler
	// stopGrace is Serve's grace (--shutdown-grace), which also bounds the
	// wait for running cluster jobs at Close; 0 before Serve.
	stopGrace time.Duration
	// bodyBudget bounds the request bodies every listener's guard holds
	// at once (http.max_body_bytes_*); made on first use.
	bodyBudget *httpserve.BodyBudget
	// tftp is the TFTP listener's settings when tftp.enabled; Serve starts
	// it with the shutdown grace.
	tftp *ztptftp.Options

	// Group is this appliance's part in a group sharing the store (nil on
	// one box); leaseFeed and leaseFeed6 the stored leases as a stream for
	// its DHCPv4 and DHCPv6 servers.
	Group      *ha.Coordinator
	leaseFeed  *etcdstore.LeaseFeed
	leaseFeed6 *etcdstore.LeaseFeed
	// peer is the image blob listener for the group's other appliances.
	peer *peerServe

	runners  []Runner
	starters []func() error
	// profiles is the loaded profile set (Start), for the joiner's Node labels.
	profiles atomic.Pointer[profile.Set]
	closers  []func() error
	// bound are the listeners serve bound before building the app
	// (UseListeners); serving runs once every listener is open (OnServing).
	bound   *Listeners
	serving []func()
}

// New opens the store and builds every service, without opening listeners,
// so CLI commands can use the same wiring offline.
func New(cfg config.Config, log *slog.Logger) (*App, error) {
	if log == nil {
		log = slog.Default()
	}
	metrics := newMetricsRegistry()
	st, err := openStore(cfg, log, false, metrics)
	if err != nil {
		return nil, err
	}
	a := &App{Cfg: cfg, Log: log, Metrics: metrics, httpMetrics: httpserve.NewMetrics(metrics), Store: st, HTTPMux: http.NewServeMux(), AdminMux: http.NewServeMux(),
		healthWarn: rate.Sometimes{Interval: 10 * time.Second}}
	// A backup killed part way leaves its store snapshot; the store's lock,
	// held now, says no other backup of this data directory runs.
	if stale := backup.RemoveStaleSnapshots(cfg.DataDir); len(stale) > 0 {
		log.Info("removed what an interrupted backup left", "files", stale)
	}
	if err := a.build(); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// build creates the services and registers their routes and runners. Each
// part adds itself here and nowhere else, built after what it needs and
// given it (no setters): the store, keys and images; the device-facing
// endpoints and the devices service; the joiner; DHCP; content serving and
// its transports; the API.
func (a *App) build() error {
	// The key only after the store: a store holding sealed data never gets
	// a new key (openKeys).
	keys, err := a.openKeys()
	if err != nil {
		return err
	}
	a.Keys = keys
	images, err := imagestore.Open(a.Store, a.Cfg.DataDir)
	if err != nil {
		return err
	}
	a.Images = images
	a.OnStart(a.warnMissingImageBlobs)
	a.Binaries = binaries.New(a.Store, a.Images)

	if a.Endpoints, err = endpoints.New(a.Cfg.AdvertiseAddr, a.Cfg.HTTP.Addr); err != nil {
		return err
	}
	if a.Endpoints, err = a.Endpoints.WithAdvertise6(a.Cfg.AdvertiseAddr6); err != nil {
		return err
	}
	if err := a.buildDeviceTLS(); err != nil {
		return err
	}
	// The reservations' addresses as identity bindings, for content and
	// the joiner alike.
	a.bindings = bindingsOf(&a.Cfg)
	// Closed after every reporter (closers run in reverse), before the store.
	if err := a.buildGroup(); err != nil {
		return err
	}
	if err := a.buildPeerBlobs(); err != nil {
		return err
	}
	a.Devices = devices.New(devices.Options{Store: a.Store, Log: a.Log.With("part", "devices"),
		Keep: a.Cfg.Events.Keep, AuditKeep: a.Cfg.Events.AuditKeep,
		UnleasedExpiry: time.Duration(a.Cfg.Devices.UnleasedExpiry), MaxUnleased: a.Cfg.Devices.MaxUnleased,
		Registerer: a.Metrics})
	a.OnClose(a.Devices.Close)
	// Event retention runs whatever transports are enabled, on one
	// appliance of a group.
	a.AddSingleton(a.Devices)

	if err := a.buildJoiner(); err != nil {
		return err
	}
	a.buildDayOps()
	if err := a.buildRollouts(); err != nil {
		return err
	}
	v4, v6 := dhcpServers(&a.Cfg)
	if v4 {
		opt, err := a.dhcpOptions()
		if err != nil {
			return err
		}
		opt.Registerer = a.Metrics
		srv, err := dhcp.New(opt)
		if err != nil {
			return err
		}
		a.DHCP = srv
		a.AddRunner(srv)
	}
	if v6 {
		opt, err := a.dhcp6Options()
		if err != nil {
			return err
		}
		opt.Registerer = a.Metrics
		srv, err := dhcp6.New(opt)
		if err != nil {
			return err
		}
		a.DHCP6 = srv
		a.AddRunner(srv)
	}

	// ZTP content over HTTP (and the cloud-init metadata listener) and TFTP.
	// Profiles load at Start, so offline CLI commands do not depend on them.
	opt := content.Options{Store: a.Store, Devices: a.Devices, Images: a.Images, Binaries: a.Binaries, Join: ztpJoin{a.Joiner}, Log: a.Log,
		Endpoints: a.Endpoints, DefaultProfile: a.Cfg.ZTP.DefaultProfile,
		FilesDir: filepath.Join(a.Cfg.DataDir, "files"), Bindings: a.bindings, Registerer: a.Metrics, DevicePins: a.devicePins()}
	// What DHCP knows before its device records are committed.
	switch {
	case a.DHCP != nil && a.DHCP6 != nil:
		opt.Pending = dhcpFinder{v4: a.DHCP, v6: a.DHCP6}
	case a.DHCP != nil:
		opt.Pending = a.DHCP
	case a.DHCP6 != nil:
		opt.Pending = a.DHCP6
	}
	ztp, err := content.New(opt)
	if err != nil {
		return err
	}
	a.ZTP = ztp
	a.OnClose(ztp.Close)
	a.Positions = positions.NewService(a.Cfg.Positions, a.Store, a.applyPlan)
	a.OnStart(a.loadProfiles)
	zh := ztphttp.New(ztp, a.Log, a.frontDoor(), a.Metrics)
	zh.Register(a.HTTPMux)
	if a.Cfg.HTTP.MetadataAddr != "" {
		a.metadata = zh.MetadataHandler()
	}
	if len(a.Cfg.HTTP.ONIELinkLocal) > 0 {
		a.linkLocal = zh.LinkLocalHandler(ztphttp.NeighborMAC)
	}
	if t := a.Cfg.TFTP; t.Enabled {
		a.tftp = &ztptftp.Options{Addr: t.Addr, SinglePort: t.SinglePort, MaxBlockSize: t.MaxBlockSize, Window: t.Window,
			RetransmitTimeout: t.RetransmitTimeout.D(), MaxRetransmits: t.MaxRetransmits, MaxTransfers: t.MaxTransfers,
			MaxTransfersPerSource: t.MaxTransfersPerSource, Log: a.Log, Registerer: a.Metrics}
	}
	if err := a.buildAPI(); err != nil {
		return err
	}
	if a.Joiner != nil {
		if err := a.buildWatch(); err != nil {
			return err
		}
	}
	a.mountAdmin()
	return nil
}

// Start does the one-time work of a serving process that offline CLI use
// must not do (first-run bootstrap, background sweeps). Serve follows.
func (a *App) Start() error {
	for _, f := range a.starters {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// loadProfiles loads the configured profile files and the cabling plan
// and, when every one is valid and the plan names only loaded profiles,
// swaps them in for serving and the joiner's labels; on any error the
// profiles and the plan in use stay.
func (a *App) loadProfiles() error {
	set, err := profile.Load(a.Cfg.Profiles)
	if err != nil {
		return err
	}
	pl, err := a.Positions.Read()
	if err != nil {
		return err
	}
	if err := content.CheckPlanProfiles(pl, set); err != nil {
		return err
	}
	if a.DHCP != nil {
		// First: the one check left that can refuse the plan (its
		// addresses against the subnets).
		if err := a.DHCP.SetPlan(pl); err != nil {
			return err
		}
	}
	if a.DHCP6 != nil {
		if err := a.DHCP6.SetPlan(pl); err != nil {
			return err
		}
	}
	if err := a.ZTP.SetProfiles(set); err != nil {
		return err
	}
	a.profiles.Store(set)
	if err := a.Positions.Use(pl); err != nil {
		return err
	}
	a.warnStartup(set)
	return nil
}

// ReloadProfiles reads the profile files and the cabling plan again
// (SIGHUP, systemctl reload ztpd): a change takes effect without a
// restart, and a file with errors is refused as a whole, with every error
// logged, while the profiles and the plan in use keep serving.
func (a *App) ReloadProfiles() error {
	if err := a.loadProfiles(); err != nil {
		a.Log.Error("profiles not reloaded: the profiles in use stay", "profiles", a.Cfg.Profiles, "err", err)
		return err
	}
	a.Log.Info("profiles reloaded", "profiles", a.Cfg.Profiles, "loaded", len(a.profiles.Load().Profiles()),
		"positions", a.Positions.Plan().Len())
	return nil
}

// applyPlan hands a cabling plan to what serves by it: content (its
// profiles must be loaded) and DHCP (its addresses must be in subnets).
// In a process that is not serving (a CLI command that opened the store
// in-process), the plan is checked against the profile files and the
// subnets, and nothing else takes it.
func (a *App) applyPlan(pl *positions.Plan) error {
	set := a.profiles.Load()
	serving := set != nil
	if !serving {
		var err error
		if set, err = profile.Load(a.Cfg.Profiles); err != nil {
			return err
		}
	}
	if err := content.CheckPlanProfiles(pl, set); err != nil {
		return err
	}
	if a.DHCP != nil {
		if err := a.DHCP.SetPlan(pl); err != nil {
			return err
		}
	}
	if a.DHCP6 != nil {
		if err := a.DHCP6.SetPlan(pl); err != nil {
			return err
		}
	}
	if !serving {
		return nil
	}
	return a.ZTP.SetPlan(pl)
}

// OnStart registers work for Start.
func (a *App) OnStart(f func() error) { a.starters = append(a.starters, f) }

// AddRunner registers a listener started by Serve.
func (a *App) AddRunner(r Runner) { a.runners = append(a.runners, r) }

// OnClose registers cleanup run by Close in reverse order.
func (a *App) OnClose(f func() error) { a.closers = append(a.closers, f) }

// Close releases every service and finally the store.
func (a *App) Close() error {
	var errs []error
	for i := len(a.closers) - 1; i >= 0; i-- {
		errs = append(errs, a.closers[i]())
	}
	a.closers = nil
	if a.Store != nil {
		errs = append(errs, a.Store.Close())
	}
	return errors.Join(errs...)
}

// Serve starts every listener and blocks until ctx is cancelled, then shuts
// them down gracefully (bounded by grace) and returns the first failure.
// Every HTTP listener runs through internal/httpserve with the http: limits.
func (a *App) Serve(ctx context.Context, grace time.Duration) error {
	// The API's certificate first: a bad one fails before anything listens.
	var apiTLS *tls.Config
	if a.apiOwn != nil && a.apiOwn.useTLS {
		var err error
		if apiTLS, err = a.apiTLS(a.apiOwn.addr); err != nil {
			return fmt.Errorf("api: %w", err)
		}
	}
	// DHCP's sockets next: a second ztpd (or another DHCP server) on the
	// same interface is refused by name before any other listener binds.
	if a.DHCP != nil {
		if err := a.DHCP.Listen(); err != nil {
			return fmt.Errorf("dhcp: %w", err)
		}
	}
	if a.DHCP6 != nil {
		if err := a.DHCP6.Listen(); err != nil {
			return fmt.Errorf("dhcp6: %w", err)
		}
	}
	// Every TCP and UDP listener is open before any runner starts (serve
	// bound them before creating anything; others bind them here).
	if a.bound == nil {
		a.bound = &Listeners{}
	}
	if err := a.bound.bind(a.Cfg, false); err != nil {
		a.bound.Close()
		return err
	}
	bound := *a.bound
	*a.bound, a.bound = Listeners{}, nil // the runners own them now
	admin, err := a.adminListener()
	if err != nil {
		bound.Close()
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lim := a.Cfg.HTTP.Limits()
	listener := func(name, addr string, ln net.Listener, h http.Handler) Runner {
		return &httpRunner{httpserve.Listener{Name: name, Addr: addr, Ln: ln, Handler: h, Limits: lim, Log: a.Log, Grace: grace, Metrics: a.httpMetrics}}
	}
	runners := []Runner{
		listener("http", a.Cfg.HTTP.Addr, bound.HTTP, a.mainHandler()),
		// The admin socket takes image uploads of any size: no body guard;
		// its mode (0600) is its access control.
		listener("admin", "", admin, a.AdminMux),
	}
	if a.DeviceTLS != nil {
		// With port 0 the system chose it: documents name that one.
		a.Endpoints.TLSBound(bound.DeviceTLS.Addr())
		runners = append(runners, &httpRunner{httpserve.Listener{Name: "https", Addr: bound.DeviceTLS.Addr().String(), Ln: bound.DeviceTLS,
			Handler: a.deviceTLSHandler(), TLS: a.DeviceTLS.TLSConfig(), Limits: lim, Log: a.Log, Grace: grace, Metrics: a.httpMetrics}})
	} else if bound.DeviceTLS != nil {
		bound.DeviceTLS.Close()
	}
	if a.metadata != nil {
		runners = append(runners, listener("metadata", a.Cfg.HTTP.MetadataAddr, bound.Metadata, a.deviceGuard("metadata").Wrap(a.metadata)))
	} else if bound.Metadata != nil {
		bound.Metadata.Close()
	}
	for _, ln := range bound.LinkLocal {
		if a.linkLocal == nil {
			ln.Close()
			continue
		}
		runners = append(runners, listener("onie-link-local", ln.Addr().String(), ln, a.deviceGuard("onie-link-local").Wrap(a.linkLocal)))
	}
	if a.Cfg.Debug.PprofAddr != "" {
		runners = append(runners, listener("pprof", a.Cfg.Debug.PprofAddr, bound.Pprof,
			httpserve.Guard{Listener: "pprof", BodyTimeout: lim.ReadBodyTimeout, Budget: a.bodies(), Log: a.Log}.Wrap(pprofMux())))
	}
	if l := a.apiOwn; l != nil {
		runners = append(runners, &httpRunner{httpserve.Listener{Name: "api", Addr: l.addr, Ln: bound.API, Handler: l.handler, TLS: apiTLS, Metrics: a.httpMetrics,
			Limits: lim, Log: a.Log, Grace: grace}})
	} else if bound.API != nil {
		bound.API.Close()
	}
	if a.Cfg.APIPlainOffLoopback() {
		addr, _ := a.Cfg.APIListener()
		a.Log.Warn("the API is served in plain HTTP on an address other than loopback (api.insecure_plain_http): signed requests, kubeconfigs and join credentials cross the network unencrypted",
			"addr", firstNonEmpty(addr, a.Cfg.HTTP.Addr))
	}
	if a.tftp != nil {
		opt := *a.tftp
		opt.Grace = grace
		runners = append(runners, tftpRunner{ztptftp.New(a.ZTP, opt), bound.TFTP})
	} else if bound.TFTP != nil {
		bound.TFTP.Close()
	}
	if r := a.peerRunner(bound.Peer, lim, grace); r != nil {
		runners = append(runners, r)
	}
	runners = append(runners, a.runners...)
	for _, f := range a.serving {
		f()
	}
	a.stopGrace = grace
	errc := make(chan error, len(runners))
	running := newRunning()
	for _, r := range runners {
		running.add(r.Name())
		go func(r Runner) {
			defer running.done(r.Name())
			if err := r.Run(ctx); err != nil {
				errc <- fmt.Errorf("%s: %w", r.Name(), err)
				cancel()
			}
		}(r)
	}
	select {
	case <-running.all:
	case <-ctx.Done():
		a.awaitStop(running, grace)
	}
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// closeClusters stops the clusters service, waiting for its running jobs
// at most the shutdown grace (10 s without one) and saying so when they
// take a while: a job talking to a cluster that does not answer would
// otherwise hold the stop silently.
func (a *App) closeClusters(cs *clusters.Service) error {
	wait := a.stopGrace
	if wait <= 0 {
		wait = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cs.Close(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(200 * time.Millisecond):
		a.Log.Info("waiting for the running cluster jobs to stop", "at_most", wait.String())
	}
	err := <-done
	if err != nil {
		// The jobs of a stopped appliance are marked failed at its next start.
		a.Log.Warn("cluster jobs still running at the end of the shutdown grace; not waiting any longer", "grace", wait.String())
	}
	return err
}

// shutdownNote is how often a stop that is still waiting says for what.
const shutdownNote = 2 * time.Second

// awaitStop waits, at most grace, for the runners to return once Serve's
// context is done, saying at INFO what it waits for as it waits: a stop
// that hangs on one listener, job or cluster watch names it. Past grace it
// stops waiting (the process is exiting) and says which were left.
func (a *App) awaitStop(running *runningSet, grace time.Duration) {
	start := time.Now()
	a.Log.Info("shutting down", "grace", grace.String(), "waiting_for", running.names())
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	note := time.NewTicker(shutdownNote)
	defer note.Stop()
	for {
		select {
		case <-running.all:
			a.Log.Info("every listener and job stopped", "after", time.Since(start).Round(time.Millisecond).String())
			return
		case name := <-running.stopped:
			a.Log.Info("stopped", "runner", name, "after", time.Since(start).Round(time.Millisecond).String(),
				"waiting_for", running.names())
		case <-note.C:
			a.Log.Info("shutdown still waiting", "waiting_for", running.names(), "after", time.Since(start).Round(time.Second).String())
		case <-deadline.C:
			a.Log.Warn("shutdown grace over: not waiting any longer", "grace", grace.String(), "left", running.names())
			return
		}
	}
}

// runningSet is the runners Serve started that have not returned.
type runningSet struct {
	mu      sync.Mutex
	m       map[string]int
	n       int
	all     chan struct{} // closed when the last one returns
	stopped chan string   // each one's name as it returns (dropped when nobody reads)
}

func newRunning() *runningSet {
	return &runningSet{m: map[string]int{}, all: make(chan struct{}), stopped: make(chan string, 64)}
}

func (r *runningSet) add(name string) {
	r.mu.Lock()
	r.m[name]++
	r.n++
	r.mu.Unlock()
}

func (r *runningSet) done(name string) {
	r.mu.Lock()
	if r.m[name]--; r.m[name] <= 0 {
		delete(r.m, name)
	}
	r.n--
	last := r.n == 0
	r.mu.Unlock()
	select {
	case r.stopped <- name:
	default:
	}
	if last {
		close(r.all)
	}
}

// names lists the runners still running, sorted.
func (r *runningSet) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.m))
	for n := range r.m {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// mainHandler is the http.addr listener: device routes (ZTP content, join,
// metadata, healthz, metrics) behind the device guard, and the API behind
// its own guard when it is served here; otherwise the API paths answer 404
// with where the API is. The web console goes with the API: when it is
// served here, so are the console's pages, except that "/" stays the
// CloudStack password server's for the requests that name themselves as
// such (DomU_Request).
func (a *App) mainHandler() http.Handler {
	mux := http.NewServeMux()
	devices := a.deviceGuard("http").Wrap(a.HTTPMux)
	mux.Handle("/", devices)
	apiHandler := a.apiOnMain
	if apiHandler != nil {
		apiHandler = a.apiGuard("http").Wrap(apiHandler)
		for _, p := range console.Paths {
			mux.Handle(p, apiHandler)
		}
		console := apiHandler
		mux.Handle("/{$}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("DomU_Request") != "" {
				devices.ServeHTTP(w, r)
				return
			}
			console.ServeHTTP(w, r)
		}))
	} else {
		apiHandler = http.HandlerFunc(a.apiElsewhere)
	}
	mux.Handle(api.CloudStackPath, apiHandler)
	mux.Handle(rest.Path, apiHandler)
	return mux
}

// deviceGuard caps device request bodies and keeps server error detail in
// the log.
func (a *App) deviceGuard(listener string) httpserve.Guard {
	return httpserve.Guard{Listener: listener, MaxBody: httpserve.DeviceMaxBody,
		BodyTimeout: a.Cfg.HTTP.ReadBodyTimeout.D(), HideErrors: true, Budget: a.bodies(), Log: a.Log}
}

// apiGuard caps API request bodies and answers refusals in the REST error
// shape. An image upload streams its body (rest.StreamedBody) under its own
// cap, so the 1 MiB cap holds for every other request. The API reads every
// other body itself, after what the headers prove (the failure limiter, a
// signature's key and expiry), so one nobody can authenticate is not read.
func (a *App) apiGuard(listener string) httpserve.Guard {
	return httpserve.Guard{Listener: listener, MaxBody: httpserve.APIMaxBody,
		BodyTimeout: a.Cfg.HTTP.ReadBodyTimeout.D(), Streamed: rest.StreamedBody,
		ReadByHandler: func(*http.Request) bool { return true }, Budget: a.bodies(), Log: a.Log}
}

// bodies is the body budget every guard shares.
func (a *App) bodies() *httpserve.BodyBudget {
	if a.bodyBudget == nil {
		a.bodyBudget = a.Cfg.HTTP.BodyBudget(a.httpMetrics)
	}
	return a.bodyBudget
}

// apiElsewhere answers API paths on the main listener when the API has a
// listener of its own.
func (a *App) apiElsewhere(w http.ResponseWriter, r *http.Request) {
	where := "its own listener (api.addr)"
	if base := a.apiBase(); base != "" {
		where = base + " (api.addr)"
	}
	httpserve.WriteErrorCode(w, http.StatusNotFound, core.KindNotFound, "the API is not served on this listener; it is at "+where)
}

// apiBase is scheme://host:port of the API's own listener, "" when the
// main listener serves the API.
func (a *App) apiBase() string {
	addr, useTLS := a.Cfg.APIListener()
	if addr == "" {
		return ""
	}
	scheme := "http"
	if useTLS {
		scheme = "https"
	}
	host, port, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = firstNonEmpty(a.Cfg.AdvertiseAddr, "<this host>")
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// frontDoor is what "/" on the device port tells a person when the console
// and the API have a listener of their own (with them on the main
// listener, "/" is the console itself).
func (a *App) frontDoor() ztphttp.FrontDoor {
	base := a.apiBase()
	if base == "" {
		return ztphttp.FrontDoor{}
	}
	return ztphttp.FrontDoor{ConsoleURL: base + "/", APIURL: base + rest.Path}
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

func (a *App) adminListener() (net.Listener, error) {
	path := filepath.Join(a.Cfg.DataDir, AdminSocketName)
	// The store lock proves no other ztpd uses this directory, so a leftover
	// socket is stale.
	_ = os.Remove(path)
	old := umask(0o177)
	ln, err := net.Listen("unix", path)
	umask(old)
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	return ln, nil
}

// httpRunner runs one HTTP listener.
type httpRunner struct{ l httpserve.Listener }

func (h *httpRunner) Name() string                  { return h.l.Name }
func (h *httpRunner) Run(ctx context.Context) error { return h.l.Run(ctx) }

// CopyAtomic writes r to path through a temp file in the same directory,
// fsyncs it and renames it into place, so path is either absent, old, or
// complete.
func CopyAtomic(path string, r io.Reader, mode os.FileMode) (int64, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name())
	n, err := io.Copy(tmp, r)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), mode)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	return n, err
}

var (
	_ store.Store = (*boltstore.Store)(nil)
	_ store.Store = (*etcdstore.Store)(nil)
)
