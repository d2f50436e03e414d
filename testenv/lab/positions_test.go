package lab

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLabPositionsReplaceASwitch is the lab planned by cable position:
// every switch (two SONiC, one ONIE) sits on its own port behind ISC
// dhcrelay -a, a cabling plan names each port's switch, cluster, role and
// address (replace: auto), and no profile matches a serial: each switch
// gets its position's address and name, its record names the position,
// and it is a Ready Node named by the position in the real API server.
// Then sw0 fails and a technician puts another box (another MAC and
// serial) on its cable, with no release and no leave: the new box gets the
// position's address, takes sw0's place (the old member left, its Node
// deleted through the API server, position.replaced), and registers a new
// Node sw0 that turns Ready.
func TestLabPositionsReplaceASwitch(t *testing.T) {
	bin, ksim := requireLabFleet(t)
	if _, err := exec.LookPath("dhcrelay"); err != nil {
		t.Skip("the positions lab needs ISC dhcrelay (isc-dhcp-relay)")
	}
	work := t.TempDir()
	var log strings.Builder
	l, err := Open(context.Background(), Scenario{Switches: 2, ONIE: 1, VMs: 2, Clusters: 1, Positions: true},
		Options{Prefix: "zlp", Octet: 142, WorkDir: work, Bin: bin, Kubeletsim: ksim, Out: &log, Timeout: 6 * time.Minute})
	dumpLogs := func() {
		for _, f := range []string{"ztpd.out", "relay.out"} {
			if b, rerr := os.ReadFile(filepath.Join(work, f)); rerr == nil {
				t.Logf("%s (tail):\n%s", f, tail(string(b), 4000))
			}
		}
	}
	if l != nil {
		defer func() {
			if t.Failed() {
				dumpLogs()
			}
			l.Close()
		}()
	}
	t.Log("progress:\n" + log.String())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for _, d := range l.Plan {
		if !d.Cabled {
			continue
		}
		id := l.device(t, d.Name)
		var rec struct{ IP, Position, CircuitID, Hostname string }
		for _, r := range l.Result.Devices {
			if r.ID == id {
				rec.IP, rec.Position, rec.CircuitID, rec.Hostname = r.IP, r.Position, r.CircuitID, r.Hostname
			}
		}
		if rec.Position != d.Name || rec.CircuitID != PortName(d.Port) || rec.IP != l.Topo.PortAddr(d.Port).String() {
			t.Fatalf("%s (%s) at port %s: record %+v, want position %s at %s", d.Name, d.Kind, PortName(d.Port), rec, d.Name, l.Topo.PortAddr(d.Port))
		}
		t.Logf("%s (%s, serial %s) behind dhcrelay port %s: %s, position %s", d.Name, d.Kind, d.Serial, rec.CircuitID, rec.IP, rec.Position)
	}
	node := func() (uid string, ready bool) {
		t.Helper()
		out, err := l.Kubectl(ctx, "lab-0", "get", "node", "sw0", "-o", "json")
		if err != nil {
			return "", false
		}
		var n struct {
			Metadata struct{ UID string }
			Status   struct {
				Conditions []struct{ Type, Status string }
			}
		}
		if err := json.Unmarshal(out, &n); err != nil {
			t.Fatal(err)
		}
		for _, c := range n.Status.Conditions {
			ready = ready || c.Type == "Ready" && c.Status == "True"
		}
		return n.Metadata.UID, ready
	}
	oldUID, ready := node()
	oldID := l.device(t, "sw0")
	if oldUID == "" || !ready {
		t.Fatalf("Node sw0 before the replacement: uid %q ready %v", oldUID, ready)
	}

	const newMAC, newSerial = "02:00:00:00:09:01", "RMA0001"
	started := time.Now()
	if _, err := l.ReplaceSwitch(ctx, "sw0", newMAC, newSerial, nil); err != nil {
		t.Fatalf("the replacement box: %v", err)
	}
	var uid string
	for {
		if uid, ready = node(); uid != "" && uid != oldUID && ready {
			break
		}
		if time.Since(started) > 2*time.Minute {
			t.Fatalf("2 min after the replacement, Node sw0 uid %q (old %q) ready %v", uid, oldUID, ready)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("the replacement box %s (serial %s) on port p0: Node sw0 re-registered (uid %s, was %s) and Ready after %s",
		newMAC, newSerial, uid, oldUID, time.Since(started).Round(100*time.Millisecond))
	devs, err := listDevices(ctx, l.App)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		switch {
		case strings.EqualFold(d.MAC, newMAC):
			if d.Position != "sw0" || d.IP != l.Topo.PortAddr(0).String() || d.State != "joined" {
				t.Errorf("the new box: position %q ip %s state %s, want sw0 %s joined", d.Position, d.IP, d.State, l.Topo.PortAddr(0))
			}
		case d.ID == oldID:
			if d.State == "joined" {
				t.Errorf("the failed box is still joined")
			}
		}
	}
	out, err := l.ZTPD(ctx, "events", "--limit", "1000", "-o", "json")
	if err != nil {
		t.Fatalf("ztpd events: %v %s", err, out)
	}
	var evs []struct{ Type, Device, Message string }
	if err := json.Unmarshal(out, &evs); err != nil {
		t.Fatalf("events: %v: %s", err, out)
	}
	seen := map[string]string{}
	for _, e := range evs {
		if strings.HasPrefix(e.Type, "position.") || e.Type == "join.left" && e.Device == oldID {
			seen[e.Type] = e.Message
			t.Logf("event %s %s: %s", e.Type, e.Device, e.Message)
		}
	}
	for _, typ := range []string{"position.replaced", "position.node_deleted", "join.left"} {
		if _, ok := seen[typ]; !ok {
			t.Errorf("no %s event", typ)
		}
	}
}
