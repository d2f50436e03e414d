package bundle

import (
	"strings"
	"testing"
	"unicode/utf8"

	yaml3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// FuzzYAMLWriter: every string, written as a scalar and (when allowed) as a
// literal block, reads back unchanged and as a string with both YAML 1.2
// (yaml.v3) and YAML 1.1 (go-yaml v2 via sigs.k8s.io/yaml) resolvers.
func FuzzYAMLWriter(f *testing.F) {
	for _, s := range []string{"plain", "10.99.1.10:6443", "yes", "NO", "0x1f", "1e3", "2026-03-01", "ztpd: worker", "a #b",
		"system:bootstrappers:kubeadm:default-node-token", "unix:///run/containerd/containerd.sock", "- x", "~", "@x",
		"#!/bin/bash\necho hi\n", "x\n\n", "no newline", " leading", "tab\there", "line\r\n", "'quoted'", "\"dq\"", "a: b", "null",
		"010", "0.5", ".5", "+1", "1_000", "12:30:45", "<<", "!tag", "&anchor", "*alias", "%x", "`x`", "[x]", "{x}", "a,b", "\u2028", "\ufeffx"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			t.Skip("only valid UTF-8 is rendered")
		}
		var w yamlWriter
		w.kv(0, "scalar", s)
		w.key(0, "list")
		w.item(0, s)
		w.block(0, "block", s)
		doc := w.String()
		var v3 map[string]any
		if err := yaml3.Unmarshal([]byte(doc), &v3); err != nil {
			t.Fatalf("yaml.v3: %v\n%s", err, doc)
		}
		var v2 map[string]any
		if err := yaml.Unmarshal([]byte(doc), &v2); err != nil {
			t.Fatalf("go-yaml v2: %v\n%s", err, doc)
		}
		for name, m := range map[string]map[string]any{"yaml.v3": v3, "go-yaml v2": v2} {
			if got, ok := m["scalar"].(string); !ok || got != s {
				t.Fatalf("%s scalar: %#v != %q\n%s", name, m["scalar"], s, doc)
			}
			if l, ok := m["list"].([]any); !ok || len(l) != 1 || l[0] != s {
				t.Fatalf("%s list: %#v\n%s", name, m["list"], doc)
			}
			if got, ok := m["block"].(string); !ok || got != s {
				t.Fatalf("%s block: %#v != %q\n%s", name, m["block"], s, doc)
			}
		}
	})
}

func TestPlainScalarsStayReadable(t *testing.T) {
	for _, s := range []string{"system:bootstrappers:kubeadm:default-node-token", "unix:///run/containerd/containerd.sock",
		"/etc/kubernetes/pki/ca.crt", "v1.28.4", "abcdef.0123456789abcdef", "systemctl daemon-reload", "10.99.1.10"} {
		if got := yamlString(s); got != s {
			t.Errorf("%q rendered as %s", s, got)
		}
	}
	for _, s := range []string{"yes", "10.99.1.10:6443", "1.28", "ztpd: worker", "a #b", "2026-03-01"} {
		if got := yamlString(s); !strings.HasPrefix(got, `"`) {
			t.Errorf("%q must be quoted, got %s", s, got)
		}
	}
}
