package client_test

import (
	"cmp"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// cliDocuments are the CLI's own JSON documents: what a command prints
// that is no API answer (a local operation's result), or an API view the
// CLI composes with others. Any other struct with JSON fields in cmd/ztpd
// must embed the client package's view it extends.
var cliDocuments = []string{
	"backupResult", "checkResult", "migrateResult", "versionInfo", "isoBuildOutput", "row_", // local operations
	"rolloutChange", // a line of "rollout watch": a change between two answers
	"deviceShown",   // a device view and its events
	"desiredResult", // a desired-state view and the rollout it started
}

// jsonStruct is a named struct type declared with JSON-tagged fields.
type jsonStruct struct {
	file, name string
	fields     []string // JSON names, sorted
	embeds     []string // embedded types, as written
}

func jsonStructs(t *testing.T, dir string) []jsonStruct {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []jsonStruct
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, dir+"/"+e.Name(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			s := jsonStruct{file: e.Name(), name: ts.Name.Name}
			for _, fl := range st.Fields.List {
				if len(fl.Names) == 0 {
					s.embeds = append(s.embeds, types(fl.Type))
				}
				if fl.Tag == nil {
					continue
				}
				tag, _ := strconv.Unquote(fl.Tag.Value)
				if name, _, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ","); name != "" && name != "-" {
					s.fields = append(s.fields, name)
				}
			}
			if len(s.fields) > 0 {
				slices.Sort(s.fields)
				out = append(out, s)
			}
			return true
		})
	}
	return out
}

func types(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return types(x.X) + "." + x.Sel.Name
	case *ast.StarExpr:
		return types(x.X)
	}
	return ""
}

// The CLI takes the API's JSON shapes from the client package: a struct
// it declares with JSON fields extends a client view (embeds it) or is one
// of its own documents. A field added to the API then reaches the CLI
// without a second declaration.
func TestCLIDeclaresNoWireType(t *testing.T) {
	for _, s := range jsonStructs(t, "../../cmd/ztpd") {
		if slices.Contains(cliDocuments, s.name) || slices.ContainsFunc(s.embeds, func(e string) bool { return strings.HasPrefix(e, "client.") }) {
			continue
		}
		t.Errorf("cmd/ztpd/%s declares %s with JSON fields %v: decode the API's answer into the api/client type "+
			"(embed it to add the CLI's fields), or list it in cliDocuments if no API answers it", s.file, s.name, s.fields)
	}
}

// The server builds the client package's views: it declares no struct
// with the same JSON fields as one of them.
func TestServerRedeclaresNoView(t *testing.T) {
	views := map[string]string{}
	for _, s := range jsonStructs(t, ".") {
		views[strings.Join(s.fields, ",")] = s.name
	}
	for _, dir := range serverDirs(t) {
		for _, s := range jsonStructs(t, dir) {
			if v, ok := views[strings.Join(s.fields, ",")]; ok {
				t.Errorf("%s/%s declares %s with the JSON fields of client.%s: build the client's type", strings.TrimPrefix(dir, "../"), s.file, s.name, v)
			}
		}
	}
}

// serverDirs are the API server's packages: api and every package under
// it but this one.
func serverDirs(t *testing.T) []string {
	t.Helper()
	dirs := []string{"../../api"}
	entries, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && e.Name() != "client" && e.Name() != "testdata" {
			dirs = append(dirs, "../../api/"+e.Name())
		}
	}
	return dirs
}

// goFiles parses a directory's non-test Go files.
func goFiles(t *testing.T, dir string) map[string]*ast.File {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*ast.File{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, dir+"/"+e.Name(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = f
	}
	return out
}

// clientType reports whether a type expression is a client package type,
// or a slice, pointer or page of one.
func clientType(e ast.Expr) bool {
	switch x := e.(type) {
	case *ast.SelectorExpr:
		return types(x.X) == "client"
	case *ast.StarExpr:
		return clientType(x.X)
	case *ast.ArrayType:
		return clientType(x.Elt)
	case *ast.IndexExpr:
		return clientType(x.X) && clientType(x.Index)
	}
	return false
}

// declsIn maps each variable declared in body (var x T, or x, ... := f())
// to its declarations in order, for resolving what a call passes.
type varDecl struct {
	pos  token.Pos
	typ  ast.Expr // var x T
	call ast.Expr // x, ... := f(...): the function called
	lit  ast.Expr // x := T{...}: the literal's type
}

func declsIn(body ast.Node) map[string][]varDecl {
	out := map[string][]varDecl{}
	ast.Inspect(body, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.ValueSpec:
			for _, name := range x.Names {
				out[name.Name] = append(out[name.Name], varDecl{pos: name.Pos(), typ: x.Type})
			}
		case *ast.AssignStmt:
			if x.Tok != token.DEFINE || len(x.Rhs) != 1 {
				return true
			}
			for _, l := range x.Lhs {
				id, ok := l.(*ast.Ident)
				if !ok {
					continue
				}
				d := varDecl{pos: id.Pos()}
				switch r := x.Rhs[0].(type) {
				case *ast.CallExpr:
					d.call = r.Fun
				case *ast.CompositeLit:
					d.lit = r.Type
				}
				out[id.Name] = append(out[id.Name], d)
			}
		}
		return true
	})
	return out
}

// declAt is the last declaration of name before pos.
func declAt(decls map[string][]varDecl, name string, pos token.Pos) (varDecl, bool) {
	var found varDecl
	ok := false
	for _, d := range decls[name] {
		if d.pos < pos {
			found, ok = d, true
		}
	}
	return found, ok
}

// cliDecodedExceptions are admin answers the CLI still decodes into a
// domain type: the joiner's membership records (no view declares them).
var cliDecodedExceptions = []string{"core.Membership"}

// The CLI decodes the API's answers, the admin socket's included, into
// the client package's types (or its own types extending them): not into
// domain types, not into structs of its own.
func TestCLIDecodesClientTypes(t *testing.T) {
	extends := map[string]bool{}
	for _, s := range jsonStructs(t, "../../cmd/ztpd") {
		if slices.Contains(cliDocuments, s.name) || slices.ContainsFunc(s.embeds, func(e string) bool { return strings.HasPrefix(e, "client.") }) {
			extends[s.name] = true
		}
	}
	decoders := map[string]bool{"adminDo": true, "do": true, "REST": true, "RESTContext": true, "CSList": true}
	for name, f := range goFiles(t, "../../cmd/ztpd") {
		for _, fd := range f.Decls {
			fn, ok := fd.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			decls := declsIn(fn.Body)
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) == 0 {
					return true
				}
				callee := calleeName(call.Fun)
				if !decoders[callee] {
					return true
				}
				out, ok := call.Args[len(call.Args)-1].(*ast.UnaryExpr)
				if !ok || out.Op != token.AND {
					return true
				}
				id, ok := out.X.(*ast.Ident)
				if !ok {
					return true
				}
				d, ok := declAt(decls, id.Name, id.Pos())
				typ := d.typ
				if typ == nil {
					typ = d.lit
				}
				switch {
				case !ok || typ == nil:
					t.Errorf("cmd/ztpd/%s: %s decodes into %s, whose type this test cannot tell: declare it with var", name, callee, id.Name)
				case clientType(typ) || extends[types(typ)] || slices.Contains(cliDecodedExceptions, types(typ)):
				case isSliceOf(typ, func(e ast.Expr) bool { return extends[types(e)] || slices.Contains(cliDecodedExceptions, types(e)) }):
				default:
					t.Errorf("cmd/ztpd/%s: %s decodes an answer into %s: decode it into the api/client type", name, callee, exprString(typ))
				}
				return true
			})
		}
	}
}

func isSliceOf(e ast.Expr, ok func(ast.Expr) bool) bool {
	a, isSlice := e.(*ast.ArrayType)
	return isSlice && ok(a.Elt)
}

func exprString(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StructType:
		return "a struct of its own"
	case *ast.MapType:
		return "map[" + exprString(x.Key) + "]" + exprString(x.Value)
	case *ast.ArrayType:
		return "[]" + exprString(x.Elt)
	case *ast.InterfaceType:
		return "any"
	}
	if s := types(e); s != "" {
		return s
	}
	return "an untyped value"
}

// viewBuilders are the server's functions whose (first) result is a client
// type, by name: what builds an answer from domain values.
func viewBuilders(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, dir := range serverDirs(t) {
		for _, f := range goFiles(t, dir) {
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if ok && fn.Type.Results != nil && len(fn.Type.Results.List) > 0 && clientType(fn.Type.Results.List[0].Type) {
					out[fn.Name.Name] = true
				}
			}
		}
	}
	return out
}

func calleeName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		return x.Sel.Name
	case *ast.IndexExpr: // a generic function
		return calleeName(x.X)
	}
	return ""
}

// The admin socket answers the client package's views, never domain
// values: a field added to a domain type does not silently reach the
// CLI's JSON, and the CLI decodes what it declares once.
func TestAdminAnswersViews(t *testing.T) {
	builders := viewBuilders(t)
	f := goFiles(t, "..")["admin.go"]
	if f == nil {
		t.Fatal("api/admin.go not found")
	}
	answers := 0
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "MountAdmin" {
			continue
		}
		decls := declsIn(fn.Body)
		view := func(e ast.Expr) bool {
			switch x := e.(type) {
			case *ast.CompositeLit:
				return clientType(x.Type)
			case *ast.CallExpr:
				return builders[calleeName(x.Fun)]
			case *ast.Ident:
				d, ok := declAt(decls, x.Name, x.Pos())
				return ok && (d.typ != nil && clientType(d.typ) || d.lit != nil && clientType(d.lit) || d.call != nil && builders[calleeName(d.call)])
			}
			return false
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || calleeName(call.Fun) != "answer" || len(call.Args) != 5 {
				return true
			}
			answers++
			if !view(call.Args[3]) {
				t.Errorf("api/admin.go: an admin route answers %s, not built as an api/client view", exprString(call.Args[3]))
			}
			return true
		})
	}
	if answers == 0 {
		t.Fatal("api/admin.go: MountAdmin answers nothing this test recognises")
	}
}

// envelopeWriters are the CloudStack door's functions that put an answer
// under a key named at run time (the command's response key, a list's
// object name): the only maps its answers are built from.
var envelopeWriters = []string{"csWrite", "csWriteOK", "listBody"}

// answerMap reports a map type an answer would be built from: one of
// anything or of strings (not a cache of the door's own values).
func answerMap(e ast.Expr) bool {
	m, ok := e.(*ast.MapType)
	if !ok {
		return false
	}
	_, anyValue := m.Value.(*ast.InterfaceType)
	return anyValue || types(m.Value) == "any" || types(m.Value) == "string"
}

// The CloudStack door builds its answers from typed structs: declared
// once, in api/client where a Go client decodes them, and in the right
// field order (TestCloudStackAnswerBytes in package api pins the bytes).
func TestCloudStackBuildsNoMaps(t *testing.T) {
	for name, f := range goFiles(t, "../cloudstack") {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil || slices.Contains(envelopeWriters, fn.Name.Name) {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				lit, ok := n.(*ast.CompositeLit)
				if !ok {
					return true
				}
				if answerMap(lit.Type) || types(lit.Type) == "gin.H" {
					t.Errorf("api/cloudstack/%s: %s builds an answer as %s: declare its shape as a struct", name, fn.Name.Name, exprString(lit.Type))
				}
				return true
			})
		}
	}
}

// The CLI sends request bodies as the client package's types (a desired
// change is client.DesiredChange), not as maps of anything.
func TestCLISendsNoUntypedBody(t *testing.T) {
	untyped := func(e ast.Expr) bool {
		m, ok := e.(*ast.MapType)
		if !ok {
			return false
		}
		_, anyValue := m.Value.(*ast.InterfaceType)
		return anyValue || types(m.Value) == "any"
	}
	for name, f := range goFiles(t, "../../cmd/ztpd") {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			decls := declsIn(fn.Body)
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				bodyArg := map[string]int{"REST": 3, "RESTContext": 4}[calleeName(call.Fun)]
				if bodyArg == 0 || len(call.Args) <= bodyArg {
					return true
				}
				var typ ast.Expr
				switch x := call.Args[bodyArg].(type) {
				case *ast.CompositeLit:
					typ = x.Type
				case *ast.Ident:
					if d, ok := declAt(decls, x.Name, x.Pos()); ok {
						typ = cmp.Or(d.typ, d.lit)
					}
				}
				if typ != nil && untyped(typ) {
					t.Errorf("cmd/ztpd/%s: %s sends a %s body: declare it in api/client and send that", name, fn.Name.Name, exprString(typ))
				}
				return true
			})
		}
	}
}
