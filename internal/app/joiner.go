package app

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/profile"
	"github.com/ztpd/ztpd/joiner"
	"github.com/ztpd/ztpd/joiner/joinhttp"
	"github.com/ztpd/ztpd/ztp/content"
)

// buildJoiner wires the joiner: the clusters service's Membership, the ZTP
// content's JoinProvider, the device-facing /join routes, the admin routes
// behind "ztpd cluster kubeconfig" and "ztpd device approve", and the token
// sweeper.
func (a *App) buildJoiner() error {
	var rules []joiner.Rule
	for _, r := range a.Cfg.Joiner.AutoApprove {
		rules = append(rules, joiner.Rule{Subnets: r.Subnets, MACs: r.MACs, CircuitIDs: r.CircuitIDs, RemoteIDs: r.RemoteIDs,
			Reserved: r.Reserved, AssertedSerials: r.Asserted.Serials, AssertedProducts: r.Asserted.Products,
			ControlPlane: slices.Contains(r.Roles, "control-plane"), Cluster: r.Cluster})
	}
	j, err := joiner.New(a.Store, a.Keys, joiner.Options{
		EnrollmentTTL: a.Cfg.Joiner.EnrollmentTTL.D(),
		TokenTTL:      a.Cfg.Joiner.TokenTTL.D(),
		ReissueWindow: a.Cfg.Joiner.ReissueWindow.D(),
		Bindings:      bindingsOf(&a.Cfg),
		AutoApprove:   rules,
		BaseURL:       deviceBaseURL(a.Cfg.AdvertiseAddr, a.Cfg.HTTP.Addr),
		Log:           a.Log.With("part", "joiner"),
	})
	if err != nil {
		return err
	}
	a.Joiner = j
	if a.Clusters != nil {
		a.Clusters.SetMembership(j)
	}
	if a.ZTP != nil {
		a.ZTP.SetJoinProvider(ztpJoin{j})
	}
	joinhttp.New(j, a.Log.With("part", "join")).Mount(a.HTTPMux)
	a.mountJoinerAdmin()
	a.AddRunner(runnerFunc{"token-sweeper", func(ctx context.Context) error { return j.RunSweeper(ctx, 5*time.Minute) }})
	return nil
}

// deviceBaseURL is the http://host:port devices reach the ZTP listener at.
func deviceBaseURL(advertise, httpAddr string) string {
	host, port, err := net.SplitHostPort(httpAddr)
	if err != nil {
		return ""
	}
	if advertise != "" {
		host = advertise
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// ztpJoin adapts the joiner to the ZTP content service.
type ztpJoin struct{ j *joiner.Service }

func (z ztpJoin) ZTPSection(ctx context.Context, dev core.Device, r profile.Result) (map[string]any, error) {
	return z.j.ZTPSection(ctx, dev, r.Cluster, r.Hostname)
}

func (z ztpJoin) KubernetesMaster(ctx context.Context, dev core.Device, r profile.Result) (*content.KubeMaster, error) {
	host, port, ok, err := z.j.KubernetesMaster(ctx, dev, r.Cluster)
	if err != nil || !ok {
		return nil, err
	}
	return &content.KubeMaster{Host: host, Port: port}, nil
}

func (z ztpJoin) UserData(ctx context.Context, dev core.Device, r profile.Result) ([]byte, error) {
	return z.j.UserData(ctx, dev, r.Cluster, r.Role, r.Hostname)
}

// mountJoinerAdmin registers the local admin operations of the joiner. They
// go through the clusters service, the one place cluster rules live.
func (a *App) mountJoinerAdmin() {
	a.AdminMux.HandleFunc("GET /admin/clusters/{ref}/kubeconfig", func(w http.ResponseWriter, r *http.Request) {
		_, cfg, err := a.Clusters.Kubeconfig(r.Context(), clusters.LocalAdmin, r.PathValue("ref"))
		if err != nil {
			writeError(w, clusterErrorCode(err), err)
			return
		}
		w.Header().Set("Content-Type", "application/yaml")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(cfg)
	})
	a.AdminMux.HandleFunc("GET /admin/clusters/{ref}/members", func(w http.ResponseWriter, r *http.Request) {
		ms, err := a.Joiner.Members(r.Context(), r.PathValue("ref"))
		if err != nil {
			writeError(w, 0, err)
			return
		}
		if ms == nil {
			ms = []core.Membership{}
		}
		writeJSON(w, http.StatusOK, ms)
	})
	a.AdminMux.HandleFunc("POST /admin/devices/{id}/reset", func(w http.ResponseWriter, r *http.Request) {
		d, err := a.Clusters.ResetDevice(r.Context(), clusters.LocalAdmin, r.PathValue("id"))
		if err != nil {
			writeError(w, clusterErrorCode(err), err)
			return
		}
		writeJSON(w, http.StatusOK, d)
	})
	a.AdminMux.HandleFunc("POST /admin/devices/{id}/approve", func(w http.ResponseWriter, r *http.Request) {
		d, err := a.Clusters.ApproveDevice(r.Context(), clusters.LocalAdmin, r.PathValue("id"), r.URL.Query().Get("cluster"))
		if err != nil {
			writeError(w, clusterErrorCode(err), err)
			return
		}
		writeJSON(w, http.StatusOK, d)
	})
}

func clusterErrorCode(err error) int {
	switch clusters.KindOf(err) {
	case clusters.KindNotFound:
		return http.StatusNotFound
	case clusters.KindInvalid:
		return http.StatusBadRequest
	case clusters.KindUnavailable, clusters.KindState:
		return http.StatusConflict
	}
	if errors.Is(err, core.ErrNotFound) {
		return http.StatusNotFound
	}
	return http.StatusInternalServerError
}
