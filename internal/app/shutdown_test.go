package app

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/clusters/clusterstest"
	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/testenv/freeport"
)

// A stop is bounded by the shutdown grace and says what it waits for, even
// with a cluster whose API endpoint accepts connections and never answers
// (the cluster watch's informer and probes hang on it).
func TestShutdownIsBoundedAndSaysWhatItWaitsFor(t *testing.T) {
	hole, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hole.Close()
	var accepted atomic.Int64
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := hole.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			conns = append(conns, c) // held open, never answered
		}
	}()

	dir := t.TempDir()
	cfg := config.Default()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.HTTP.Addr = freeport.Addr(t)
	cfg.AdvertiseAddr = "127.0.0.1"
	cfg.API.AdminKeyFile = filepath.Join(dir, "admin.key")
	cfg.API.ClusterProbeInterval = config.Duration(500 * time.Millisecond)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	a, err := New(cfg, NewLogger(logs, "info", "text"))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			a.Close()
		}
	}()
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	c := clusterstest.Cluster(t, a.Clusters, "http://127.0.0.1:8080", "1.30.4", "prod", 2)
	err = a.Store.Update(func(tx core.Tx) error {
		rt, err := tx.Clusters().JoinState(c.ID)
		if err != nil {
			return err
		}
		rt.APIEndpoint = hole.Addr().String()
		return tx.Clusters().PutJoinState(c.ID, rt)
	})
	if err != nil {
		t.Fatal(err)
	}

	const grace = 2 * time.Second
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, grace) }()
	for deadline := time.Now().Add(20 * time.Second); accepted.Load() == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the cluster watch never connected to the endpoint; log:\n%s", logs)
		}
	}
	time.Sleep(time.Second) // the informer's list and a probe are in flight

	start := time.Now()
	stop()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(grace + 3*time.Second):
		t.Fatalf("Serve still running %s after the stop with a %s grace; log:\n%s", time.Since(start), grace, logs)
	}
	a.Close()
	closed = true
	if took := time.Since(start); took > grace+1500*time.Millisecond {
		t.Errorf("the stop took %s with a %s grace; log:\n%s", took, grace, logs)
	}
	out := logs.String()
	if !strings.Contains(out, `msg="shutting down"`) || !strings.Contains(out, "waiting_for=") || !strings.Contains(out, "kubewatch") {
		t.Errorf("the stop does not say what it waits for:\n%s", out)
	}
	t.Logf("stop took %s", time.Since(start))
}
