package consoletest

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/testenv/browser"
)

// TestConsolePositions: positions added with the CLI (through the admin
// socket) and devices whose records name them are shown by chromium rack
// by rack, each slot with what the device records say of it (arrived,
// joined, mismatched, expected, empty, replaced: a new box waiting to take
// a failed one's place, both named), and the device page names its
// position with a link to it. The page is photographed
// ($ZTPD_POSITIONS_SHOT, else the test's screenshot directory).
func TestConsolePositions(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	if _, err := browser.Path(); err != nil {
		t.Skip(err)
	}
	z := serveZtpd(t, func(tx core.Tx) error {
		if err := seedDevices(tx); err != nil {
			return err
		}
		now := time.Now().UTC().Truncate(time.Second)
		place := map[string]string{"02:00:00:00:16:01": "leaf-16a", "02:00:00:00:16:03": "leaf-16c"}
		for id, pos := range place {
			d, err := tx.Devices().Get(id)
			if err != nil {
				return err
			}
			d.Position, d.RelayAddr, d.CircuitID = pos, "10.99.16.1", "Ethernet"+pos[len(pos)-1:]
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
		}
		if err := tx.Devices().Put(core.Device{ID: "02:00:00:00:16:04", Kind: core.KindSONiC, MAC: "02:00:00:00:16:04", Serial: "CONSOLE0004",
			IP: "10.99.16.14", Subnet: "fabric", State: core.StateJoined, Position: "leaf-16d", RelayAddr: "10.99.16.1",
			CircuitID: "Ethernetd", FirstSeen: now, LastSeen: now, UpdatedAt: now}); err != nil {
			return err
		}
		// leaf-17b: its box failed (left, seen an hour ago) and another
		// waits to replace it.
		old := now.Add(-time.Hour)
		if err := tx.Devices().Put(core.Device{ID: "02:00:00:00:17:02", Kind: core.KindSONiC, MAC: "02:00:00:00:17:02", Serial: "FAILED0017",
			IP: "10.99.17.12", Subnet: "fabric", State: core.StateLeft, Position: "leaf-17b", RelayAddr: "10.99.17.1",
			CircuitID: "Ethernetb", FirstSeen: old, LastSeen: old, UpdatedAt: old}); err != nil {
			return err
		}
		return tx.Devices().Put(core.Device{ID: "02:00:00:00:17:09", Kind: core.KindSONiC, MAC: "02:00:00:00:17:09", Serial: "RMA0017",
			IP: "10.99.17.120", Subnet: "fabric", State: core.StateWaiting, Position: "leaf-17b", RelayAddr: "10.99.17.1",
			CircuitID: "Ethernetb", FirstSeen: now, LastSeen: now, UpdatedAt: now,
			Refusal: core.Refusal{What: "join", Kind: core.RefusalWaiting, At: now,
				Reason: "replaces leaf-17b (serial FAILED0017): approve the replacement with ztpd device approve 02:00:00:00:17:09"}})
	})
	for _, args := range [][]string{
		{"leaf-16a", "--relay", "10.99.16.1", "--circuit-id", "Etherneta", "--rack", "16", "--port", "Ethernet0", "--serial", "CONSOLE0001", "--address", "10.99.16.11"},
		{"leaf-16b", "--relay", "10.99.16.1", "--circuit-id", "Ethernetb", "--rack", "16", "--port", "Ethernet4", "--serial", "CONSOLE0002"},
		{"leaf-16c", "--relay", "10.99.16.1", "--circuit-id", "Ethernetc", "--rack", "16", "--port", "Ethernet8", "--serial", "PLANNED0003"},
		{"leaf-16d", "--relay", "10.99.16.1", "--circuit-id", "Ethernetd", "--rack", "16", "--port", "Ethernet12"},
		{"leaf-17a", "--relay", "10.99.17.1", "--circuit-id", "hex:00ff3c73637269707433", "--rack", "17", "--port", "Ethernet0"},
		{"leaf-17b", "--relay", "10.99.17.1", "--circuit-id", "Ethernetb", "--rack", "17", "--port", "Ethernet4"},
	} {
		if out, err := z.CLI(append([]string{"position", "set"}, args...)...); err != nil {
			t.Fatalf("position set %v: %v\n%s", args, err, out)
		}
	}
	admin := z.Key("admin", "ops")
	b := browser.New(t)
	tab := b.Tab(t)
	if err := tab.SignIn(z.Base, admin.APIKey, admin.SecretKey); err != nil {
		t.Fatal(err)
	}
	open(t, tab, z.Base, "/positions")
	for id, state := range map[string]string{"leaf-16a": "arrived", "leaf-16b": "expected", "leaf-16c": "mismatched",
		"leaf-16d": "joined", "leaf-17a": "empty", "leaf-17b": "replaced"} {
		got, err := browser.Eval[string](tab, `document.getElementById("pos-`+id+`").dataset.state`)
		if err != nil || got != state {
			t.Errorf("slot %s shows %q (%v), want %s", id, got, err, state)
		}
	}
	if text, _ := tab.TextOf("#racks"); !strings.Contains(text, "Rack 16") || !strings.Contains(text, "Rack 17") ||
		!strings.Contains(text, "hex:00ff3c73637269707433") || !strings.Contains(text, "CONSOLE0001") {
		t.Errorf("the racks view lacks its racks, a hostile circuit id as text, or a device:\n%s", text)
	}
	if text, _ := tab.TextOf("#pos-leaf-17b"); !strings.Contains(text, "RMA0017 replaces FAILED0017") {
		t.Errorf("the replaced slot does not name both boxes: %q", text)
	}
	if bad, err := browser.Eval[bool](tab, `!!document.querySelector("main script")`); err != nil || bad {
		t.Fatalf("markup in the page: %v", err)
	}
	if summary, _ := tab.TextOf("#positions-summary"); !strings.Contains(summary, "6 positions in 2 racks") {
		t.Errorf("summary %q", summary)
	}
	shot := os.Getenv("ZTPD_POSITIONS_SHOT")
	if shot == "" {
		shot = shotDir(t) + "/positions-1280.png"
	}
	if err := tab.Screenshot(shot, 1280); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", shot)

	open(t, tab, z.Base, "/devices/02:00:00:00:16:03")
	if got, err := tab.WaitText("#device-position", "leaf-16c"); err != nil {
		t.Fatalf("device page position: %q %v", got, err)
	}
}
