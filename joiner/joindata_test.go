package joiner

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/joiner/bundle"
)

// testPins are two well-formed curl pins (a rotation under way).
const testPins = "sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=;sha256//BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBA="

// joinData is the document JoinData answers.
type joinData struct {
	Role     string          `json:"role"`
	Init     bool            `json:"init"`
	Files    []DeliveredFile `json:"files"`
	Commands []string        `json:"commands"`
}

// TestVMUserDataIsPublicWithTheTLSListener: with the device HTTPS
// listener, a VM's user-data is the same secret-free waiter whether the
// VM is admitted, waits for approval, or its cluster does not exist yet;
// its join data (JoinData) waits while the VM may not join (a wait, 503
// at the door), then carries exactly the files and commands of the
// cloud-config the plain listener would have served, the report going
// to the TLS listener with the pins; once issued and past the reissue
// window it is a state error that names the reset.
func TestVMUserDataIsPublicWithTheTLSListener(t *testing.T) {
	e := newEnv(t, Options{BaseURL: "http://10.99.0.1:8080", SecureBaseURL: func() string { return "https://10.99.0.1:8442" },
		DevicePins: func() string { return testPins }, ReissueWindow: 10 * time.Minute}) // no auto-approval
	m := mac(1)
	ip := e.hold(addrOf(1), m)
	e.store.Update(func(tx core.Tx) error {
		return tx.Devices().Put(core.Device{ID: m, MAC: m, Kind: core.KindVM, IP: ip})
	})
	public := func(when string) []byte {
		t.Helper()
		ud, err := e.svc.UserData(bg, e.device(m), "prod", "", "cp-1")
		if err != nil {
			t.Fatalf("%s: user-data: %v", when, err)
		}
		for _, secret := range []string{"PRIVATE KEY", "BEGIN", "ZTPD_REPORT_TOKEN", "ztpa1.", "token:"} {
			if bytes.Contains(ud, []byte(secret)) {
				t.Fatalf("%s: public user-data carries %q:\n%s", when, secret, ud)
			}
		}
		for _, want := range []string{"https://10.99.0.1:8442" + JoinDataPath, testPins, bundle.JoinWaitScriptPath,
			"systemctl enable --now --no-block " + bundle.JoinWaitUnit, "hostname: cp-1"} {
			if !bytes.Contains(ud, []byte(want)) {
				t.Fatalf("%s: public user-data lacks %q:\n%s", when, want, ud)
			}
		}
		return ud
	}
	before := public("no cluster yet")
	if _, err := e.svc.JoinData(bg, e.device(m), "prod", "", "cp-1", EtcdCSRs{}); core.KindOf(err) != core.KindWaiting || !strings.Contains(err.Error(), "does not exist yet") {
		t.Fatalf("join data before the cluster exists: %v", err)
	}
	e.cluster(clusterSpec{Name: "prod", Size: 2})
	if got := public("waiting for approval"); !bytes.Equal(got, before) {
		t.Fatal("the public user-data changed with the cluster's creation")
	}
	var we *WaitError
	if _, err := e.svc.JoinData(bg, e.device(m), "prod", "", "cp-1", EtcdCSRs{}); !errors.As(err, &we) || core.KindOf(err) != core.KindWaiting {
		t.Fatalf("join data of a VM awaiting approval: %v", err)
	}
	if _, err := e.svc.Approve(bg, m, "prod"); err != nil {
		t.Fatal(err)
	}
	raw, err := e.svc.JoinData(bg, e.device(m), "prod", "", "cp-1", EtcdCSRs{})
	if err != nil {
		t.Fatalf("join data once approved: %v", err)
	}
	var jd joinData
	if err := json.Unmarshal(raw, &jd); err != nil {
		t.Fatalf("join data is not JSON: %v\n%.300s", err, raw)
	}
	if !jd.Init || len(jd.Commands) == 0 {
		t.Fatalf("join data of the first control plane: init %v, commands %q", jd.Init, jd.Commands)
	}
	files := map[string]DeliveredFile{}
	for _, f := range jd.Files {
		files[f.Path] = f
	}
	if k := files["/etc/kubernetes/pki/ca.key"]; k.Mode != "0600" || !strings.Contains(k.Content, "PRIVATE KEY") {
		t.Fatalf("the first control plane's CA key: %+v", k)
	}
	env := files["/etc/ztpd/report.env"].Content
	if !strings.Contains(env, "ZTPD_REPORT_URL='https://10.99.0.1:8442/join/report'") || !strings.Contains(env, "ZTPD_REPORT_PIN='"+testPins+"'") {
		t.Fatalf("report.env of a VM with the TLS listener:\n%s", env)
	}
	// What the cloud-config would write and run (bundle.Node renders
	// both; TestNodeRenderings checks they agree).
	for _, p := range []string{"/etc/kubernetes/pki/ca.crt", bundle.KubeadmConfigPath, "/opt/bin/setup-kube-system", "/opt/bin/deploy-kube-system",
		"/etc/systemd/system/deploy-kube-system.service", "/etc/ztpd/manifests/sonic-rbac.yaml"} {
		if files[p].Content == "" {
			t.Fatalf("join data lacks %s: %d files", p, len(jd.Files))
		}
	}
	if !slices.Contains(jd.Commands, "systemctl start deploy-kube-system") {
		t.Fatalf("join data commands %q", jd.Commands)
	}

	// A retry within the reissue window (an answer lost) is answered
	// again; past it, a state error naming the reset.
	e.clk.add(5 * time.Minute)
	if _, err := e.svc.JoinData(bg, e.device(m), "prod", "", "cp-1", EtcdCSRs{}); err != nil {
		t.Fatalf("a retry within the window: %v", err)
	}
	e.clk.add(6 * time.Minute)
	_, err = e.svc.JoinData(bg, e.device(m), "prod", "", "cp-1", EtcdCSRs{})
	if core.KindOf(err) != core.KindState || !errors.Is(err, ErrJoinDataIssued) || !strings.Contains(err.Error(), "ztpd device reset "+m) {
		t.Fatalf("join data past the window: %v", err)
	}
	public("after issue")
}

// TestVMUserDataWithoutTheTLSListener: the operator turned the listener
// off: the user-data is the cloud-config with the join, as before, and
// there is no join data to fetch.
func TestVMUserDataWithoutTheTLSListener(t *testing.T) {
	e := newEnv(t, Options{AutoApprove: approveAll, BaseURL: "http://10.99.0.1:8080"})
	e.cluster(clusterSpec{Name: "prod", Size: 2})
	m := mac(1)
	ip := e.hold(addrOf(1), m)
	e.store.Update(func(tx core.Tx) error {
		return tx.Devices().Put(core.Device{ID: m, MAC: m, Kind: core.KindVM, IP: ip})
	})
	ud, err := e.svc.UserData(bg, e.device(m), "prod", "", "cp-1")
	if err != nil || !bytes.Contains(ud, []byte("/etc/kubernetes/pki/ca.key")) || bytes.Contains(ud, []byte(bundle.JoinWaitUnit)) ||
		!bytes.Contains(ud, []byte("ZTPD_REPORT_URL='http://10.99.0.1:8080/join/report'")) || bytes.Contains(ud, []byte("ZTPD_REPORT_PIN=")) {
		t.Fatalf("user-data without the listener: %v\n%.400s", err, ud)
	}
}
