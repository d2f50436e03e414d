package etcdstore_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/etcdstore"
	"github.com/ztpd/ztpd/internal/store/storetest"
	"github.com/ztpd/ztpd/testenv/freeport"
	"github.com/ztpd/ztpd/testenv/kubebin"
)

// embeddedMember starts a one-member embedded cluster for the test.
func embeddedMember(t testing.TB) *etcdstore.Member {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := etcdstore.StartMember(ctx, etcdstore.MemberConfig{
		Name: "a1", Dir: filepath.Join(t.TempDir(), "etcd"),
		Peers: map[string]string{"a1": freeport.URL(t, "http")}, ClientURL: freeport.URL(t, "http"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// externalEtcd runs the real etcd binary (testenv/k8sbin) and returns a
// client of it.
func externalEtcd(t testing.TB) *clientv3.Client {
	t.Helper()
	bin := kubebin.RequireEtcd(t)
	dir := t.TempDir()
	client, peer := freeport.URL(t, "http"), freeport.URL(t, "http")
	cmd := exec.Command(bin, "--name=x1", "--data-dir="+filepath.Join(dir, "data"),
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer, "--initial-cluster=x1="+peer,
		"--max-txn-ops=4096", "--log-level=warn")
	logf, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); logf.Close() })
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Get(ctx, "health")
		cancel()
		if err == nil {
			return cli
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "etcd.log"))
			t.Fatalf("etcd did not answer: %v\n%s", err, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var prefixes atomic.Int64

// openOn opens a store on cli under a prefix of its own.
func openOn(t testing.TB, cli *clientv3.Client, local bool, maxOps int) *etcdstore.Store {
	t.Helper()
	return openPrefix(t, cli, fmt.Sprintf("/t%d/", prefixes.Add(1)), local, maxOps)
}

func openPrefix(t testing.TB, cli *clientv3.Client, prefix string, local bool, maxOps int) *etcdstore.Store {
	t.Helper()
	return openMetered(t, cli, prefix, local, maxOps, nil)
}

// openMetered is openPrefix with the store's metrics on reg.
func openMetered(t testing.TB, cli *clientv3.Client, prefix string, local bool, maxOps int, reg prometheus.Registerer) *etcdstore.Store {
	t.Helper()
	s, err := etcdstore.Open(etcdstore.Options{Client: cli, Prefix: prefix, Name: "test", TempDir: t.TempDir(),
		LocalMember: local, MaxTxnOps: maxOps, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformanceEmbedded(t *testing.T) {
	m := embeddedMember(t)
	storetest.Conformance(t, func(t *testing.T) core.Store {
		return openOn(t, m.Client, true, etcdstore.EmbeddedMaxTxnOps)
	})
}

func TestConformanceExternal(t *testing.T) {
	cli := externalEtcd(t)
	storetest.Conformance(t, func(t *testing.T) core.Store { return openOn(t, cli, false, 4096) })
}
