package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/testenv/inproc"
)

// TestCNICommand: "ztpd cni" registers a manifest file with its
// parameters, lists, shows (by name and ID, the manifest byte for byte)
// and deletes it over the REST API; a user key's register and delete and
// the delete of a configuration a cluster uses print the API's refusal
// and fail; names complete.
func TestCNICommand(t *testing.T) {
	for _, v := range []string{"ZTPD_API_URL", "ZTPD_API_KEY", "ZTPD_SECRET_KEY", "ZTPD_API_CA"} {
		t.Setenv(v, "")
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	base, cfg, _ := inproc.ServeApp(t, nil)
	dd := "--data-dir=" + cfg.DataDir
	keyOf := func(role string) (key, secret string) {
		t.Helper()
		out, err := runCLI(t, dd, "apikey", "create", "--role", role, "--name", role+"-key", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		var k struct {
			APIKey    string `json:"api_key"`
			SecretKey string `json:"secret_key"`
		}
		if err := json.Unmarshal([]byte(out), &k); err != nil {
			t.Fatal(err)
		}
		return k.APIKey, k.SecretKey
	}
	adminKey, adminSecret := keyOf("admin")
	userKey, userSecret := keyOf("user")
	conn := func(key, secret string) []string {
		return []string{dd, "--api-url", base, "--api-key", key, "--secret-key", secret}
	}
	cli := func(args ...string) (string, error) {
		t.Helper()
		return runCLI(t, append(append([]string{}, args...), conn(adminKey, adminSecret)...)...)
	}
	ucli := func(args ...string) (string, error) {
		t.Helper()
		return runCLI(t, append(append([]string{}, args...), conn(userKey, userSecret)...)...)
	}

	manifest := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cni-settings\n  namespace: kube-system\n" +
		"data:\n  mtu: \"{{ ds.meta_data.MTU }}\"\n  cidr: \"{{ ds.meta_data.PodCIDR }}\"\n"
	file := filepath.Join(t.TempDir(), "calico.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}

	// An undeclared parameter and a user key are refused with the API's words.
	if out, err := cli("cni", "register", "calico", "--file", file, "--param", "MTU"); err == nil ||
		!strings.Contains(err.Error(), `"PodCIDR" is not among its params`) {
		t.Fatalf("register with an undeclared parameter: %v\n%s", err, out)
	}
	if out, err := ucli("cni", "register", "calico", "--file", file, "--param", "MTU,PodCIDR"); err == nil ||
		!strings.Contains(err.Error(), "this operation needs an admin API key (forbidden, HTTP 403)") {
		t.Fatalf("a user key registers: %v\n%s", err, out)
	}
	if _, err := cli("cni", "register", "calico"); err == nil || !strings.Contains(err.Error(), `"file" not set`) {
		t.Fatalf("register without --file: %v", err)
	}

	out, err := cli("cni", "register", "calico", "--file", file, "--param", "MTU", "--param", "PodCIDR", "-o", "json")
	var reg client.CNIConfiguration
	if err != nil || json.Unmarshal([]byte(out), &reg) != nil || reg.ID == "" || reg.Manifest != manifest ||
		!slices.Equal(reg.Params, []string{"MTU", "PodCIDR"}) || reg.Account != "admin" {
		t.Fatalf("register: %v\n%s", err, out)
	}
	if _, err := cli("cni", "register", "calico", "--file", file, "--param", "MTU,PodCIDR"); err == nil ||
		!strings.Contains(err.Error(), "A CNI configuration with name calico already exists") {
		t.Fatalf("register a name twice: %v", err)
	}

	// Every key lists and shows.
	out, err = ucli("cni", "list", "-o", "json")
	var list []client.CNIConfiguration
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].ID != reg.ID {
		t.Fatalf("list -o json: %v\n%s", err, out)
	}
	if out, err := ucli("cni", "list"); err != nil || !strings.Contains(out, "NAME") || !strings.Contains(out, "calico") ||
		!strings.Contains(out, "MTU,PodCIDR") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	if out, err := ucli("cni", "list", "--keyword", "flannel", "-o", "json"); err != nil || strings.TrimSpace(out) != "[]" {
		t.Fatalf("list --keyword of nothing: %v\n%s", err, out)
	}
	for _, ref := range []string{"calico", reg.ID} {
		out, err := ucli("cni", "show", ref, "-o", "json")
		var got client.CNIConfiguration
		if err != nil || json.Unmarshal([]byte(out), &got) != nil || got.ID != reg.ID {
			t.Fatalf("show %s: %v\n%s", ref, err, out)
		}
	}
	if out, err := ucli("cni", "show", "calico"); err != nil || !strings.Contains(out, "params") || !strings.Contains(out, "8 lines") {
		t.Fatalf("show: %v\n%s", err, out)
	}
	if out, err := ucli("cni", "show", "calico", "--manifest"); err != nil || out != manifest {
		t.Fatalf("show --manifest: %v\n%q", err, out)
	}
	if _, err := ucli("cni", "show", "nosuch"); err == nil || !strings.Contains(err.Error(), "no CNI configuration nosuch") {
		t.Fatalf("show of nothing: %v", err)
	}

	// TAB completes registered names.
	root := newRootCmd()
	show, _, err := root.Find([]string{"cni", "show"})
	if err != nil {
		t.Fatal(err)
	}
	if err := show.ParseFlags(conn(userKey, userSecret)); err != nil {
		t.Fatal(err)
	}
	if got, _ := show.ValidArgsFunction(show, nil, "cal"); !slices.Equal(got, []string{"calico"}) {
		t.Errorf("ztpd cni show cal<TAB> offers %q", got)
	}

	// In use by a cluster: refused, naming it, until the cluster is gone.
	if _, err := cli("kube-version", "add", "--semver", "1.32.0", "--url", "http://10.99.0.1:8080/isos/v1.32.0.iso"); err != nil {
		t.Fatal(err)
	}
	if out, err := ucli("cluster", "create", "net", "--version", "1.32.0", "--cni", "calico",
		"--cni-detail", "MTU=1450", "--cni-detail", "PodCIDR=10.1.0.0/16"); err != nil {
		t.Fatalf("create with --cni: %v\n%s", err, out)
	}
	if _, err := ucli("cni", "delete", "calico", "--yes"); err == nil || !strings.Contains(err.Error(), "this operation needs an admin API key (forbidden, HTTP 403)") {
		t.Fatalf("a user key deletes: %v", err)
	}
	if _, err := cli("cni", "delete", "calico"); err == nil || !strings.Contains(err.Error(), "pass --yes") {
		t.Fatalf("delete without --yes: %v", err)
	}
	if _, err := cli("cni", "delete", "calico", "--yes"); err == nil ||
		!strings.Contains(err.Error(), "CNI configuration calico is in use by Kubernetes cluster(s) net") {
		t.Fatalf("delete of a configuration in use: %v", err)
	}
	if out, err := ucli("cluster", "delete", "net", "--yes"); err != nil {
		t.Fatalf("cluster delete: %v\n%s", err, out)
	}
	if out, err := cli("cni", "delete", reg.ID, "--yes", "-o", "json"); err != nil || !strings.Contains(out, `"deleted": "`+reg.ID+`"`) {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	if out, err := cli("cni", "list", "-o", "json"); err != nil || strings.TrimSpace(out) != "[]" {
		t.Fatalf("list after delete: %v\n%s", err, out)
	}
}
