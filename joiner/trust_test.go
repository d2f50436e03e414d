package joiner

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/joiner/tokens"
)

// TestUserDataGivesKeyMaterialOnce: the first control plane's user-data
// carries the cluster CA key; a second fetch from the same address (any
// pod SNAT'ed to the node could make it) gets a cloud-config without key
// material, and so does every later one, until an operator resets the
// device: whoever fetches second must not get the cluster's CA key.
func TestUserDataGivesKeyMaterialOnce(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll})
	e.cluster(clusterSpec{Name: "prod", Size: 2})
	m := mac(1)
	ip := e.hold(addrOf(1), m)
	e.store.Update(func(tx core.Tx) error {
		return tx.Devices().Put(core.Device{ID: m, MAC: m, Kind: core.KindVM, IP: ip})
	})
	dev := e.device(m)
	first, err := e.svc.UserData(bg, dev, "prod", "", "cp-1")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(first, []byte("PRIVATE KEY")) || !bytes.Contains(first, []byte("/etc/kubernetes/pki/ca.key")) {
		t.Fatalf("first control plane's user-data has no CA key:\n%s", first)
	}
	for i := range 3 {
		again, err := e.svc.UserData(bg, dev, "prod", "", "cp-1")
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(again, []byte("PRIVATE KEY")) || bytes.Contains(again, []byte("token")) || bytes.Contains(again, []byte("BEGIN")) {
			t.Fatalf("fetch %d after the bundle was served carries key material:\n%s", i+2, again)
		}
		if !bytes.Contains(again, []byte("ztpd device reset")) || !bytes.HasPrefix(again, []byte("#cloud-config\n")) {
			t.Fatalf("fetch %d: %s", i+2, again)
		}
	}
	ms, _ := e.svc.Membership(bg, m)
	if len(ms.History) != 1 {
		t.Fatalf("history grew with refused fetches: %+v", ms.History)
	}
	// After an operator's reset, once more: a re-install.
	if _, err := e.svc.ResetDevice(bg, m); err != nil {
		t.Fatal(err)
	}
	if d := e.device(m); d.State != core.StateLeased || d.Role != "" {
		t.Fatalf("device after reset: %+v", d)
	}
	again, err := e.svc.UserData(bg, e.device(m), "prod", "", "cp-1")
	if err != nil || !bytes.Contains(again, []byte("PRIVATE KEY")) {
		t.Fatalf("after reset: %v\n%s", err, again)
	}
	if ms, _ = e.svc.Membership(bg, m); ms.State != core.StateJoinIssued {
		t.Fatalf("membership after re-install: %+v", ms)
	}
}

// TestJoinRetryWindow: a switch may retry its join (same bundle role)
// within the reissue window while it has not reported joined; then never.
func TestJoinRetryWindow(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll, ReportURL: "http://10.99.0.1:8080/join/report", ReissueWindow: 10 * time.Minute})
	e.cluster(clusterSpec{Name: "prod", Size: 4})
	e.must(e.join("prod", 1)) // first control plane
	m := mac(2)
	ip := e.hold(addrOf(2), m)
	joinOnce := func() (*Bundle, error) {
		return e.svc.Join(bg, JoinRequest{Enrollment: e.enroll("prod", m, ""), MAC: m, RemoteIP: ip})
	}
	b := e.must(joinOnce())
	e.clk.add(5 * time.Minute)
	b2 := e.must(joinOnce()) // a retry within the window
	if b2.Role != b.Role {
		t.Fatalf("retry changed role %s -> %s", b.Role, b2.Role)
	}
	e.clk.add(6 * time.Minute)
	if _, err := joinOnce(); !errors.Is(err, ErrAlreadyIssued) || !strings.Contains(err.Error(), "device reset") {
		t.Fatalf("retry after the window: %v", err)
	}
	if ok, reason, err := e.svc.Issuable(bg, m, "prod", false); ok || err != nil || !strings.Contains(reason, "retry window") {
		t.Fatalf("Issuable after the window: %v %q %v", ok, reason, err)
	}
	// Joined: never again, even within a fresh window.
	if _, err := e.svc.ResetDevice(bg, m); err != nil {
		t.Fatal(err)
	}
	b3 := e.must(joinOnce())
	e.nodeReady(b3, "True")
	if _, err := joinOnce(); !errors.Is(err, ErrAlreadyIssued) || !strings.Contains(err.Error(), "registered Node") {
		t.Fatalf("join after joined: %v", err)
	}
	// The reset revoked the first bundle's report credential.
	if _, err := e.svc.Report(bg, b2.ReportToken(), at(2), ReportJoined, ""); !errors.Is(err, ErrReportInvalid) {
		t.Fatalf("report with a credential from before the reset: %v", err)
	}
}

// TestEnrollmentSecretsDoNotPileUp: every ztp.json fetch makes a new
// enrollment secret for its switch; the previous unused one goes, so a
// device re-fetching all day keeps one live secret and one record.
func TestEnrollmentSecretsDoNotPileUp(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll, BaseURL: "http://10.99.0.1:8080"})
	e.cluster(clusterSpec{Name: "fabric", Size: 4})
	sw := core.Device{ID: mac(7), MAC: mac(7), Kind: core.KindSONiC, Serial: "SN-7"}
	var last string
	for range 50 {
		sec, err := e.svc.ZTPSection(bg, sw, "fabric", "leaf-7")
		if err != nil {
			t.Fatal(err)
		}
		last = sec["enrollment"].(string)
	}
	n := 0
	e.store.View(func(tx core.Tx) error {
		return tx.Tokens().ListKind(string(tokens.KindEnrollment), func(core.Token) (bool, error) {
			n++
			return true, nil
		})
	})
	if n != 1 {
		t.Fatalf("%d enrollment records after 50 fetches, want 1", n)
	}
	ip := e.hold(addrOf(7), sw.MAC)
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: last, Serial: "SN-7", RemoteIP: ip}); err != nil {
		var we *WaitError
		if !errors.As(err, &we) {
			t.Fatalf("the newest secret: %v", err)
		}
	}
}

// TestHistoryIsBounded: a membership's history keeps its first entry and
// the newest ones, however often a device waits and retries.
func TestHistoryIsBounded(t *testing.T) {
	e := newEnv(t, Options{})
	e.cluster(clusterSpec{Name: "prod", Size: 1})
	m := mac(3)
	ip := e.hold(addrOf(3), m)
	for i := range 100 {
		// Alternate the wait reason so every attempt is a transition.
		if i%2 == 1 {
			e.store.Update(func(tx core.Tx) error {
				mm, err := tx.Memberships().Get(m)
				if err != nil {
					return err
				}
				mm.WaitReason = "x"
				return tx.Memberships().Put(mm)
			})
		}
		if _, err := e.svc.Join(bg, JoinRequest{Enrollment: e.enroll("prod", m, ""), MAC: m, RemoteIP: ip}); err == nil {
			t.Fatal("admitted without approval")
		}
	}
	ms, _ := e.svc.Membership(bg, m)
	if len(ms.History) != maxHistory || ms.History[0].State != core.StateWaiting {
		t.Fatalf("history of %d entries", len(ms.History))
	}
}

// TestSwitchJoiningBeforeItsRecord: DHCP and the content service write
// device records behind, so a fast switch can join before its record
// exists; the kind its request states then decides the method (it found
// a boot storm's switches admitted as VMs when a new record defaulted to
// vm).
func TestSwitchJoiningBeforeItsRecord(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll})
	e.cluster(clusterSpec{Name: "fabric", Size: 4})
	e.must(e.join("fabric", 1)) // the first control plane, so switches may join
	m := mac(9)
	ip := e.hold(addrOf(9), m)
	b := e.must(e.svc.Join(bg, JoinRequest{Enrollment: e.enroll("fabric", m, "SN-9"), MAC: m, Serial: "SN-9", Kind: core.KindSONiC, RemoteIP: ip, CSR: switchCSR(t)}))
	if b.Method != MethodSONiC || b.SONiC == nil || b.CloudConfig != nil {
		t.Fatalf("switch without a record joined by %s", b.Method)
	}
	if d := e.device(m); d.Kind != core.KindSONiC || d.Serial != "SN-9" {
		t.Fatalf("record made by the join: %+v", d)
	}
}
