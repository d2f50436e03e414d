package profile

import (
	"maps"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
)

// A profile's desired: block loads into the defaults its devices get, the
// Kubernetes version as a release tag; a profile without one gives none.
func TestDesiredBlock(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "leaf.yaml", `name: leaf
match: {kind: sonic}
desired:
  mode: cluster
  image: sonic-202411.bin
  kubernetes_version: 1.37.2
  hooks:
    pre_upgrade: snapshot-bgp.sh
    post_upgrade: check-bgp.sh
  labels:
    ztpd.io/rack: "7"
    tier: leaf
---
name: spine
match: {kind: vm}
`)
	set, err := Load([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	ds, ok := set.Get("leaf").Desired()
	if !ok || ds.Mode != core.ModeCluster || ds.Image != "sonic-202411.bin" || ds.KubernetesVersion != "v1.37.2" ||
		!maps.Equal(ds.Hooks, map[string]string{"pre_upgrade": "snapshot-bgp.sh", "post_upgrade": "check-bgp.sh"}) ||
		!maps.Equal(ds.Labels, map[string]string{"ztpd.io/rack": "7", "tier": "leaf"}) {
		t.Fatalf("leaf's desired defaults: %+v %v", ds, ok)
	}
	// A copy: changing it changes nothing loaded.
	ds.Labels["tier"] = "spine"
	if again, _ := set.Get("leaf").Desired(); again.Labels["tier"] != "leaf" {
		t.Fatal("Desired shares the profile's labels")
	}
	if ds, ok := set.Get("spine").Desired(); ok || ds.Mode != "" || ds.Labels != nil {
		t.Fatalf("a profile without the block: %+v %v", ds, ok)
	}
}

// Every problem of a desired: block is reported at load, at its place,
// with the field as written: a mode, version, hook phase or label that
// cannot be, a hook without a script, a standalone mode in a profile that
// joins a cluster, an unknown field. Images are checked for form only (the
// image store is checked where they are used).
func TestDesiredBlockErrors(t *testing.T) {
	got := loadErrs(t, map[string]string{"a.yaml": `name: a
match: {kind: sonic}
desired:
  mode: standalon
  image: "no such/image"
  kubernetes_version: v1.37
  hooks:
    pre_upgrad: snap.sh
    post_join: ""
    pre_leave: check.sh
  labels:
    "bad key!": x
    rack: "not a value!"
  lables: {a: b}
---
name: b
cluster: fabric
desired:
  mode: standalone
  kubernetes_version: latest
`})
	wantErrs(t, got,
		`a.yaml:4:9: profile "a": desired.mode: "standalon" is not one of cluster, standalone (did you mean "standalone"?)`,
		`a.yaml:5:10: profile "a": desired.image: "no such/image" is not an image name`,
		`a.yaml:6:23: profile "a": desired.kubernetes_version: "v1.37" is not a Kubernetes version such as v1.37.2`,
		`a.yaml:8:5: profile "a": desired.hooks.pre_upgrad: "pre_upgrad" is not a hook phase (pre_upgrade, pre_leave, post_join, post_upgrade) (did you mean "pre_upgrade"?)`,
		`a.yaml:9:5: profile "a": desired.hooks.post_join: names no script: give the image store name of the hook's script`,
		`a.yaml:12:5: profile "a": desired.labels.bad key!: "bad key!" is not a label key: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`,
		`a.yaml:13:5: profile "a": desired.labels.rack: "not a value!" is not a label value: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`,
		`a.yaml:14:3: profile "a": desired.lables: unknown field (did you mean labels?)`,
		`a.yaml:19:9: profile "b": desired.mode: standalone, but the profile names cluster "fabric": a standalone device joins no cluster`,
		`a.yaml:20:23: profile "b": desired.kubernetes_version: "latest" is not a Kubernetes version such as v1.37.2`,
	)
}
