package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/clusters/clusterstest"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/testenv/inproc"
)

// "cluster delete" and "cluster delete --force" against a serving ztpd. The
// cluster's member is put in the store directly and no control plane ever
// answered, so taking it out fails (its Node cannot be read): the delete
// fails and leaves Alert; with --force the cluster goes and the member is
// reported abandoned with why.
func TestClusterDeleteForce(t *testing.T) {
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

	c := clusterstest.Cluster(t, ztpd.Clusters, base, "1.36.3", "prod", 1)
	inproc.Healthy(t, ztpd, c.ID)
	const member = "02:00:00:00:0d:01"
	now := time.Now().UTC()
	err = ztpd.Store.Update(func(tx core.Tx) error {
		if err := tx.Devices().Put(core.Device{ID: member, MAC: member, Kind: core.KindVM, State: core.StateJoined, Cluster: c.ID,
			Role: "worker", FirstSeen: now, LastSeen: now, UpdatedAt: now}); err != nil {
			return err
		}
		if err := tx.Memberships().Put(core.Membership{Device: member, Cluster: c.ID, Role: "worker", State: core.StateJoined,
			NodeName: "worker-9", Created: now, UpdatedAt: now}); err != nil {
			return err
		}
		return tx.Memberships().Enlist(c.ID, member, "worker")
	})
	if err != nil {
		t.Fatal(err)
	}
	stateOf := func() core.ClusterState {
		var st core.ClusterState = "gone"
		ztpd.Store.View(func(tx core.Tx) error {
			if cl, err := tx.Clusters().Get(c.ID); err == nil {
				st = cl.State
			}
			return nil
		})
		return st
	}

	if _, err := cli("cluster", "delete", "prod", "--force"); err == nil || !strings.Contains(err.Error(), "with --force also when members cannot be taken out") ||
		!strings.Contains(err.Error(), "pass --yes") {
		t.Fatalf("unconfirmed forced delete: %v", err)
	}
	if _, err := cli("cluster", "delete", "prod", "--yes"); err == nil || !strings.Contains(err.Error(), "worker-9") || stateOf() != core.ClusterAlert {
		t.Fatalf("delete without force: %v, cluster %s", err, stateOf())
	}
	out, err = cli("cluster", "delete", "prod", "--yes", "--force", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Success   bool                   `json:"success"`
		Text      string                 `json:"displaytext"`
		Abandoned []client.AbandonedNode `json:"abandoned"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if !res.Success || res.Text != "Kubernetes cluster deleted; 1 member abandoned on its node" || len(res.Abandoned) != 1 ||
		res.Abandoned[0].Device != member || res.Abandoned[0].Node != "worker-9" || res.Abandoned[0].Reason == "" || stateOf() != "gone" {
		t.Fatalf("forced delete: %s, cluster %s", out, stateOf())
	}
	t.Logf("abandoned: %+v", res.Abandoned[0])
}
