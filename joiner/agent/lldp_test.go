package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// lldpctl -f json as lldpd prints it (lldpd's integration tests' shape):
// one interface is a mapping of its name, several a list of mappings; a
// chassis with a system name is keyed by it.
const (
	lldpTwo = `{"lldp": {"interface": [
  {"eth0": {"via": "LLDP", "rid": "1", "age": "0 day, 00:01:10",
    "chassis": {"mgmt-sw-1": {"id": {"type": "mac", "value": "52:54:00:aa:00:01"}, "descr": "SONiC", "mgmt-ip": "10.99.0.1",
      "capability": [{"type": "Bridge", "enabled": true}]}},
    "port": {"id": {"type": "ifname", "value": "Ethernet12"}, "descr": "leaf-1 mgmt", "ttl": "120"}}},
  {"Ethernet0": {"via": "LLDP", "rid": "2", "age": "0 day, 00:01:05",
    "chassis": {"id": {"type": "mac", "value": "52:54:00:bb:00:01"}, "descr": "no system name"},
    "port": {"id": {"type": "mac", "value": "52:54:00:bb:00:11"}, "descr": "Ethernet48", "ttl": "120"}}}
]}}`
	lldpOne = `{"lldp": {"interface": {"eth0": {"via": "LLDP", "rid": "1", "age": "0 day, 00:00:09",
    "chassis": {"mgmt-sw-2": {"id": {"type": "mac", "value": "52:54:00:aa:00:02"}, "descr": "SONiC"}},
    "port": {"id": {"type": "ifname", "value": "Ethernet3"}, "descr": "x", "ttl": "120"}}}}}`
)

// lldpctl makes the rig's lldpctl print out (failing, as without lldpd,
// when out is "").
func (r *rig) lldpctl(out string) {
	r.t.Helper()
	script := "#!/bin/sh\necho 'lldpctl: unable to connect to lldpd daemon' >&2\nexit 1\n"
	if out != "" {
		data := filepath.Join(r.bin, "lldpctl.json")
		os.WriteFile(data, []byte(out), 0o644)
		script = "#!/bin/sh\n[ \"$1 $2\" = \"-f json\" ] || exit 2\ncat " + data + "\n"
	}
	if err := os.WriteFile(filepath.Join(r.bin, "lldpctl"), []byte(script), 0o755); err != nil {
		r.t.Fatal(err)
	}
}

// TestAgentReportsLLDPNeighbours: the agent sends the neighbours lldpctl
// shows when they changed since ztpd last took them, and nothing without
// lldpd.
func TestAgentReportsLLDPNeighbours(t *testing.T) {
	r := newRig(t)
	sent := func() []string {
		r.ztpd.mu.Lock()
		defer r.ztpd.mu.Unlock()
		return append([]string(nil), r.ztpd.neighbors...)
	}
	r.lldpctl("")
	r.once(0)
	if len(sent()) != 0 {
		t.Fatalf("sent without lldpd: %v", sent())
	}
	r.lldpctl(lldpTwo)
	out := r.once(0)
	if got := sent(); len(got) != 1 {
		t.Fatalf("reports: %v", got)
	}
	var body struct {
		Neighbors []map[string]string `json:"lldp_neighbors"`
	}
	if err := json.Unmarshal([]byte(sent()[0]), &body); err != nil {
		t.Fatal(err)
	}
	want := []map[string]string{
		{"port": "eth0", "remote_system": "mgmt-sw-1", "remote_port": "Ethernet12"},
		{"port": "Ethernet0", "remote_system": "52:54:00:bb:00:01", "remote_port": "Ethernet48"},
	}
	if len(body.Neighbors) != 2 || body.Neighbors[0]["remote_port"] != want[0]["remote_port"] || body.Neighbors[0]["remote_system"] != want[0]["remote_system"] ||
		body.Neighbors[1]["remote_system"] != want[1]["remote_system"] || body.Neighbors[1]["remote_port"] != want[1]["remote_port"] {
		t.Fatalf("neighbours sent: %+v", body.Neighbors)
	}
	if !strings.Contains(out, "LLDP neighbours reported: eth0 -> mgmt-sw-1 Ethernet12") {
		t.Fatalf("agent output:\n%s", out)
	}
	// Unchanged: not sent again; changed: sent.
	r.once(0)
	if n := len(sent()); n != 1 {
		t.Fatalf("unchanged neighbours sent %d times", n)
	}
	r.lldpctl(lldpOne)
	r.once(0)
	if got := sent(); len(got) != 2 || !strings.Contains(got[1], `"remote_system": "mgmt-sw-2"`) {
		t.Fatalf("changed neighbours: %v", got)
	}
}
