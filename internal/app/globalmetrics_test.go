package app

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoGlobalMetrics keeps the rule that every metric registers on the
// Registerer its App hands out: product code (outside tests and testenv/)
// never registers on Prometheus' global registry, which every App in one
// process would share.
func TestNoGlobalMetrics(t *testing.T) {
	root := filepath.Join("..", "..")
	global := map[string]bool{
		"promauto.NewCounter": true, "promauto.NewCounterVec": true, "promauto.NewGauge": true,
		"promauto.NewGaugeVec": true, "promauto.NewHistogram": true, "promauto.NewHistogramVec": true,
		"promauto.NewSummary": true, "promauto.NewSummaryVec": true, "promauto.NewCounterFunc": true,
		"promauto.NewGaugeFunc": true, "prometheus.MustRegister": true, "prometheus.Register": true,
		"prometheus.DefaultRegisterer": true,
	}
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel == "testenv" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		files++
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && global[x.Name+"."+sel.Sel.Name] {
				t.Errorf("%s: %s.%s registers on the global registry: take the App's Registerer", rel, x.Name, sel.Sel.Name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read only %d Go files from %s: not the module's tree?", files, root)
	}
}
