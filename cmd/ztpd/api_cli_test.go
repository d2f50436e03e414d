package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/testenv/inproc"
)

// TestAPICommandGroups drives apikey, version, cluster, device, lease and
// token commands against a serving ztpd (HTTP listener and admin socket).
func TestAPICommandGroups(t *testing.T) {
	// No credentials from the environment or a cli.yaml of the user running the test.
	for _, v := range []string{"ZTPD_API_URL", "ZTPD_API_KEY", "ZTPD_SECRET_KEY", "ZTPD_API_CA"} {
		t.Setenv(v, "")
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	base, cfg, ztpd := inproc.ServeApp(t, nil)
	dir := cfg.DataDir
	dd := "--data-dir=" + dir
	out, err := runCLI(t, dd, "apikey", "create", "--role", "admin", "--name", "ops", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var key struct {
		APIKey    string `json:"api_key"`
		SecretKey string `json:"secret_key"`
		Role      string `json:"role"`
	}
	if err := json.Unmarshal([]byte(out), &key); err != nil || key.SecretKey == "" || key.Role != "admin" {
		t.Fatalf("apikey create: %q %v", out, err)
	}
	conn := []string{dd, "--api-url", base, "--api-key", key.APIKey, "--secret-key", key.SecretKey, "-o", "json"}
	cli := func(args ...string) (string, error) {
		t.Helper()
		return runCLI(t, append(append([]string{}, args...), conn...)...)
	}
	mustCLI := func(v any, args ...string) {
		t.Helper()
		out, err := cli(args...)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if v != nil {
			if err := json.Unmarshal([]byte(out), v); err != nil {
				t.Fatalf("%v: output %q: %v", args, out, err)
			}
		}
	}

	// kube-version add --iso: stored in the image store, URL and checksum printed.
	iso := filepath.Join(t.TempDir(), "k8s.iso")
	if err := os.WriteFile(iso, []byte(strings.Repeat("CD001", 4096)), 0o644); err != nil {
		t.Fatal(err)
	}
	var added struct {
		Version struct {
			Name  string `json:"name"`
			State string `json:"state"`
		} `json:"version"`
		URL      string `json:"url"`
		Checksum string `json:"checksum"`
	}
	mustCLI(&added, "kube-version", "add", "--iso", iso, "--semver", "1.31.4")
	if !strings.HasSuffix(added.URL, "/isos/v1.31.4.iso") || !strings.HasPrefix(added.Checksum, "{SHA-256}") || added.Version.Name != "v1.31.4" || added.Version.State != "Enabled" {
		t.Fatalf("kube-version add --iso: %+v", added)
	}
	if _, err := cli("kube-version", "add", "--iso", iso, "--semver", "1.9.0"); err == nil || !strings.Contains(err.Error(), "minimum") {
		t.Fatalf("old version accepted: %v", err)
	}
	mustCLI(nil, "kube-version", "add", "--semver", "1.32.0", "--url", "http://10.99.0.1:8080/isos/v1.32.0.iso")
	var versions []map[string]any
	mustCLI(&versions, "kube-version", "list")
	if len(versions) != 2 {
		t.Fatalf("kube-version list: %v", versions)
	}

	// Cluster lifecycle.
	var c client.CSCluster
	mustCLI(&c, "cluster", "create", "c1", "--version", "1.31.4", "--size", "2", "--control-nodes", "3")
	if c.State != "Starting" || c.Size != 2 || c.ControlNodes != 3 || c.CPUNumber != "10" {
		t.Fatalf("cluster create: %+v", c)
	}
	// Nothing has booted: the kubeconfig waits, and the error says for what.
	if _, err := cli("cluster", "kubeconfig", "c1"); err == nil || !strings.Contains(err.Error(), "530") ||
		!strings.Contains(err.Error(), "Kubernetes cluster c1 is Starting (waiting for") {
		t.Fatalf("kubeconfig of a Starting cluster: %v", err)
	}
	inproc.Healthy(t, ztpd, c.ID) // ztpd's watch sees its API server answer, control planes Ready
	mustCLI(&c, "cluster", "show", "c1")
	if c.State != "Running" {
		t.Fatalf("after a healthy observation: %+v", c)
	}
	var list []client.CSCluster
	mustCLI(&list, "cluster", "list")
	if len(list) != 1 || list[0].Name != "c1" {
		t.Fatalf("cluster list: %+v", list)
	}
	mustCLI(&c, "cluster", "scale", "c1", "--size", "4")
	if c.Size != 4 {
		t.Fatalf("scale: %+v", c)
	}
	// Nodes by name: a device seen on the network is admitted, left out of
	// rolling upgrades; one that never joined cannot be removed.
	const seen = "02:00:00:00:1f:01"
	if err := ztpd.Store.Update(func(tx core.Tx) error {
		now := time.Now().UTC()
		return tx.Devices().Put(core.Device{ID: seen, MAC: seen, Kind: core.KindVM, State: core.StateLeased, FirstSeen: now, LastSeen: now, UpdatedAt: now})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli("cluster", "add-nodes", "c1"); err == nil || !strings.Contains(err.Error(), "give the cluster and one device at least") {
		t.Fatalf("add-nodes without a device: %v", err)
	}
	mustCLI(&c, "cluster", "add-nodes", "c1", seen, "--manual-upgrade")
	if c.Size != 5 || c.State != "Running" {
		t.Fatalf("add-nodes: %+v", c)
	}
	if _, err := cli("cluster", "remove-nodes", "c1", seen); err == nil || !strings.Contains(err.Error(), "has no node "+seen) {
		t.Fatalf("remove-nodes of a device that never joined: %v", err)
	}
	mustCLI(&c, "cluster", "upgrade", "c1", "--version", "v1.32.0")
	if c.KubernetesVersionName != "v1.32.0" {
		t.Fatalf("upgrade: %+v", c)
	}
	if _, err := cli("cluster", "upgrade", "c1", "--version", "1.31.4"); err == nil || !strings.Contains(err.Error(), "downgraded") {
		t.Fatalf("downgrade: %v", err)
	}
	mustCLI(nil, "cluster", "stop", "c1")
	mustCLI(&c, "cluster", "show", "c1")
	if c.State != "Stopped" {
		t.Fatalf("after stop: %s", c.State)
	}
	// Started, it is Starting until ztpd sees it healthy again.
	mustCLI(&c, "cluster", "start", "c1")
	if c.State != "Starting" {
		t.Fatalf("after start: %s", c.State)
	}
	inproc.Healthy(t, ztpd, c.ID)
	// No control plane has joined yet, so the cluster has no endpoint to
	// put into a kubeconfig.
	if _, err := cli("cluster", "kubeconfig", "c1"); err == nil || !strings.Contains(err.Error(), "no API endpoint yet") || !strings.Contains(err.Error(), "530") {
		t.Fatalf("kubeconfig before any control plane: %v", err)
	}
	var job map[string]string
	mustCLI(&job, "cluster", "delete", "c1", "--no-wait", "--yes")
	if job["jobid"] == "" {
		t.Fatalf("--no-wait: %v", job)
	}

	// Per-role shapes: the control planes' offering apart from the
	// workers'; a node template names a loaded profile (none is here).
	var shaped client.CSCluster
	mustCLI(&shaped, "cluster", "create", "c2", "--version", "1.31.4", "--node-offering", "control=ztpd-large")
	if shaped.ControlOfferingName != "ztpd-large" || shaped.WorkerOfferingName != "ztpd-small" {
		t.Fatalf("cluster create --node-offering: %+v", shaped)
	}
	mustCLI(nil, "cluster", "delete", "c2", "--yes")
	// Etcd nodes: an odd count, on their own offering; an even one refused.
	var withEtcd client.CSCluster
	mustCLI(&withEtcd, "cluster", "create", "e1", "--version", "1.31.4", "--etcd-nodes", "3", "--node-offering", "etcd=ztpd-medium")
	if withEtcd.EtcdNodes != 3 || withEtcd.EtcdOfferingName != "ztpd-medium" {
		t.Fatalf("cluster create --etcd-nodes 3: %+v", withEtcd)
	}
	mustCLI(nil, "cluster", "delete", "e1", "--yes")
	if _, err := cli("cluster", "create", "e2", "--version", "1.31.4", "--etcd-nodes", "2"); err == nil ||
		!strings.Contains(err.Error(), "etcdnodes=2") {
		t.Fatalf("cluster create --etcd-nodes 2: %v", err)
	}
	if _, err := cli("cluster", "create", "c3", "--version", "1.31.4", "--node-template", "worker=nosuch"); err == nil ||
		!strings.Contains(err.Error(), `no profile named "nosuch" is loaded`) {
		t.Fatalf("cluster create --node-template of no loaded profile: %v", err)
	}

	// REST-backed groups.
	var devices, leases, tokens []any
	mustCLI(&devices, "device", "list")
	mustCLI(&leases, "lease", "list")
	mustCLI(&tokens, "token", "list")
	if devices == nil || leases == nil || tokens == nil {
		t.Fatal("empty lists must print []")
	}

	// A user key may not manage versions; keys never list secrets.
	out, err = runCLI(t, dd, "apikey", "create", "--role", "user", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var user struct {
		APIKey    string `json:"api_key"`
		SecretKey string `json:"secret_key"`
	}
	_ = json.Unmarshal([]byte(out), &user)
	_, err = runCLI(t, dd, "--api-url", base, "--api-key", user.APIKey, "--secret-key", user.SecretKey,
		"kube-version", "add", "--semver", "1.33.0", "--url", "http://x/y.iso")
	if err == nil || !strings.Contains(err.Error(), "error 432") {
		t.Fatalf("user adds version: %v", err)
	}
	// A user key's cluster: the user sees only its own, the admin's
	// "cluster list" every account's (listall), "--mine" the admin's own.
	ucli := func(args ...string) (string, error) {
		return runCLI(t, append(append([]string{}, args...), dd, "--api-url", base, "--api-key", user.APIKey, "--secret-key", user.SecretKey, "-o", "json")...)
	}
	if out, err := ucli("cluster", "create", "u1", "--version", "1.32.0", "--size", "1"); err != nil {
		t.Fatalf("user creates a cluster: %v %s", err, out)
	}
	mustCLI(nil, "cluster", "create", "a1", "--version", "1.32.0", "--size", "1")
	namesOf := func(out string) string {
		var l []client.CSCluster
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			t.Fatalf("cluster list output %q: %v", out, err)
		}
		var n []string
		for _, c := range l {
			n = append(n, c.Name+"@"+c.Account)
		}
		return strings.Join(n, ",")
	}
	if out, err := ucli("cluster", "list"); err != nil || namesOf(out) != "u1@"+user.APIKey {
		t.Fatalf("user cluster list: %v %s", err, out)
	}
	if out, err := cli("cluster", "list"); err != nil || namesOf(out) != "u1@"+user.APIKey+",a1@admin" {
		t.Fatalf("admin cluster list: %v %s", err, out)
	}
	if out, err := cli("cluster", "list", "--mine"); err != nil || namesOf(out) != "a1@admin" {
		t.Fatalf("admin cluster list --mine: %v %s", err, out)
	}
	if _, err := ucli("cluster", "scale", "a1", "--size", "2"); err == nil || !strings.Contains(err.Error(), `cluster "a1" not found`) {
		t.Fatalf("user scales the admin's cluster: %v", err)
	}
	mustCLI(&c, "cluster", "show", "u1") // the admin resolves any account's cluster by name
	if c.Account != user.APIKey {
		t.Fatalf("admin shows the user's cluster: %+v", c)
	}

	out, _ = runCLI(t, dd, "apikey", "list", "-o", "json")
	if strings.Contains(out, key.SecretKey) || strings.Contains(out, user.SecretKey) || !strings.Contains(out, key.APIKey) {
		t.Fatalf("apikey list: %s", out)
	}
	// Admin socket refusals reach the operator as the service's sentence,
	// not as the JSON error body they travel in.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"apikey", "create", "--role", "root"}, `role "root": use admin or user`},
		{[]string{"apikey", "revoke", "AKnosuchkey", "--yes"}, "AKnosuchkey"},
	} {
		_, err := runCLI(t, append([]string{dd}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.ContainsAny(err.Error(), "{}") {
			t.Errorf("%v: error %v, want a plain sentence with %q", c.args, err, c.want)
		}
	}
	if _, err := runCLI(t, "cluster", "list", "--api-url", base); err == nil || !strings.Contains(err.Error(), "no API credentials") {
		t.Fatalf("missing credentials: %v", err)
	}
}
