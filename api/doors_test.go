package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestDoorsOpenNoTransactions: the API is a door that authenticates,
// translates and answers; reads and writes go through the services, which
// take the caller and decide tenancy. So no non-test file under api/
// imports a store package, opens a store transaction (View, Update or
// Batch) or holds a core.Tx.
func TestDoorsOpenNoTransactions(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path == filepath.Join("internal", "apitest") {
			return filepath.SkipDir // the doors' tests' fixtures: they seed the store as a test does
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if strings.HasPrefix(p, "github.com/ztpd/ztpd/internal/store") {
				t.Errorf("%s imports %s: a door reads and writes through services", path, p)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				// A transaction's handle: only a store hands one out.
				if x, ok := n.X.(*ast.Ident); ok && x.Name == "core" && n.Sel.Name == "Tx" {
					t.Errorf("%s: a door holds a core.Tx: read and write through a service", fset.Position(n.Pos()))
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok || !isTransaction(sel.Sel.Name) {
					return true
				}
				// store.View(func...) / Update / Batch, or any of them on
				// a field that holds the store (a service's own View, such
				// as clusters.Service.View of one cluster, is a read).
				_, funcArg := firstArg(n).(*ast.FuncLit)
				if funcArg || isStoreField(sel.X) {
					t.Errorf("%s: %s opens a store transaction: move the read or write into its service",
						fset.Position(n.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("checked %d files: is the test running in api/?", checked)
	}
}

func isTransaction(name string) bool { return name == "View" || name == "Update" || name == "Batch" }

func firstArg(call *ast.CallExpr) ast.Expr {
	if len(call.Args) == 0 {
		return nil
	}
	return call.Args[0]
}

// isStoreField reports whether x names a store: s.st, s.store, d.Store.
func isStoreField(x ast.Expr) bool {
	var name string
	switch x := x.(type) {
	case *ast.Ident:
		name = x.Name
	case *ast.SelectorExpr:
		name = x.Sel.Name
	}
	return name == "st" || strings.EqualFold(name, "store")
}
