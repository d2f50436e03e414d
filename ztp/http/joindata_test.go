package ztphttp_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/httpserve"
	"github.com/ztpd/ztpd/internal/profile"
	"github.com/ztpd/ztpd/internal/store/storetest"
	"github.com/ztpd/ztpd/ztp/content"
	"github.com/ztpd/ztpd/ztp/endpoints"
	ztphttp "github.com/ztpd/ztpd/ztp/http"
)

// joinStub answers JoinData with what the test sets and counts the asks.
type joinStub struct {
	body  []byte
	err   error
	asked atomic.Int32
}

func (*joinStub) ZTPSection(context.Context, core.Device, profile.Result) (map[string]any, error) {
	return nil, nil
}
func (*joinStub) KubernetesMaster(context.Context, core.Device, profile.Result) (*content.KubeMaster, error) {
	return nil, nil
}
func (*joinStub) UserData(context.Context, core.Device, profile.Result) ([]byte, error) {
	return []byte("#cloud-config\n"), nil
}
func (j *joinStub) JoinData(_ context.Context, d core.Device, r profile.Result, _ content.EtcdCSRs) ([]byte, error) {
	j.asked.Add(1)
	return j.body, j.err
}

// TestJoinDataOverTLSOnly: a VM's join data is answered on the device
// HTTPS listener only, to the holder of the address it asks from: on
// plain HTTP (the content listener and the metadata one on port 80) it
// is refused with the https URL before anything is looked up; another
// address gets a refusal; a wait is 503 with Retry-After and its reason;
// the data is 200 JSON; data handed out for good is 409 with the reason.
func TestJoinDataOverTLSOnly(t *testing.T) {
	f := storetest.Open(t)
	devs := devices.New(devices.Options{Store: f.Store})
	t.Cleanup(func() { devs.Close() })
	ims, err := imagestore.Open(f.Store, f.Dir)
	if err != nil {
		t.Fatal(err)
	}
	const vm, ip = "1e:00:42:00:00:07", "10.99.42.7"
	storetest.Update(t, f.Store, func(tx core.Tx) error {
		if err := tx.Leases().Put(core.Lease{IP: ip, MAC: vm, Subnet: "vms", State: core.LeaseActive}); err != nil {
			return err
		}
		return tx.Devices().Put(core.Device{ID: vm, MAC: vm, Kind: core.KindVM, Subnet: "vms", IP: ip, State: core.StateLeased})
	})
	ep, _ := endpoints.New("10.99.42.1", "10.99.42.1:8080")
	if ep, err = ep.WithTLS("10.99.42.1:8442"); err != nil {
		t.Fatal(err)
	}
	join := &joinStub{}
	svc, err := content.New(content.Options{Store: f.Store, Devices: devs, Images: ims, Endpoints: ep, Join: join,
		FilesDir: filepath.Join(f.Dir, "files"), DevicePins: func() string { return "sha256//AAAA" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	set, err := profile.Load([]string{"../../examples/profiles"})
	if err != nil {
		t.Fatal(err)
	}
	svc.SetProfiles(set)
	srv := ztphttp.New(svc, nil, ztphttp.FrontDoor{}, nil)
	mux := http.NewServeMux()
	srv.Register(mux)
	get := func(h http.Handler, from string, secure bool) (*httptest.ResponseRecorder, httpserve.ErrorBody) {
		t.Helper()
		req := httptest.NewRequest("GET", endpoints.JoinDataPath, nil)
		req.RemoteAddr = from + ":40000"
		if secure {
			req.TLS = &tls.ConnectionState{HandshakeComplete: true}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var body httpserve.ErrorBody
		json.Unmarshal(rec.Body.Bytes(), &body)
		return rec, body
	}
	join.body = []byte(`{"files":[{"path":"/etc/ztpd/kubeadm.yaml","mode":"0600","content":"secret"}],"commands":["true"]}` + "\n")

	for name, h := range map[string]http.Handler{"content listener": mux, "metadata listener": srv.MetadataHandler()} {
		rec, body := get(h, ip, false)
		if rec.Code != 403 || body.Error.Code != "refused" || !strings.Contains(body.Error.Message, "https://10.99.42.1:8442"+endpoints.JoinDataPath) ||
			strings.Contains(rec.Body.String(), "secret") {
			t.Fatalf("plain HTTP on the %s: %d %s", name, rec.Code, rec.Body)
		}
	}
	if rec, body := get(mux, "10.99.42.99", true); rec.Code != 403 || body.Error.Code != "refused" {
		t.Fatalf("an address nobody holds: %d %s", rec.Code, rec.Body)
	}
	if n := join.asked.Load(); n != 0 {
		t.Fatalf("the joiner was asked %d times for refused requests", n)
	}

	join.err = core.Waiting("waiting for approval of 1e:00:42:00:00:07 (ztpd device approve 1e:00:42:00:00:07)", 7*time.Second)
	rec, body := get(mux, ip, true)
	if rec.Code != 503 || rec.Header().Get("Retry-After") != "7" || body.Error.Code != "waiting" || !strings.Contains(body.Error.Message, "approve") {
		t.Fatalf("waiting: %d Retry-After %q %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}

	join.err = nil
	rec, _ = get(mux, ip, true)
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" || rec.Body.String() != string(join.body) ||
		rec.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("join data: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}

	join.err = &core.Error{Kind: core.KindState, Msg: "the bundle of 1e:00:42:00:00:07 was issued at ...; `ztpd device reset 1e:00:42:00:00:07` allows a new one"}
	rec, body = get(mux, ip, true)
	if rec.Code != 409 || body.Error.Code != "state" || !strings.Contains(body.Error.Message, "ztpd device reset "+vm) {
		t.Fatalf("already issued: %d %s", rec.Code, rec.Body)
	}
}
