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
