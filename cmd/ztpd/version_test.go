package main

import (
	"encoding/json"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/store/boltstore"
)

// "ztpd version" is the build version only; the Kubernetes versions are
// "ztpd kube-version".
func TestVersionIsTheBuildVersion(t *testing.T) {
	out, err := runCLI(t, "version", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal([]byte(out), &fields); err != nil {
		t.Fatalf("version -o json: %v\n%s", err, out)
	}
	for k := range fields {
		if !slices.Contains([]string{"version", "commit", "go", "store_schema"}, k) {
			t.Errorf("version -o json has field %q", k)
		}
	}
	var vi versionInfo
	if err := json.Unmarshal([]byte(out), &vi); err != nil {
		t.Fatal(err)
	}
	if vi.Version != version || vi.Go != runtime.Version() || vi.Schema != boltstore.SchemaVersion {
		t.Fatalf("version: %+v", vi)
	}
	if out, err := runCLI(t, "version"); err != nil || !strings.Contains(out, "store schema") {
		t.Fatalf("version table: %v\n%s", err, out)
	}
	// The old place of the Kubernetes version subcommands points to the new one.
	if _, err := runCLI(t, "version", "list"); err == nil || !strings.Contains(err.Error(), "ztpd kube-version list") {
		t.Fatalf("version list: %v", err)
	}
}

func TestCommandLayout(t *testing.T) {
	root := newRootCmd()
	byName := map[string][]string{}
	for _, c := range root.Commands() {
		for _, s := range c.Commands() {
			byName[c.Name()] = append(byName[c.Name()], s.Name())
		}
		if _, ok := byName[c.Name()]; !ok {
			byName[c.Name()] = nil
		}
	}
	if subs, ok := byName["version"]; !ok || len(subs) != 0 {
		t.Errorf("version: present %v, subcommands %v (want the build version alone)", ok, subs)
	}
	if subs := byName["kube-version"]; !slices.Equal(subs, []string{"add", "delete", "disable", "enable", "list"}) {
		t.Errorf("kube-version subcommands %v", subs)
	}
	// The namespace lab is its own binary (cmd/ztpd-lab).
	if _, ok := byName["lab"]; ok {
		t.Error("ztpd has a lab command")
	}
}
