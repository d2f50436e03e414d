package apikeys

import (
	"errors"
	"strings"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// ErrSignatureSeen: the signature digest is remembered already (the write
// it signed was accepted before). ErrSignaturesFull: the key has as many
// remembered signatures as it may.
var (
	ErrSignatureSeen  = errors.New("signature remembered already")
	ErrSignaturesFull = errors.New("as many signatures remembered for this key as allowed")
)

// RememberedSignaturesSetting is the setting that holds an API key's
// signatures remembered for good: each a fixed-width digest of width
// characters, concatenated. A setting, so it outlives a restart and every
// appliance sharing the store sees it.
func RememberedSignaturesSetting(apiKey string) string { return "api.unversioned_writes." + apiKey }

// RememberSignature records digest (width characters) among apiKey's
// signatures remembered for good, refusing one seen before
// (ErrSignatureSeen) or beyond perKey of them (ErrSignaturesFull): a
// signature that never expires stays valid as long as its key, so it is
// never forgotten.
func (s *Service) RememberSignature(apiKey, digest string, width, perKey int) error {
	name := RememberedSignaturesSetting(apiKey)
	return s.st.Update(func(tx core.Tx) error {
		seen, _, err := tx.Settings().Get(name)
		if err != nil {
			return err
		}
		n := len(seen) / width
		for i := range n {
			if seen[i*width:(i+1)*width] == digest {
				return ErrSignatureSeen
			}
		}
		if n >= perKey {
			return ErrSignaturesFull
		}
		return tx.Settings().Put(name, seen[:n*width]+digest)
	})
}

// RememberedSignatures is how many signatures of width characters apiKey
// has remembered for good.
func (s *Service) RememberedSignatures(apiKey string, width int) (int, error) {
	var n int
	err := s.st.View(func(tx core.Tx) error {
		seen, _, err := tx.Settings().Get(RememberedSignaturesSetting(apiKey))
		n = len(strings.TrimSpace(seen)) / width
		return err
	})
	return n, err
}

// RecordSession appends a console sign-in or sign-out (typ) to the audit
// trail, naming the key and its account (so that a user key sees its own
// sessions) and the client address; never a secret.
func (s *Service) RecordSession(typ, what string, cred Credential, account, client string, now time.Time) error {
	return s.st.Update(func(tx core.Tx) error {
		_, err := tx.Events().Append(core.Event{Time: now.UTC(), Type: typ,
			Message: what + " with API key " + cred.APIKey + " (" + cred.Name + ") from " + client,
			Fields:  map[string]string{"api_key": cred.APIKey, "name": cred.Name, "role": string(cred.Role), "account": account, "client": client}})
		return err
	})
}
