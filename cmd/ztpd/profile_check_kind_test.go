package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/profile"
)

// A device DHCP left as kind unknown: profile check names the setting that
// would make it a VM (its MAC's prefix under dhcp.vm.mac_prefixes), or says
// the configuration already covers it and the next lease will.
func TestProfileCheckNamesVMMACPrefixForUnknownKind(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "vm.yaml"), []byte("name: vm\nmatch:\n  kind: [vm]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := profile.Load([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	st := &profileCheckStoreAccess{where: "not consulted", close: func() error { return nil }}
	check := func(cfg config.Config, d core.Device) []string {
		t.Helper()
		res, err := checkProfiles(set, d, "", cfg, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res.Notes
	}
	guest := core.Device{ID: "06:00:4c:00:00:07", MAC: "06:00:4c:00:00:07", Kind: core.KindUnknown, IP: "10.99.42.7"}
	notes := strings.Join(check(config.Default(), guest), "\n")
	if !strings.Contains(notes, `add its MAC prefix "06:00" to dhcp.vm.mac_prefixes (now ["1e:00"])`) {
		t.Errorf("unknown-kind device: notes do not name dhcp.vm.mac_prefixes with its prefix:\n%s", notes)
	}
	cfg := config.Default()
	cfg.DHCP.VM.MACPrefixes = []string{"1e:00", "06:00"}
	notes = strings.Join(check(cfg, guest), "\n")
	if !strings.Contains(notes, "its next DHCP request makes it a vm") || strings.Contains(notes, "add its MAC prefix") {
		t.Errorf("unknown-kind device its configuration now covers: notes:\n%s", notes)
	}
	vm := guest
	vm.Kind = core.KindVM
	for _, n := range check(config.Default(), vm) {
		if strings.Contains(n, "mac_prefixes") {
			t.Errorf("a vm gets a mac_prefixes note: %s", n)
		}
	}
}
