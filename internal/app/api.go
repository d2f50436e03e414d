package app

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/ztpd/ztpd/api"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/clusters"
)

// buildAPI wires API keys, the clusters service and the API front ends.
func (a *App) buildAPI() error {
	a.APIKeys = apikeys.New(a.Store, a.Keys)
	var mem clusters.Membership
	if a.Joiner != nil {
		mem = a.Joiner
	}
	cs, err := clusters.New(a.Store, mem, clusters.Options{Log: a.Log.With("part", "clusters"), Images: a.Images,
		KubeconfigTTL: a.Cfg.API.KubeconfigTTL.D(), AlertAfter: a.Cfg.API.ClusterAlertAfter.D()})
	if err != nil {
		return err
	}
	a.Clusters = cs
	a.OnClose(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return cs.Close(ctx)
	})

	sigs := api.DefaultSignaturePolicy()
	sigs.RequireExpiryREST = a.Cfg.API.RequireExpiryREST
	sigs.RequireExpiryCloudStack = a.Cfg.API.RequireExpiryCloudStack
	sigs.MaxLifetime = a.Cfg.API.MaxSignatureLifetime.D()
	srv := api.New(api.Deps{Log: a.Log.With("part", "api"), Store: a.Store, Clusters: cs, Keys: a.APIKeys,
		Images: a.Images, Refusals: a.ZTP, AuthFailuresPerMinute: a.Cfg.API.AuthFailuresPerMinute, Signatures: &sigs})
	a.apiLocal = srv.LocalHandler()
	// Off loopback the API gets a listener of its own, with TLS unless the
	// operator opted out (config.APIListener); Serve runs it. Otherwise the
	// main listener serves it.
	if addr, useTLS := a.Cfg.APIListener(); addr == "" {
		a.apiOnMain = srv.Handler()
	} else {
		a.apiOwn = &apiListen{addr: addr, useTLS: useTLS, handler: a.apiGuard("api").Wrap(srv.Handler())}
	}
	a.AddRunner(runnerFunc{"job-pruner", func(ctx context.Context) error { return cs.RunPruner(ctx, time.Hour) }})

	a.OnStart(func() error {
		n, err := cs.Recover()
		if err != nil {
			return fmt.Errorf("recovering async jobs: %w", err)
		}
		if n > 0 {
			a.Log.Warn("async jobs interrupted by the last shutdown were marked failed", "count", n)
		}
		return api.Bootstrap(a.APIKeys, os.Stdout, a.Cfg.API.AdminKeyFile, a.Log)
	})
	return nil
}

// runnerFunc adapts a function to Runner.
type runnerFunc struct {
	name string
	run  func(context.Context) error
}

func (r runnerFunc) Name() string                  { return r.name }
func (r runnerFunc) Run(ctx context.Context) error { return r.run(ctx) }
