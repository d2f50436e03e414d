package api

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
// value set only by LocalHandler, so nothing a network client sends can
// set it.

type localKey struct{}

// localAdmin is the credential of requests through the admin socket: the
// same principal as the admin routes (clusters.LocalAdmin), with no secret.
var localAdmin = apikeys.Credential{APIKey: clusters.LocalAdmin.APIKey, Name: clusters.LocalAdmin.Name,
	Account: clusters.LocalAdmin.Account, Role: apikeys.RoleAdmin}

// LocalHandler is the API for the admin socket: every request acts as the
// local administrator without authentication. Never serve it on a network
// listener.
func (s *Server) LocalHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.engine.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), localKey{}, true)))
	})
}

// isLocal reports whether r came through LocalHandler.
func isLocal(r *http.Request) bool {
	v, _ := r.Context().Value(localKey{}).(bool)
	return v
}
