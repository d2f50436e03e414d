package joiner

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/ztp/endpoints"
)

// refusals are the enrollment.refused events stored, oldest first.
func (e *env) refusals() []core.Event {
	e.t.Helper()
	var out []core.Event
	err := e.store.View(func(tx core.Tx) error {
		return tx.Events().List(core.StreamOf(EnrollmentRefused), 0, func(ev core.Event) (bool, error) {
			if ev.Type == EnrollmentRefused {
				out = append(out, ev)
			}
			return true, nil
		})
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// TestEnrollmentBoundToAddress: the secret a switch's ztp.json carries is
// bound to the address it was fetched from and the switch's MAC. From
// another address, a second time, or late it is refused, each with an
// audit event naming the reason on the device it was issued to; a switch
// that asks again within the reissue window gets a fresh one that works.
func TestEnrollmentBoundToAddress(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll, BaseURL: "http://10.99.0.1:8080", EnrollmentTTL: 10 * time.Minute})
	e.cluster(clusterSpec{Name: "fabric", Size: 4})
	e.must(e.join("fabric", 1)) // the first control plane: switches join after it
	if !core.IsAudit(EnrollmentRefused) {
		t.Fatal("enrollment.refused is not in the audit trail")
	}
	sw := core.Device{ID: mac(7), MAC: mac(7), Kind: core.KindSONiC, Serial: "SN-7", IP: e.hold(addrOf(7), mac(7))}
	section := func() string {
		t.Helper()
		sec, err := e.svc.ZTPSection(bg, sw, "fabric", "leaf-7")
		if err != nil {
			t.Fatal(err)
		}
		return sec["enrollment"].(string)
	}
	secret := section()
	csr := switchCSR(t)

	// From another address, even one leased to the same MAC's claim.
	other := e.hold(addrOf(8), mac(8))
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: secret, MAC: sw.MAC, Serial: sw.Serial, Kind: core.KindSONiC, RemoteIP: other, CSR: csr}); !errors.Is(err, ErrEnrollmentAddress) {
		t.Fatalf("from another address: %v", err)
	}
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: secret, MAC: sw.MAC, Kind: core.KindSONiC, RemoteIP: "10.99.200.200", CSR: csr}); !errors.Is(err, ErrEnrollmentAddress) {
		t.Fatalf("from an address nobody holds: %v", err)
	}
	// The refusals did not use it up: from its address it works.
	b := e.must(e.svc.Join(bg, JoinRequest{Enrollment: secret, MAC: sw.MAC, Serial: sw.Serial, Kind: core.KindSONiC, RemoteIP: sw.IP, CSR: csr}))
	if b.Device != sw.ID {
		t.Fatalf("bundle for %s", b.Device)
	}
	// A second time, from its own address: replayed.
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: secret, MAC: sw.MAC, Serial: sw.Serial, Kind: core.KindSONiC, RemoteIP: sw.IP, CSR: csr}); !errors.Is(err, ErrEnrollmentUsed) {
		t.Fatalf("second use: %v", err)
	}
	// Within the reissue window the switch fetching its ztp.json again
	// gets a fresh secret, which is bound and works like the first.
	fresh := section()
	if fresh == secret {
		t.Fatal("the re-fetched section carries the used secret")
	}
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: fresh, MAC: sw.MAC, Serial: sw.Serial, Kind: core.KindSONiC, RemoteIP: other, CSR: csr}); !errors.Is(err, ErrEnrollmentAddress) {
		t.Fatalf("fresh secret from another address: %v", err)
	}
	e.must(e.svc.Join(bg, JoinRequest{Enrollment: fresh, MAC: sw.MAC, Serial: sw.Serial, Kind: core.KindSONiC, RemoteIP: sw.IP, CSR: csr}))

	// Expired.
	sw2 := core.Device{ID: mac(9), MAC: mac(9), Kind: core.KindSONiC, Serial: "SN-9", IP: e.hold(addrOf(9), mac(9))}
	sec2, err := e.svc.ZTPSection(bg, sw2, "fabric", "leaf-9")
	if err != nil {
		t.Fatal(err)
	}
	e.clk.add(10 * time.Minute)
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: sec2["enrollment"].(string), MAC: sw2.MAC, Kind: core.KindSONiC, RemoteIP: sw2.IP, CSR: csr}); !errors.Is(err, ErrEnrollmentExpired) {
		t.Fatalf("expired: %v", err)
	}
	// A secret nobody issued names no device: refused, not stored.
	if _, err := e.svc.Join(bg, JoinRequest{Enrollment: "abcdef.0123456789abcdef", MAC: sw.MAC, RemoteIP: sw.IP}); !errors.Is(err, ErrEnrollmentInvalid) {
		t.Fatalf("made-up secret: %v", err)
	}

	want := []struct{ device, reason, remote string }{
		{sw.ID, RefusalWrongAddress, other}, {sw.ID, RefusalWrongAddress, "10.99.200.200"},
		{sw.ID, RefusalReplayed, sw.IP}, {sw.ID, RefusalWrongAddress, other}, {sw2.ID, RefusalExpired, sw2.IP},
	}
	got := e.refusals()
	if len(got) != len(want) {
		t.Fatalf("%d enrollment.refused events, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		ev := got[i]
		if ev.Device != w.device || ev.Fields["reason"] != w.reason || ev.Fields["remote"] != w.remote || ev.Cluster == "" {
			t.Errorf("event %d: %s %v, want %s reason %s from %s", i, ev.Device, ev.Fields, w.device, w.reason, w.remote)
		}
	}
	if got[0].Fields["bound_to"] != sw.IP {
		t.Errorf("event names the bound address %q, want %s", got[0].Fields["bound_to"], sw.IP)
	}
}

// TestEnrollmentRefusalsAreBounded: replaying one secret over and over
// stores a few events, then one every while with the count suppressed.
func TestEnrollmentRefusalsAreBounded(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll, BaseURL: "http://10.99.0.1:8080"})
	e.cluster(clusterSpec{Name: "fabric", Size: 4})
	sw := core.Device{ID: mac(7), MAC: mac(7), Kind: core.KindSONiC, IP: e.hold(addrOf(7), mac(7))}
	sec, err := e.svc.ZTPSection(bg, sw, "fabric", "leaf-7")
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		e.svc.Join(bg, JoinRequest{Enrollment: sec["enrollment"].(string), MAC: sw.MAC, Kind: core.KindSONiC, RemoteIP: "10.99.200.1", CSR: switchCSR(t)})
	}
	if n := len(e.refusals()); n != 3 {
		t.Fatalf("%d events for 50 replays, want 3 (the burst)", n)
	}
	e.clk.add(refusalLogEvery)
	e.svc.Join(bg, JoinRequest{Enrollment: sec["enrollment"].(string), MAC: sw.MAC, Kind: core.KindSONiC, RemoteIP: "10.99.200.1", CSR: switchCSR(t)})
	got := e.refusals()
	if len(got) != 4 || got[3].Fields["suppressed"] != "47" {
		t.Fatalf("after the interval: %d events, last %v", len(got), got[len(got)-1].Fields)
	}
}

// TestSectionNamesTheTLSListener: with the device HTTPS listener, the
// section's join-url is on it and the section carries the pins; without,
// join-url stays plain and there is no pin.
func TestSectionNamesTheTLSListener(t *testing.T) {
	pins := "sha256//47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=;sha256//uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek="
	e := newEnv(t, Options{AutoApprove: approveAll, BaseURL: "http://10.99.0.1:8080", SecureBaseURL: func() string { return "https://10.99.0.1/" },
		DevicePins: func() string { return pins }})
	e.cluster(clusterSpec{Name: "fabric", Size: 4})
	// The first control plane, a VM: it reads its join data over the
	// pinned listener, so it reports there too.
	vm := e.must(e.join("fabric", 1)).Deliver()
	if vm.ReportURL != "https://10.99.0.1/join/report" || vm.ReportPin != pins {
		t.Fatalf("a VM's report: %q pinned to %q", vm.ReportURL, vm.ReportPin)
	}
	sw := core.Device{ID: mac(7), MAC: mac(7), Kind: core.KindSONiC, IP: e.hold(addrOf(7), mac(7))}
	sec, err := e.svc.ZTPSection(bg, sw, "fabric", "leaf-7")
	if err != nil {
		t.Fatal(err)
	}
	if sec["join-url"] != "https://10.99.0.1/join" || sec["tls-pin"] != pins {
		t.Fatalf("section %v", sec)
	}
	// The switch's join answer (fetched over the pinned listener) sends
	// its report there too, with the pins for its client to check.
	b := e.must(e.svc.Join(bg, JoinRequest{Enrollment: sec["enrollment"].(string), MAC: sw.MAC, Kind: core.KindSONiC, RemoteIP: sw.IP, CSR: switchCSR(t)}))
	delivery := b.Deliver()
	raw, err := delivery.AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	var d Delivery
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if d.ReportURL != "https://10.99.0.1/join/report" || d.ReportPin != pins || d.ReportToken == "" {
		t.Fatalf("a switch's report: %q pinned to %q", d.ReportURL, d.ReportPin)
	}
	if sec["plugin"].(map[string]any)["url"] != "http://10.99.0.1:8080"+PluginPath {
		t.Fatalf("plugin %v: the plugin itself is no secret and stays where SONiC ZTP fetches it", sec["plugin"])
	}

	plain := newEnv(t, Options{AutoApprove: approveAll, BaseURL: "http://10.99.0.1:8080"})
	plain.cluster(clusterSpec{Name: "fabric", Size: 4})
	sw.IP = plain.hold(addrOf(7), mac(7))
	sec, err = plain.svc.ZTPSection(bg, sw, "fabric", "leaf-7")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := sec["tls-pin"]; ok || sec["join-url"] != "http://10.99.0.1:8080/join" {
		t.Fatalf("plain section %v", sec)
	}
}

// TestSectionInTheDeviceFamily: with BasesFor, a dual-stack appliance's
// section and report URL are in the family the device's request came in
// on; a request of unknown family keeps the configured bases.
func TestSectionInTheDeviceFamily(t *testing.T) {
	ep, err := endpoints.New("10.99.0.1", "[::]:8080")
	if err == nil {
		ep, err = ep.WithAdvertise6("fd99::1")
	}
	if err != nil {
		t.Fatal(err)
	}
	bases := func(ctx context.Context) (string, string) {
		l := endpoints.Local(ctx)
		if !l.IsValid() {
			return "", ""
		}
		return ep.Base(l), ep.SecureBase(l)
	}
	e := newEnv(t, Options{AutoApprove: approveAll, BaseURL: ep.Join(), BasesFor: bases})
	e.cluster(clusterSpec{Name: "fabric", Size: 4})
	sw := core.Device{ID: mac(7), MAC: mac(7), Kind: core.KindSONiC, IP: e.hold(addrOf(7), mac(7))}
	for _, c := range []struct {
		local string
		want  string
	}{{"fd99::1", "http://[fd99::1]:8080"}, {"10.99.0.1", "http://10.99.0.1:8080"}, {"", "http://10.99.0.1:8080"}} {
		ctx := bg
		if c.local != "" {
			ctx = endpoints.WithLocal(bg, netip.MustParseAddr(c.local))
		}
		sec, err := e.svc.ZTPSection(ctx, sw, "fabric", "leaf-7")
		if err != nil {
			t.Fatal(err)
		}
		if sec["join-url"] != c.want+"/join" || sec["plugin"].(map[string]any)["url"] != c.want+PluginPath {
			t.Errorf("over %q: join-url %v plugin %v, want %s", c.local, sec["join-url"], sec["plugin"], c.want)
		}
		if _, _, report := e.svc.deviceURLs(ctx); report != c.want+"/join/report" {
			t.Errorf("over %q: report URL %s", c.local, report)
		}
	}
}
