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
	if r := u.do("GET", "/api/v1/apikeys", nil); r.status != 403 {
		t.Fatalf("user lists keys: %d", r.status)
	}
	if r := u.do("POST", "/api/v1/apikeys", map[string]string{"name": "x", "role": "admin"}); r.status != 403 {
		t.Fatalf("user creates a key: %d", r.status)
	}
	if r := a.do("POST", "/api/v1/apikeys", map[string]string{"name": "ci", "role": "owner"}); r.status != 400 {
		t.Fatalf("bad role: %d %s", r.status, r.raw)
	}
	r := a.do("POST", "/api/v1/apikeys", map[string]string{"name": "ci", "role": "user", "account": "team-a"})
	if r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.raw)
	}
	var nk NewKeyResult
	r.decode(t, &nk)
	if nk.SecretKey == "" || nk.Role != apikeys.RoleUser || nk.Account != "team-a" || nk.Name != "ci" {
		t.Fatalf("new key: %s", r.raw)
	}
	// The new key works, and the list shows it without any secret.
	ci := e.rest(nk.APIKey, nk.SecretKey)
	if r := ci.do("GET", "/api/v1/clusters", nil); r.status != 200 {
		t.Fatalf("new key: %d %s", r.status, r.raw)
	}
	r = a.do("GET", "/api/v1/apikeys", nil)
	var list client.Page[apikeys.Info]
	r.decode(t, &list)
	if r.status != 200 || len(list.Items) != 3 || strings.Contains(string(r.raw), nk.SecretKey) || strings.Contains(string(r.raw), "secret") {
		t.Fatalf("list: %d %s", r.status, r.raw)
	}
	// Revoked: its requests fail from now on.
	if r := a.do("DELETE", "/api/v1/apikeys/"+nk.APIKey, nil); r.status != 200 {
		t.Fatalf("revoke: %d %s", r.status, r.raw)
	}
	if r := ci.do("GET", "/api/v1/clusters", nil); r.status != 401 {
		t.Fatalf("revoked key: %d", r.status)
	}
	time.Sleep(2 * time.Millisecond) // the same write again signs anew
	if r := a.do("DELETE", "/api/v1/apikeys/"+nk.APIKey, nil); r.status != 404 {
		t.Fatalf("revoke again: %d %s", r.status, r.raw)
	}
	// The last admin key stays.
	if r := a.do("DELETE", "/api/v1/apikeys/"+e.admin.APIKey, nil); r.status != 409 {
		t.Fatalf("revoke the last admin key: %d %s", r.status, r.raw)
	}
}
