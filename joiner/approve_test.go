package joiner

import (
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
)

// A past bug: device approve for a device whose profile names no cluster was
// accepted and changed nothing, and --cluster nosuch answered "Invalid
// Kubernetes cluster ID". Approve refuses what would change nothing, with
// the reason, and records nothing.
func TestApproveRefusesWhatChangesNothing(t *testing.T) {
	profiles := map[string][2]string{ // serial -> profile, cluster
		"SN-PLAIN": {"plain", ""},
		"SN-PROD":  {"leaf", "prod"},
		"SN-GONE":  {"old", "gone"},
	}
	e := newEnv(t, Options{ProfileOf: func(d core.Device) (string, string, bool) {
		p := profiles[d.Serial]
		return p[0], p[1], true
	}})
	prod := e.cluster(clusterSpec{Name: "prod", Size: 2})
	e.cluster(clusterSpec{Name: "other", Size: 2})
	devs := map[string]string{"SN-PLAIN": mac(1), "SN-PROD": mac(2), "SN-GONE": mac(3), "SN-NONE": mac(4)}
	if err := e.store.Update(func(tx core.Tx) error {
		for serial, m := range devs {
			if err := tx.Devices().Put(core.Device{ID: m, MAC: m, Kind: core.KindSONiC, Serial: serial}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dev, cluster string
		kind         core.ErrorKind
		want         string
	}{
		{mac(1), "", core.KindState, `matches profile "plain", which names no cluster`},
		{mac(1), "prod", core.KindState, `which names no cluster`},
		{mac(3), "", core.KindState, `names cluster "gone", and that cluster does not exist`},
		{mac(4), "", core.KindState, "matches no profile"},
		{mac(2), "other", core.KindState, `it would join prod, not other`},
		{mac(2), "nosuch", core.KindNotFound, `cluster "nosuch" not found`},
		{mac(9), "", core.KindNotFound, "device " + mac(9) + " not found"},
	} {
		_, err := e.svc.Approve(bg, c.dev, c.cluster)
		if err == nil || core.KindOf(err) != c.kind || !strings.Contains(err.Error(), c.want) {
			t.Errorf("approve %s --cluster %q: %v (kind %v), want %v %q", c.dev, c.cluster, err, core.KindOf(err), c.kind, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "Invalid Kubernetes cluster ID") {
			t.Errorf("approve %s --cluster %q says %q", c.dev, c.cluster, err)
		}
	}
	var approved []string
	if err := e.store.View(func(tx core.Tx) error {
		for _, m := range devs {
			d, err := tx.Devices().Get(m)
			if err != nil {
				return err
			}
			if d.Approved || d.Cluster != "" {
				approved = append(approved, m)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(approved) != 0 {
		t.Fatalf("refused approvals changed devices %v", approved)
	}

	// The device whose profile names an existing cluster is approved for it,
	// with or without --cluster naming that cluster.
	d, err := e.svc.Approve(bg, mac(2), "")
	if err != nil || !d.Approved || d.Cluster != prod.ID {
		t.Fatalf("approve of a device of cluster prod: %+v %v", d, err)
	}
	if d, err := e.svc.Approve(bg, "SN-PROD", "prod"); err != nil || !d.Approved {
		t.Fatalf("approve by serial with --cluster prod: %+v %v", d, err)
	}
}

// Without loaded profiles (offline CLI use) approve cannot tell and approves
// as before.
func TestApproveWithoutProfilesApproves(t *testing.T) {
	e := newEnv(t, Options{ProfileOf: func(core.Device) (string, string, bool) { return "", "", false }})
	m := mac(1)
	if err := e.store.Update(func(tx core.Tx) error {
		return tx.Devices().Put(core.Device{ID: m, MAC: m, Kind: core.KindVM})
	}); err != nil {
		t.Fatal(err)
	}
	if d, err := e.svc.Approve(bg, m, ""); err != nil || !d.Approved {
		t.Fatalf("%+v %v", d, err)
	}
}

// A device seen on DHCP only has not yet said the serial a profile may match
// on: pre-approving it is not refused, and it is refused once it has fetched
// and still matches nothing.
func TestApproveBeforeFirstFetchIsAccepted(t *testing.T) {
	e := newEnv(t, Options{ProfileOf: func(core.Device) (string, string, bool) { return "", "", true }})
	early, fetched := mac(1), mac(2)
	if err := e.store.Update(func(tx core.Tx) error {
		if err := tx.Devices().Put(core.Device{ID: early, MAC: early, Kind: core.KindSONiC, State: core.StateLeased}); err != nil {
			return err
		}
		return tx.Devices().Put(core.Device{ID: fetched, MAC: fetched, Kind: core.KindSONiC, State: core.StateZTPServed})
	}); err != nil {
		t.Fatal(err)
	}
	if d, err := e.svc.Approve(bg, early, ""); err != nil || !d.Approved {
		t.Fatalf("pre-approval of a device seen on DHCP only: %+v %v", d, err)
	}
	if _, err := e.svc.Approve(bg, fetched, ""); err == nil || !strings.Contains(err.Error(), "matches no profile") {
		t.Fatalf("approval of a fetched device matching no profile: %v", err)
	}
}
