package ztphttp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

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

// TestRefusalsAnswerThroughTheOneErrorWriter: every refusal keeps its
// status (403 no holder, 403 another device's config, 404 no such image,
// 403 unsafe path) and answers in httpserve's one error shape with the
// core kind as code; a served document still answers 200.
func TestRefusalsAnswerThroughTheOneErrorWriter(t *testing.T) {
	f := storetest.Open(t)
	devs := devices.New(devices.Options{Store: f.Store})
	t.Cleanup(func() { devs.Close() })
	ims, err := imagestore.Open(f.Store, f.Dir)
	if err != nil {
		t.Fatal(err)
	}
	ims.Add(context.Background(), strings.NewReader("img"), imagestore.Meta{Name: "sonic-broadcom-202405.1.bin", Kind: "sonic-installer", Version: "202405.1"}, "")
	storetest.Update(t, f.Store, func(tx core.Tx) error {
		if err := tx.Leases().Put(core.Lease{IP: "10.99.40.10", MAC: "52:54:00:40:00:10", State: core.LeaseActive}); err != nil {
			return err
		}
		return tx.Devices().Put(core.Device{ID: "52:54:00:40:00:10", MAC: "52:54:00:40:00:10", Kind: core.KindSONiC,
			Serial: "LEAF0010", IP: "10.99.40.10", State: core.StateLeased})
	})
	ep, _ := endpoints.New("10.99.40.1", "10.99.40.1:8080")
	svc, err := content.New(content.Options{Store: f.Store, Devices: devs, Images: ims, Endpoints: ep, FilesDir: filepath.Join(f.Dir, "files")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	set, err := profile.Load([]string{"../../examples/profiles"})
	if err != nil {
		t.Fatal(err)
	}
	svc.SetProfiles(set)
	mux := http.NewServeMux()
	ztphttp.New(svc, nil, ztphttp.FrontDoor{}, nil).Register(mux)
	for _, c := range []struct {
		from, path string
		code       int
		kind       string
	}{
		{"10.99.40.99", "/ztp/ztp.json", 403, "refused"},
		{"10.99.40.99", "/ztp/config/52:54:00:40:00:10/config_db.json", 403, "refused"},
		{"10.99.40.10", "/images/nope", 404, "not_found"},
		{"10.99.40.10", "/files/..%2f..%2fetc%2fpasswd", 403, "refused"},
	} {
		req := httptest.NewRequest("GET", c.path, nil)
		req.RemoteAddr = c.from + ":40000"
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		var body httpserve.ErrorBody
		if rec.Code != c.code || json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Error.Code != c.kind || body.Error.Message == "" {
			t.Errorf("%s from %s: %d %s, want %d %s", c.path, c.from, rec.Code, rec.Body, c.code, c.kind)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: content type %q", c.path, ct)
		}
	}
	req := httptest.NewRequest("GET", "/ztp/ztp.json", nil)
	req.RemoteAddr = "10.99.40.10:40000"
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "http://10.99.40.1:8080/") {
		t.Fatalf("holder's ztp.json: %d %s", rec.Code, rec.Body)
	}
}
