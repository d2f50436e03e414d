// Package inproc runs a whole ztpd (the same wiring as `ztpd serve`) inside
// a test process, on a loopback port and a fresh data directory, for tests
// that talk to it as its real clients do (CLI, API SDKs).
package inproc

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/app"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/testenv/freeport"
)

// Serve starts ztpd with the default configuration, a temp data dir and a
// free loopback HTTP port (mutate may change more before validation). It
// returns once /healthz answers and the admin socket exists; the server
// stops when the test ends.
func Serve(t testing.TB, mutate func(*config.Config)) (base string, cfg config.Config) {
	t.Helper()
	base, cfg, _ = ServeApp(t, mutate)
	return base, cfg
}

// ServeApp is Serve that also returns the running App, for tests that must
// feed it what a peer it cannot reach here would (a cluster's API server
// answering ztpd's watch: App.Clusters.ObserveHealth).
func ServeApp(t testing.TB, mutate func(*config.Config)) (base string, cfg config.Config, a *app.App) {
	t.Helper()
	cfg = config.Default()
	cfg.DataDir = t.TempDir()
	cfg.HTTP.Addr = freeport.Addr(t)
	cfg.Log.Level = "error"
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	a, err := app.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, time.Second) }()
	t.Cleanup(func() { cancel(); <-served; a.Close() })
	base = "http://" + cfg.HTTP.Addr
	for i := 0; ; i++ {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if _, err := os.Stat(filepath.Join(cfg.DataDir, app.AdminSocketName)); err == nil {
				return base, cfg, a
			}
		}
		if i > 300 {
			t.Fatal("ztpd did not come up")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Healthy feeds the App's clusters service one observation of a healthy
// cluster (its API server answers, every desired Node Ready), as ztpd's
// watch of the cluster's API server would: a Starting cluster becomes
// Running. For tests with no real control plane behind their clusters.
func Healthy(t testing.TB, a *app.App, clusterID string) {
	t.Helper()
	var c core.Cluster
	if err := a.Store.View(func(tx core.Tx) error {
		var err error
		c, err = tx.Clusters().Get(clusterID)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	cp := max(c.ControlNodes, 1)
	if err := a.Clusters.ObserveHealth(clusterID, clusters.Health{APIReachable: true, Nodes: cp + c.Size, ReadyNodes: cp + c.Size,
		ControlPlanes: cp, ReadyControlPlanes: cp}); err != nil {
		t.Fatal(err)
	}
}
