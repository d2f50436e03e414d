package profile

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// hostile is an injection once found pasted into config_db.json: a serial that
// closes the string and its table and opens a TACACS server table.
const hostile = `X"}}, "TACPLUS_SERVER": {"10.6.6.6": {"priority": "1"}}, "Y": {"z": "`

// contexts is a profile whose templates put one value in every context a
// document template can put it.
const contexts = `name: contexts
match: {kind: sonic}
hostname: sonic
config_db:
  inline: |
    {
      "IN_STRING": {"k": {"v": "pre {{ index .Labels "x" }} post", "{{ index .Labels "x" }}": "key"}},
      "VALUES": {"k": {"whole": {{ index .Labels "x" }}, "json": {{ index .Labels "x" | json }}, "n": {{ len .Labels }}}},
      "NUMBERS": {"k": {"asn": 65{{ len .Labels }}}}{{ if index .Labels "x" }},
      "COND": {"k": {"v": "{{ index .Labels "x" }}"}}{{ end }}{{ range $k, $v := .Labels }},
      "RANGE_{{ $k }}": {"k": {"v": "{{ $v }}"}}{{ end }}
    }
vm:
  user_data:
    inline: |
      #cloud-config
      hostname: {{ index .Labels "x" }}
      plain_tail: {{ index .Labels "frag" }}.cluster.local
      double: "a {{ index .Labels "x" }} b"
      single: 'a {{ index .Labels "x" }} b'
      list:
        - {{ index .Labels "x" }}
      flow: [{{ index .Labels "x" }}, two]
      # comment {{ index .Labels "x" }}
      script: |
        echo {{ index .Labels "frag" }}
      after: end
`

func loadInline(t testing.TB, src string) *Profile {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := Load([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	return set.Profiles()[0]
}

func TestEveryContextEscapes(t *testing.T) {
	p := loadInline(t, contexts)
	f := SampleFacts()
	f.Labels = map[string]string{"x": hostile, "frag": "web-01"}
	r, err := p.Render(f, Env{}, RenderAll)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.ConfigDB["TACPLUS_SERVER"]; ok {
		t.Fatalf("injected table in config_db: %v", r.ConfigDB)
	}
	get := func(table, field string) any {
		return r.ConfigDB[table].(map[string]any)["k"].(map[string]any)[field]
	}
	if v := get("IN_STRING", "v"); v != "pre "+hostile+" post" {
		t.Errorf("in a string: %q", v)
	}
	if v := get("IN_STRING", hostile); v != "key" {
		t.Errorf("as a key: %v", r.ConfigDB["IN_STRING"])
	}
	if v := get("VALUES", "whole"); v != hostile {
		t.Errorf("a whole value: %q", v)
	}
	if v := get("VALUES", "json"); v != hostile {
		t.Errorf("json function: %q", v)
	}
	if v := get("NUMBERS", "asn"); v != json.Number("652") {
		t.Errorf("number fragment: %v", v)
	}
	if v := get("RANGE_x", "v"); v != hostile {
		t.Errorf("range: %q", v)
	}
	var ud map[string]any
	if err := yaml.Unmarshal(r.UserData, &ud); err != nil {
		t.Fatalf("user data: %v\n%s", err, r.UserData)
	}
	want := map[string]any{"hostname": hostile, "plain_tail": "web-01.cluster.local", "double": "a " + hostile + " b",
		"single": "a " + hostile + " b", "list": []any{hostile}, "flow": []any{hostile, "two"}, "script": "echo web-01\n", "after": "end"}
	for k, v := range want {
		got, _ := json.Marshal(ud[k])
		exp, _ := json.Marshal(v)
		if string(got) != string(exp) {
			t.Errorf("user data %s = %s, want %s", k, got, exp)
		}
	}
	if len(ud) != len(want) {
		t.Errorf("user data keys %v", ud)
	}

	// A value that cannot be written safely where it stands is refused
	// rather than rendered: glued to plain text, or a line break in a
	// block scalar.
	for _, frag := range []string{"a: b", "x\nroot: y", "#x"} {
		f.Labels = map[string]string{"x": "ok", "frag": frag}
		if _, err := p.Render(f, Env{}, RenderAll); err == nil || !strings.Contains(err.Error(), "cannot be written") && !strings.Contains(err.Error(), "line break") {
			t.Errorf("fragment %q: %v", frag, err)
		}
	}
}

// TestContextMistakesAreLoadErrors: templates whose quoting depends on a
// branch cannot be escaped and are refused when profiles load.
func TestContextMistakesAreLoadErrors(t *testing.T) {
	for _, src := range []string{
		"name: a\nconfig_db: {inline: '{\"A\": {\"b\": \"{{ if .Serial }}\"{{ end }}\"}}'}\n",
		"name: b\nconfig_db: {inline: '{\"A\": {\"b\": {{ range .Labels }}\"{{ end }}}}'}\n",
		"name: c\nvm:\n  user_data:\n    inline: |\n      #cloud-config\n      a: {{ if .Serial }}'{{ end }}x\n",
		"name: d\nconfig_db: {inline: '{{ define \"x\" }}{{ end }}{}'}\n",
	} {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "p.yaml"), []byte(src), 0o644)
		if _, err := Load([]string{dir}); err == nil || !strings.Contains(err.Error(), "context") && !strings.Contains(err.Error(), "not supported") {
			t.Errorf("%q loaded: %v", src, err)
		}
	}
}

// shippedProfiles are the example profiles plus the contexts profile.
func shippedProfiles(t testing.TB) []*Profile {
	t.Helper()
	set, err := Load([]string{"../../examples/profiles"})
	if err != nil {
		t.Fatal(err)
	}
	return append(set.Profiles(), loadInline(t, contexts))
}

// shape is what a rendered document's structure is: config_db's tables and
// user data's top-level keys.
func shape(t testing.TB, r *Result) (tables, keys []string) {
	for k := range r.ConfigDB {
		tables = append(tables, k)
	}
	if r.UserData != nil {
		var ud map[string]any
		if err := yaml.Unmarshal(r.UserData, &ud); err != nil {
			t.Fatalf("rendered user data is not YAML: %v\n%s", err, r.UserData)
		}
		for k := range ud {
			keys = append(keys, k)
		}
	}
	slices.Sort(tables)
	slices.Sort(keys)
	return tables, keys
}

// FuzzRenderHostileFacts renders every shipped profile for a device whose
// facts are arbitrary strings: the render either fails with an error, or
// its config_db.json is JSON and its cloud-config YAML of exactly the shape
// a well-behaved device gets (no injected table or key).
func FuzzRenderHostileFacts(f *testing.F) {
	f.Add(hostile, "Accton-AS7712-32X", "r1", "web-01")
	f.Add(`a"b`, "P\nroot: x", `'`, "\\")
	f.Add("SPN0001", `{"x": 1}`, "\n- evil", "x: y")
	f.Add("LEAF\u2028X", "#", "|\n  x", "*alias")
	profiles := shippedProfiles(f)
	base := SampleFacts()
	base.IP = "10.99.40.10" // inside the leaf profile's management subnet
	type want struct{ tables, keys []string }
	benign := map[string]want{}
	for _, p := range profiles {
		bf := *base
		bf.Labels = map[string]string{"x": "ok", "frag": "ok", "rack": "r1"}
		r, err := p.Render(&bf, Env{BaseURL: "http://192.0.2.1:8080"}, RenderAll)
		if err != nil { // the spine profile computes addresses from its serials
			bf.Serial = "SPN0001"
			r, err = p.Render(&bf, Env{BaseURL: "http://192.0.2.1:8080"}, RenderAll)
		}
		if err != nil {
			f.Fatalf("profile %s with sample facts: %v", p.Name, err)
		}
		tb, ks := shape(f, r)
		benign[p.Name] = want{tb, ks}
	}
	f.Fuzz(func(t *testing.T, serial, product, label, frag string) {
		for _, p := range profiles {
			df := *base
			df.Serial, df.Product, df.DHCPHostname = serial, product, frag
			df.Labels = map[string]string{"x": label, "frag": frag, "rack": label}
			r, err := p.Render(&df, Env{BaseURL: "http://192.0.2.1:8080"}, RenderAll)
			if err != nil {
				continue
			}
			if r.ConfigDB != nil {
				raw, err := json.Marshal(r.ConfigDB)
				if err != nil || !json.Valid(raw) {
					t.Fatalf("%s: config_db does not encode: %v", p.Name, err)
				}
			}
			tb, ks := shape(t, r)
			w := benign[p.Name]
			if p.Name != "contexts" && !slices.Equal(tb, w.tables) || !slices.Equal(ks, w.keys) {
				t.Fatalf("%s: shape changed by device facts: tables %v keys %v, want %v %v", p.Name, tb, ks, w.tables, w.keys)
			}
			if p.Name == "contexts" {
				for _, tname := range tb {
					if !strings.HasPrefix(tname, "RANGE_") && !slices.Contains(w.tables, tname) && tname != "COND" {
						t.Fatalf("contexts: injected table %q", tname)
					}
				}
			}
		}
	})
}
