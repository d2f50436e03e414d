package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/testenv/freeport"
)

// TestPositionCLI: the cabling plan managed through "ztpd position" (the
// admin socket while the server runs, the store in-process after it
// stopped), checked together with the plan files (a clash names both
// places), and "profile check --position" showing what the slot's device
// gets: its name, reserved address and the plan's fields in its
// config_db, and a warning when the slot expects another box.
func TestPositionCLI(t *testing.T) {
	bin := buildZtpd(t)
	env := cliEnv(t)
	dir := t.TempDir()
	addr := freeport.Addr(t)
	plans, profiles := filepath.Join(dir, "plan"), filepath.Join(dir, "profiles")
	for _, d := range []string{plans, profiles} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(path, s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	planFile := filepath.Join(plans, "rack7.csv")
	write(planFile, "name,relay,circuit_id,address,rack,port,loopback\nleaf-07a,10.99.7.1,Ethernet12,10.99.7.21,7,Ethernet12,10.255.0.7\n")
	write(filepath.Join(profiles, "leaf.yaml"), `name: leaf
match:
  kind: [sonic]
hostname: 'leaf-{{ .Serial | lower }}'
mgmt:
  interface: eth0
  ip: '{{ .IP }}'
  prefix: 24
sections:
  - name: snmp
    data:
      snmp-location: 'rack {{ .Position.Rack }} Loopback0|{{ index .Position.Fields "loopback" }}/32'
`)
	cfg := filepath.Join(dir, "ztpd.yaml")
	write(cfg, fmt.Sprintf("data_dir: %s\nhttp:\n  addr: %s\nprofiles: [%s]\npositions: [%s]\n", filepath.Join(dir, "data"), addr, profiles, plans))
	run := func(args ...string) string {
		t.Helper()
		return visRun(t, bin, env, append([]string{"--config", cfg}, args...)...)
	}
	fail := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"--config", cfg}, args...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("ztpd %s succeeded:\n%s", strings.Join(args, " "), out)
		}
		return string(out)
	}
	list := func() map[string]client.Position {
		t.Helper()
		var ps []client.Position
		if err := json.Unmarshal([]byte(run("position", "list", "-o", "json")), &ps); err != nil {
			t.Fatal(err)
		}
		m := map[string]client.Position{}
		for _, p := range ps {
			m[p.Name] = p
		}
		return m
	}

	srv, _ := visServe(t, bin, cfg, addr, env)
	run("position", "set", "leaf-07b", "--relay", "10.99.7.1", "--circuit-id", "Ethernet13", "--rack", "7", "--field", "loopback=10.255.0.8")
	run("position", "set", "leaf-07b", "--serial", "SN07B", "--label", "tier=leaf")
	got := list()
	if b := got["leaf-07b"]; b.Source != "api" || b.Serial != "SN07B" || b.Fields["loopback"] != "10.255.0.8" || b.Labels["tier"] != "leaf" || b.CircuitID != "Ethernet13" {
		t.Fatalf("leaf-07b after two sets: %+v", b)
	}
	if a := got["leaf-07a"]; a.Source != planFile+":2" || a.Address != "10.99.7.21" {
		t.Fatalf("leaf-07a from the plan file: %+v", a)
	}
	// A stored position the network cannot tell apart from the file's line.
	out := fail("position", "set", "leaf-07c", "--relay", "10.99.7.1", "--circuit-id", "Ethernet12")
	if !strings.Contains(out, "leaf-07a") || !strings.Contains(out, planFile+":2") || !strings.Contains(out, "cannot tell it apart") {
		t.Fatalf("clashing set: %s", out)
	}
	if out := fail("position", "set", "leaf-07a", "--rack", "8"); !strings.Contains(out, planFile+":2") {
		t.Fatalf("changing a file's position: %s", out)
	}
	// An import file with problems is refused at its lines, nothing stored.
	bad := filepath.Join(dir, "bad.yaml")
	write(bad, "positions:\n  - name: leaf-08a\n    relay: 10.99.8.1\n  - name: Leaf_08b\n    relay: 10.99.8.1\n    circuit_id: Ethernet2\n")
	if out := fail("position", "import", bad); !strings.Contains(out, bad+":4") || !strings.Contains(out, "host name") {
		t.Fatalf("bad import: %s", out)
	}
	good := filepath.Join(dir, "rack8.yaml")
	write(good, "positions:\n  - name: leaf-08a\n    relay: 10.99.8.1\n    circuit_id: Ethernet1\n  - name: leaf-08b\n    relay: 10.99.8.1\n    circuit_id: Ethernet2\n")
	var imported client.PositionImported
	if err := json.Unmarshal([]byte(run("position", "import", good, "-o", "json")), &imported); err != nil || imported.Created != 2 {
		t.Fatalf("import: %+v %v", imported, err)
	}

	check := run("profile", "check", "--position", "leaf-07a")
	for _, want := range []string{"leaf-07a", "10.99.7.21", "Loopback0|10.255.0.7/32", planFile + ":2", "matched", "leaf"} {
		if !strings.Contains(check, want) {
			t.Errorf("profile check --position leaf-07a lacks %q:\n%s", want, check)
		}
	}
	// The slot expects SN07B: another box there would be refused.
	check = run("profile", "check", "--position", "leaf-07b", "--serial", "OTHER1")
	if !strings.Contains(check, "expects serial SN07B, not OTHER1") {
		t.Errorf("profile check --position leaf-07b --serial OTHER1 does not warn of the refusal:\n%s", check)
	}
	if out := fail("profile", "check", "--position", "leaf-99z"); !strings.Contains(out, "no such position") {
		t.Errorf("unknown position: %s", out)
	}
	visStop(t, srv)

	// The server stopped: the same commands open the store in-process.
	if got := list(); len(got) != 4 || got["leaf-08b"].Source != "api" || got["leaf-07a"].Source != planFile+":2" {
		t.Fatalf("list with the server stopped: %+v", got)
	}
	run("position", "delete", "leaf-08b", "--yes")
	if out := fail("position", "delete", "leaf-07a", "--yes"); !strings.Contains(out, planFile) {
		t.Fatalf("deleting a file's position: %s", out)
	}
	if check := run("profile", "check", "--position", "leaf-07b", "-o", "json"); !strings.Contains(check, `"name": "leaf-07b"`) {
		t.Errorf("profile check --position with the server stopped:\n%s", check)
	}
	if got := list(); len(got) != 3 {
		t.Fatalf("after delete: %+v", got)
	}
}
