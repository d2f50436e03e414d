package app

import (
	"errors"
	"net/http"

	imagestore "github.com/ztpd/ztpd/images/store"
)

func (a *App) mountImageAdmin() {
	a.AdminMux.HandleFunc("POST /admin/images", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		m := imagestore.Meta{Name: q.Get("name"), Kind: q.Get("kind"), Platform: q.Get("platform"), Version: q.Get("version")}
		im, existed, err := a.Images.Add(r.Context(), r.Body, m, q.Get("sha256"))
		if err != nil {
			writeError(w, 0, err)
			return
		}
		code := http.StatusCreated
		if existed {
			code = http.StatusOK
		}
		writeJSON(w, code, map[string]any{"image": im, "existed": existed})
	})
	a.AdminMux.HandleFunc("GET /admin/images", func(w http.ResponseWriter, r *http.Request) {
		list, err := a.Images.List(r.URL.Query().Get("kind"))
		if err != nil {
			writeError(w, http.StatusInternalServerError, err)
			return
		}
		writeJSON(w, http.StatusOK, list)
	})
	a.AdminMux.HandleFunc("DELETE /admin/images/{ref}", func(w http.ResponseWriter, r *http.Request) {
		im, err := a.Images.Remove(r.PathValue("ref"))
		if err != nil {
			code := 0
			if errors.Is(err, imagestore.ErrInUse) {
				code = http.StatusConflict
			}
			writeError(w, code, err)
			return
		}
		writeJSON(w, http.StatusOK, im)
	})
}
