package app

import (
	"net/http"

	"github.com/ztpd/ztpd/api/agentdoor"
	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devicetls"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// buildDeviceTLS makes the device-facing TLS key pair when http.tls is
// enabled: loaded (or created, once for the whole group) from the store,
// or the operator's files; its refresh runs with the listeners. The
// endpoints learn the HTTPS base, so documents can name it.
func (a *App) buildDeviceTLS() error {
	addr := a.Cfg.DeviceTLSListener()
	if addr == "" {
		return nil
	}
	ep, err := a.Endpoints.WithTLS(addr)
	if err != nil {
		return err
	}
	a.Endpoints = ep
	svc, err := devicetls.New(devicetls.Options{Store: a.Store, Keys: a.Keys, CertFile: a.Cfg.HTTP.TLS.CertFile, KeyFile: a.Cfg.HTTP.TLS.KeyFile,
		Grace: a.Cfg.HTTP.TLS.RotationGrace.D(), Names: a.apiNames(addr), Log: a.Log.With("part", "device-tls"), Registerer: a.Metrics})
	if err != nil {
		return err
	}
	if err := svc.Load(); err != nil {
		return err
	}
	a.DeviceTLS = svc
	a.AddRunner(svc)
	return nil
}

// ReloadDeviceTLS reads the operator's device certificate files again
// (SIGHUP, with the profiles): the listener serves the new key to the next
// connection and documents name its pin. Files that do not load are
// logged and refused; the certificate in use stays. Without the listener
// or its files it does nothing.
func (a *App) ReloadDeviceTLS() error {
	if a.DeviceTLS == nil {
		return nil
	}
	if _, err := a.DeviceTLS.ReloadFiles(); err != nil {
		a.Log.Error("device TLS certificate files not reloaded: the certificate in use stays", "err", err)
		return err
	}
	return nil
}

// devicePins is what documents name of the device TLS certificate, nil
// without the listener.
func (a *App) devicePins() func() string {
	if a.DeviceTLS == nil {
		return nil
	}
	return a.DeviceTLS.PinList
}

// deviceTLSHandler serves the device HTTPS listener: the same device
// routes as http.addr (content, /join) and the agent door, each request's
// device being the holder of its connection's address.
func (a *App) deviceTLSHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", a.deviceGuard("https").Wrap(a.HTTPMux))
	if a.apiDevice != nil {
		mux.Handle(agentdoor.Path, a.apiGuard("https").Wrap(a.apiDevice))
	}
	return mux
}

// errNoDeviceTLS answers device-tls operations when the listener is off.
var errNoDeviceTLS = core.Errorf(core.KindState, "the device HTTPS listener is off (http.tls.enabled: false)")

// mountDeviceTLS adds the admin routes behind `ztpd device-tls`.
func (a *App) mountDeviceTLS(m *http.ServeMux) {
	m.HandleFunc("GET /admin/device-tls", func(w http.ResponseWriter, r *http.Request) {
		if a.DeviceTLS == nil {
			httpserve.WriteError(w, r, a.Log, errNoDeviceTLS)
			return
		}
		if err := a.DeviceTLS.Refresh(); err != nil {
			httpserve.WriteError(w, r, a.Log, err)
			return
		}
		a.answer(w, r, deviceTLSView(a.DeviceTLS.Status()), nil)
	})
	m.HandleFunc("POST /admin/device-tls/rotate", func(w http.ResponseWriter, r *http.Request) {
		if a.DeviceTLS == nil {
			httpserve.WriteError(w, r, a.Log, errNoDeviceTLS)
			return
		}
		st, err := a.DeviceTLS.Rotate()
		a.answer(w, r, deviceTLSView(st), err)
	})
}

// deviceTLSView is the admin socket's answer: the api/client type, so a
// field added to devicetls.Status is not on the wire until a view has it.
func deviceTLSView(st devicetls.Status) client.DeviceTLS {
	return client.DeviceTLS{Source: st.Source, Phase: string(st.Phase), ServingPin: st.Serving, Pins: st.Pins,
		Created: st.Created, SwitchAt: st.SwitchAt, OldPinUntil: st.OldPinUntil, Grace: st.Grace}
}
