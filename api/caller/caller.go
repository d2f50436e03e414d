// Package caller is who an API request acts as, the same for every door:
// the local administrator of the admin socket, and the clusters service's
// view of an API key.
package caller

import (
	"context"
	"net/http"

	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/clusters"
)

// The admin socket (<data-dir>/ztpd.sock, mode 0600) serves the same REST
// and CloudStack routes and handlers as the API listener, so every API
// command of the CLI works on the appliance without an API key and there
// is one implementation of each. The socket's file mode is the access
// control: a request that came through it acts as the local administrator
// (clusters.LocalAdmin) and carries no signature. The mark is a context
// value set only by AsLocal, so nothing a network client sends can set it.

type localKey struct{}

// LocalAdmin is the credential of requests through the admin socket: the
// same principal as the admin routes (clusters.LocalAdmin), with no secret.
var LocalAdmin = apikeys.Credential{APIKey: clusters.LocalAdmin.APIKey, Name: clusters.LocalAdmin.Name,
	Account: clusters.LocalAdmin.Account, Role: apikeys.RoleAdmin}

// AsLocal marks r as having come through the admin socket. Only the admin
// socket's handler may call it.
func AsLocal(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), localKey{}, true))
}

// IsLocal reports whether r came through the admin socket (AsLocal).
func IsLocal(r *http.Request) bool {
	v, _ := r.Context().Value(localKey{}).(bool)
	return v
}

// Of is the clusters service's view of an API key.
func Of(cred apikeys.Credential) clusters.Caller {
	return clusters.Caller{APIKey: cred.APIKey, Name: cred.Name, Account: cred.Account, Admin: cred.IsAdmin()}
}

// AccountName is the name a key acts under in answers and records: its
// name, else the key itself.
func AccountName(cred apikeys.Credential) string {
	if cred.Name != "" {
		return cred.Name
	}
	return cred.APIKey
}
