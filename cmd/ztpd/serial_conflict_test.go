package main

import (
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/app"
	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/testenv/freeport"
)

// TestDeviceApproveRefusesAnAmbiguousSerial: a device stated the serial of
// a switch waiting for approval. "device approve SERIAL" and "device show
// SERIAL" exit non-zero naming both devices (MAC, address); "device show
// MAC" shows the conflict; approving by MAC admits the switch.
func TestDeviceApproveRefusesAnAmbiguousSerial(t *testing.T) {
	bin := buildZtpd(t)
	dir := t.TempDir()
	cfgPath := visConfig(t, dir, freeport.Addr(t))
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.New(cfg, app.NewLogger(io.Discard, "error", "text"))
	if err != nil {
		t.Fatal(err)
	}
	const victim, attacker = "02:00:00:00:16:01", "02:00:00:00:16:02"
	now := time.Now().UTC()
	err = a.Store.Update(func(tx core.Tx) error {
		for _, d := range []core.Device{
			{ID: victim, MAC: victim, Kind: core.KindSONiC, Serial: "VICTIM01", IP: "127.0.0.5", State: core.StateZTPServed, LastSeen: now},
			{ID: attacker, MAC: attacker, Kind: core.KindUnknown, IP: "127.0.0.6", State: core.StateLeased, LastSeen: now},
		} {
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// What content reports for the attacker's fetch with SERIAL-NUMBER: VICTIM01.
	a.Devices.Progress(devices.Progress{Device: core.Device{ID: attacker, MAC: attacker, Kind: core.KindSONiC, Serial: "VICTIM01", IP: "127.0.0.6"},
		Next: core.StateZTPServed, Event: core.Event{Time: now, Type: "ztp.json.served", Device: attacker}})
	a.Devices.Flush()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	env := cliEnv(t)
	for _, args := range [][]string{{"device", "approve", "VICTIM01"}, {"device", "show", "VICTIM01"}} {
		cmd := exec.Command(bin, append([]string{"--config", cfgPath}, args...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("ztpd %s succeeded on an ambiguous serial:\n%s", strings.Join(args, " "), out)
		}
		for _, want := range []string{"ambiguous", victim, attacker, "127.0.0.5", "127.0.0.6"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("ztpd %s: output lacks %q:\n%s", strings.Join(args, " "), want, out)
			}
		}
	}
	out := visRun(t, bin, env, "--config", cfgPath, "device", "show", victim)
	if !strings.Contains(out, "serial conflict") || !strings.Contains(out, attacker) {
		t.Errorf("device show of the holder lacks the conflict:\n%s", out)
	}
	out = visRun(t, bin, env, "--config", cfgPath, "device", "show", attacker)
	if !strings.Contains(out, "serial conflict") || !strings.Contains(out, victim) || strings.Contains(out, "serial       VICTIM01") {
		t.Errorf("device show of the claimant:\n%s", out)
	}
}
