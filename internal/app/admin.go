package app

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ztpd/ztpd/api"
	"github.com/ztpd/ztpd/api/rest"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// Paths the main listener serves besides devices' and the API's.
const (
	HealthzPath = "/healthz"
	MetricsPath = "/metrics"
)

// Every route of the admin socket (local CLI operations) and the health
// check, in one place. The handlers only translate HTTP to a service call
// and its answer: the domain logic is in the services (store backup,
// images, clusters and the joiner, API keys), and every answer and error
// goes through httpserve's one writer (status from the core error kind).
func (a *App) mountAdmin() {
	a.HTTPMux.HandleFunc("GET "+HealthzPath, a.healthz)
	a.HTTPMux.Handle("GET "+MetricsPath, promhttp.HandlerFor(a.metricsGatherer(), promhttp.HandlerOpts{}))
	m := a.AdminMux
	m.HandleFunc("GET /admin/status", a.healthz)
	m.HandleFunc("GET /admin/backup", a.adminBackup)

	// Clusters and devices: through the clusters service, the one place
	// cluster rules live (it asks the joiner).
	m.HandleFunc("GET /admin/clusters/{ref}/kubeconfig", func(w http.ResponseWriter, r *http.Request) {
		_, cfg, err := a.Clusters.Kubeconfig(r.Context(), clusters.LocalAdmin, r.PathValue("ref"))
		if err != nil {
			httpserve.WriteError(w, r, a.Log, err)
			return
		}
		w.Header().Set("Content-Type", "application/yaml")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(cfg)
	})
	m.HandleFunc("GET /admin/clusters/{ref}/members", func(w http.ResponseWriter, r *http.Request) {
		ms, err := a.Joiner.Members(r.Context(), r.PathValue("ref"))
		if ms == nil {
			ms = []core.Membership{}
		}
		a.answer(w, r, ms, err)
	})

	// The REST and CloudStack APIs themselves, as the local administrator:
	// every API command of the CLI works on the appliance without a key,
	// through the same handlers as remote use.
	m.Handle(rest.Path, a.apiLocal)
	m.Handle(api.CloudStackPath, a.apiLocal)

	a.mountDeviceTLS(m)

	// API keys, versions and images of the CLI: api owns those handlers.
	api.MountAdmin(m, api.AdminDeps{Keys: a.APIKeys, Clusters: a.Clusters, ISOs: a.Images, ISOBaseURL: a.Endpoints.ISOs()}, a.Log)
}

// answer writes v, or err by its kind.
func (a *App) answer(w http.ResponseWriter, r *http.Request, v any, err error) {
	if err != nil {
		httpserve.WriteError(w, r, a.Log, err)
		return
	}
	httpserve.WriteJSON(w, http.StatusOK, v)
}

func (a *App) healthz(w http.ResponseWriter, r *http.Request) {
	schema, err := a.Store.Schema()
	body := map[string]any{"status": "ok", "schema": schema, "store": a.Cfg.Store.Backend}
	code := http.StatusOK
	if err != nil {
		// The body says what an operator or a load balancer needs and no
		// internal detail (the log has it), so it passes the guard as is.
		code = http.StatusServiceUnavailable
		body = map[string]any{"status": "unhealthy", "error": "the store cannot be read", "store": a.Cfg.Store.Backend}
		a.healthWarn.Do(func() { a.Log.Warn("/healthz: the store cannot be read", "err", err) })
		httpserve.MarkPublic(w)
	}
	// The group part also when the store cannot be read: what this
	// appliance holds (nothing, once its session lapsed) is what an
	// operator looking at a partitioned appliance needs.
	if g := a.groupStatus(); g != nil {
		body["group"] = g
	}
	httpserve.WriteJSON(w, code, body)
}

// adminErrorMessage is the message of an admin error answer (httpserve's
// error body).
func adminErrorMessage(body []byte) (string, bool) {
	var e httpserve.ErrorBody
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Message == "" {
		return "", false
	}
	if e.Error.RequestID != "" {
		return fmt.Sprintf("%s (request %s)", e.Error.Message, e.Error.RequestID), true
	}
	return e.Error.Message, true
}
