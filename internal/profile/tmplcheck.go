package profile

// Static checks of templates at load: every function a template calls must
// exist and every field it reads (.Serial, .Mgmt.IP, $.Hostname) must be a
// field of Data, so `{{ .Serail }}` fails `ztpd profile check` with "did you
// mean .Serial?" at its line, rather than at execution with "can't evaluate
// field Serail in type *profile.Data". All problems of a template are found,
// not only the first.

import (
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/template/parse"
)

// tmplProblem is a problem at byte offset off of a template's source.
type tmplProblem struct {
	off  int // -1: unknown
	line int // template line when off is unknown (parse errors), else 0
	msg  string
}

// builtinFuncs are text/template's own functions.
var builtinFuncs = []string{"and", "call", "html", "index", "slice", "js", "len", "not", "or",
	"print", "printf", "println", "urlquery", "eq", "ge", "gt", "le", "lt", "ne"}

// funcNames are the functions a template may call, for suggestions (the
// escapers ztpd appends itself are left out).
func funcNames() []string {
	names := append([]string(nil), builtinFuncs...)
	for k := range funcs {
		if !strings.HasPrefix(k, "_ztpd_") {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	return names
}

func isFunc(name string) bool {
	if _, ok := funcs[name]; ok {
		return true
	}
	for _, b := range builtinFuncs {
		if b == name {
			return true
		}
	}
	return false
}

var dataType = reflect.TypeFor[Data]()

var parseErrRE = regexp.MustCompile(`^template: [^\n]*?:(\d+): `)

// checkTemplate parses src without resolving functions and walks its tree.
// It returns every problem, or the parse error alone when src does not
// parse.
func checkTemplate(name, src string) []tmplProblem {
	tr := parse.New(name)
	tr.Mode = parse.SkipFuncCheck
	set := map[string]*parse.Tree{}
	if _, err := tr.Parse(src, "", "", set); err != nil {
		msg := err.Error()
		line := 0
		if m := parseErrRE.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = msg[len(m[0]):]
		}
		return []tmplProblem{{off: -1, line: line, msg: msg}}
	}
	c := &tmplChecker{src: src}
	for _, t := range set {
		var dot reflect.Type
		if t.Name == name {
			dot = dataType // the profile's template runs on Data; a {{define}}d one on whatever it is given
		}
		c.list(t.Root, dot, map[string]reflect.Type{"$": dot})
	}
	sort.SliceStable(c.problems, func(i, j int) bool { return c.problems[i].off < c.problems[j].off })
	return c.problems
}

type tmplChecker struct {
	src      string
	problems []tmplProblem
}

func (c *tmplChecker) add(n parse.Node, format string, args ...any) {
	c.problems = append(c.problems, tmplProblem{off: startOf(c.src, int(n.Position()), n.String()), msg: fmt.Sprintf(format, args...)})
}

// startOf is where the text of a node stands in src: the parser places a
// chain ($.Mgmt.IP) at its last element, a reader looks for its first.
func startOf(src string, off int, text string) int {
	if off < 0 || off > len(src) || text == "" {
		return off
	}
	end := min(len(src), off+len(text))
	if i := strings.LastIndex(src[:end], text); i >= 0 && i+len(text) > off {
		return i
	}
	return off
}

func copyVars(v map[string]reflect.Type) map[string]reflect.Type {
	out := make(map[string]reflect.Type, len(v)+2)
	for k, t := range v {
		out[k] = t
	}
	return out
}

func (c *tmplChecker) list(l *parse.ListNode, dot reflect.Type, vars map[string]reflect.Type) {
	if l == nil {
		return
	}
	for _, n := range l.Nodes {
		switch x := n.(type) {
		case *parse.ActionNode:
			c.pipe(x.Pipe, dot, vars, false)
		case *parse.IfNode:
			inner := copyVars(vars)
			c.pipe(x.Pipe, dot, inner, false)
			c.list(x.List, dot, inner)
			c.list(x.ElseList, dot, copyVars(vars))
		case *parse.WithNode:
			inner := copyVars(vars)
			t := c.pipe(x.Pipe, dot, inner, false)
			c.list(x.List, t, inner)
			c.list(x.ElseList, dot, copyVars(vars))
		case *parse.RangeNode:
			inner := copyVars(vars)
			key, elem := rangeTypes(c.pipe(x.Pipe, dot, inner, true))
			switch len(x.Pipe.Decl) {
			case 1:
				inner[x.Pipe.Decl[0].Ident[0]] = elem
			case 2:
				inner[x.Pipe.Decl[0].Ident[0]] = key
				inner[x.Pipe.Decl[1].Ident[0]] = elem
			}
			c.list(x.List, elem, inner)
			c.list(x.ElseList, dot, copyVars(vars))
		case *parse.TemplateNode:
			if x.Pipe != nil {
				c.pipe(x.Pipe, dot, vars, false)
			}
		}
	}
}

// rangeTypes are the key and element types of ranging over t (nil when
// not known).
func rangeTypes(t reflect.Type) (key, elem reflect.Type) {
	if t == nil {
		return nil, nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Map:
		return t.Key(), t.Elem()
	case reflect.Slice, reflect.Array:
		return reflect.TypeFor[int](), t.Elem()
	case reflect.Int:
		return t, t
	}
	return nil, nil
}

// pipe checks a pipeline and returns the type it yields (nil: unknown).
// Its declarations ($x := ...) are typed in vars, except a range's, whose
// variables are its keys and elements (the caller types them).
func (c *tmplChecker) pipe(p *parse.PipeNode, dot reflect.Type, vars map[string]reflect.Type, isRange bool) reflect.Type {
	if p == nil {
		return nil
	}
	var t reflect.Type
	for _, cmd := range p.Cmds {
		t = c.command(cmd, dot, vars)
	}
	if !isRange {
		for _, v := range p.Decl {
			vars[v.Ident[0]] = t
		}
	}
	return t
}

func (c *tmplChecker) command(cmd *parse.CommandNode, dot reflect.Type, vars map[string]reflect.Type) reflect.Type {
	var t reflect.Type
	for i, a := range cmd.Args {
		at := c.arg(a, dot, vars)
		if i == 0 {
			t = at
		}
	}
	return t
}

// arg checks one operand and returns its type.
func (c *tmplChecker) arg(a parse.Node, dot reflect.Type, vars map[string]reflect.Type) reflect.Type {
	switch x := a.(type) {
	case *parse.IdentifierNode:
		if !isFunc(x.Ident) {
			c.add(x, "unknown function %q%s", x.Ident, didYouMean(x.Ident, funcNames(), strconv.Quote))
			return nil
		}
		if f, ok := funcs[x.Ident]; ok {
			if ft := reflect.TypeOf(f); ft.NumOut() > 0 {
				return ft.Out(0)
			}
		}
		return nil
	case *parse.FieldNode:
		return c.fields(x, dot, "", x.Ident)
	case *parse.VariableNode:
		t, known := vars[x.Ident[0]]
		if !known || len(x.Ident) == 1 {
			return t
		}
		return c.fields(x, t, x.Ident[0], x.Ident[1:])
	case *parse.ChainNode:
		var t reflect.Type
		if p, ok := x.Node.(*parse.PipeNode); ok {
			t = c.pipe(p, dot, copyVars(vars), false)
		} else {
			t = c.arg(x.Node, dot, vars)
		}
		return c.fields(x, t, "("+x.Node.String()+")", x.Field)
	case *parse.PipeNode:
		return c.pipe(x, dot, copyVars(vars), false)
	case *parse.DotNode:
		return dot
	case *parse.StringNode:
		return reflect.TypeFor[string]()
	case *parse.BoolNode:
		return reflect.TypeFor[bool]()
	case *parse.NumberNode:
		switch {
		case x.IsInt:
			return reflect.TypeFor[int]()
		case x.IsFloat:
			return reflect.TypeFor[float64]()
		}
		return reflect.TypeFor[complex128]()
	}
	return nil
}

// fields resolves the chain idents on t; prefix is what the chain hangs
// from ("" for dot, "$", "$x"), for messages.
func (c *tmplChecker) fields(n parse.Node, t reflect.Type, prefix string, idents []string) reflect.Type {
	path := prefix
	holder := func() string {
		switch {
		case path != "" && path != "$":
			return path
		case t == dataType:
			return "the device data"
		}
		return "dot"
	}
	for _, id := range idents {
		if t == nil {
			return nil
		}
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Map:
			if t.Key().Kind() != reflect.String {
				return nil
			}
			t = t.Elem()
		case reflect.Struct:
			if f, ok := t.FieldByName(id); ok && f.IsExported() {
				t = f.Type
				break
			}
			if m, ok := reflect.PointerTo(t).MethodByName(id); ok {
				if m.Type.NumOut() == 0 {
					return nil
				}
				t = m.Type.Out(0)
				break
			}
			known := structNames(t)
			hint := didYouMean(id, known, func(s string) string { return path + "." + s })
			if hint == "" {
				hint = fmt.Sprintf(" (%s has %s)", holder(), strings.Join(known, ", "))
			}
			c.add(n, "unknown field %s.%s%s", path, id, hint)
			return nil
		case reflect.Interface:
			return nil
		default:
			c.add(n, "%s.%s: %s is a %s value and has no fields", path, id, holder(), kindName(t))
			return nil
		}
		path += "." + id
	}
	return t
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "text"
	case reflect.Int, reflect.Int64, reflect.Float64, reflect.Complex128:
		return "number"
	case reflect.Bool:
		return "true/false"
	case reflect.Slice:
		return "list"
	}
	return t.Kind().String()
}

// structNames are the field and method names a template can use on t.
func structNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		if f := t.Field(i); f.IsExported() {
			names = append(names, f.Name)
		}
	}
	pt := reflect.PointerTo(t)
	for i := range pt.NumMethod() {
		names = append(names, pt.Method(i).Name)
	}
	return names
}
