package app

import (
	"context"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/clusters/clusterstest"
	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/ztp/content"
)

// TestVMUserDataComesFromTheJoiner: a CloudStack VM whose profile names a
// cluster gets the joiner's cloud-config at /latest/user-data: the first VM
// runs kubeadm init with the appliance's CA, the next joins pinned to it.
func TestVMUserDataComesFromTheJoiner(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "vms.yaml")
	os.WriteFile(prof, []byte("name: vms\nmatch:\n  kind: vm\ncluster: prod\n"), 0o644)
	cfg := config.Default()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.HTTP.Addr = "127.0.0.1:8080"
	cfg.Profiles = []string{prof}
	cfg.Joiner.AutoApprove = []config.Rule{{Subnets: []string{"10.99.42.0/24"}, Roles: []string{"control-plane", "worker"}}}
	a, err := New(cfg, NewLogger(io.Discard, "error", "text"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// The cluster is created as the API creates it: through the clusters
	// service, which has the joiner provision its CA.
	clusterstest.Cluster(t, a.Clusters, "http://10.99.42.1:8080", "1.30.4", "prod", 2)
	now := time.Now().UTC()
	vm := func(i int) *content.Client {
		ip := netip.AddrFrom4([4]byte{10, 99, 42, byte(10 + i)})
		mac := "52:54:00:00:00:" + string("0123456789"[i]) + "0"
		err := a.Store.Update(func(tx core.Tx) error {
			if err := tx.Leases().Put(core.Lease{IP: ip.String(), MAC: mac, Subnet: "vms",
				State: core.LeaseActive, Start: now, Expiry: now.Add(time.Hour)}); err != nil {
				return err
			}
			return tx.Devices().Put(core.Device{ID: mac, MAC: mac, Kind: core.KindVM, IP: ip.String(), State: core.StateLeased})
		})
		if err != nil {
			t.Fatal(err)
		}
		return &content.Client{Addr: ip, Transport: "http"}
	}
	first, err := a.ZTP.UserData(ctx, vm(1))
	if err != nil {
		t.Fatal(err)
	}
	caHash, _ := a.Joiner.CAHash(mustClusterID(t, a, "prod"))
	if !strings.HasPrefix(string(first), "#cloud-config") || !strings.Contains(string(first), "kind: InitConfiguration") ||
		!strings.Contains(string(first), "/etc/kubernetes/pki/ca.key") {
		t.Fatalf("first VM user-data:\n%.600s", first)
	}
	second, err := a.ZTP.UserData(ctx, vm(2))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(second), "kind: JoinConfiguration") || !strings.Contains(string(second), caHash) ||
		strings.Contains(string(second), "ca.key") || !strings.Contains(string(second), "10.99.42.11:6443") {
		t.Fatalf("second VM user-data:\n%.800s", second)
	}
	ms, err := a.Joiner.Members(ctx, "prod")
	if err != nil || len(ms) != 2 {
		t.Fatalf("members %v %v", ms, err)
	}
}

func mustClusterID(t *testing.T, a *App, name string) string {
	var c core.Cluster
	err := a.Store.View(func(tx core.Tx) error { var err error; c, err = tx.Clusters().ByName(name); return err })
	if err != nil {
		t.Fatal(err)
	}
	return c.ID
}
