package app

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/internal/config"
	"github.com/ztpd/ztpd/internal/core"
)

// previewSecrets are the secret values the profiles below hold: no
// preview may show any of them.
var previewSecrets = []string{"Hunter2-Secret-9", "Comm-Secret-41", "TacPass-Secret-7", "Snmp-Secret-3", "Vm-Secret-5"}

// The leaf profile: a config_db template, extra ztp.json sections with
// secrets, and a cluster to join (the joiner's join section is added at
// serve time, which the preview says).
const previewLeafProfile = `name: leaf
match:
  kind: [sonic]
  product: [Accton-AS7712-32X]
hostname: 'leaf-{{ .Serial | lower }}'
config_db:
  mode: merge
  inline: |
    {"DEVICE_METADATA": {"localhost": {"hostname": "{{ .Hostname }}", "hwsku": "{{ .Product }}"}},
     "TACPLUS": {"global": {"passkey": "TacPass-Secret-7", "timeout": "5"}},
     "SNMP_COMMUNITY": {"Snmp-Secret-3": {"TYPE": "RO"}}}
cluster: fabric
role: worker
sections:
  - name: snmp
    data:
      community-ro: Comm-Secret-41
      snmp-location: rack r1
  - name: users
    data:
      plugin: {url: "http://10.99.40.1/plugins/users"}
      admin_password: Hunter2-Secret-9
      login: admin
`

const previewVMProfile = `name: vms
match:
  kind: vm
hostname: 'worker-{{ .MAC | macHex }}'
vm:
  user_data:
    inline: |
      #cloud-config
      hostname: {{ .Hostname }}
      password: Vm-Secret-5
      chpasswd: {expire: false}
`

// previewResult is GET /api/v1/devices/:id/preview (openapi.json
// DevicePreview).
type previewResult struct {
	Kind      string `json:"kind"`
	Profile   string `json:"profile"`
	Fetches   []struct{ What, URL string }
	Documents []struct {
		Name        string `json:"name"`
		ContentType string `json:"content_type"`
		Body        string `json:"body"`
	} `json:"documents"`
	Notes    []string `json:"notes"`
	Warnings []string `json:"warnings"`
}

func (p previewResult) doc(name string) (string, string, bool) {
	for _, d := range p.Documents {
		if d.Name == name {
			return d.Body, d.ContentType, true
		}
	}
	return "", "", false
}

func (p previewResult) note(sub string) bool {
	for _, n := range p.Notes {
		if strings.Contains(n, sub) {
			return true
		}
	}
	return false
}

// TestDevicePreviewWithLoadedProfiles: the device preview the console
// shows, through the REST route as the local administrator, over the
// profiles ztpd serve loaded (the App's previewer, content.PreviewDevice):
// a SONiC switch its profile matches gets ztp.json and config_db.json
// rendered from it with every secret masked and the join noted; a switch
// no profile matches gets no documents and the reason; a VM gets
// meta-data and user-data.
func TestDevicePreviewWithLoadedProfiles(t *testing.T) {
	dir := t.TempDir()
	leaf, vms := filepath.Join(dir, "leaf.yaml"), filepath.Join(dir, "vms.yaml")
	for f, body := range map[string]string{leaf: previewLeafProfile, vms: previewVMProfile} {
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := config.Default()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.HTTP.Addr = "127.0.0.1:8080"
	cfg.API.AdminKeyFile = filepath.Join(dir, "admin.key") // the first admin key goes there, not to stdout
	cfg.Profiles = []string{leaf, vms}
	a, err := New(cfg, NewLogger(io.Discard, "error", "text"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}

	now := time.Now().UTC()
	devices := []core.Device{
		{ID: "02:00:00:00:01:01", MAC: "02:00:00:00:01:01", Kind: core.KindSONiC, Serial: "ABC123", Product: "Accton-AS7712-32X",
			IP: "10.99.40.11", Subnet: "fabric", State: core.StateLeased, FirstSeen: now, LastSeen: now, UpdatedAt: now},
		{ID: "02:00:00:00:01:02", MAC: "02:00:00:00:01:02", Kind: core.KindSONiC, Serial: "XYZ999", Product: "Dell-S5248F",
			IP: "10.99.40.12", Subnet: "fabric", State: core.StateLeased, FirstSeen: now, LastSeen: now, UpdatedAt: now},
		{ID: "52:54:00:00:00:07", MAC: "52:54:00:00:00:07", Kind: core.KindVM,
			IP: "10.99.42.7", Subnet: "vms", State: core.StateLeased, FirstSeen: now, LastSeen: now, UpdatedAt: now},
	}
	err = a.Store.Update(func(tx core.Tx) error {
		for _, d := range devices {
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Unmasked, the previewer's documents hold every secret: the masking
	// below is what keeps them out.
	var raw []byte
	for _, d := range devices {
		pv, err := profilePreviewer{a}.PreviewDevice(d)
		if err != nil {
			t.Fatal(err)
		}
		raw = append(append(append(raw, pv.ZTPJSON...), pv.ConfigDB...), pv.UserData...)
	}
	for _, s := range previewSecrets {
		if !strings.Contains(string(raw), s) {
			t.Fatalf("the profiles' documents lack %s: the test proves nothing", s)
		}
	}
	preview := func(ref string) previewResult {
		t.Helper()
		w := httptest.NewRecorder()
		a.apiLocal.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/api/v1/devices/"+ref+"/preview", nil))
		if w.Code != http.StatusOK {
			t.Fatalf("preview %s: %d %s", ref, w.Code, w.Body)
		}
		for _, s := range previewSecrets {
			if strings.Contains(w.Body.String(), s) {
				t.Errorf("preview %s shows the secret %s:\n%s", ref, s, w.Body)
			}
		}
		var p previewResult
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
			t.Fatalf("preview %s: %v\n%s", ref, err, w.Body)
		}
		return p
	}

	// The leaf, asked for by serial number as the console may link it.
	p := preview("ABC123")
	if p.Kind != "sonic" || p.Profile != "leaf" || len(p.Warnings) != 0 {
		t.Errorf("leaf: kind %q profile %q warnings %q", p.Kind, p.Profile, p.Warnings)
	}
	ztp, ct, ok := p.doc("ztp.json")
	if !ok || ct != "application/json" {
		t.Fatalf("leaf: no ztp.json document: %+v", p.Documents)
	}
	var ztpDoc map[string]any
	if err := json.Unmarshal([]byte(ztp), &ztpDoc); err != nil {
		t.Fatalf("ztp.json is not JSON: %v\n%s", err, ztp)
	}
	for _, want := range []string{`"02-snmp"`, `"community-ro": "********"`, `"snmp-location": "rack r1"`, `"03-users"`,
		`"admin_password": "********"`, `"login": "admin"`, `"source": "http://127.0.0.1:8080/ztp/config/02:00:00:00:01:01/config_db.json"`} {
		if !strings.Contains(ztp, want) {
			t.Errorf("ztp.json lacks %s:\n%s", want, ztp)
		}
	}
	cdb, ct, ok := p.doc("config_db.json")
	if !ok || ct != "application/json" {
		t.Fatalf("leaf: no config_db.json document: %+v", p.Documents)
	}
	for _, want := range []string{`"hostname": "leaf-abc123"`, `"hwsku": "Accton-AS7712-32X"`, `"passkey": "********"`,
		`"timeout": "5"`, `"SNMP_COMMUNITY": "********"`} {
		if !strings.Contains(cdb, want) {
			t.Errorf("config_db.json lacks %s:\n%s", want, cdb)
		}
	}
	if !p.note(`cluster "fabric" (role worker)`) || !p.note("join section") {
		t.Errorf("leaf: the join is not noted: %q", p.Notes)
	}
	if len(p.Fetches) != 2 || p.Fetches[0].What != "ztp.json" || !strings.HasPrefix(p.Fetches[1].What, "config_db.json (merge)") {
		t.Errorf("leaf fetches: %+v", p.Fetches)
	}

	// A switch no profile matches: what it would get (nothing) and why.
	p = preview("02:00:00:00:01:02")
	if p.Profile != "" || len(p.Documents) != 0 || !p.note("no profile matches this device") ||
		!p.note("profile leaf does not match") || !p.note("profile vms does not match") {
		t.Errorf("unmatched switch: profile %q documents %+v notes %q", p.Profile, p.Documents, p.Notes)
	}
	if len(p.Fetches) != 1 || p.Fetches[0].What != "ztp.json" {
		t.Errorf("unmatched switch fetches: %+v", p.Fetches)
	}

	// The VM: cloud-init's meta-data and user-data.
	p = preview("52:54:00:00:00:07")
	if p.Kind != "vm" || p.Profile != "vms" {
		t.Errorf("vm: kind %q profile %q", p.Kind, p.Profile)
	}
	md, ct, ok := p.doc("meta-data")
	if !ok || ct != "application/json" || !strings.Contains(md, `"local-hostname": "worker-525400000007"`) {
		t.Errorf("vm meta-data (%s): %s", ct, md)
	}
	ud, ct, ok := p.doc("user-data")
	if !ok || ct != "text/plain" || !strings.HasPrefix(ud, "#cloud-config") || !strings.Contains(ud, `hostname: "worker-525400000007"`) ||
		!strings.Contains(ud, "password: ********") {
		t.Errorf("vm user-data (%s):\n%s", ct, ud)
	}

	// A device that is not recorded: 404.
	w := httptest.NewRecorder()
	a.apiLocal.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/api/v1/devices/02:00:00:00:09:09/preview", nil))
	if w.Code != http.StatusNotFound {
		t.Errorf("unknown device: %d %s", w.Code, w.Body)
	}
}
