package joiner

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/joiner/tokens"
)

// TestLifecycleAsTheClustersServiceDrivesIt follows a cluster created by
// the API through provision, stop, start, upgrade and destroy.
func TestLifecycleAsTheClustersServiceDrivesIt(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll})
	now := e.clk.now()
	// The cluster's API server is a local stand-in, so revocation can be
	// checked where it lands (and no test traffic leaves loopback).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := core.Cluster{ID: "3f1c0a52-8d2e-4c2b-9a57-0d5c1b7e9f10", Name: "api-made", VersionID: "v1", Size: 2, ControlNodes: 1,
		State: core.ClusterStarting, Created: now, Endpoint: "https://" + ln.Addr().String() + "/"}
	err = e.store.Update(func(tx core.Tx) error {
		if err := tx.Versions().Put(core.Version{ID: "v1", Name: "v1.29.3", SemVer: "1.29.3", State: "Enabled"}); err != nil {
			return err
		}
		return tx.Clusters().Put(c)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Provision(bg, c); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.Provision(bg, c); err != nil { // idempotent
		t.Fatalf("second provision: %v", err)
	}
	api := startAPIServer(t, ln, e.svc.mustKeys(t, c.ID).ca)
	cp := e.must(e.join(c.ID, 1))
	if cp.KubernetesVersion != "v1.29.3" || !cp.Init {
		t.Fatalf("bundle %v", cp)
	}

	if err := e.svc.Stop(bg, c); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Enroll(bg, EnrollRequest{Cluster: c.ID, MAC: mac(2)}); !errors.Is(err, ErrClusterUnavailable) {
		t.Fatalf("enroll while stopped: %v", err)
	}
	if err := e.svc.Start(bg, c); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.SetVersion(bg, c, core.Version{ID: "v2", SemVer: "1.30.1"}); err != nil {
		t.Fatal(err)
	}
	w := e.must(e.join(c.ID, 2))
	if w.KubernetesVersion != "v1.30.1" {
		t.Fatalf("after upgrade, bundle version %s", w.KubernetesVersion)
	}
	if ms, _ := e.svc.Membership(bg, cp.Device); ms.Version != "v1.30.1" {
		t.Fatalf("member version %s", ms.Version)
	}
	// A manual-upgrade worker is left out of the next upgrade: its
	// membership keeps the version it runs.
	err = e.store.Update(func(tx core.Tx) error {
		stored, err := tx.Clusters().Get(c.ID)
		if err != nil {
			return err
		}
		stored.ManualUpgrade = []string{w.Device}
		return tx.Clusters().Put(stored)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.svc.SetVersion(bg, c, core.Version{ID: "v3", SemVer: "1.31.0"}); err != nil {
		t.Fatal(err)
	}
	if ms, _ := e.svc.Membership(bg, cp.Device); ms.Version != "v1.31.0" {
		t.Fatalf("upgraded control plane's version %s", ms.Version)
	}
	if ms, _ := e.svc.Membership(bg, w.Device); ms.Version != "v1.30.1" {
		t.Fatalf("manual-upgrade worker's version %s, want v1.30.1 (left out of the upgrade)", ms.Version)
	}

	// Revoke by bare id, as the API does.
	m := e.memberRecord(w.Device)
	if err := e.svc.RevokeToken(bg, m.TokenID); err != nil {
		t.Fatal(err)
	}
	if !e.tokenRecord(tokens.KindKubeadm, m.TokenID).Revoked {
		t.Fatal("token not revoked")
	}
	if d := api.deletions(); len(d) != 1 || d[0] != "bootstrap-token-"+m.TokenID {
		t.Fatalf("deleted in the cluster: %v, want the revoked token's Secret", d)
	}
	// Revoking again is a no-op in ztpd and retries the deletion.
	if err := e.svc.RevokeToken(bg, m.TokenID); err != nil || len(api.deletions()) != 2 {
		t.Fatalf("revoking again retries the deletion: %v %v", err, api.deletions())
	}
	if err := e.svc.RevokeToken(bg, "nosuch"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("unknown token: %v", err)
	}

	if err := e.svc.Destroy(bg, c); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{cp.Device, w.Device} {
		if ms, _ := e.svc.Membership(bg, d); ms.State != core.StateLeft {
			t.Fatalf("%s after destroy: %s", d, ms.State)
		}
	}
	err = e.store.View(func(tx core.Tx) error {
		n := 0
		err := tx.Tokens().List("", func(rec core.Token) (bool, error) {
			if rec.Cluster == c.ID && !rec.Revoked {
				n++
			}
			return true, nil
		})
		if n > 0 {
			return errors.New("tokens left unrevoked")
		}
		if _, ok, _ := tx.Secrets().Get(secretsOwner(c.ID)); ok {
			return errors.New("CA key material survived destroy")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Kubeconfig(bg, c, clusters.KubeconfigRequest{User: "u", Group: clusters.KubeconfigGroup}); err == nil || !strings.Contains(err.Error(), "not set up") {
		t.Fatalf("kubeconfig after destroy: %v", err)
	}
}

func (e *env) memberRecord(device string) core.Membership {
	e.t.Helper()
	m, err := e.svc.Membership(bg, device)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}
