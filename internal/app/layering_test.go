package app

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/ztpd/ztpd/"

// TestLayering checks the rules of ARCHITECTURE.md's "Rules the layout
// keeps" that an import graph can show: only the composition root imports
// upward. Test files are not checked (a test may build what it tests
// with).
func TestLayering(t *testing.T) {
	if testing.Short() {
		t.Skip("lists every package of the module")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to list the packages with")
	}
	cmd := exec.Command(goBin, "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		pkg := strings.TrimPrefix(f[0], module)
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module) {
				imports[pkg] = append(imports[pkg], strings.TrimPrefix(imp, module))
			}
		}
	}
	if len(imports) < 20 {
		t.Fatalf("go list found %d packages importing others of the module: not the module's tree?", len(imports))
	}
	under := func(pkg string, roots ...string) bool {
		for _, r := range roots {
			if pkg == r || strings.HasPrefix(pkg, r+"/") {
				return true
			}
		}
		return false
	}
	doors := []string{"api", "ztp/http", "ztp/tftp", "ztp/dhcp", "joiner/joinhttp"}
	// Test tooling: the lab binary and testenv's harnesses.
	tooling := []string{"testenv", "cmd/ztpd-lab", "bench"}
	rules := []struct {
		name    string
		applies func(pkg string) bool
		refused func(imp string) bool
		// withinDoor: a door's own parts may import each other.
		withinDoor bool
	}{
		{"only cmd/ and testenv/ import the composition root (internal/app)",
			func(pkg string) bool { return !under(pkg, "cmd", "testenv", "internal/app") },
			func(imp string) bool { return under(imp, "internal/app") }, false},
		{"internal/core imports no other package of ztpd (no transport, no engine, no service)",
			func(pkg string) bool { return pkg == "internal/core" },
			func(string) bool { return true }, false},
		{"the services under internal/ import nothing from joiner/, images/, ztp/ or api/ (those build on them)",
			func(pkg string) bool { return under(pkg, "internal") && !under(pkg, "internal/app") },
			func(imp string) bool { return under(imp, "joiner", "images", "ztp", "api") }, false},
		{"only the composition root imports a door (api, ztp/http, ztp/tftp, ztp/dhcp, joiner/joinhttp), besides a door's own parts",
			func(pkg string) bool { return !under(pkg, "cmd", "internal/app") && !under(pkg, tooling...) },
			func(imp string) bool { return under(imp, doors...) }, true},
		{"the packages under api/ (its doors and their shared parts) do not import their composer, api",
			func(pkg string) bool { return under(pkg, "api") && pkg != "api" },
			func(imp string) bool { return imp == "api" }, false},
		{"the REST door imports no other door: the console builds on it, not it on the console",
			func(pkg string) bool { return under(pkg, "api/rest") },
			func(imp string) bool { return under(imp, "api/console", "api/cloudstack", "api/agentdoor") }, false},
		{"product packages import nothing from testenv/",
			func(pkg string) bool { return !under(pkg, tooling...) },
			func(imp string) bool { return under(imp, "testenv") }, false},
		{"no package imports cmd/",
			func(string) bool { return true },
			func(imp string) bool { return under(imp, "cmd") }, false},
	}
	for _, r := range rules {
		for pkg, imps := range imports {
			if !r.applies(pkg) {
				continue
			}
			for _, imp := range imps {
				if r.refused(imp) && !(r.withinDoor && sameDoor(pkg, imp, doors)) {
					t.Errorf("%s imports %s, but %s", pkg, imp, r.name)
				}
			}
		}
	}
}

// sameDoor: pkg is part of the door imp belongs to (api and api/console,
// api/console and api/rest).
func sameDoor(pkg, imp string, doors []string) bool {
	for _, d := range doors {
		if (pkg == d || strings.HasPrefix(pkg, d+"/")) && (imp == d || strings.HasPrefix(imp, d+"/")) {
			return true
		}
	}
	return false
}
