package positions

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// TestServiceFilesAndAPITogether: positions stored through the API and
// those of the plan files make one plan. A stored position the network
// cannot tell apart from a file's line is refused naming both; a file
// edited to clash with a stored position fails the reload naming both,
// and the plan in use stays. A process that never loaded the plan (a CLI
// command with the store in-process) reads it on demand.
func TestServiceFilesAndAPITogether(t *testing.T) {
	st := storetest.Open(t).Store
	dir := t.TempDir()
	file := filepath.Join(dir, "rack7.yaml")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("positions:\n  - name: leaf-07a\n    relay: 10.0.7.1\n    circuit_id: Ethernet12\n")
	admin := core.Caller{Admin: true}

	svc := NewService([]string{dir}, st, nil)
	if _, err := svc.Put(admin, &Position{Name: "leaf-07b", Relay: netip.MustParseAddr("10.0.7.1"), CircuitID: "Ethernet13"}); err != nil {
		t.Fatal(err)
	}
	// Another process on the same store, which never loaded a plan.
	other := NewService([]string{dir}, st, nil)
	pl, err := other.Current()
	if err != nil || pl.Len() != 2 || pl.Get("leaf-07a").Where() != file+":2" || pl.Get("leaf-07b").Where() != "the API" {
		t.Fatalf("current plan: %v %+v", err, pl.List())
	}

	_, err = svc.Put(admin, &Position{Name: "leaf-07c", Relay: netip.MustParseAddr("10.0.7.1"), CircuitID: "Ethernet12"})
	if core.KindOf(err) != core.KindInvalid || !strings.Contains(err.Error(), "leaf-07a") || !strings.Contains(err.Error(), file+":2") {
		t.Fatalf("clash with a file line: %v", err)
	}
	if _, err := svc.Put(admin, &Position{Name: "leaf-07a", Relay: netip.MustParseAddr("10.0.9.1")}); core.KindOf(err) != core.KindConflict {
		t.Fatalf("shadowing a file's position: %v", err)
	}
	if err := svc.Delete(admin, "leaf-07a"); core.KindOf(err) != core.KindConflict || !strings.Contains(err.Error(), file) {
		t.Fatalf("deleting a file's position: %v", err)
	}
	if _, err := svc.Put(core.Caller{Account: "acme"}, &Position{Name: "x", Relay: netip.MustParseAddr("10.0.9.1")}); core.KindOf(err) != core.KindPermission {
		t.Fatalf("a user's put: %v", err)
	}

	if err := svc.Reload(); err != nil {
		t.Fatal(err)
	}
	write("positions:\n  - name: leaf-07a\n    relay: 10.0.7.1\n    circuit_id: Ethernet12\n  - name: leaf-07z\n    relay: 10.0.7.1\n    circuit_id: Ethernet13\n")
	err = svc.Reload()
	if err == nil || !strings.Contains(err.Error(), file+":5") || !strings.Contains(err.Error(), "leaf-07b") || !strings.Contains(err.Error(), "through the API") {
		t.Fatalf("reload with a file line clashing with a stored position: %v", err)
	}
	if svc.Plan().Get("leaf-07b") == nil || svc.Plan().Get("leaf-07z") != nil {
		t.Fatal("a refused reload changed the plan in use")
	}
}
