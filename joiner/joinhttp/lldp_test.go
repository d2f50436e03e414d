package joinhttp

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/positions"
	"github.com/ztpd/ztpd/joiner"
)

// Neighbours as lldpd's lldpctl -f json prints them (lldpd's
// tests/integration/test_lldpcli.py shape): one interface is a mapping of
// its name; several are a list of such mappings. A chassis with a system
// name is keyed by it; one without has its fields directly.
const (
	lldpWrong = `{"lldp": {"interface": [
  {"eth0": {"via": "LLDP", "rid": "1", "age": "0 day, 00:01:10",
    "chassis": {"mgmt-sw-2": {"id": {"type": "mac", "value": "52:54:00:aa:00:02"}, "descr": "SONiC Software Version: SONiC.202405",
      "mgmt-ip": "10.99.0.2", "capability": [{"type": "Bridge", "enabled": true}, {"type": "Router", "enabled": true}]}},
    "port": {"id": {"type": "ifname", "value": "Ethernet3"}, "descr": "Servers-3", "ttl": "120"}}},
  {"Ethernet0": {"via": "LLDP", "rid": "2", "age": "0 day, 00:01:05",
    "chassis": {"id": {"type": "mac", "value": "52:54:00:bb:00:01"}, "descr": "spine without a name"},
    "port": {"id": {"type": "mac", "value": "52:54:00:bb:00:11"}, "descr": "Ethernet48", "ttl": "120"}}}
]}}`
	lldpRight = `{"lldp": {"interface": {"eth0": {"via": "LLDP", "rid": "1", "age": "0 day, 00:02:00",
    "chassis": {"mgmt-sw-1": {"id": {"type": "mac", "value": "52:54:00:aa:00:01"}, "descr": "SONiC Software Version: SONiC.202405",
      "mgmt-ip": "10.99.0.1", "capability": [{"type": "Bridge", "enabled": true}]}},
    "port": {"id": {"type": "ifname", "value": "Ethernet12"}, "descr": "leaf-1 mgmt", "ttl": "120"}}}}}`
)

// fakeTools writes lldpctl (printing out, or failing when out is "") and a
// docker that fails, so the plugin's fallback to SONiC's lldp container
// finds nothing here.
func fakeTools(t *testing.T, dir, out string) {
	t.Helper()
	os.MkdirAll(dir, 0o755)
	script := "#!/bin/sh\necho 'lldpctl: unable to connect to lldpd daemon' >&2\nexit 1\n"
	if out != "" {
		os.WriteFile(filepath.Join(dir, "lldpctl.json"), []byte(out), 0o644)
		script = "#!/bin/sh\n[ \"$1 $2\" = \"-f json\" ] || exit 2\ncat " + filepath.Join(dir, "lldpctl.json") + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "lldpctl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "docker"), []byte("#!/bin/sh\nexit 1\n"), 0o755)
}

// TestPluginReportsLLDPNeighbours: the real join plugin sends the switch's
// LLDP neighbours as lldpctl prints them, and nothing without lldpd; a
// position with `cabling: strict` holds the join while they differ from
// the plan (the plugin logs the reason naming expected and seen) and lets
// it go on once recabled.
func TestPluginReportsLLDPNeighbours(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed")
	}
	pos := &positions.Position{Name: "leaf-1", Relay: netip.MustParseAddr("10.99.7.1"), CircuitID: "Ethernet12",
		Cabling: positions.CablingStrict, Neighbors: []positions.Neighbor{{Port: "eth0", RemoteSystem: "mgmt-sw-1", RemotePort: "Ethernet12"}}}
	plan, errs := positions.Build([]*positions.Position{pos})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	f := setupWith(t, []joiner.Rule{{AssertedSerials: []string{"SN-LEAF-1"}}, {MACs: []string{"02:00:00:00:00:01"}, ControlPlane: true}},
		func(o *joiner.Options) { o.Plan = func() *positions.Plan { return plan } })
	f.hold(t, "127.0.0.2", "02:00:00:00:00:01")
	f.hold(t, "127.0.0.1", "0c:29:ef:00:00:01")
	cp := f.enroll(t, "02:00:00:00:00:01", "")
	if code, _, b := curl(t, "--interface", "127.0.0.2", "-X", "POST", "--data", `{"enrollment":"`+cp+`","mac":"02:00:00:00:00:01"}`, f.srv.URL+"/join"); code != 200 {
		t.Fatalf("control plane: %d %s", code, b)
	}
	dev := core.Device{ID: "0c:29:ef:00:00:01", MAC: "0c:29:ef:00:00:01", Kind: core.KindSONiC, Serial: "SN-LEAF-1", Position: "leaf-1", IP: "127.0.0.1"}
	if err := f.st.Update(func(tx core.Tx) error { return tx.Devices().Put(dev) }); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	plugin := filepath.Join(dir, "plugin")
	if code, _, b := curl(t, "-o", plugin, f.srv.URL+joiner.PluginPath); code != 200 {
		t.Fatalf("plugin download: %d %s", code, b)
	}
	sec, err := f.svc.ZTPSection(context.Background(), dev, "prod", "leaf-1")
	if err != nil {
		t.Fatal(err)
	}
	input := filepath.Join(dir, "input.json")
	raw, _ := json.Marshal(map[string]any{"09-join": sec})
	os.WriteFile(input, raw, 0o600)
	bin, root := filepath.Join(dir, "bin"), filepath.Join(dir, "root")
	run := func(lldp string, wait string) (string, error) {
		fakeTools(t, bin, lldp)
		cmd := exec.Command("python3", plugin, input)
		cmd.Env = append(os.Environ(), "ZTPD_ROOT="+root, "ZTPD_MAX_WAIT="+wait, "PATH="+bin+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	lastNeighbors := func() []positions.Neighbor {
		bodies := f.joinBodies()
		var body struct {
			Neighbors []positions.Neighbor `json:"lldp_neighbors"`
		}
		if err := json.Unmarshal([]byte(bodies[len(bodies)-1]), &body); err != nil {
			t.Fatal(err)
		}
		return body.Neighbors
	}

	// lldpd not running: nothing is sent (the cluster is still Starting,
	// so the plugin waits and gives up).
	if out, err := run("", "1"); err == nil || !strings.Contains(out, "gave up waiting") {
		t.Fatalf("plugin without lldpd: %v\n%s", err, out)
	}
	if strings.Contains(f.joinBodies()[len(f.joinBodies())-1], "lldp_neighbors") {
		t.Fatal("a switch without LLDP sent neighbours")
	}
	f.running(t)

	// Cabled wrong: held, the reason names expected and seen.
	out, err := run(lldpWrong, "1")
	if err == nil || !strings.Contains(out, "waiting: cabling does not match position leaf-1 (cabling: strict): eth0: expected mgmt-sw-1 Ethernet12, seen mgmt-sw-2 Ethernet3") {
		t.Fatalf("plugin cabled wrong: %v\n%s", err, out)
	}
	got := lastNeighbors()
	want := []positions.Neighbor{{Port: "eth0", RemoteSystem: "mgmt-sw-2", RemotePort: "Ethernet3"},
		{Port: "Ethernet0", RemoteSystem: "52:54:00:bb:00:01", RemotePort: "Ethernet48"}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("neighbours sent: %+v, want %+v", got, want)
	}
	var d core.Device
	f.st.View(func(tx core.Tx) error { d, _ = tx.Devices().Get(dev.ID); return nil })
	if d.CablingMismatch == nil || d.CablingMismatch.Position != "leaf-1" || d.State != core.StateWaiting {
		t.Fatalf("device cabled wrong: %s %+v", d.State, d.CablingMismatch)
	}

	// Recabled: admitted, the warning cleared.
	if out, err := run(lldpRight, "5"); err != nil || !strings.Contains(out, "admitted to cluster prod") || !strings.Contains(out, "LLDP neighbours: eth0 -> mgmt-sw-1 Ethernet12") {
		t.Fatalf("plugin recabled: %v\n%s", err, out)
	}
	f.st.View(func(tx core.Tx) error { d, _ = tx.Devices().Get(dev.ID); return nil })
	if d.CablingMismatch != nil || d.State != core.StateJoinIssued {
		t.Fatalf("device recabled: %s %+v", d.State, d.CablingMismatch)
	}
}
