package apikeys

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/storetest"
)

func newService(t *testing.T) (*Service, core.Store, string) {
	t.Helper()
	f := storetest.Open(t)
	return New(f.Store, f.Keys), f.Store, f.Dir
}

func TestCreateLookupVerifyRevoke(t *testing.T) {
	s, st, _ := newService(t)
	admin, adminSecret, err := s.Create("ops", RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	user, userSecret, err := s.Create("", RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	if len(admin.APIKey) != 43 || len(adminSecret) != 43 || admin.APIKey == user.APIKey {
		t.Fatalf("key shapes: %q %q", admin.APIKey, adminSecret)
	}
	c, err := s.Lookup(user.APIKey)
	if err != nil || string(c.Secret) != userSecret || c.Role != RoleUser || c.IsAdmin() {
		t.Fatalf("lookup: %+v %v", c, err)
	}
	if _, err := s.VerifySecret(admin.APIKey, adminSecret); err != nil {
		t.Fatal(err)
	}
	if _, err := s.VerifySecret(admin.APIKey, userSecret); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("wrong secret accepted: %v", err)
	}
	if _, err := s.Lookup("nope"); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("unknown key: %v", err)
	}

	// The store holds neither secret in plain form, and lists never show it.
	var raw bytes.Buffer
	if _, err := st.Backup(&raw); err != nil {
		t.Fatal(err)
	}
	for _, sec := range []string{adminSecret, userSecret} {
		if bytes.Contains(raw.Bytes(), []byte(sec)) {
			t.Fatal("plain secret found in the store file")
		}
	}
	list, err := s.List()
	if err != nil || len(list) != 2 || list[0].APIKey != admin.APIKey {
		t.Fatalf("list: %+v %v", list, err)
	}

	// The only admin cannot be revoked; a user can, and stops working at once
	// (the cache is dropped).
	if _, err := s.Revoke(admin.APIKey); core.KindOf(err) != core.KindState || !strings.Contains(err.Error(), "last admin") {
		t.Fatalf("revoking the last admin: %v", err)
	}
	if _, err := s.Revoke(user.APIKey); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lookup(user.APIKey); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("revoked key still works: %v", err)
	}
	if _, err := s.Revoke(user.APIKey); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("revoke twice: %v", err)
	}
	// Events (audit events, since keys are operator actions) name keys,
	// never secrets.
	seen := 0
	err = st.View(func(tx core.Tx) error {
		for _, stream := range []core.EventStream{core.DeviceEvents, core.AuditEvents} {
			err := tx.Events().List(stream, 0, func(e core.Event) (bool, error) {
				seen++
				v, err := json.Marshal(e)
				if err != nil {
					return false, err
				}
				if bytes.Contains(v, []byte(adminSecret)) || bytes.Contains(v, []byte(userSecret)) {
					t.Fatal("secret in an event")
				}
				return true, nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 3 { // two created, one revoked
		t.Fatalf("%d key events", seen)
	}
}

func TestBootstrapOnlyOnEmptyStore(t *testing.T) {
	s, _, _ := newService(t)
	info, secret, created, err := s.Bootstrap()
	if err != nil || !created || info.Role != RoleAdmin || secret == "" {
		t.Fatalf("bootstrap: %+v %v %v", info, created, err)
	}
	_, secret2, created2, err := s.Bootstrap()
	if err != nil || created2 || secret2 != "" {
		t.Fatalf("second bootstrap created a key: %v %v", created2, err)
	}
}

func TestSealedSecretIsBoundToItsKey(t *testing.T) {
	s, st, _ := newService(t)
	a, _, _ := s.Create("a", RoleAdmin)
	b, _, _ := s.Create("b", RoleUser)
	// Move a's sealed secret into b's record: b must stop working, not
	// authenticate with a's secret.
	err := st.Update(func(tx core.Tx) error {
		ra, err := tx.APIKeys().Get(a.APIKey)
		if err != nil {
			return err
		}
		rb, err := tx.APIKeys().Get(b.APIKey)
		if err != nil {
			return err
		}
		rb.SecretSealed = ra.SecretSealed
		return tx.APIKeys().Put(rb)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lookup(b.APIKey); err == nil {
		t.Fatal("a sealed secret moved to another record opened")
	}
}

func TestCreateValidates(t *testing.T) {
	s, _, _ := newService(t)
	if _, _, err := s.Create("x", Role("root")); core.KindOf(err) != core.KindInvalid {
		t.Fatalf("bad role: %v, want invalid", err)
	}
	if _, _, err := s.Create("bad/name", RoleUser); core.KindOf(err) != core.KindInvalid {
		t.Fatalf("bad name: %v, want invalid", err)
	}
}

// TestAccounts: admin keys default to the admin account, user keys to an
// account of their own; an explicit account is kept and shared; user keys
// cannot join the admin account; system: names are refused.
func TestAccounts(t *testing.T) {
	s, _, _ := newService(t)
	admin, _, _ := s.Create("ops", RoleAdmin)
	u1, _, _ := s.Create("dev", RoleUser)
	u2, _, _ := s.Create("dev", RoleUser)
	if admin.Account != core.AdminAccount || u1.Account != u1.APIKey || u2.Account == u1.Account {
		t.Fatalf("default accounts: admin %q, users %q %q", admin.Account, u1.Account, u2.Account)
	}
	t1, _, err := s.CreateInAccount("ci", "team-a", RoleUser)
	if err != nil {
		t.Fatal(err)
	}
	t2, _, _ := s.CreateInAccount("ci-2", "team-a", RoleUser)
	c1, _ := s.Lookup(t1.APIKey)
	c2, _ := s.Lookup(t2.APIKey)
	if c1.Account != "team-a" || c2.Account != "team-a" || c1.Name != "ci" {
		t.Fatalf("credentials %+v %+v", c1.Account, c2.Account)
	}
	if list, _ := s.List(); len(list) != 5 || list[3].Account != "team-a" {
		t.Fatalf("list %+v", list)
	}
	for _, bad := range []struct{ name, account string }{{"x", "admin"}, {"x", "ADMIN"}, {"x", "a b"}, {"x", "-a"}, {"system:kube-proxy", ""}} {
		if _, _, err := s.CreateInAccount(bad.name, bad.account, RoleUser); err == nil {
			t.Errorf("user key %q in account %q accepted", bad.name, bad.account)
		}
	}
	if a2, _, err := s.CreateInAccount("ops-2", "admin", RoleAdmin); err != nil || a2.Account != "admin" {
		t.Fatalf("second admin key: %v", err)
	}
}
