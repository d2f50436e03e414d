package client_test

import (
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
	for _, s := range jsonStructs(t, "..") {
		if v, ok := views[strings.Join(s.fields, ",")]; ok {
			t.Errorf("api/%s declares %s with the JSON fields of client.%s: build the client's type", s.file, s.name, v)
		}
	}
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
				callee := ""
				switch fun := call.Fun.(type) {
				case *ast.Ident:
					callee = fun.Name
				case *ast.SelectorExpr:
					callee = fun.Sel.Name
				}
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
