package app

// The at-rest key and the store must belong together: every sealed secret
// (API key secrets, cluster CA keys, token seeds) opens only with the key
// that sealed it. A lost key cannot be replaced by a new one; a new key
// would make every sealed secret unreadable while the server seemed to work
// (every API key a generic 401). So the app opens the store first, counts
// what it holds sealed and with which keys, and only then opens the key:
// it creates one only for a store with nothing sealed.

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/backup"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/secretbox"
)

// KeyFingerprintSetting is the store setting recording the fingerprint of
// the at-rest key its sealed data was sealed with.
const KeyFingerprintSetting = backup.KeyFingerprintSetting

// keyFile is the at-rest key's file: key_file, else <data-dir>/secret.key.
func (a *App) keyFile() string {
	if a.Cfg.KeyFile != "" {
		return a.Cfg.KeyFile
	}
	return filepath.Join(a.Cfg.DataDir, SecretKeyFile)
}

// SealedCensus is what a store holds sealed, and with which keys.
type SealedCensus struct {
	APIKeys int            // API keys (each secret sealed)
	Owners  map[string]int // sealed documents by kind of owner ("cluster")
	KeyIDs  map[string]int // sealed blobs by the id of the key that sealed them
	// Recorded is the key fingerprint the store recorded, if any.
	Recorded string
	// firstAPIKey is an API key whose secret the key check opens for real.
	firstAPIKey string
}

// Total is the number of sealed records.
func (c SealedCensus) Total() int {
	n := c.APIKeys
	for _, v := range c.Owners {
		n += v
	}
	return n
}

// String says what is sealed, for a person: "2 API keys, key material of 1 cluster".
func (c SealedCensus) String() string {
	var parts []string
	if c.APIKeys > 0 {
		parts = append(parts, plural(c.APIKeys, "API key"))
	}
	kinds := make([]string, 0, len(c.Owners))
	for k := range c.Owners {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		parts = append(parts, "key material of "+plural(c.Owners[k], k))
	}
	if len(parts) == 0 {
		return "nothing sealed"
	}
	return strings.Join(parts, ", ")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// CensusOf counts the sealed data tx sees. Records that cannot be decoded
// are skipped (they open with no key).
func CensusOf(tx core.Tx) (SealedCensus, error) {
	c := SealedCensus{Owners: map[string]int{}, KeyIDs: map[string]int{}}
	rec, _, err := tx.Settings().Get(KeyFingerprintSetting)
	if err != nil {
		return c, err
	}
	c.Recorded = rec
	err = tx.APIKeys().List(func(k core.APIKey) (bool, error) {
		c.APIKeys++
		if id, err := secretbox.SealedKeyID(k.SecretSealed); err == nil {
			c.KeyIDs[id]++
			if c.firstAPIKey == "" {
				c.firstAPIKey = k.APIKey
			}
		}
		return true, nil
	})
	if err != nil && !isCorrupt(err) {
		return c, err
	}
	err = tx.Secrets().List(func(owner string, doc []byte) (bool, error) {
		kind, _, _ := strings.Cut(owner, "/")
		c.Owners[kind]++
		for _, id := range sealedKeyIDsIn(doc) {
			c.KeyIDs[id]++
		}
		return true, nil
	})
	return c, err
}

func isCorrupt(err error) bool {
	var ce *core.CorruptError
	return errors.As(err, &ce)
}

// sealedKeyIDsIn finds the sealed blobs in a secrets document (JSON whose
// byte fields are base64) and returns the key ids they name. The document's
// shape is its owner's business; a sealed blob is recognisable by itself.
func sealedKeyIDsIn(doc []byte) []string {
	var v any
	if json.Unmarshal(doc, &v) != nil {
		return nil
	}
	var ids []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		case string:
			if b, err := base64.StdEncoding.DecodeString(x); err == nil {
				if id, err := secretbox.SealedKeyID(b); err == nil {
					ids = append(ids, id)
				}
			}
		}
	}
	walk(v)
	return ids
}

// KeyError is a refusal to open the at-rest key: missing, or not the key
// the store's sealed data needs. Its message names the key needed (by
// fingerprint) and where it is expected.
type KeyError struct {
	DataDir string
	Path    string // where the key is expected
	Need    string // fingerprint (or key id) the sealed data needs
	Have    string // fingerprint of the key found; "" when missing
	Sealed  string // what is sealed (SealedCensus.String)
}

func (e *KeyError) Error() string {
	need := "the key with fingerprint " + e.Need
	switch {
	case e.Need == "":
		need = "the key that sealed them (its fingerprint is not recorded)"
	case len(e.Need) < 64:
		need = "the key with id " + e.Need + " (the first 16 digits of its fingerprint)"
	}
	var b strings.Builder
	if e.Have == "" {
		fmt.Fprintf(&b, "at-rest key missing: the store in %s holds sealed secrets (%s) that need %s, and %s does not exist. "+
			"ztpd will not create a new key, which could never open them. ", e.DataDir, e.Sealed, need, e.Path)
	} else {
		fmt.Fprintf(&b, "at-rest key mismatch: the store in %s holds sealed secrets (%s) that need %s, but %s holds the key with fingerprint %s. ",
			e.DataDir, e.Sealed, need, e.Path, e.Have)
	}
	fmt.Fprintf(&b, "Put that key at %s (or set key_file to where it is): restore it from a backup made with \"ztpd backup --with-key\" "+
		"(ztpd restore FILE --force), or copy secret.key from the server the store came from", e.Path)
	return b.String()
}

// openKeys opens the at-rest keyring for the open store. It creates a key
// only when the store holds nothing sealed; otherwise the key file must hold
// every key the sealed data names (and one sealed API key secret must
// really open). The store records the fingerprint of the key in use.
func (a *App) openKeys() (*secretbox.Keyring, error) {
	path := a.keyFile()
	var census SealedCensus
	if err := a.Store.View(func(tx core.Tx) error {
		var err error
		census, err = CensusOf(tx)
		return err
	}); err != nil {
		return nil, fmt.Errorf("at-rest key check: %w", err)
	}
	kr, err := secretbox.LoadKeyring(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && census.Total() == 0:
		if kr, err = secretbox.OpenKeyring(path); err != nil {
			return nil, err
		}
		if census.Recorded != "" {
			a.Log.Warn("the store recorded another at-rest key but holds nothing sealed; a new key was created",
				"key_file", path, "fingerprint", kr.Fingerprint(), "recorded", census.Recorded)
		} else {
			a.Log.Info("at-rest key created", "key_file", path, "fingerprint", kr.Fingerprint())
		}
	case errors.Is(err, fs.ErrNotExist):
		return nil, &KeyError{DataDir: a.Cfg.DataDir, Path: path, Need: neededKey(census, nil), Sealed: census.String()}
	case err != nil:
		return nil, err
	default:
		if need := neededKey(census, kr); need != "" {
			return nil, &KeyError{DataDir: a.Cfg.DataDir, Path: path, Need: need, Have: kr.Fingerprint(), Sealed: census.String()}
		}
		if census.firstAPIKey != "" {
			// The ids match; prove it by opening one secret for real.
			_, err := apikeys.New(a.Store, kr).Lookup(census.firstAPIKey)
			if errors.Is(err, secretbox.ErrSealed) || errors.Is(err, secretbox.ErrUnknownKey) {
				return nil, fmt.Errorf("at-rest key %s (fingerprint %s) does not open the store's sealed API key secrets: %w",
					path, kr.Fingerprint(), err)
			}
		}
		if census.Total() == 0 && census.Recorded != "" && !kr.Holds(census.Recorded) {
			a.Log.Warn("the store recorded another at-rest key but holds nothing sealed; using this one",
				"key_file", path, "fingerprint", kr.Fingerprint(), "recorded", census.Recorded)
		}
	}
	if census.Recorded != kr.Fingerprint() {
		if err := a.Store.Update(func(tx core.Tx) error {
			return tx.Settings().Put(KeyFingerprintSetting, kr.Fingerprint())
		}); err != nil {
			return nil, fmt.Errorf("record the at-rest key fingerprint: %w", err)
		}
	}
	return kr, nil
}

// neededKey is the key the sealed data needs and kr (nil: no key) lacks:
// the recorded fingerprint when it names that key, else the key id the
// blobs carry. "" when kr holds every key needed.
func neededKey(c SealedCensus, kr *secretbox.Keyring) string {
	var missing []string
	for id := range c.KeyIDs {
		if kr == nil || !kr.Holds(id) {
			missing = append(missing, id)
		}
	}
	if len(missing) == 0 {
		if kr == nil && c.Total() > 0 {
			// Sealed records none of whose blobs could be read: name the
			// recorded key, if any.
			return c.Recorded
		}
		return ""
	}
	sort.Strings(missing)
	for _, id := range missing {
		if c.Recorded != "" && secretbox.KeyIDOf(c.Recorded) == id {
			return c.Recorded
		}
	}
	return missing[0]
}

// warnMissingImageBlobs warns at start about images whose content is not
// in the data directory (a store restored without its blobs): devices
// asking for them get 503 until they are added again. In a group that
// fetches blobs from its peers it only says how many will be fetched.
func (a *App) warnMissingImageBlobs() error {
	list, err := a.Images.List("")
	if err != nil {
		a.Log.Warn("image check at start failed", "err", err)
		return nil
	}
	var missing []string
	for _, im := range list {
		if _, err := os.Stat(a.Images.BlobPath(im.SHA256)); err != nil {
			missing = append(missing, im.Name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	first := missing[:min(len(missing), 5)]
	if a.Images.Fetch != nil {
		// In a group a blob added on another appliance is expected to be
		// missing here until fetched (blobPrefetch, or a device's request).
		a.Log.Info("images whose content is not on this appliance yet: it is fetched from the peer appliances in the background, or when a device asks for it",
			"count", len(missing), "first", strings.Join(first, ", "))
		return nil
	}
	a.Log.Warn("images without their content: devices asking for them get 503 until they are added again (ztpd image add FILE --kind KIND --name NAME) or restored from a backup made with --with-images",
		"count", len(missing), "first", strings.Join(first, ", "), "dir", filepath.Join(a.Cfg.DataDir, "images"))
	return nil
}
