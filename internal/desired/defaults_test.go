package desired

import (
	"context"
	"maps"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// Overlay: what was set on the device wins field by field; labels and
// hooks merge key by key; a standalone default does not apply to a device
// whose state names a cluster; the rest is the device's own.
func TestOverlay(t *testing.T) {
	defaults := core.DesiredState{Mode: core.ModeStandalone, Image: "sonic-202411.bin", KubernetesVersion: "v1.37.2",
		Labels: map[string]string{"tier": "leaf", "rack": "1"}, Hooks: map[string]string{"pre_upgrade": "snap.sh"}}
	op := &core.AgentOperation{ID: "op-1"}
	explicit := core.DesiredState{Device: "d1", Image: "sonic-202505.bin", Labels: map[string]string{"rack": "7"},
		Hooks: map[string]string{"post_upgrade": "check.sh"}, Generation: 3, Operation: op}
	got := Overlay(defaults, explicit)
	want := core.DesiredState{Device: "d1", Mode: core.ModeStandalone, Image: "sonic-202505.bin", KubernetesVersion: "v1.37.2",
		Labels: map[string]string{"tier": "leaf", "rack": "7"}, Hooks: map[string]string{"pre_upgrade": "snap.sh", "post_upgrade": "check.sh"},
		Generation: 3, Operation: op}
	if got.Device != want.Device || got.Mode != want.Mode || got.Image != want.Image || got.KubernetesVersion != want.KubernetesVersion ||
		!maps.Equal(got.Labels, want.Labels) || !maps.Equal(got.Hooks, want.Hooks) || got.Generation != 3 || got.Operation != op {
		t.Fatalf("overlay:\n got %+v\nwant %+v", got, want)
	}
	// Neither input changes.
	if defaults.Labels["rack"] != "1" || len(explicit.Hooks) != 1 {
		t.Fatalf("overlay changed its inputs: %v %v", defaults.Labels, explicit.Hooks)
	}
	// A member (its state names a cluster) keeps mode unset, not standalone.
	if got := Overlay(defaults, core.DesiredState{Cluster: "c1"}); got.Mode != "" {
		t.Fatalf("standalone default over a state naming a cluster: %q", got.Mode)
	}
	if got := Overlay(core.DesiredState{Mode: core.ModeCluster}, core.DesiredState{Cluster: "c1"}); got.Mode != core.ModeCluster {
		t.Fatalf("cluster default: %q", got.Mode)
	}
	// No defaults: the device's own state, as it is.
	if got := Overlay(core.DesiredState{}, explicit); got.Image != explicit.Image || !maps.Equal(got.Labels, explicit.Labels) {
		t.Fatalf("without defaults: %+v", got)
	}
}

// A device's profile defaults (Options.Defaults) show in Get and Layers
// and in its agent's document, under what was set on the device; Set
// changes only what is set on the device, and a target cleared there
// falls back to the profile's. The profile's image is resolved when the
// document is made: one the store lacks is left out.
func TestProfileDefaults(t *testing.T) {
	st := storetest.Store(t)
	const dev, other = "02:00:00:00:00:01", "02:00:00:00:00:02"
	now := time.Now().UTC()
	storetest.Update(t, st, func(tx core.Tx) error {
		for _, id := range []string{dev, other} {
			if err := tx.Devices().Put(core.Device{ID: id, MAC: id, Kind: core.KindSONiC, State: core.StateLeased}); err != nil {
				return err
			}
		}
		for _, im := range []core.Image{{SHA256: strings.Repeat("a1", 32), Name: "sonic-202411.bin", Kind: "sonic-installer", Created: now},
			{SHA256: strings.Repeat("b2", 32), Name: "sonic-202505.bin", Kind: "sonic-installer", Created: now},
			{SHA256: strings.Repeat("c3", 32), Name: "snap.sh", Kind: "file", Created: now}} {
			if err := tx.Images().Put(im); err != nil {
				return err
			}
			if err := tx.Images().SetName(im.Name, im.SHA256); err != nil {
				return err
			}
		}
		return nil
	})
	defaults := core.DesiredState{Mode: core.ModeCluster, Image: "sonic-202411.bin", KubernetesVersion: "v1.37.2",
		Labels: map[string]string{"tier": "leaf"}, Hooks: map[string]string{"pre_upgrade": "snap.sh"}}
	s := New(st, Options{Auth: credentialIsDevice{}, ImageURL: func(sha string) string { return "http://10.99.0.1/images/" + sha },
		Defaults: func(device string) (core.DesiredState, string) {
			if device == dev {
				return defaults, "leaf"
			}
			return core.DesiredState{}, ""
		}})
	ctx := context.Background()

	l, err := s.Layers(dev)
	if err != nil {
		t.Fatal(err)
	}
	if l.Profile != "leaf" || l.Explicit.Generation != 0 || l.Explicit.Image != "" || l.Effective.Image != "sonic-202411.bin" ||
		l.Effective.Mode != core.ModeCluster || l.Effective.KubernetesVersion != "v1.37.2" || l.Effective.Labels["tier"] != "leaf" ||
		l.Effective.Hooks["pre_upgrade"] != "snap.sh" {
		t.Fatalf("layers of a device nobody set anything for: %+v", l)
	}
	if d, _ := s.Get(other); d.Image != "" || d.Mode != "" || d.Labels != nil {
		t.Fatalf("a device without profile defaults: %+v", d)
	}

	// Set changes what is set on the device: it wins; the rest stays the
	// profile's.
	img, v := "sonic-202505.bin", ""
	out, err := s.Set(ctx, "admin", dev, Change{Image: &img, Labels: map[string]string{"rack": "7"}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Image != img || out.KubernetesVersion != "" || !maps.Equal(out.Labels, map[string]string{"rack": "7"}) || out.Generation != 1 {
		t.Fatalf("Set stores only what was set: %+v", out)
	}
	d, err := s.Get(dev)
	if err != nil {
		t.Fatal(err)
	}
	if d.Image != img || d.KubernetesVersion != "v1.37.2" || !maps.Equal(d.Labels, map[string]string{"tier": "leaf", "rack": "7"}) || d.Generation != 1 {
		t.Fatalf("effective after Set: %+v", d)
	}
	doc, err := s.AgentDocument(ctx, dev, netip.MustParseAddr("10.99.0.10"))
	if err != nil {
		t.Fatal(err)
	}
	if doc.Mode != core.ModeCluster || doc.KubernetesVersion != "v1.37.2" || doc.Image == nil || doc.Image.Name != img ||
		doc.Image.URL != "http://10.99.0.1/images/"+strings.Repeat("b2", 32) || !maps.Equal(doc.Labels, d.Labels) {
		t.Fatalf("agent document: %+v (image %+v)", doc, doc.Image)
	}

	// Clearing the image on the device falls back to the profile's; a
	// profile image the store lacks is left out of the document.
	img = ""
	if _, err := s.Set(ctx, "admin", dev, Change{Image: &img, KubernetesVersion: &v}); err != nil {
		t.Fatal(err)
	}
	if doc, _ = s.AgentDocument(ctx, dev, netip.MustParseAddr("10.99.0.10")); doc.Image == nil || doc.Image.Name != "sonic-202411.bin" {
		t.Fatalf("cleared image: document %+v", doc.Image)
	}
	defaults.Image = "sonic-209901.bin"
	if doc, _ = s.AgentDocument(ctx, dev, netip.MustParseAddr("10.99.0.10")); doc.Image != nil {
		t.Fatalf("an image the store lacks in the document: %+v", doc.Image)
	}
	if d, _ := s.Get(dev); d.Image != "sonic-209901.bin" {
		t.Fatalf("Get shows the profile's image as named: %q", d.Image)
	}
}
