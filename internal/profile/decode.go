package profile

// Decoding a profile document from its yaml.Node tree, field by field, so
// that every problem of a file is found in one pass and reported where it
// stands (line and column) under the name the operator wrote (priority,
// match.kind), never under a Go type name. yaml.v3's own strict decoding
// stops at the first unknown field of a document and reports it as
// "field priorty not found in type profile.spec".

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// pos is a place in a file; col 0 means the column is not known.
type pos struct{ line, col int }

// fieldPos maps a field path (mgmt.prefix, match.kind[1], sections[0].name)
// to the position of its value.
type fieldPos map[string]pos

// of is the position of field, else of its closest enclosing field.
func (fp fieldPos) of(field string) pos {
	for field != "" {
		if p, ok := fp[field]; ok {
			return p
		}
		i := strings.LastIndexAny(field, ".[")
		if i < 0 {
			break
		}
		field = field[:i]
	}
	return pos{}
}

// problem is one error found while loading a document, before it is tied
// to its file and profile.
type problem struct {
	file  string // "" = the profile's own file
	at    pos
	field string
	err   error
}

// maxNodes bounds the nodes one document may expand to through aliases
// (a few lines of anchors can otherwise stand for billions of nodes).
const maxNodes = 1 << 20

type decoder struct {
	lines    []string // the file's lines, for block scalar indentation
	at       fieldPos
	bad      map[string]bool     // fields whose value could not be decoded
	text     map[string]Template // where each text value stands, for templates given as plain text
	problems []problem
	budget   int
}

// newDecoder decodes one document of a file whose lines are lines.
func newDecoder(lines []string) *decoder {
	return &decoder{lines: lines, at: fieldPos{}, bad: map[string]bool{},
		text: map[string]Template{}, budget: maxNodes}
}

func (d *decoder) fail(n *yaml.Node, field, format string, args ...any) {
	d.bad[field] = true
	d.problems = append(d.problems, problem{at: pos{n.Line, n.Column}, field: field, err: fmt.Errorf(format, args...)})
}

func join(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// describe names what a node is, for "want X, got Y".
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return strconv.Quote(n.Value)
	}
	return "nothing"
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

var (
	strListType  = reflect.TypeFor[StrList]()
	templateType = reflect.TypeFor[Template]()
	nodeType     = reflect.TypeFor[yaml.Node]()
)

// decode sets v from n. field is v's path, for errors and positions.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, field string) {
	if d.budget--; d.budget < 0 {
		if d.budget == -1 {
			d.fail(n, field, "the document expands to more than %d values through aliases", maxNodes)
		}
		return
	}
	at := n
	for depth := 0; n.Kind == yaml.AliasNode && n.Alias != nil; depth++ {
		if depth > 100 {
			d.fail(at, field, "alias chain too long")
			return
		}
		n = n.Alias
	}
	if field != "" {
		d.at[field] = pos{at.Line, at.Column}
	}
	switch v.Type() {
	case nodeType:
		v.Set(reflect.ValueOf(*n))
		return
	case strListType:
		d.strList(n, at, v, field)
		return
	case templateType:
		d.template(n, at, v, field)
		return
	}
	if isNull(n) {
		v.SetZero() // key: with nothing after it, as yaml.v3 decodes it
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		nv := reflect.New(v.Type().Elem())
		d.decode(n, nv.Elem(), field)
		v.Set(nv)
	case reflect.Struct:
		d.structure(n, at, v, field)
	case reflect.Map:
		d.mapping(n, at, v, field)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.fail(at, field, "want a list, got %s", describe(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, c := range n.Content {
			item := fmt.Sprintf("%s[%d]", field, i)
			if isNull(c) { // yaml.v3 dropped these silently
				d.at[item] = pos{c.Line, c.Column}
				d.fail(c, item, "an empty list item")
				continue
			}
			d.decode(c, s.Index(i), item)
		}
		v.Set(s)
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.fail(at, field, "want a text value, got %s", describe(n))
			return
		}
		v.SetString(n.Value)
		d.text[field] = d.textAt(n)
	case reflect.Bool:
		var b bool
		if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
			d.fail(at, field, "want true or false, got %s", describe(n))
			return
		}
		v.SetBool(b)
	case reflect.Int:
		var i int
		if n.Kind != yaml.ScalarNode || n.Decode(&i) != nil {
			d.fail(at, field, "want a whole number, got %s", describe(n))
			return
		}
		v.SetInt(int64(i))
	default:
		d.fail(at, field, "cannot be set from YAML") // a spec field of a type decode does not know
	}
}

func (d *decoder) strList(n, at *yaml.Node, v reflect.Value, field string) {
	switch n.Kind {
	case yaml.ScalarNode:
		if isNull(n) {
			v.SetZero()
			return
		}
		v.Set(reflect.ValueOf(StrList{n.Value}))
	case yaml.SequenceNode:
		out := make(StrList, 0, len(n.Content))
		for i, c := range n.Content {
			item := fmt.Sprintf("%s[%d]", field, i)
			for c.Kind == yaml.AliasNode && c.Alias != nil {
				c = c.Alias
			}
			d.at[item] = pos{n.Content[i].Line, n.Content[i].Column}
			if c.Kind != yaml.ScalarNode {
				d.fail(n.Content[i], item, "want a plain value, got %s", describe(c))
				continue
			}
			out = append(out, c.Value)
		}
		v.Set(reflect.ValueOf(out))
	default:
		d.fail(at, field, "want a value or a list of values, got %s", describe(n))
	}
}

func (d *decoder) template(n, at *yaml.Node, v reflect.Value, field string) {
	if isNull(n) {
		v.SetZero()
		return
	}
	if n.Kind != yaml.ScalarNode {
		d.fail(at, field, "want a text value, got %s", describe(n))
		return
	}
	v.Set(reflect.ValueOf(d.textAt(n)))
}

// textAt is scalar n as a Template: its text and where it stands.
func (d *decoder) textAt(n *yaml.Node) Template {
	t := Template{Src: n.Value, Line: n.Line, Column: n.Column, style: n.Style}
	if n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		t.indent = d.blockIndent(n.Line)
	}
	return t
}

// blockIndent is the indentation of the first content line of a block
// scalar whose indicator is on line.
func (d *decoder) blockIndent(line int) int {
	for i := line; i < len(d.lines); i++ { // d.lines[line] is the next line
		s := strings.TrimRight(d.lines[i], "\r")
		if strings.TrimSpace(s) == "" {
			continue
		}
		return len(s) - len(strings.TrimLeft(s, " "))
	}
	return 0
}

// yamlFields lists the YAML names of a struct's fields and their index.
func yamlFields(t reflect.Type) (map[string]int, []string) {
	idx := map[string]int{}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		idx[name] = i
		names = append(names, name)
	}
	return idx, names
}

// pairs lists a mapping's key/value nodes with YAML merge keys (<<: *base)
// applied: keys written in the mapping win over merged ones, and earlier
// merged mappings over later ones.
func (d *decoder) pairs(n *yaml.Node, field string) [][2]*yaml.Node {
	var own, merged [][2]*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			srcs := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				srcs = v.Content
			}
			for _, s := range srcs {
				for s.Kind == yaml.AliasNode && s.Alias != nil {
					s = s.Alias
				}
				if s.Kind != yaml.MappingNode {
					d.fail(k, field, "a merge (<<) takes a mapping or a list of mappings")
					continue
				}
				if d.budget -= len(s.Content); d.budget < 0 {
					d.fail(k, field, "the document expands to more than %d values through aliases", maxNodes)
					return own
				}
				merged = append(merged, d.pairs(s, field)...)
			}
			continue
		}
		own = append(own, [2]*yaml.Node{k, v})
	}
	if len(merged) == 0 {
		return own
	}
	seen := map[string]bool{}
	for _, p := range own {
		seen[p[0].Value] = true
	}
	for _, p := range merged {
		if !seen[p[0].Value] {
			seen[p[0].Value] = true
			own = append(own, p)
		}
	}
	return own
}

func (d *decoder) structure(n, at *yaml.Node, v reflect.Value, field string) {
	idx, names := yamlFields(v.Type())
	if n.Kind != yaml.MappingNode {
		what := "profile fields"
		if field != "" {
			what = strings.Join(names, ", ")
		}
		d.fail(at, field, "want a mapping (%s), got %s", what, describe(n))
		return
	}
	seen := map[string]*yaml.Node{}
	for _, kv := range d.pairs(n, field) {
		k, val := kv[0], kv[1]
		if k.Kind != yaml.ScalarNode {
			d.fail(k, field, "keys must be plain names, got %s", describe(k))
			continue
		}
		if isNull(k) { // yaml.v3 skipped these silently
			d.fail(k, field, "a key without a name")
			continue
		}
		f := join(field, k.Value)
		if first, dup := seen[k.Value]; dup {
			d.fail(k, f, "appears twice (first at line %d)", first.Line)
			continue
		}
		seen[k.Value] = k
		i, ok := idx[k.Value]
		if !ok {
			msg := "unknown field" + didYouMean(k.Value, names, func(s string) string { return s })
			if !strings.Contains(msg, "did you mean") {
				where := "a profile"
				if field != "" {
					where = field
				}
				msg += "; " + where + " takes " + strings.Join(names, ", ")
			}
			d.fail(k, f, "%s", msg)
			continue
		}
		d.decode(val, v.Field(i), f)
	}
}

func (d *decoder) mapping(n, at *yaml.Node, v reflect.Value, field string) {
	if n.Kind != yaml.MappingNode {
		d.fail(at, field, "want a mapping, got %s", describe(n))
		return
	}
	m := reflect.MakeMap(v.Type())
	seen := map[string]*yaml.Node{}
	for _, kv := range d.pairs(n, field) {
		k, val := kv[0], kv[1]
		if k.Kind != yaml.ScalarNode {
			d.fail(k, field, "keys must be plain text, got %s", describe(k))
			continue
		}
		if isNull(k) {
			d.fail(k, field, "a key without a name")
			continue
		}
		f := join(field, k.Value)
		if first, dup := seen[k.Value]; dup {
			d.fail(k, f, "appears twice (first at line %d)", first.Line)
			continue
		}
		seen[k.Value] = k
		e := reflect.New(v.Type().Elem()).Elem()
		d.decode(val, e, f)
		d.at[f] = pos{k.Line, k.Column} // problems with an entry are mostly with its key
		m.SetMapIndex(reflect.ValueOf(k.Value), e)
	}
	v.Set(m)
}
