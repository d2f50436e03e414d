package joiner

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/kubewatch"
	"github.com/ztpd/ztpd/joiner/bundle"
	"github.com/ztpd/ztpd/testenv/certcheck"
	"github.com/ztpd/ztpd/testenv/freeport"
)

func runtimeOf(t *testing.T, e *env, id string) core.JoinState {
	t.Helper()
	var rt core.JoinState
	if err := e.store.View(func(tx core.Tx) error { var err error; rt, err = joinState(tx, id); return err }); err != nil {
		t.Fatal(err)
	}
	return rt
}

// TestKubeconfigIdentityAndAdminBinding: an issued kubeconfig is the
// caller's (CN user, O ztpd:cluster-admins, never system:masters) and
// expires when asked; the group's ClusterRoleBinding to cluster-admin is in
// the first control plane's init manifests, and ztpd creates it through the
// API server too: retried while the server is down, once when it is up,
// recorded. kubectl then authenticates with the kubeconfig against the
// server (which verifies client certificates against the cluster CA) and
// reads the binding.
func TestKubeconfigIdentityAndAdminBinding(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed")
	}
	if bundle.ClusterAdminsGroup != clusters.KubeconfigGroup {
		t.Fatalf("the init manifest binds %q, kubeconfigs carry %q", bundle.ClusterAdminsGroup, clusters.KubeconfigGroup)
	}
	role, binding := kubewatch.RBAC()
	roleJSON, _ := json.Marshal(role)
	bindingJSON, _ := json.Marshal(binding)
	e := newEnv(t, Options{AutoApprove: approveAll, Observer: Observer{User: kubewatch.ObserverUser,
		Groups: []string{kubewatch.ObserverGroup}, RBAC: [][]byte{roleJSON, bindingJSON}}})
	addr := freeport.Addr(t) // the API server is not up yet
	c := e.cluster(clusterSpec{Name: "prod", Size: 1, Endpoint: "https://" + addr + "/"})
	cp := e.must(e.join("prod", 1))
	if got := cloudFiles(t, cp)["/etc/ztpd/manifests/ztpd-cluster-admins.yaml"]; got != bundle.ClusterAdminsRBAC {
		t.Fatalf("first control plane's init manifests lack the binding: %q", got)
	}

	if err := e.svc.EnsureAdminBinding(bg, "prod"); err == nil {
		t.Fatal("binding created with no API server")
	}
	if rt := runtimeOf(t, e, c.ID); rt.AdminBinding || !rt.AdminBindingRetry {
		t.Fatalf("failed attempt not recorded for retry: %+v", rt)
	}
	kc, err := e.svc.IssueKubeconfig(bg, "prod", "alice", clusters.KubeconfigGroup, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	// The API server comes up; the sweeper loop (as `ztpd serve` runs it)
	// creates the binding.
	var ln net.Listener
	for i := 0; ; i++ {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		if i > 50 {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	api := startAPIServer(t, ln, e.svc.mustKeys(t, c.ID).ca)
	ctx, cancel := context.WithCancel(bg)
	done := make(chan struct{})
	go func() { e.svc.RunSweeper(ctx, time.Hour); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(15 * time.Second)
	for !runtimeOf(t, e, c.ID).AdminBinding {
		if time.Now().After(deadline) {
			t.Fatal("the sweeper did not create the binding")
		}
		time.Sleep(20 * time.Millisecond)
	}
	bindings, reqs := api.created2()
	if len(bindings) != 2 || len(api.roles) != 1 {
		t.Fatalf("%d bindings, %d roles created", len(bindings), len(api.roles))
	}
	// The observer's role: nodes only, never secrets or system:masters.
	gotRole, _ := json.Marshal(api.roles[0])
	obsBinding, _ := json.Marshal(bindings[1])
	if !strings.Contains(string(gotRole), `"name":"ztpd:node-observer"`) || !strings.Contains(string(gotRole), `"resources":["nodes"]`) ||
		!strings.Contains(string(gotRole), `"verbs":["get","list","watch","patch"]`) || !strings.Contains(string(obsBinding), `"name":"ztpd:observers"`) {
		t.Fatalf("observer RBAC %s %s", gotRole, obsBinding)
	}
	b, _ := json.Marshal(bindings[0])
	if !strings.Contains(string(b), `"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cluster-admin"}`) ||
		!strings.Contains(string(b), `"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"Group","name":"ztpd:cluster-admins"}]`) {
		t.Fatalf("binding %s", b)
	}
	if reqs[0] != "POST "+crbPath+" kubernetes-admin/system:masters" {
		t.Fatalf("binding created as %q", reqs[0])
	}
	// Once: recorded, never posted again.
	if err := e.svc.EnsureAdminBinding(bg, "prod"); err != nil {
		t.Fatal(err)
	}
	if _, reqs := api.created2(); len(reqs) != 3 {
		t.Fatalf("binding posted again: %v", reqs)
	}
	var rbacEvents int
	e.store.View(func(tx core.Tx) error {
		return tx.Events().List(core.StreamOf("cluster.rbac"), 0, func(ev core.Event) (bool, error) {
			if ev.Type == "cluster.rbac" && ev.Cluster == c.ID {
				rbacEvents++
			}
			return true, nil
		})
	})
	if rbacEvents != 1 {
		t.Fatalf("%d cluster.rbac events", rbacEvents)
	}

	// The certificate, as openssl reads it.
	cfgFile := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(cfgFile, kc.Config, 0o600); err != nil {
		t.Fatal(err)
	}
	certB64, err := exec.Command(kubectl, "config", "view", "--raw", "--kubeconfig", cfgFile, "-o", "jsonpath={.users[0].user.client-certificate-data}").Output()
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := base64.StdEncoding.DecodeString(string(certB64))
	if err != nil {
		t.Fatal(err)
	}
	subject, notAfter := certcheck.SubjectAndEnd(t, certPEM)
	if subject != "O = ztpd:cluster-admins, CN = alice" {
		t.Fatalf("certificate subject %q", subject)
	}
	if want := e.clk.now().Add(2 * time.Hour); !notAfter.Equal(want) || !kc.NotAfter.Equal(want) {
		t.Fatalf("certificate expires %v (reported %v), want %v", notAfter, kc.NotAfter, want)
	}

	// kubectl authenticates with it and reads what ztpd created.
	cmd := exec.Command(kubectl, "--kubeconfig", cfgFile, "get", "--raw", crbPath+"/"+AdminBindingName)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"name":"cluster-admin"`) {
		t.Fatalf("kubectl get --raw: %v\n%s", err, out)
	}
	_, reqs = api.created2()
	if last := reqs[len(reqs)-1]; last != "GET "+crbPath+"/"+AdminBindingName+" alice/ztpd:cluster-admins" {
		t.Fatalf("kubectl authenticated as %q", last)
	}

	// A binding the cluster already has (made by kubeadm init from the
	// manifest) counts as created.
	if err := e.store.Update(func(tx core.Tx) error {
		rt, _ := joinState(tx, c.ID)
		rt.AdminBinding = false
		return tx.Clusters().PutJoinState(c.ID, rt)
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.EnsureAdminBinding(bg, "prod"); err != nil || !runtimeOf(t, e, c.ID).AdminBinding {
		t.Fatalf("existing binding (409): %v", err)
	}
}
