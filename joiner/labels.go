package joiner

import (
	"strings"

	"github.com/ztpd/ztpd/internal/core"
)

// Node labels ztpd sets from what it knows about a member, so workloads can
// select switches by image and model (the SONiC design's ask). Facts go
// under LabelPrefix ("ztpd.io/role", "ztpd.io/hwsku", ...); the operator's
// labels from the device record and its profile go under
// OperatorLabelPrefix ("label.ztpd.io/rack"). Both prefixes are ztpd's
// alone: the watch adds, changes and removes labels there to match, and
// leaves every other label on the Node alone. None is in the kubernetes.io
// or k8s.io namespaces, so the kubelet may set them itself at registration
// (--node-labels in the bundle) and NodeRestriction allows it.
const (
	LabelPrefix         = "ztpd.io/"
	OperatorLabelPrefix = "label.ztpd.io/"
)

// NodeLabels are the labels a member's Node should carry. Values the device
// supplied (serial, versions, hostnames) are made valid label values, never
// passed through: a value Kubernetes would refuse is rewritten (invalid
// characters become '_', trimmed to 63), and one that cannot be made valid
// is left out.
func NodeLabels(dev core.Device, role string, profileLabels map[string]string) map[string]string {
	out := map[string]string{}
	set := func(key, v string) {
		if v = labelValue(v); v != "" {
			out[key] = v
		}
	}
	set(LabelPrefix+"role", role)
	set(LabelPrefix+"kind", string(dev.Kind))
	set(LabelPrefix+"profile", dev.Profile)
	set(LabelPrefix+"serial", dev.Serial)
	set(LabelPrefix+"sonic_version", dev.SONiCVer)
	set(LabelPrefix+"hwsku", dev.Product)
	set(LabelPrefix+"platform", dev.Platform)
	set(LabelPrefix+"mac", strings.ReplaceAll(dev.MAC, ":", "-"))
	for _, ls := range []map[string]string{profileLabels, dev.Labels} { // the device's own win
		for k, v := range ls {
			if name := labelName(k); name != "" {
				set(OperatorLabelPrefix+name, v)
			}
		}
	}
	return out
}

// labelValue makes s a valid label value: at most 63 characters of
// [A-Za-z0-9_.-], beginning and ending with an alphanumeric; "" if
// nothing is left.
func labelValue(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			b[i] = '_'
		}
	}
	if len(b) > 63 {
		b = b[:63]
	}
	start, end := 0, len(b)
	for start < end && !isAlnum(b[start]) {
		start++
	}
	for end > start && !isAlnum(b[end-1]) {
		end--
	}
	return string(b[start:end])
}

// labelName is the name part of a label key made from an operator's label
// name (same rules as a value, and not empty).
func labelName(s string) string { return labelValue(s) }

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// DesiredLabels answers the watch: the labels the Node named node of
// cluster should carry under ztpd's prefixes; false when no member of
// cluster has that node name (a Node ztpd did not onboard: leave it alone).
func (s *Service) DesiredLabels(clusterID, node string) (map[string]string, bool) {
	var out map[string]string
	err := s.store.View(func(tx core.Tx) error {
		m, ok, err := s.memberByNode(tx, clusterID, node)
		if err != nil || !ok {
			return err
		}
		dev, err := tx.Devices().Get(m.Device)
		if err != nil {
			return err
		}
		out = NodeLabels(dev, m.Role, s.profileLabels(dev.Profile))
		return nil
	})
	if err != nil || out == nil {
		return nil, false
	}
	return out, true
}

func (s *Service) profileLabels(name string) map[string]string {
	if s.opts.ProfileLabels == nil || name == "" {
		return nil
	}
	return s.opts.ProfileLabels(name)
}
