package rollout

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
)

// withBinaries replaces the env's engine by one whose Options.Binaries is
// binaries (the fake agents only read the desired-state owner).
func (e *env) withBinaries(binaries func(string) (string, map[string]string, error)) {
	e.t.Helper()
	eng, err := New(e.st, Options{Nodes: e.nodes, Agents: e.des, Members: e.members, Binaries: binaries})
	if err != nil {
		e.t.Fatal(err)
	}
	e.eng = eng
}

func upgradeArgs(t *testing.T, e *env, i int) map[string]string {
	t.Helper()
	d, err := e.des.Get(device(i))
	if err != nil || d.Operation == nil {
		t.Fatalf("desired state of %s: %v %+v", device(i), err, d)
	}
	for _, s := range d.Operation.Steps {
		if s.Action == "kubeadm-upgrade" {
			return s.Args
		}
	}
	t.Fatalf("%s's operation has no kubeadm-upgrade step: %+v", device(i), d.Operation.Steps)
	return nil
}

// TestUpgradeStepCarriesTheBinaries: with Binaries set, every node's
// kubeadm-upgrade step names the binaries' URL and the sha256s of kubeadm
// and kubelet (kubectl's is not the agent's business).
func TestUpgradeStepCarriesTheBinaries(t *testing.T) {
	e := newEnv(t, 1)
	var mu sync.Mutex
	var asked []string
	sums := map[string]string{"kubeadm": strings.Repeat("a", 64), "kubelet": strings.Repeat("b", 64), "kubectl": strings.Repeat("c", 64)}
	e.withBinaries(func(v string) (string, map[string]string, error) {
		mu.Lock()
		asked = append(asked, v)
		mu.Unlock()
		return "http://10.99.0.1:8080/binaries/" + v, sums, nil
	})
	r := e.wait(e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2"}).ID)
	if r.State != core.RolloutSucceeded {
		t.Fatalf("rollout %s: %s", r.State, r.Reason)
	}
	for i, phase := range []string{"apply", "node"} {
		args := upgradeArgs(t, e, i)
		role := map[string]string{"apply": "control-plane", "node": "worker"}[phase]
		want := map[string]string{"version": "v1.37.2", "phase": phase, "timeout": args["timeout"], "role": role,
			"binaries_url": "http://10.99.0.1:8080/binaries/v1.37.2", "kubeadm_sha256": sums["kubeadm"], "kubelet_sha256": sums["kubelet"]}
		if len(args) != len(want) {
			t.Fatalf("%s: args %v, want %v", device(i), args, want)
		}
		for k, v := range want {
			if args[k] != v {
				t.Fatalf("%s: %s = %q, want %q (%v)", device(i), k, args[k], v, args)
			}
		}
	}
	if strings.Join(asked, ",") != "v1.37.2,v1.37.2" {
		t.Fatalf("Binaries asked for %v", asked)
	}
}

// TestUpgradeWithoutBinaries: no URL leaves the step without binaries_url
// (the node's own kubeadm); an error fails the first node before its
// cordon, so it keeps running its pods.
func TestUpgradeWithoutBinaries(t *testing.T) {
	e := newEnv(t, 1)
	e.withBinaries(func(string) (string, map[string]string, error) { return "", nil, nil })
	r := e.wait(e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2"}).ID)
	if r.State != core.RolloutSucceeded {
		t.Fatalf("rollout %s: %s", r.State, r.Reason)
	}
	for i := range 2 {
		args := upgradeArgs(t, e, i)
		if _, ok := args["binaries_url"]; ok || args["kubeadm_sha256"] != "" || args["version"] != "v1.37.2" {
			t.Fatalf("%s: args %v", device(i), args)
		}
	}

	e = newEnv(t, 1)
	e.withBinaries(func(v string) (string, map[string]string, error) {
		return "", nil, errors.New("the ISO setup-" + v + ".iso is damaged")
	})
	r = e.wait(e.start(Spec{Kind: core.RolloutKubernetes, Target: "v1.37.2"}).ID)
	if r.State != core.RolloutFailed || !strings.Contains(r.Reason, "binaries of v1.37.2: the ISO setup-v1.37.2.iso is damaged") {
		t.Fatalf("rollout %s: %s", r.State, r.Reason)
	}
	e.nodes.mu.Lock()
	defer e.nodes.mu.Unlock()
	if len(e.nodes.log) != 0 || e.nodes.nodes["node-0"].version != "v1.36.3" {
		t.Fatalf("the cluster was touched: %v", e.nodes.log)
	}
}
