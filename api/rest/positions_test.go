package rest

import (
	"net/http"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/api/client"
)

// TestPositionsREST: an admin adds, reads, replaces and removes positions
// stored through the API; a plan that would not be valid is refused with
// the reason, in the one error model, and users may read but not change.
func TestPositionsREST(t *testing.T) {
	e := newEnv(t, envOpts{})
	admin := e.rest(e.admin.APIKey, e.adminSec)
	leaf := client.Position{Relay: "10.0.7.1", CircuitID: "Ethernet12", Address: "10.0.7.21", Rack: "7", Port: "Ethernet12",
		Labels: map[string]string{"tier": "leaf"}, Fields: map[string]string{"loopback": "10.255.0.7"}}
	r := admin.Do("PUT", "/api/v1/positions/leaf-07a", leaf)
	if r.Status != http.StatusCreated {
		t.Fatalf("PUT: %d %s", r.Status, r.Raw)
	}
	var got client.Position
	r.Decode(t, &got)
	if got.Name != "leaf-07a" || got.Source != "api" || got.Fields["loopback"] != "10.255.0.7" {
		t.Fatalf("PUT answered %+v", got)
	}
	leaf.Role, leaf.Cluster = "worker", "fabric-2"
	if r := admin.Do("PUT", "/api/v1/positions/leaf-07a", leaf); r.Status != http.StatusOK {
		t.Fatalf("replacing PUT: %d %s", r.Status, r.Raw)
	}
	// Another slot the network cannot tell apart from leaf-07a.
	twin := client.Position{Relay: "10.0.7.1", CircuitID: "Ethernet12"}
	r = admin.Do("PUT", "/api/v1/positions/leaf-07b", twin)
	if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Raw), "cannot tell it apart") || !strings.Contains(string(r.Raw), "leaf-07a") {
		t.Fatalf("indistinguishable PUT: %d %s", r.Status, r.Raw)
	}
	for _, bad := range []client.Position{{Relay: "nowhere"}, {Relay: "10.0.7.1", CircuitID: "\x01"}, {Relay: "10.0.7.1", Name: "other"}} {
		if r := admin.Do("PUT", "/api/v1/positions/leaf-07c", bad); r.Status != http.StatusBadRequest {
			t.Fatalf("PUT %+v: %d %s", bad, r.Status, r.Raw)
		}
	}
	var page client.Page[client.Position]
	admin.Do("GET", "/api/v1/positions", nil).Decode(t, &page)
	if len(page.Items) != 1 || page.Items[0].Cluster != "fabric-2" {
		t.Fatalf("list %+v", page)
	}
	user := e.rest(e.user.APIKey, e.userSec)
	if r := user.Do("GET", "/api/v1/positions/leaf-07a", nil); r.Status != http.StatusOK {
		t.Fatalf("user GET: %d", r.Status)
	}
	if r := user.Do("DELETE", "/api/v1/positions/leaf-07a", nil); r.Status != http.StatusForbidden {
		t.Fatalf("user DELETE: %d", r.Status)
	}
	if r := admin.Do("DELETE", "/api/v1/positions/leaf-07a", nil); r.Status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", r.Status, r.Raw)
	}
	if r := admin.Do("GET", "/api/v1/positions/leaf-07a", nil); r.Status != http.StatusNotFound {
		t.Fatalf("GET after DELETE: %d", r.Status)
	}
	if r := admin.Do("DELETE", "/api/v1/positions/leaf-07a", nil); r.Status != http.StatusNotFound {
		t.Fatalf("second DELETE: %d", r.Status)
	}

	// An import stores all its positions together, or none: one bad item
	// refuses the whole body with every problem.
	batch := client.PositionImport{Items: []client.Position{
		{Name: "leaf-08a", Relay: "10.0.8.1", CircuitID: "Ethernet1"},
		{Name: "leaf-08b", Relay: "10.0.8.1", CircuitID: "Ethernet1"},
		{Name: "leaf-08c", Relay: "10.0.8.1", CircuitID: "Ethernet3", Role: "worker"},
	}}
	r = admin.Do("POST", "/api/v1/positions/import", batch)
	if r.Status != http.StatusBadRequest || !strings.Contains(string(r.Raw), "leaf-08a") || !strings.Contains(string(r.Raw), "role without a cluster") {
		t.Fatalf("bad import: %d %s", r.Status, r.Raw)
	}
	admin.Do("GET", "/api/v1/positions", nil).Decode(t, &page)
	if len(page.Items) != 0 {
		t.Fatalf("a refused import stored %+v", page.Items)
	}
	batch.Items[1].CircuitID, batch.Items[2].Cluster = "Ethernet2", "fabric-2"
	if r := user.Do("POST", "/api/v1/positions/import", batch); r.Status != http.StatusForbidden {
		t.Fatalf("user import: %d", r.Status)
	}
	var imported client.PositionImported
	r = admin.Do("POST", "/api/v1/positions/import", batch)
	r.Decode(t, &imported)
	if r.Status != http.StatusOK || imported.Created != 3 || imported.Replaced != 0 {
		t.Fatalf("import: %d %s", r.Status, r.Raw)
	}
	batch.Items = batch.Items[:1]
	admin.Do("POST", "/api/v1/positions/import", batch).Decode(t, &imported)
	if imported.Created != 0 || imported.Replaced != 1 {
		t.Fatalf("second import: %+v", imported)
	}
	admin.Do("GET", "/api/v1/positions", nil).Decode(t, &page)
	if len(page.Items) != 3 {
		t.Fatalf("after import: %+v", page.Items)
	}
}
