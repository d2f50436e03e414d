package rest

import (
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/apikeys"
)

func TestRESTAPIKeys(t *testing.T) {
	e := newEnv(t, envOpts{})
	a, u := e.rest(e.admin.APIKey, e.adminSec), e.rest(e.user.APIKey, e.userSec)
	if r := u.Do("GET", "/api/v1/apikeys", nil); r.Status != 403 {
		t.Fatalf("user lists keys: %d", r.Status)
	}
	if r := u.Do("POST", "/api/v1/apikeys", map[string]string{"name": "x", "role": "admin"}); r.Status != 403 {
		t.Fatalf("user creates a key: %d", r.Status)
	}
	if r := a.Do("POST", "/api/v1/apikeys", map[string]string{"name": "ci", "role": "owner"}); r.Status != 400 {
		t.Fatalf("bad role: %d %s", r.Status, r.Raw)
	}
	r := a.Do("POST", "/api/v1/apikeys", map[string]string{"name": "ci", "role": "user", "account": "team-a"})
	if r.Status != 201 {
		t.Fatalf("create: %d %s", r.Status, r.Raw)
	}
	var nk client.NewAPIKey
	r.Decode(t, &nk)
	if nk.SecretKey == "" || nk.Role != string(apikeys.RoleUser) || nk.Account != "team-a" || nk.Name != "ci" {
		t.Fatalf("new key: %s", r.Raw)
	}
	// The new key works, and the list shows it without any secret.
	ci := e.rest(nk.APIKey, nk.SecretKey)
	if r := ci.Do("GET", "/api/v1/clusters", nil); r.Status != 200 {
		t.Fatalf("new key: %d %s", r.Status, r.Raw)
	}
	r = a.Do("GET", "/api/v1/apikeys", nil)
	var list client.Page[client.APIKeyInfo]
	r.Decode(t, &list)
	if r.Status != 200 || len(list.Items) != 3 || strings.Contains(string(r.Raw), nk.SecretKey) || strings.Contains(string(r.Raw), "secret") {
		t.Fatalf("list: %d %s", r.Status, r.Raw)
	}
	// Revoked: its requests fail from now on.
	if r := a.Do("DELETE", "/api/v1/apikeys/"+nk.APIKey, nil); r.Status != 200 {
		t.Fatalf("revoke: %d %s", r.Status, r.Raw)
	}
	if r := ci.Do("GET", "/api/v1/clusters", nil); r.Status != 401 {
		t.Fatalf("revoked key: %d", r.Status)
	}
	time.Sleep(2 * time.Millisecond) // the same write again signs anew
	if r := a.Do("DELETE", "/api/v1/apikeys/"+nk.APIKey, nil); r.Status != 404 {
		t.Fatalf("revoke again: %d %s", r.Status, r.Raw)
	}
	// The last admin key stays.
	if r := a.Do("DELETE", "/api/v1/apikeys/"+e.admin.APIKey, nil); r.Status != 409 {
		t.Fatalf("revoke the last admin key: %d %s", r.Status, r.Raw)
	}
}
