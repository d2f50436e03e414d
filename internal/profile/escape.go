package profile

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"text/template"
	"text/template/parse"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Contextual escaping for document templates, after html/template: a
// profile's config_db.json template renders JSON and its user_data template
// a cloud-config (YAML). Values reach them from devices (serial, product,
// host name, ...) and from operators (labels), so every action's output is
// escaped for the place in the document it lands in, whatever the template
// author wrote: at load, each {{ action }} gets an escaper appended to its
// pipeline, chosen by a small lexer that follows the document's text.
//
// JSON: inside a string, the value is string-escaped; where a whole value
// stands, it becomes a JSON value (strings quoted, numbers and booleans as
// they are, the json function's output as it is); glued to other token text
// (65{{ .N }}) it must be a number fragment.
//
// YAML: inside "..." it is double-quote-escaped, inside '...' quote-doubled,
// in a comment or a block scalar (| or >) it must be one line; where a whole
// plain scalar stands (key: {{ .X }}, - {{ .X }}) it is double-quoted; glued
// to other plain text (host-{{ .X }}.example) it must be characters that
// cannot end or start a YAML construct.
//
// Branches of {{if}}/{{with}} must end in the same context, and a {{range}}
// body where it started, or the template is refused at load.

type docKind int

const (
	docJSON docKind = iota + 1
	docYAML
)

// jsonText is the json template function's output: already a JSON value.
type jsonText string

// Escaper names, appended to pipelines. They are in funcs, so templates
// could call them, to no harm.
const (
	escJSONString   = "_ztpd_json_string"
	escJSONValue    = "_ztpd_json_value"
	escJSONFragment = "_ztpd_json_fragment"
	escYAMLDouble   = "_ztpd_yaml_double"
	escYAMLSingle   = "_ztpd_yaml_single"
	escYAMLLine     = "_ztpd_yaml_line"
	escYAMLValue    = "_ztpd_yaml_value"
	escYAMLFragment = "_ztpd_yaml_fragment"
)

var escapers = template.FuncMap{
	escJSONString:   func(v any) string { return jsonStringBody(text(v)) },
	escJSONValue:    jsonValue,
	escJSONFragment: func(v any) (string, error) { return fragment(v, "JSON", isNumberFragment) },
	escYAMLDouble:   func(v any) string { return jsonStringBody(text(v)) }, // JSON escapes are YAML double-quoted escapes
	escYAMLSingle:   yamlSingle,
	escYAMLLine:     yamlLine,
	escYAMLValue:    yamlValue,
	escYAMLFragment: func(v any) (string, error) { return fragment(v, "YAML", isPlainFragment) },
}

// text is how text/template would print v.
func text(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case jsonText:
		return string(x)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

func jsonStringBody(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

func jsonValue(v any) (string, error) {
	switch x := v.(type) {
	case jsonText:
		return string(x), nil
	case string:
		b, _ := json.Marshal(x)
		return string(b), nil
	case nil:
		return "null", nil
	}
	switch reflect.ValueOf(v).Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64,
		reflect.Map, reflect.Slice, reflect.Array, reflect.Struct:
		b, err := json.Marshal(v)
		return string(b), err
	}
	b, _ := json.Marshal(fmt.Sprint(v))
	return string(b), nil
}

func yamlValue(v any) (string, error) {
	if x, ok := v.(jsonText); ok {
		return string(x), nil // JSON is YAML flow syntax
	}
	return `"` + jsonStringBody(text(v)) + `"`, nil
}

func yamlSingle(v any) (string, error) {
	s := text(v)
	if err := oneLine(s); err != nil {
		return "", err
	}
	return strings.ReplaceAll(s, "'", "''"), nil
}

func yamlLine(v any) (string, error) {
	s := text(v)
	return s, oneLine(s)
}

func oneLine(s string) error {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == 0x85 || r == 0x2028 || r == 0x2029 {
			return fmt.Errorf("value %q holds a line break or control character, which cannot be written at this place of a YAML document", s)
		}
	}
	return nil
}

func fragment(v any, doc string, ok func(string) bool) (string, error) {
	s := text(v)
	if !ok(s) {
		return "", fmt.Errorf("value %q cannot be written here: it is glued to other text outside quotes in a %s document; put the text in quotes in the template", s, doc)
	}
	return s, nil
}

func isNumberFragment(s string) bool {
	return strings.Trim(s, "0123456789.eE+-") == ""
}

// isPlainFragment: characters that can neither end a plain YAML scalar nor
// start another construct, wherever they stand inside one.
func isPlainFragment(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnumByte(c) && strings.IndexByte("._-/+=@~%", c) < 0 {
			return false
		}
	}
	return true
}

func isAlnumByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// escapeDoc rewrites t's parse tree so that every action's output is
// escaped for its context in a document of kind k.
func escapeDoc(t *template.Template, k docKind) error {
	if t.Tree == nil || t.Tree.Root == nil {
		return nil
	}
	for _, d := range t.Templates() {
		if d != t && d.Tree != nil {
			return fmt.Errorf("{{define}} and {{template}} are not supported in document templates")
		}
	}
	e := &escaper{kind: k, tree: t.Tree}
	var st lexState
	if k == docYAML {
		st.atLineStart = true
	}
	_, err := e.list(t.Tree.Root, st)
	return err
}

type escaper struct {
	kind docKind
	tree *parse.Tree
}

// tmplPosError is a problem at byte offset off of a template's text.
type tmplPosError struct {
	off int
	msg string
}

func (e *tmplPosError) Error() string { return e.msg }

// at is a problem with node n: placed at n, and naming the action's text.
func (e *escaper) at(n parse.Node, format string, args ...any) error {
	_, ctx := e.tree.ErrorContext(n)
	return &tmplPosError{off: int(n.Position()), msg: ctx + ": " + fmt.Sprintf(format, args...)}
}

// lexState is where in the document the output so far ends.
type lexState struct {
	mode        lexMode
	escaped     bool // JSON string: after a backslash
	prev        byte // last byte on this line (0 at a line start), action output counts as 'x'
	atLineStart bool // YAML: only spaces so far on this line
	indent      int  // YAML: indentation of the current line
	lineIndent  int  // YAML: indentation of the line's content
	blockParent int  // YAML block scalar: indentation of the line that opened it
	flow        int  // YAML: depth of [ ] and { } collections
	pendBlock   bool // YAML: this line ended with a block scalar indicator so far
	quoteEnd    bool // YAML '...': a quote that may be the first of ''
}

type lexMode uint8

const (
	modePlain   lexMode = iota // JSON: outside strings; YAML: plain context
	modeString                 // JSON string, YAML "..."
	modeSingle                 // YAML '...'
	modeComment                // YAML # ...
	modeBlock                  // YAML | or > block scalar content
)

func (e *escaper) list(l *parse.ListNode, st lexState) (lexState, error) {
	if l == nil {
		return st, nil
	}
	for i, n := range l.Nodes {
		var next byte = 0xff // unknown: whatever follows is outside this list
		if i+1 < len(l.Nodes) {
			if tn, ok := l.Nodes[i+1].(*parse.TextNode); ok && len(tn.Text) > 0 {
				next = tn.Text[0]
			}
		}
		var err error
		if st, err = e.node(n, st, next); err != nil {
			return st, err
		}
	}
	return st, nil
}

func (e *escaper) node(n parse.Node, st lexState, next byte) (lexState, error) {
	switch x := n.(type) {
	case *parse.TextNode:
		for _, c := range x.Text {
			st = e.step(st, c)
		}
		return st, nil
	case *parse.ActionNode:
		if len(x.Pipe.Decl) > 0 {
			return st, nil // an assignment prints nothing
		}
		name, err := e.escaperFor(st, next)
		if err != nil {
			return st, e.at(x, "%v", err)
		}
		x.Pipe.Cmds = append(x.Pipe.Cmds, &parse.CommandNode{NodeType: parse.NodeCommand, Pos: x.Pos,
			Args: []parse.Node{parse.NewIdentifier(name).SetTree(e.tree).SetPos(x.Pos)}})
		return e.step(st, 'x'), nil
	case *parse.IfNode:
		return e.branches(&x.BranchNode, st, "if")
	case *parse.WithNode:
		return e.branches(&x.BranchNode, st, "with")
	case *parse.RangeNode:
		end, err := e.list(x.List, st)
		if err != nil {
			return st, err
		}
		if !sameContext(end, st) {
			return st, e.at(x, "the {{range}} body ends in another quoting context than it starts in")
		}
		if x.ElseList != nil {
			return e.branches(&x.BranchNode, st, "range")
		}
		return st, nil
	case *parse.TemplateNode:
		return st, e.at(x, "{{template}} is not supported in document templates")
	}
	return st, nil // comments, break, continue
}

func (e *escaper) branches(b *parse.BranchNode, st lexState, what string) (lexState, error) {
	a, err := e.list(b.List, st)
	if err != nil {
		return st, err
	}
	z, err := e.list(b.ElseList, st)
	if err != nil {
		return st, err
	}
	if !sameContext(a, z) {
		return st, e.at(b, "the branches of {{%s}} end in different quoting contexts", what)
	}
	return a, nil
}

func sameContext(a, b lexState) bool {
	return a.mode == b.mode && a.escaped == b.escaped && a.flow == b.flow && a.quoteEnd == b.quoteEnd
}

// boundary reports whether a value may start at prev: the start of a
// document or line, after whitespace or a structural character.
func (e *escaper) boundary(prev byte) bool {
	switch prev {
	case 0, ' ', '\t', '\n', '\r', ',', '[', '{':
		return true
	case ':':
		return e.kind == docJSON
	}
	return false
}

// ends reports whether a value may end before next (0xff: unknown).
func (e *escaper) ends(next byte) bool {
	switch next {
	case 0xff, ' ', '\t', '\n', '\r', ',', ']', '}':
		return true
	}
	return false
}

func (e *escaper) escaperFor(st lexState, next byte) (string, error) {
	if e.kind == docJSON {
		switch {
		case st.mode == modeString && st.escaped:
			return "", fmt.Errorf("an action right after a backslash in a JSON string")
		case st.mode == modeString:
			return escJSONString, nil
		case e.boundary(st.prev) && e.ends(next):
			return escJSONValue, nil
		}
		return escJSONFragment, nil
	}
	switch st.mode {
	case modeString:
		if st.escaped {
			return "", fmt.Errorf("an action right after a backslash in a YAML double-quoted string")
		}
		return escYAMLDouble, nil
	case modeSingle:
		return escYAMLSingle, nil
	case modeComment, modeBlock:
		return escYAMLLine, nil
	}
	if st.quoteEnd {
		return "", fmt.Errorf("an action right after a closing single quote")
	}
	if e.boundary(st.prev) && (e.ends(next) || next == '#' || next == ':') {
		return escYAMLValue, nil
	}
	return escYAMLFragment, nil
}

// step advances st over one output byte.
func (e *escaper) step(st lexState, c byte) lexState {
	if e.kind == docJSON {
		switch {
		case st.mode == modeString && st.escaped:
			st.escaped = false
		case st.mode == modeString && c == '\\':
			st.escaped = true
		case st.mode == modeString && c == '"':
			st.mode = modePlain
		case st.mode == modePlain && c == '"':
			st.mode = modeString
		}
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' || st.mode == modeString {
			st.prev = c
		} else {
			st.prev = ' '
		}
		return st
	}
	return yamlStep(st, c)
}

func yamlStep(st lexState, c byte) lexState {
	if c == '\n' {
		switch st.mode {
		case modeComment:
			st.mode = modePlain
		case modeSingle, modeString:
			// quoted scalars may span lines
		}
		if st.mode == modePlain && st.pendBlock {
			st.mode, st.blockParent = modeBlock, st.lineIndent
		}
		st.pendBlock, st.quoteEnd = false, false
		st.atLineStart, st.indent, st.prev = true, 0, 0
		return st
	}
	if st.atLineStart {
		if c == ' ' {
			st.indent++
			return st
		}
		st.atLineStart, st.lineIndent = false, st.indent
		if st.mode == modeBlock {
			if st.indent > st.blockParent {
				st.prev = c
				return st
			}
			st.mode = modePlain // dedent: the block scalar ended
		}
	}
	switch st.mode {
	case modeBlock, modeComment:
		st.prev = c
		return st
	case modeString:
		switch {
		case st.escaped:
			st.escaped = false
		case c == '\\':
			st.escaped = true
		case c == '"':
			st.mode = modePlain
		}
		st.prev = c
		return st
	case modeSingle:
		if c == '\'' {
			st.mode, st.quoteEnd = modePlain, true
		}
		st.prev = c
		return st
	}
	// Plain context.
	if st.quoteEnd {
		st.quoteEnd = false
		if c == '\'' { // '' inside a single-quoted scalar
			st.mode = modeSingle
			st.prev = c
			return st
		}
	}
	valueStart := st.prev == 0 || st.prev == ' ' || st.prev == '\t' || st.flow > 0 && (st.prev == '[' || st.prev == '{' || st.prev == ',')
	switch {
	case c == '#' && (st.prev == 0 || st.prev == ' ' || st.prev == '\t'):
		st.mode = modeComment
	case c == '"' && valueStart:
		st.mode = modeString
	case c == '\'' && valueStart:
		st.mode = modeSingle
	case (c == '[' || c == '{') && (valueStart || st.flow > 0):
		st.flow++
	case (c == ']' || c == '}') && st.flow > 0:
		st.flow--
	}
	// A block scalar indicator (| or >, with chomping or indentation
	// indicators) at the end of a line opens a block scalar.
	switch {
	case (c == '|' || c == '>') && valueStart && st.flow == 0:
		st.pendBlock = true
	case st.pendBlock && (c == '-' || c == '+' || '1' <= c && c <= '9'):
	case st.pendBlock && (c == ' ' || c == '\t'):
	default:
		if st.mode != modeComment {
			st.pendBlock = false
		}
	}
	if c == ' ' || c == '\t' {
		st.prev = ' '
	} else {
		st.prev = c
	}
	return st
}

// checkCloudConfig checks rendered cloud-config user data: UTF-8, and a
// YAML mapping (what cloud-init reads).
func checkCloudConfig(b []byte) error {
	if !utf8.Valid(b) {
		return fmt.Errorf("rendered cloud-config is not valid UTF-8")
	}
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("rendered cloud-config is not valid YAML: %v", err)
	}
	if _, ok := v.(map[string]any); !ok && v != nil {
		return fmt.Errorf("rendered cloud-config is not a YAML mapping")
	}
	return nil
}
