package api

import (
	"net/http"

	"github.com/ztpd/ztpd/api/caller"
)

// LocalHandler is the API for the admin socket: every request acts as the
// local administrator without authentication (package caller). Never
// serve it on a network listener.
func (s *Server) LocalHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.engine.ServeHTTP(w, caller.AsLocal(r))
	})
}
