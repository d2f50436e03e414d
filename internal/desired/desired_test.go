package desired

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// credentialIsDevice: the test agents' credential is their device ID.
type credentialIsDevice struct{}

func (credentialIsDevice) AuthenticateAgent(_ context.Context, cred string, _ netip.Addr) (string, error) {
	return cred, nil
}

// TestPollSeconds: the agent document tells a device FastPoll picks to
// poll every FastPollInterval (5 s by default) and every other device
// PollInterval; a fast interval that is not shorter changes nothing.
func TestPollSeconds(t *testing.T) {
	const busy, idle = "02:00:00:00:00:01", "02:00:00:00:00:02"
	f := storetest.Open(t)
	storetest.Update(t, f.Store, func(tx core.Tx) error {
		for _, id := range []string{busy, idle} {
			if err := tx.Devices().Put(core.Device{ID: id, MAC: id, Kind: core.KindVM, State: core.StateJoined}); err != nil {
				return err
			}
		}
		return nil
	})
	asked := map[string]int{}
	inRollout := func(device string) bool { asked[device]++; return device == busy }
	isNext := func(device string) bool { return device == busy }
	for _, c := range []struct {
		name       string
		opts       Options
		busy, idle int
	}{
		{"next in a rollout", Options{FastPoll: inRollout, NextPoll: isNext}, 1, 60},
		{"next, configured", Options{FastPoll: inRollout, NextPoll: isNext, NextPollInterval: 2 * time.Second}, 2, 60},
		{"next interval not shorter", Options{FastPoll: inRollout, NextPoll: isNext, PollInterval: time.Second}, 1, 1},
		{"defaults", Options{FastPoll: inRollout}, 5, 60},
		{"no FastPoll", Options{}, 60, 60},
		{"configured", Options{FastPoll: inRollout, PollInterval: 90 * time.Second, FastPollInterval: 2 * time.Second}, 2, 90},
		{"sub-second fast interval", Options{FastPoll: inRollout, FastPollInterval: 300 * time.Millisecond}, 1, 60},
		{"fast interval not shorter", Options{FastPoll: inRollout, PollInterval: 3 * time.Second}, 3, 3},
	} {
		opts := c.opts
		opts.Auth = credentialIsDevice{}
		s := New(f.Store, opts)
		for device, want := range map[string]int{busy: c.busy, idle: c.idle} {
			doc, err := s.AgentDocument(context.Background(), device, netip.MustParseAddr("10.99.0.10"))
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if doc.PollSeconds != want {
				t.Errorf("%s: poll_seconds of %s = %d, want %d", c.name, device, doc.PollSeconds, want)
			}
		}
	}
	if asked[busy] == 0 || asked[idle] == 0 {
		t.Fatalf("FastPoll asked %v, want both devices", asked)
	}
}
