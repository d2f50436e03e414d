package app

import (
	"context"
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
	// The device HTTPS listener off (the operator's choice): the user-data
	// carries the join, and the start says so.
	cfg.HTTP.TLS.Enabled = false
	var logs strings.Builder
	a, err := New(cfg, NewLogger(&logs, "warn", "text"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "VMs' user-data carries their join secrets") {
		t.Errorf("no warning at start that VM secrets cross in clear:\n%s", logs.String())
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

// TestVMJoinDataOverTheDeviceListener: with the device HTTPS listener a
// VM's user-data names its join data's https URL and the listener's pin
// and carries no key; the join data is answered over that listener only,
// with the first control plane's CA key among its files.
func TestVMJoinDataOverTheDeviceListener(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "vms.yaml")
	os.WriteFile(prof, []byte("name: vms\nmatch:\n  kind: vm\ncluster: prod\n"), 0o644)
	cfg := config.Default()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.HTTP.Addr = "127.0.0.1:8080"
	cfg.HTTP.TLS = config.DeviceTLS{Enabled: true, Addr: "127.0.0.1:8442"}
	cfg.Profiles = []string{prof}
	cfg.Joiner.AutoApprove = []config.Rule{{Subnets: []string{"10.99.42.0/24"}, Roles: []string{"control-plane", "worker"}}}
	var logs strings.Builder
	a, err := New(cfg, NewLogger(&logs, "warn", "text"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "VMs' user-data carries their join secrets") {
		t.Errorf("the clear-text warning with the listener on:\n%s", logs.String())
	}
	clusterstest.Cluster(t, a.Clusters, "http://10.99.42.1:8080", "1.30.4", "prod", 2)
	ctx := context.Background()
	now := time.Now().UTC()
	ip, mac := netip.MustParseAddr("10.99.42.11"), "52:54:00:00:00:10"
	err = a.Store.Update(func(tx core.Tx) error {
		if err := tx.Leases().Put(core.Lease{IP: ip.String(), MAC: mac, Subnet: "vms", State: core.LeaseActive, Start: now, Expiry: now.Add(time.Hour)}); err != nil {
			return err
		}
		return tx.Devices().Put(core.Device{ID: mac, MAC: mac, Kind: core.KindVM, IP: ip.String(), State: core.StateLeased})
	})
	if err != nil {
		t.Fatal(err)
	}
	ud, err := a.ZTP.UserData(ctx, &content.Client{Addr: ip, Transport: "http"})
	if err != nil {
		t.Fatal(err)
	}
	pins := a.DeviceTLS.PinList()
	if !strings.Contains(string(ud), "https://127.0.0.1:8442/latest/join-data") || !strings.Contains(string(ud), pins) ||
		strings.Contains(string(ud), "PRIVATE KEY") || strings.Contains(string(ud), "BEGIN") || strings.Contains(string(ud), "ZTPD_REPORT_TOKEN") {
		t.Fatalf("public user-data:\n%.1200s", ud)
	}
	if _, err := a.ZTP.JoinData(ctx, &content.Client{Addr: ip, Transport: "http"}); core.KindOf(err) != core.KindRefused ||
		!strings.Contains(err.Error(), "https://127.0.0.1:8442/latest/join-data") {
		t.Fatalf("join data over plain HTTP: %v", err)
	}
	jd, err := a.ZTP.JoinData(ctx, &content.Client{Addr: ip, Transport: "http", Secure: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(jd), "/etc/kubernetes/pki/ca.key") || !strings.Contains(string(jd), "PRIVATE KEY") ||
		!strings.Contains(string(jd), "ZTPD_REPORT_PIN") {
		t.Fatalf("join data:\n%.600s", jd)
	}
}
