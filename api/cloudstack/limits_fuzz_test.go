package cloudstack

import (
	"strings"
	"testing"
)

// FuzzNodeMap: whatever per-role entries a client sends, nodeMap either
// refuses them (431) or returns node types trimmed and lowercased, each
// with a non-empty value that one of the entries gave for it.
func FuzzNodeMap(f *testing.F) {
	f.Add("0", "worker", "ztpd-large", "1", "control", "ztpd-small")
	f.Add("0", "Worker ", "x", "00", "worker", "y")
	f.Add("0]", "", "", "1", "etcd", "e")
	f.Fuzz(func(t *testing.T, i1, n1, v1, i2, n2, v2 string) {
		r := &csRequest{p: map[string]string{
			"nodeofferings[" + i1 + "].node": n1, "nodeofferings[" + i1 + "].offering": v1,
			"nodeofferings[" + i2 + "].node": n2, "nodeofferings[" + i2 + "].offering": v2,
		}}
		m, e := nodeMap(r, "nodeofferings", "offering")
		if e != nil {
			if e.code != csParamError || !strings.Contains(e.text, "nodeofferings") {
				t.Fatalf("refusal %+v", e)
			}
			return
		}
		given := map[string]bool{}
		for _, en := range r.entries("nodeofferings") {
			given[strings.ToLower(strings.TrimSpace(en["node"]))+"\x00"+strings.TrimSpace(en["offering"])] = true
		}
		for k, v := range m {
			if k == "" || v == "" || k != strings.ToLower(strings.TrimSpace(k)) || !given[k+"\x00"+v] {
				t.Fatalf("entries %v gave %q=%q", r.entries("nodeofferings"), k, v)
			}
		}
	})
}
