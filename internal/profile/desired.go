package profile

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/semver"
)

// desiredSpec is a profile's desired: block, the desired-state defaults
// of the devices that get the profile: what an operator set on
// a device itself wins over it, field by field (labels and hooks key by
// key).
type desiredSpec struct {
	Mode              string            `yaml:"mode"`
	Image             string            `yaml:"image"`
	KubernetesVersion string            `yaml:"kubernetes_version"`
	Labels            map[string]string `yaml:"labels"`
	// Hooks maps a hook phase to the image store name of its script.
	Hooks map[string]string `yaml:"hooks"`
}

// checkDesired validates the desired: block. Its images (the target and
// the hooks' scripts) are checked for form only: whether the image store
// holds them is checked where they are used, since the store changes
// while profiles stay loaded.
func (c *compiler) checkDesired() {
	ds := c.p.spec.Desired
	if ds == nil {
		return
	}
	modes := []string{string(core.ModeCluster), string(core.ModeStandalone)}
	switch core.DeviceMode(ds.Mode) {
	case "", core.ModeCluster:
	case core.ModeStandalone:
		if c.p.Cluster != "" {
			c.add("desired.mode", "standalone, but the profile names cluster %q: a standalone device joins no cluster", c.p.Cluster)
		}
	default:
		c.add("desired.mode", "%q is not one of cluster, standalone%s", ds.Mode, didYouMean(ds.Mode, modes, strconv.Quote))
	}
	if ds.Image != "" && !imageNameRE.MatchString(ds.Image) {
		c.add("desired.image", "%q is not an image name", ds.Image)
	}
	if v := ds.KubernetesVersion; v != "" {
		sv, err := semver.ParseRelease(v)
		if err != nil {
			c.add("desired.kubernetes_version", "%q is not a Kubernetes version such as v1.37.2", v)
		} else {
			ds.KubernetesVersion = sv.Tag()
		}
	}
	for _, phase := range slices.Sorted(maps.Keys(ds.Hooks)) {
		field := "desired.hooks." + phase
		if !slices.Contains(core.HookPhases, phase) {
			c.add(field, "%q is not a hook phase (%s)%s", phase, strings.Join(core.HookPhases, ", "),
				didYouMean(phase, core.HookPhases, strconv.Quote))
			continue
		}
		if img := ds.Hooks[phase]; img == "" {
			c.add(field, "names no script: give the image store name of the hook's script")
		} else if !imageNameRE.MatchString(img) {
			c.add(field, "%q is not an image name", img)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(ds.Labels)) {
		field := "desired.labels." + k
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			c.add(field, "%q is not a label key: %s", k, strings.Join(errs, "; "))
		} else if errs := validation.IsValidLabelValue(ds.Labels[k]); len(errs) > 0 {
			c.add(field, "%q is not a label value: %s", ds.Labels[k], strings.Join(errs, "; "))
		}
	}
}

// Desired is the desired-state defaults the profile's desired: block
// gives its devices (the Kubernetes version as a release tag, v1.37.2),
// and whether it has one.
func (p *Profile) Desired() (core.DesiredState, bool) {
	ds := p.spec.Desired
	if ds == nil {
		return core.DesiredState{}, false
	}
	return core.DesiredState{Mode: core.DeviceMode(ds.Mode), Image: ds.Image, KubernetesVersion: ds.KubernetesVersion,
		Labels: maps.Clone(ds.Labels), Hooks: maps.Clone(ds.Hooks)}, true
}
