package profile

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// loadErrs loads the files (name -> body) from one directory and returns
// the error lines, without the directory.
func loadErrs(t *testing.T, files map[string]string) []string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		write(t, dir, name, body)
	}
	_, err := Load([]string{dir})
	if err == nil {
		t.Fatalf("loaded without error: %v", files)
	}
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error %T: %v", err, err)
	}
	var out []string
	for _, e := range errs {
		out = append(out, strings.ReplaceAll(e.Error(), dir+string(filepath.Separator), ""))
	}
	return out
}

func wantErrs(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("errors:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// The issue's examples: an unknown field used to be "field priorty not found
// in type profile.spec" at line 1 of the document; it is named as written,
// at its own line and column, with the field it was meant to be.
func TestUnknownFieldDidYouMeanAtItsLine(t *testing.T) {
	got := loadErrs(t, map[string]string{"a.yaml": "name: a\nmatch: {kind: sonic}\n\n\npriorty: 5\n"})
	wantErrs(t, got, `a.yaml:5:1: profile "a": priorty: unknown field (did you mean priority?)`)

	got = loadErrs(t, map[string]string{"a.yaml": "name: a\nmatch:\n  kind: sonic\n  seral: X1\n  colour: red\n"})
	wantErrs(t, got,
		`a.yaml:4:3: profile "a": match.seral: unknown field (did you mean serial?)`,
		`a.yaml:5:3: profile "a": match.colour: unknown field; match takes serial, mac, product, platform, kind, subnet, circuit_id, remote_id`)
}

// `{{ .Serail }}` is caught when the profile loads, at the template's line
// in the YAML file, with the field it was meant to be; so are unknown
// functions and nested fields.
func TestTemplateFieldsAndFunctionsCheckedAtLoad(t *testing.T) {
	got := loadErrs(t, map[string]string{"a.yaml": "name: a\nmatch: {kind: sonic}\n\n\nhostname: 'sw-{{ .Serail }}'\n"})
	wantErrs(t, got, `a.yaml:5:18: profile "a": hostname: unknown field .Serail (did you mean .Serial?)`)

	got = loadErrs(t, map[string]string{"a.yaml": "name: a\n" +
		"hostname: '{{ .serial | lowr }}'\n" +
		"hwsku: '{{ $.Mgmt.Ip }}{{ with .Mgmt }}{{ .Gateway }}{{ .Prefx }}{{ end }}'\n" +
		"sections:\n" +
		"  - name: snmp\n" +
		"    data:\n" +
		"      community-ro: x\n" +
		"      location: '{{ range $k, $v := .Labels }}{{ $v.Rack }}{{ end }}{{ .Hostnme }}'\n"})
	wantErrs(t, got,
		`a.yaml:2:15: profile "a": hostname: unknown field .serial (did you mean .Serial?)`,
		`a.yaml:2:25: profile "a": hostname: unknown function "lowr" (did you mean "lower"?)`,
		`a.yaml:3:12: profile "a": hwsku: unknown field $.Mgmt.Ip (did you mean $.Mgmt.IP?)`,
		`a.yaml:3:57: profile "a": hwsku: unknown field .Prefx (did you mean .Prefix?)`,
		`a.yaml:8:50: profile "a": sections[0].data.location: $v.Rack: $v is a text value and has no fields`,
		`a.yaml:8:72: profile "a": sections[0].data.location: unknown field .Hostnme (did you mean .Hostname?)`)
}

// Every problem of a file, and of every file, comes in one pass, in order
// of position, each at its own place.
func TestAllErrorsInOnePass(t *testing.T) {
	got := loadErrs(t, map[string]string{
		"a.yaml": `name: leaf
priority: high
match:
  kind: [sonic, router]
  subnet: 10.0.0.0/33
hostname: 'leaf-{{ .Serail }}'
mgmt:
  ip: '{{ .IP }}'
  prefix: 40
config_db:
  inline: |
    {
      "DEVICE_METADATA": {"localhost": {"hwsku": "{{ .Prodct }}"}}
    }
ztp_options: {reboot-on-sucess: true}
role: wroker
cluster: fabric
---
hostname: spine
`,
		"b.yaml": "name: leaf\nhwsku: '{{ .HWSKU }}'\n",
	})
	wantErrs(t, got,
		`a.yaml:2:11: profile "leaf": priority: want a whole number, got "high"`,
		`a.yaml:4:17: profile "leaf": match.kind: "router" is not one of sonic, onie, vm, unknown`,
		`a.yaml:5:11: profile "leaf": match.subnet: "10.0.0.0/33" is not a CIDR`,
		`a.yaml:6:20: profile "leaf": hostname: unknown field .Serail (did you mean .Serial?)`,
		`a.yaml:9:11: profile "leaf": mgmt.prefix: "40" is not a prefix length 1..32`,
		`a.yaml:13:54: profile "leaf": config_db: unknown field .Prodct (did you mean .Product?)`,
		`a.yaml:15:15: profile "leaf": ztp_options.reboot-on-sucess: unknown ztp.json global option (did you mean reboot-on-success?)`,
		`a.yaml:16:7: profile "leaf": role: "wroker" is not one of control-plane, worker, sonic, etcd (did you mean "worker"?)`,
		`a.yaml:19: name: required: every profile has a name`,
		`b.yaml:1:7: profile "leaf": name: also defined at a.yaml:1`,
	)
}

// Errors never show Go's names for things (profile.spec, *profile.Data,
// cannot unmarshal !!str).
func TestErrorsUseYAMLNames(t *testing.T) {
	for _, body := range []string{
		"name: a\npriority: [1]\n",
		"name: a\nmatch: [sonic]\n",
		"name: a\nmatch: {kind: {a: b}}\n",
		"name: a\nsonic: {version: '1', set_default: maybe}\n",
		"name: a\nlabels: [a]\n",
		"name: a\nvm: {public_keys: key}\n",
		"name: a\nhostname: '{{ .Serail }}'\n",
		"name: a\nhostname: '{{ .Mgmt.Foo.Bar }}'\n",
		"name: [a]\n",
		"- a\n- b\n",
	} {
		got := strings.Join(loadErrs(t, map[string]string{"a.yaml": body}), "\n")
		for _, goName := range []string{"profile.", "*profile", "unmarshal", "!!", "reflect", "Go "} {
			if strings.Contains(got, goName) {
				t.Errorf("%q: error names Go's %q: %s", body, goName, got)
			}
		}
		if !strings.Contains(got, "a.yaml:") {
			t.Errorf("%q: no place: %s", body, got)
		}
	}
}

// A YAML syntax error is placed at the offending token (yaml.v3 alone says
// line 4 here, the 0-based line of the bracket's mapping).
func TestSyntaxErrorAtItsLine(t *testing.T) {
	got := loadErrs(t, map[string]string{"a.yaml": "name: a\nhostname: x\n---\nname: b\nmatch: {kind: [sonic}\n"})
	wantErrs(t, got, `a.yaml:5:21: YAML syntax: did not find expected ',' or ']' (while parsing a flow sequence that starts at line 5 column 15)`)
	got = loadErrs(t, map[string]string{"a.yaml": "name: a\nmatch:\n  kind: [sonic,\n  serial: x\nhostname: y\n"})
	if len(got) != 1 || !strings.HasPrefix(got[0], "a.yaml:5:") {
		t.Fatalf("unclosed bracket: %v", got)
	}
}

// Templates in block scalars and in template files are placed in their own
// lines; a label a device may lack is reported with the way to default it.
func TestTemplatePlaces(t *testing.T) {
	got := loadErrs(t, map[string]string{
		"a.yaml": "name: a\nconfig_db: {file: a.tmpl}\nvm:\n  user_data:\n    inline: |\n      #cloud-config\n      hostname: {{ .Hostname }}\n      fqdn: {{ .Hostnam }}.local\n",
		"a.tmpl": "{\n  \"DEVICE_METADATA\": {\n    \"localhost\": {\"hwsku\": \"{{ .HwSKU }}\"}\n  }\n}\n",
	})
	wantErrs(t, got,
		`a.tmpl:3:32: profile "a": config_db: unknown field .HwSKU (did you mean .HWSKU?)`,
		`a.yaml:8:16: profile "a": vm.user_data: unknown field .Hostnam (did you mean .Hostname?)`)

	got = loadErrs(t, map[string]string{"a.yaml": "name: a\nhostname: 'x-{{ .Labels.rack }}'\n"})
	wantErrs(t, got, `a.yaml:2:17: profile "a": hostname: at <.Labels.rack>: map has no entry for key "rack" (the sample device has no label "rack"; write {{ index .Labels "rack" | default "..." }} when a device may lack it)`)

	got = loadErrs(t, map[string]string{"a.yaml": "name: a\nhostname: '{{ .Serial '\nhwsku: '{{ if }}'\n"})
	wantErrs(t, got,
		`a.yaml:2:11: profile "a": hostname: unclosed action`,
		`a.yaml:3:8: profile "a": hwsku: missing value for if`)
}

// Aliases cannot make a small file expand without bound.
func TestAliasBombIsRefused(t *testing.T) {
	var b strings.Builder
	b.WriteString("name: a\nsections:\n  - name: snmp\n    data:\n      a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 9; i++ {
		prev := "*a" + string(rune('0'+i-1))
		b.WriteString("      a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [" + strings.Repeat(prev+", ", 9) + prev + "]\n")
	}
	got := strings.Join(loadErrs(t, map[string]string{"a.yaml": b.String()}), "\n")
	if !strings.Contains(got, "expands to more than") {
		t.Fatalf("alias bomb: %s", got)
	}
}

// YAML merge keys work as yaml.v3's own decoding has them.
func TestMergeKeys(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.yaml", "name: a\nmgmt: &m {ip: '{{ .IP }}', prefix: 24}\nlabels: &l {rack: r1, pod: p1}\n---\nname: b\nmgmt:\n  <<: *m\n  prefix: 16\nlabels:\n  <<: *l\n  pod: p2\n")
	set, err := Load([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	r, err := set.Get("b").Render(&Facts{Serial: "S", IP: "10.1.2.3"}, Env{}, RenderAll)
	if err != nil {
		t.Fatal(err)
	}
	if r.Mgmt.CIDR() != "10.1.2.3/16" || r.Labels["rack"] != "r1" || r.Labels["pod"] != "p2" {
		t.Fatalf("merged: %+v %v", r.Mgmt, r.Labels)
	}
}

// specByYAML decodes the documents of src as the loader did before: strict
// yaml.v3 decoding into spec.
func specByYAML(src string) ([]spec, error) {
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	var out []spec
	for {
		var s spec
		err := dec.Decode(&s)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
}

// specByNodes decodes the documents of src with the loader's decoder.
func specByNodes(src string) ([]spec, []problem) {
	dec := yaml.NewDecoder(bytes.NewReader([]byte(src)))
	var out []spec
	var probs []problem
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			return out, probs
		}
		var s spec
		if len(doc.Content) > 0 {
			d := newDecoder(strings.Split(src, "\n"))
			d.decode(doc.Content[0], reflect.ValueOf(&s).Elem(), "")
			probs = append(probs, d.problems...)
		}
		out = append(out, s)
	}
}

// normalize drops what only the loader's decoder keeps (template places)
// and resolves aliases in section data, so both decodings compare.
func normalize(s *spec) {
	for _, t := range []*Template{&s.Hostname, &s.HWSKU} {
		*t = Template{Src: t.Src}
	}
	if s.Mgmt != nil {
		for _, t := range []*Template{&s.Mgmt.IP, &s.Mgmt.Prefix, &s.Mgmt.Gateway} {
			*t = Template{Src: t.Src}
		}
	}
	for i := range s.Sections {
		for s.Sections[i].Data.Kind == yaml.AliasNode && s.Sections[i].Data.Alias != nil {
			s.Sections[i].Data = *s.Sections[i].Data.Alias
		}
	}
}

// FuzzDecodeAgreesWithYAML: what yaml.v3's strict decoding accepted, the
// loader's decoder accepts with the same values (loading behaves as it did);
// what it refused, the loader's decoder refuses too (or the YAML does not
// parse at all), each problem with a line.
func FuzzDecodeAgreesWithYAML(f *testing.F) {
	for _, s := range []string{"name: x\npriority: 3\nmatch: {serial: [a, b], kind: sonic}\nhostname: '{{ .Serial }}'\n",
		"name: x\nmgmt: {ip: 1.2.3.4, prefix: 8}\nsonic: {version: '1', set_default: false, skip_reboot: yes}\n",
		"name: x\nlabels: {a: b}\nztp_options: {ignore-result: true}\nvm: {public_keys: [a b], user_data: {inline: x}}\n",
		"name: x\nsections: [{name: snmp, data: {a: [1, {b: '{{ .IP }}'}]}}]\n", "name: x\npriorty: 1\n",
		"name: x\nmgmt: &m {prefix: 24}\n---\nname: y\nmgmt: {<<: *m, ip: 1.2.3.4}\n", "name: x\nname: y\n",
		"priority: 0x10\nname: ~\n", "match: {kind: [[a]]}\n", "config_db: {mode: 5}\nrole: [a]\n"} {
		f.Add(s)
	}
	for _, name := range []string{"leaf.yaml", "spine.yaml", "vm-worker.yaml", "default.yaml", "fabric-control-plane.yaml"} {
		if b, err := os.ReadFile(filepath.Join("../../examples/profiles", name)); err == nil {
			f.Add(string(b))
		}
	}
	f.Fuzz(func(t *testing.T, src string) {
		if hasNull(src) {
			return // yaml.v3 skipped a key without a name and empty list items; the loader refuses them
		}
		want, err := specByYAML(src)
		got, probs := specByNodes(src)
		for _, p := range probs {
			if p.at.line <= 0 {
				t.Fatalf("problem without a line: %v", p.err)
			}
		}
		if err != nil {
			if len(probs) == 0 && len(got) == len(want) {
				// yaml.v3 refused a document the loader's decoder took:
				// only a syntax error (which Parse reports) may do that.
				var n yaml.Node
				dec := yaml.NewDecoder(strings.NewReader(src))
				for {
					if e := dec.Decode(&n); e != nil {
						if errors.Is(e, io.EOF) {
							t.Fatalf("yaml.v3 refused (%v), the loader took %q", err, src)
						}
						return
					}
				}
			}
			return
		}
		if len(probs) > 0 {
			t.Fatalf("yaml.v3 took %q, the loader refused: %v", src, probs[0].err)
		}
		if len(got) != len(want) {
			t.Fatalf("%d documents, yaml.v3 %d", len(got), len(want))
		}
		for i := range got {
			normalize(&got[i])
			normalize(&want[i])
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("document %d of %q:\nloader %+v\nyaml.v3 %+v", i, src, got[i], want[i])
			}
		}
	})
}

// hasNull reports whether a mapping of src has a null key (`~: x`, `: x`)
// or a list a null item (`- ~`).
func hasNull(src string) bool {
	var found func(n *yaml.Node) bool
	seen := 0
	found = func(n *yaml.Node) bool {
		if seen++; seen > 100000 {
			return false
		}
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if isNull(n.Content[i]) {
					return true
				}
			}
		}
		if n.Kind == yaml.SequenceNode {
			for _, c := range n.Content {
				if isNull(c) {
					return true
				}
			}
		}
		for _, c := range n.Content {
			if found(c) {
				return true
			}
		}
		return false
	}
	dec := yaml.NewDecoder(strings.NewReader(src))
	for {
		var n yaml.Node
		if dec.Decode(&n) != nil {
			return false
		}
		if found(&n) {
			return true
		}
	}
}

// FuzzCheckTemplate: the load-time check of a template never panics,
// places every problem inside the template, agrees with text/template on
// what parses, and leaves nothing for execution to find about field names:
// a template it passes never fails with "can't evaluate field".
func FuzzCheckTemplate(f *testing.F) {
	for _, s := range []string{"{{ .Serial }}", "{{ .Serail }}", "{{ .Mgmt.IP }}{{ .Mgmt.Ip }}", "{{ $.Labels.a }}",
		"{{ with .Mgmt }}{{ .Prefix }}{{ .Nope }}{{ end }}", "{{ $x := .Mgmt }}{{ $x.Gateway }}{{ $x.Gw }}",
		"{{ .Serial | lowr }}", "{{ if .IP }}{{ .IP.X }}{{ end }}", "{{ (.Mgmt).CIDR }}", "{{ .Mgmt.CIDR.Foo }}",
		"{{ index .Labels \"a\" | default .Hostname }}", "{{ .Serial ", "{{ end }}", "{{ define \"x\" }}{{ .Y }}{{ end }}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		probs := checkTemplate("t", src)
		for _, p := range probs {
			if p.off > len(src) || p.msg == "" {
				t.Fatalf("problem %+v outside %q", p, src)
			}
		}
		_, err := newTmpl("t", src)
		if len(probs) == 0 && err != nil {
			t.Fatalf("check passed %q, text/template refused: %v", src, err)
		}
		if len(probs) > 0 || strings.Contains(src, "range") || strings.Contains(src, "template") {
			return // not run: a range or template call may run long
		}
		tp, _ := newTmpl("t", src)
		d := &Data{Labels: map[string]string{}}
		if _, err := tp.exec(d); err != nil && strings.Contains(err.Error(), "can't evaluate field") {
			t.Fatalf("check passed %q, execution: %v", src, err)
		}
	})
}
