package client_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/api"
	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

// server is a real API server on a store in a temporary directory, behind
// the guard the application puts in front of it, and an admin key's client
// of it.
func server(t *testing.T) (*client.Client, *failing) {
	t.Helper()
	f := storetest.Open(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	keys := apikeys.New(f.Store, f.Keys)
	cl, err := clusters.New(f.Store, nil, clusters.Options{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	info, secret, err := keys.Create("ops", apikeys.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	st := &failing{Store: f.Store}
	srv := api.New(api.Deps{Log: log, Metrics: prometheus.NewRegistry(), Store: st, Clusters: cl, Keys: keys})
	ts := httptest.NewServer(httpserve.Guard{Listener: "api", HideErrors: true, Log: log,
		ReadByHandler: func(*http.Request) bool { return true }}.Wrap(srv.Handler()))
	t.Cleanup(func() {
		ts.Close()
		cl.Close(context.Background())
	})
	return client.New(ts.URL+"/client/api", info.APIKey, []byte(secret), ts.Client()), st
}

// failing is the server's store, whose reads fail once broken (API keys
// still verify: their service reads the store itself).
type failing struct {
	core.Store
	broken atomic.Bool
}

func (s *failing) View(fn func(core.Tx) error) error {
	if s.broken.Load() {
		return errors.New("the disk is on fire")
	}
	return s.Store.View(fn)
}

func TestListDevicesThroughPages(t *testing.T) {
	c, st := server(t)
	now := time.Now().UTC().Truncate(time.Second)
	macs := []string{"02:00:00:00:00:01", "02:00:00:00:00:02", "02:00:00:00:00:03"}
	err := st.Update(func(tx core.Tx) error {
		for _, mac := range macs {
			d := core.Device{ID: mac, MAC: mac, Kind: core.KindSONiC, State: core.StateDiscovered, Serial: "SN" + mac[len(mac)-2:],
				Labels: map[string]string{"rack": "7"}, FirstSeen: now, LastSeen: now, UpdatedAt: now}
			if err := tx.Devices().Put(d); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	list, err := client.All[client.Device](c, "/api/v1/devices", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(macs) {
		t.Fatalf("%d devices, want %d: %+v", len(list), len(macs), list)
	}
	for i, d := range list {
		if d.MAC != macs[i] || d.Kind != core.KindSONiC || d.Labels["rack"] != "7" || !d.FirstSeen.Equal(now) {
			t.Fatalf("device %d: %+v", i, d)
		}
	}
	// One page of one: All follows next_cursor, max bounds the count.
	two, err := client.All[client.Device](c, "/api/v1/devices", url.Values{"state": {string(core.StateDiscovered)}}, 2)
	if err != nil || len(two) != 2 || two[1].MAC != macs[1] {
		t.Fatalf("max 2: %+v %v", two, err)
	}
}

func TestCloudStackListClustersSigned(t *testing.T) {
	c, _ := server(t)
	var list []client.CSCluster
	if err := c.CSList("listKubernetesClusters", "kubernetescluster", nil, &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Fatalf("clusters on an empty store: %+v", list)
	}
	// A wrong secret is refused with CloudStack's error, decoded.
	bad := client.New(c.BaseURL, c.Key, []byte("not the secret"), c.HTTP)
	err := bad.CSList("listKubernetesClusters", "kubernetescluster", nil, &list)
	var e *client.Error
	if !errors.As(err, &e) || !e.CloudStack() || e.HTTPStatus != http.StatusUnauthorized || e.CSErrorCode != http.StatusUnauthorized || e.Message == "" {
		t.Fatalf("bad signature: %#v (%v)", e, err)
	}
}

func TestRESTErrorCarriesCode(t *testing.T) {
	c, _ := server(t)
	var d client.Device
	err := c.REST("GET", "/api/v1/devices/02:00:00:00:00:99", nil, nil, &d)
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("no *client.Error: %v", err)
	}
	if e.HTTPStatus != http.StatusNotFound || e.Code != "not_found" || e.Message == "" || e.CloudStack() {
		t.Fatalf("error %#v", e)
	}
	if want := e.Message + " (not_found, HTTP 404)"; err.Error() != want {
		t.Fatalf("error text %q, want %q", err.Error(), want)
	}
}

// A server error names the request ID the server logged its detail under.
func TestRESTServerErrorCarriesRequestID(t *testing.T) {
	c, st := server(t)
	st.broken.Store(true)
	_, err := client.All[client.Device](c, "/api/v1/devices", nil, 0)
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("no *client.Error: %v", err)
	}
	if e.HTTPStatus/100 != 5 || e.Code == "" || e.RequestID == "" || e.Message == "" {
		t.Fatalf("error %#v", e)
	}
}
