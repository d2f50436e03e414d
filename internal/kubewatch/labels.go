package kubewatch

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// LabelPrefix is the default label key prefix ztpd owns on Nodes:
// "ztpd.io/<name>", and any subdomain of it ("sonic.ztpd.io/<name>").
const LabelPrefix = "ztpd.io"

// Owned reports whether ztpd manages a label key under prefixes: the key
// has a prefix part (before "/") equal to one of prefixes or a subdomain of
// one. Unprefixed keys and every other prefix (kubernetes.io, the kubelet's
// own, an operator's) are never set or removed by ztpd.
func Owned(key string, prefixes []string) bool {
	p, _, ok := strings.Cut(key, "/")
	if !ok {
		return false
	}
	for _, own := range prefixes {
		if p == own || strings.HasSuffix(p, "."+own) {
			return true
		}
	}
	return false
}

// checkPrefix refuses a prefix that is not a DNS subdomain or that would
// claim Kubernetes' own label namespaces.
func checkPrefix(p string) error {
	if errs := validation.IsDNS1123Subdomain(p); len(errs) > 0 {
		return fmt.Errorf("kubewatch: label prefix %q: %s", p, strings.Join(errs, "; "))
	}
	for _, reserved := range []string{"kubernetes.io", "k8s.io"} {
		if p == reserved || strings.HasSuffix(p, "."+reserved) {
			return fmt.Errorf("kubewatch: label prefix %q is Kubernetes' own", p)
		}
	}
	return nil
}

// labelChanges compares a Node's labels with the desired ones and returns
// the JSON merge patch values (nil: remove) that make the owned labels
// equal to desired, and the desired labels that were skipped, with why.
// A desired key outside prefixes, an invalid key or an invalid value is
// skipped; an owned label whose desired value was skipped is kept as is.
func labelChanges(current, desired map[string]string, prefixes []string) (changes map[string]*string, skipped []string) {
	for k, v := range desired {
		if !Owned(k, prefixes) {
			skipped = append(skipped, fmt.Sprintf("%s: not under %s", k, strings.Join(prefixes, ", ")))
			continue
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			skipped = append(skipped, fmt.Sprintf("%s: %s", k, strings.Join(errs, "; ")))
			continue
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			skipped = append(skipped, fmt.Sprintf("%s=%q: %s", k, v, strings.Join(errs, "; ")))
			continue
		}
		if cur, ok := current[k]; ok && cur == v {
			continue
		}
		if changes == nil {
			changes = map[string]*string{}
		}
		changes[k] = &v
	}
	for k := range current {
		if _, want := desired[k]; want || !Owned(k, prefixes) {
			continue
		}
		if changes == nil {
			changes = map[string]*string{}
		}
		changes[k] = nil
	}
	sort.Strings(skipped)
	return changes, skipped
}

// labelPatch is the JSON merge patch (RFC 7386) of metadata.labels: only
// the listed keys change, so labels others set meanwhile are kept.
func labelPatch(changes map[string]*string) ([]byte, error) {
	return json.Marshal(map[string]any{"metadata": map[string]any{"labels": changes}})
}

// changeSummary lists the keys set and removed, for the log (values are
// device facts, not secrets, but keys are enough to say what happened).
func changeSummary(changes map[string]*string) (set, removed []string) {
	for k, v := range changes {
		if v == nil {
			removed = append(removed, k)
		} else {
			set = append(set, k)
		}
	}
	sort.Strings(set)
	sort.Strings(removed)
	return set, removed
}
