// Package app wires the domain services and the transports together. It is
// the only place that knows every part; the parts do not know each other.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	imagestore "github.com/ztpd/ztpd/images/store"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/boltstore"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
	"github.com/ztpd/ztpd/internal/profile"
	"github.com/ztpd/ztpd/internal/secretbox"
	"github.com/ztpd/ztpd/joiner"
	"github.com/ztpd/ztpd/ztp/content"
	"github.com/ztpd/ztpd/ztp/dhcp"
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
	Cfg   config.Config
	Log   *slog.Logger
	Store *boltstore.Store

	// Keys seals secrets at rest: cluster CA keys, token seeds, API secrets.
	Keys *secretbox.Keyring

	// Images is the content-addressed artifact store.
	Images *imagestore.Store

	// ZTP renders per-device ZTP content for the HTTP and TFTP transports;
	// wire the joiner with ZTP.SetJoinProvider.
	ZTP *content.Service

	// Clusters is the Kubernetes versions and clusters service; the joiner
	// plugs in with Clusters.SetMembership. APIKeys holds API credentials.
	Clusters *clusters.Service
	APIKeys  *apikeys.Service

	// Joiner owns cluster PKI, join credentials, admission and membership.
	Joiner *joiner.Service

	// HTTPMux is the ZTP content listener's router; transports mount on it.
	HTTPMux *http.ServeMux
	// AdminMux serves the admin socket: local CLI operations.
	AdminMux *http.ServeMux

	runners  []Runner
	starters []func() error
	closers  []func() error
}

// New opens the store and builds every service, without opening listeners,
// so CLI commands can use the same wiring offline.
func New(cfg config.Config, log *slog.Logger) (*App, error) {
	if log == nil {
		log = slog.Default()
	}
	st, err := boltstore.Open(cfg.DataDir, boltstore.Options{})
	if err != nil {
		return nil, err
	}
	a := &App{Cfg: cfg, Log: log, Store: st, HTTPMux: http.NewServeMux(), AdminMux: http.NewServeMux()}
	if err := a.build(); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// build creates the services and registers their routes and runners. Each
// part adds itself here and nowhere else.
func (a *App) build() error {
	a.HTTPMux.HandleFunc("GET /healthz", a.healthz)
	a.HTTPMux.Handle("GET /metrics", promhttp.Handler())
	a.AdminMux.HandleFunc("GET /admin/backup", a.adminBackup)
	a.AdminMux.HandleFunc("GET /admin/status", a.healthz)
	a.AddRunner(eventRetention(a.Store, a.Cfg.Events.Keep, a.Cfg.Events.AuditKeep, a.Log.With("part", "events")))
	// DHCP binds privileged sockets, so only a serving process builds it.
	if a.Cfg.DHCP.Enabled() {
		a.OnStart(func() error {
			srv, err := dhcp.New(a.Cfg, a.Store, a.Log)
			if err != nil {
				return err
			}
			a.AddRunner(srv)
			a.ZTP.SetDeviceFinder(srv)
			return nil
		})
	}

	keyFile := a.Cfg.KeyFile
	if keyFile == "" {
		keyFile = filepath.Join(a.Cfg.DataDir, SecretKeyFile)
	}
	keys, err := secretbox.OpenKeyring(keyFile)
	if err != nil {
		return err
	}
	a.Keys = keys

	images, err := imagestore.Open(a.Store, a.Cfg.DataDir)
	if err != nil {
		return err
	}
	a.Images = images
	a.mountImageAdmin()

	// ZTP content over HTTP (and the cloud-init metadata listener) and TFTP.
	// Profiles load at Start, so offline CLI commands do not depend on them.
	ztp, err := content.New(content.Options{Store: a.Store, Images: a.Images, Log: a.Log,
		AdvertiseAddr: a.Cfg.AdvertiseAddr, HTTPAddr: a.Cfg.HTTP.Addr, DefaultProfile: a.Cfg.ZTP.DefaultProfile,
		FilesDir: filepath.Join(a.Cfg.DataDir, "files"), Bindings: bindingsOf(&a.Cfg)})
	if err != nil {
		return err
	}
	a.ZTP = ztp
	a.OnClose(ztp.Close)
	a.OnStart(func() error {
		set, err := profile.Load(a.Cfg.Profiles)
		if err != nil {
			return err
		}
		return ztp.SetProfiles(set)
	})
	zh := ztphttp.New(ztp, a.Log)
	zh.Register(a.HTTPMux)
	if a.Cfg.HTTP.MetadataAddr != "" {
		a.AddRunner(&ztphttp.MetadataRunner{Addr: a.Cfg.HTTP.MetadataAddr, Handler: zh.MetadataHandler(), Log: a.Log})
	}
	if a.Cfg.TFTP.Enabled {
		a.AddRunner(ztptftp.New(ztp, a.Cfg.TFTP, a.Log))
	}
	if err := a.buildAPI(); err != nil {
		return err
	}
	return a.buildJoiner()
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

func (a *App) healthz(w http.ResponseWriter, r *http.Request) {
	schema, err := a.Store.Schema()
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `{"status":"unhealthy","error":%q}`+"\n", err.Error())
		return
	}
	fmt.Fprintf(w, `{"status":"ok","schema":%d}`+"\n", schema)
}

func (a *App) adminBackup(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/octet-stream")
	setLen := func(n int64) { w.Header().Set("Content-Length", strconv.FormatInt(n, 10)) }
	if _, err := a.Store.BackupSized(w, setLen); err != nil {
		a.Log.Error("backup failed", "err", err)
	}
}

// Serve starts every listener and blocks until ctx is cancelled, then shuts
// them down gracefully (bounded by grace) and returns the first failure.
func (a *App) Serve(ctx context.Context, grace time.Duration) error {
	admin, err := a.adminListener()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runners := append([]Runner{
		&httpRunner{name: "http", addr: a.Cfg.HTTP.Addr, handler: a.HTTPMux, log: a.Log, grace: grace},
		&httpRunner{name: "admin", ln: admin, handler: a.AdminMux, log: a.Log, grace: grace},
	}, a.runners...)
	if a.Cfg.Debug.PprofAddr != "" {
		runners = append(runners, &httpRunner{name: "pprof", addr: a.Cfg.Debug.PprofAddr, handler: pprofMux(), log: a.Log, grace: grace})
	}
	errc := make(chan error, len(runners))
	var wg sync.WaitGroup
	for _, r := range runners {
		wg.Add(1)
		go func(r Runner) {
			defer wg.Done()
			if err := r.Run(ctx); err != nil {
				errc <- fmt.Errorf("%s: %w", r.Name(), err)
				cancel()
			}
		}(r)
	}
	wg.Wait()
	close(errc)
	return <-errc
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

// httpRunner serves one http.Handler until its context ends.
type httpRunner struct {
	name    string
	addr    string
	ln      net.Listener
	handler http.Handler
	log     *slog.Logger
	grace   time.Duration
}

func (h *httpRunner) Name() string { return h.name }

func (h *httpRunner) Run(ctx context.Context) error {
	ln := h.ln
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", h.addr); err != nil {
			return err
		}
	}
	srv := &http.Server{Handler: h.handler, ErrorLog: slog.NewLogLogger(h.log.Handler(), slog.LevelWarn)}
	h.log.Info("listening", "listener", h.name, "addr", ln.Addr().String())
	return httpserve.Serve(ctx, srv, ln, h.grace)
}

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

var _ core.Store = (*boltstore.Store)(nil)
