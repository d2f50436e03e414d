package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/clusters/clusterstest"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/testenv/inproc"
)

// "cluster delete" of clusters that never started, as an operator meets
// them: one no device booted for goes with a plain delete; one whose
// control plane joined but never came up is refused with CloudStack's 431
// and what lets it go, and goes with --force.
func TestClusterDeleteStuck(t *testing.T) {
	for _, v := range []string{"ZTPD_API_URL", "ZTPD_API_KEY", "ZTPD_SECRET_KEY", "ZTPD_API_CA"} {
		t.Setenv(v, "")
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	base, cfg, ztpd := inproc.ServeApp(t, nil)
	dd := "--data-dir=" + cfg.DataDir
	out, err := runCLI(t, dd, "apikey", "create", "--role", "admin", "--name", "ops", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var key struct {
		APIKey    string `json:"api_key"`
		SecretKey string `json:"secret_key"`
	}
	if err := json.Unmarshal([]byte(out), &key); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) (string, error) {
		t.Helper()
		return runCLI(t, append(args, dd, "--api-url", base, "--api-key", key.APIKey, "--secret-key", key.SecretKey)...)
	}
	stateOf := func(id string) core.ClusterState {
		var st core.ClusterState = "gone"
		ztpd.Store.View(func(tx core.Tx) error {
			if cl, err := tx.Clusters().Get(id); err == nil {
				st = cl.State
			}
			return nil
		})
		return st
	}

	empty := clusterstest.Cluster(t, ztpd.Clusters, base, "1.36.3", "never-booted", 1)
	if st := stateOf(empty.ID); st != core.ClusterStarting {
		t.Fatalf("never-booted: %s", st)
	}
	if out, err := cli("cluster", "delete", "never-booted", "--yes"); err != nil || stateOf(empty.ID) != "gone" {
		t.Fatalf("delete of a Starting cluster with no member: %v %s, cluster %s", err, out, stateOf(empty.ID))
	}

	c := clusterstest.Cluster(t, ztpd.Clusters, base, "1.36.4", "stuck", 1)
	const member = "02:00:00:00:0e:01"
	now := time.Now().UTC()
	err = ztpd.Store.Update(func(tx core.Tx) error {
		if err := tx.Memberships().Put(core.Membership{Device: member, Cluster: c.ID, Role: "control-plane", State: core.StateJoined,
			Created: now, UpdatedAt: now}); err != nil {
			return err
		}
		return tx.Memberships().Enlist(c.ID, member, "control-plane")
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cli("cluster", "delete", "stuck", "--yes")
	if err == nil || !strings.Contains(err.Error(), "431") ||
		!strings.Contains(err.Error(), "is in Starting state and cannot be deleted: 1 member has joined ("+member+")") ||
		!strings.Contains(err.Error(), "or with force") || stateOf(c.ID) != core.ClusterStarting {
		t.Fatalf("delete of a Starting cluster with a joined member: %v, cluster %s", err, stateOf(c.ID))
	}
	if out, err := cli("cluster", "delete", "stuck", "--yes", "--force"); err != nil || stateOf(c.ID) != "gone" {
		t.Fatalf("forced delete of a Starting cluster: %v %s, cluster %s", err, out, stateOf(c.ID))
	}
}
