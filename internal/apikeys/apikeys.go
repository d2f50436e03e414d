// Package apikeys manages API credentials: a public API key plus a secret key,
// with a role (admin or user).
//
// Why the secret is not only hashed: CloudStack request signing is
// HMAC-SHA1(secret, request). To verify an HMAC the server must compute it,
// so it needs the secret itself; a hash cannot be turned back into the key.
// (CloudStack stores secret keys encrypted in its database for the same
// reason.) So every record keeps
//   - the secret sealed with AES-256-GCM under a key file outside the store
//     (a stolen backup of the store alone reveals no secret), bound to its
//     API key so a sealed blob cannot be moved to another record, and
//   - a SHA-256 hash of the secret, the only thing the bearer path (secret
//     presented directly, accepted over TLS only) ever compares against.
//
// Secrets are 256-bit random values, so a plain SHA-256 is as strong as a
// slow password hash here. Secrets are returned once, at creation, and never
// appear in lists, events or logs.
//
// Every key belongs to an account, the tenant that owns what the key
// creates (clusters). Keys of one account see the same clusters, so a key
// can be replaced without losing them. By default an admin key is in the
// account "admin" and a user key in an account of its own, named by its API
// key; keys made for the same team should be given the same account.
package apikeys

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// Role is what a key may do.
type Role string

const (
	// RoleAdmin may do everything, including Kubernetes version management.
	RoleAdmin Role = "admin"
	// RoleUser may manage clusters and read devices, leases, images and events.
	RoleUser Role = "user"
)

// ParseRole validates a role name.
func ParseRole(s string) (Role, error) {
	switch Role(s) {
	case RoleAdmin, RoleUser:
		return Role(s), nil
	}
	return "", core.Errorf(core.KindInvalid, "role %q: use admin or user", s)
}

// ErrUnknownKey means no usable credential has that API key.
var ErrUnknownKey = errors.New("unknown API key")

// Sealer encrypts secrets at rest (internal/secretbox; the joiner's keyring
// has the same methods).
type Sealer interface {
	Seal(plaintext, aad []byte) ([]byte, error)
	Open(sealed, aad []byte) ([]byte, error)
}

// Info describes a key without its secret.
type Info struct {
	APIKey  string    `json:"api_key"`
	Name    string    `json:"name,omitempty"`
	Account string    `json:"account"`
	Role    Role      `json:"role"`
	Created time.Time `json:"created"`
}

// Credential is a verified-lookup result: what the server needs to check a
// signature and authorise the call.
type Credential struct {
	APIKey  string
	Name    string
	Account string
	Role    Role
	Secret  []byte // do not log, do not keep beyond the request
}

// IsAdmin reports whether the credential has the admin role.
func (c Credential) IsAdmin() bool { return c.Role == RoleAdmin }

// Service manages keys in the store. Lookups are cached in memory; every
// change goes through the Service, which keeps the cache exact.
type Service struct {
	st  core.Store
	box Sealer

	mu    sync.RWMutex
	cache map[string]cached
}

type cached struct {
	name    string
	account string
	role    Role
	secret  []byte
	hash    [32]byte
}

// New returns a Service over st, sealing secrets with box.
func New(st core.Store, box Sealer) *Service {
	return &Service{st: st, box: box, cache: map[string]cached{}}
}

var (
	nameRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9 ._@:-]{0,63}$`)
	accountRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)
)

// ValidateAccount checks an account name for a key of role.
func ValidateAccount(account string, role Role) error {
	if !accountRE.MatchString(account) {
		return core.Errorf(core.KindInvalid, "account %q: use up to 64 letters, digits and . _ @ -, starting with a letter or digit", account)
	}
	if role != RoleAdmin && strings.EqualFold(account, core.AdminAccount) {
		return core.Errorf(core.KindInvalid, "account %q is the admin keys' account; a user key needs another", account)
	}
	return nil
}

// accountOf is the account of a stored key: as recorded, else "admin" for
// admin keys and the API key itself for user keys (an account of its own).
func accountOf(r core.APIKey) string {
	switch {
	case r.Account != "":
		return r.Account
	case Role(r.Role) == RoleAdmin:
		return core.AdminAccount
	}
	return r.APIKey
}

// Create makes a key in its role's default account and returns its
// description and its secret. The secret is shown only here.
func (s *Service) Create(name string, role Role) (Info, string, error) {
	return s.CreateInAccount(name, "", role)
}

// CreateInAccount makes a key in account ("" for the role's default).
func (s *Service) CreateInAccount(name, account string, role Role) (Info, string, error) {
	if _, err := ParseRole(string(role)); err != nil {
		return Info{}, "", err
	}
	if name != "" && !nameRE.MatchString(name) {
		return Info{}, "", core.Errorf(core.KindInvalid, "name %q: use up to 64 letters, digits, spaces and . _ @ : -", name)
	}
	if strings.HasPrefix(strings.ToLower(name), "system:") {
		// The name becomes the user of the kubeconfigs the key fetches;
		// system: names are Kubernetes' own identities.
		return Info{}, "", core.Errorf(core.KindInvalid, "name %q: names starting with system: are Kubernetes' own identities", name)
	}
	if account != "" {
		if err := ValidateAccount(account, role); err != nil {
			return Info{}, "", err
		}
	}
	apiKey, err := randomToken(43)
	if err != nil {
		return Info{}, "", err
	}
	secret, err := randomToken(43)
	if err != nil {
		return Info{}, "", err
	}
	sealed, err := s.box.Seal([]byte(secret), aad(apiKey))
	if err != nil {
		return Info{}, "", err
	}
	sum := sha256.Sum256([]byte(secret))
	rec := core.APIKey{APIKey: apiKey, Name: name, Account: account, Role: string(role), SecretSealed: sealed,
		SecretHash: hex.EncodeToString(sum[:]), Created: time.Now().UTC()}
	err = s.st.Update(func(tx core.Tx) error {
		if err := tx.APIKeys().Put(rec); err != nil {
			return err
		}
		_, err := tx.Events().Append(core.Event{Type: "apikey.created",
			Message: fmt.Sprintf("API key %s created with role %s in account %s", apiKey, role, accountOf(rec)),
			Fields:  map[string]string{"api_key": apiKey, "role": string(role), "name": name, "account": accountOf(rec)}})
		return err
	})
	if err != nil {
		return Info{}, "", err
	}
	return infoOf(rec), secret, nil
}

// Count returns how many keys exist.
func (s *Service) Count() (int, error) {
	var n int
	err := s.st.View(func(tx core.Tx) error {
		var err error
		n, err = tx.APIKeys().Count()
		return err
	})
	return n, err
}

// Bootstrap creates a first admin key when the store holds none. created is
// false (and the secret empty) when keys already exist.
func (s *Service) Bootstrap() (info Info, secret string, created bool, err error) {
	var n int
	if err := s.st.View(func(tx core.Tx) error {
		var err error
		n, err = tx.APIKeys().Count()
		return err
	}); err != nil {
		return Info{}, "", false, err
	}
	if n > 0 {
		return Info{}, "", false, nil
	}
	info, secret, err = s.Create("bootstrap-admin", RoleAdmin)
	return info, secret, err == nil, err
}

// List returns every key, oldest first, without secrets.
func (s *Service) List() ([]Info, error) {
	out := []Info{}
	err := s.st.View(func(tx core.Tx) error {
		return tx.APIKeys().List(func(r core.APIKey) (bool, error) {
			out = append(out, infoOf(r))
			return true, nil
		})
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, err
}

// Revoke deletes a key; requests signed with it fail from now on. The last
// admin key cannot be revoked, so the API never locks its operators out.
func (s *Service) Revoke(apiKey string) (Info, error) {
	var rec core.APIKey
	err := s.st.Update(func(tx core.Tx) error {
		var err error
		if rec, err = tx.APIKeys().Get(apiKey); err != nil {
			return err
		}
		if Role(rec.Role) == RoleAdmin {
			admins := 0
			err := tx.APIKeys().List(func(r core.APIKey) (bool, error) {
				if Role(r.Role) == RoleAdmin {
					admins++
				}
				return true, nil
			})
			if err != nil {
				return err
			}
			if admins <= 1 {
				return core.Errorf(core.KindState, "API key %s is the last admin key; create another admin key first", apiKey)
			}
		}
		if err := tx.APIKeys().Delete(apiKey); err != nil {
			return err
		}
		_, err = tx.Events().Append(core.Event{Type: "apikey.revoked",
			Message: fmt.Sprintf("API key %s revoked", apiKey),
			Fields:  map[string]string{"api_key": apiKey, "role": rec.Role}})
		return err
	})
	if err != nil {
		return Info{}, err
	}
	s.mu.Lock()
	if c, ok := s.cache[apiKey]; ok {
		clear(c.secret)
		delete(s.cache, apiKey)
	}
	s.mu.Unlock()
	return infoOf(rec), nil
}

// Lookup returns the credential of apiKey for signature verification.
func (s *Service) Lookup(apiKey string) (Credential, error) {
	c, err := s.load(apiKey)
	if err != nil {
		return Credential{}, err
	}
	return Credential{APIKey: apiKey, Name: c.name, Account: c.account, Role: c.role, Secret: c.secret}, nil
}

// VerifySecret checks a secret presented directly (bearer authentication)
// against the stored hash, in constant time.
func (s *Service) VerifySecret(apiKey, secret string) (Credential, error) {
	c, err := s.load(apiKey)
	if err != nil {
		return Credential{}, err
	}
	sum := sha256.Sum256([]byte(secret))
	if subtle.ConstantTimeCompare(sum[:], c.hash[:]) != 1 {
		return Credential{}, ErrUnknownKey
	}
	return Credential{APIKey: apiKey, Name: c.name, Account: c.account, Role: c.role, Secret: c.secret}, nil
}

func (s *Service) load(apiKey string) (cached, error) {
	s.mu.RLock()
	c, ok := s.cache[apiKey]
	s.mu.RUnlock()
	if ok {
		return c, nil
	}
	if len(apiKey) == 0 || len(apiKey) > 128 {
		return cached{}, ErrUnknownKey
	}
	var rec core.APIKey
	if err := s.st.View(func(tx core.Tx) error {
		var err error
		rec, err = tx.APIKeys().Get(apiKey)
		return err
	}); errors.Is(err, core.ErrNotFound) {
		return cached{}, ErrUnknownKey
	} else if err != nil {
		return cached{}, err
	}
	secret, err := s.box.Open(rec.SecretSealed, aad(apiKey))
	if err != nil {
		return cached{}, fmt.Errorf("API key %s: %w", apiKey, err)
	}
	c = cached{name: rec.Name, account: accountOf(rec), role: Role(rec.Role), secret: secret}
	h, err := hex.DecodeString(rec.SecretHash)
	if err != nil || len(h) != 32 {
		return cached{}, fmt.Errorf("API key %s: corrupt secret hash", apiKey)
	}
	copy(c.hash[:], h)
	s.mu.Lock()
	s.cache[apiKey] = c
	s.mu.Unlock()
	return c, nil
}

func infoOf(r core.APIKey) Info {
	return Info{APIKey: r.APIKey, Name: r.Name, Account: accountOf(r), Role: Role(r.Role), Created: r.Created}
}

func aad(apiKey string) []byte { return []byte("ztpd apikey secret v1\x00" + apiKey) }

const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// randomToken returns n characters drawn uniformly from [A-Za-z0-9]
// (43 characters carry 256 bits). No punctuation: keys never need escaping
// and never look like a command-line flag.
func randomToken(n int) (string, error) {
	out := make([]byte, 0, n)
	buf := make([]byte, 64)
	for len(out) < n {
		if _, err := rand.Read(buf); err != nil {
			return "", err
		}
		for _, b := range buf {
			// 248 = 4*62: rejecting higher bytes keeps the draw uniform.
			if b < 248 && len(out) < n {
				out = append(out, alphabet[b%62])
			}
		}
	}
	return string(out), nil
}
