package app

import (
	"context"
	"slices"
	"time"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/profile"
	"github.com/ztpd/ztpd/joiner"
	"github.com/ztpd/ztpd/joiner/joinhttp"
	"github.com/ztpd/ztpd/ztp/content"
	"github.com/ztpd/ztpd/ztp/endpoints"
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
	for _, i := range a.Cfg.RelayInfoNeedsRelays() {
		a.Log.Warn("an auto_approve rule matches circuit or remote ids but no relay is declared under dhcp.relays: relayed requests are dropped and the rule admits nobody",
			"rule", i)
	}
	observer, err := observerIdentity()
	if err != nil {
		return err
	}
	// The joiner changes device records in its own transactions: through
	// the devices service's store, which logs their state changes once
	// committed.
	j, err := joiner.New(a.Devices.Store(a.Store), a.Keys, joiner.Options{
		Observer:      observer,
		EnrollmentTTL: a.Cfg.Joiner.EnrollmentTTL.D(),
		TokenTTL:      a.Cfg.Joiner.TokenTTL.D(),
		ReissueWindow: a.Cfg.Joiner.ReissueWindow.D(),
		Bindings:      a.bindings,
		AutoApprove:   rules,
		BaseURL:       a.Endpoints.Join(),
		SecureBaseURL: a.Endpoints.SecureJoin, // the port may be bound later (port 0)
		BasesFor:      a.deviceBases,
		DevicePins:    a.devicePins(),
		Devices:       a.Devices, // built before the joiner
		Log:           a.Log.With("part", "joiner"),
		ProfileLabels: a.profileLabels,
		ProfileOf:     a.profileOf,
		Plan:          a.positionsPlan,
		DeleteNode:    a.deleteNode,
		AgentFiles:    a.agentFiles(),
		Registerer:    a.Metrics,
	})
	if err != nil {
		return err
	}
	a.Joiner = j // passed to content (Options.Join) and clusters (buildAPI)
	joinhttp.New(j, a.Log.With("part", "join")).Mount(a.HTTPMux)
	a.AddSingleton(runnerFunc{"token-sweeper", func(ctx context.Context) error { return j.RunSweeper(ctx, 5*time.Minute) }})
	return nil
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

func (z ztpJoin) JoinData(ctx context.Context, dev core.Device, r profile.Result, csrs content.EtcdCSRs) ([]byte, error) {
	return z.j.JoinData(ctx, dev, r.Cluster, r.Role, r.Hostname, joiner.EtcdCSRs(csrs))
}

// profileLabels are the labels of the loaded profile name (none before
// Start loads the profiles, or for a profile no longer configured).
func (a *App) profileLabels(name string) map[string]string {
	set := a.profiles.Load()
	if set == nil {
		return nil
	}
	if p := set.Get(name); p != nil {
		return p.Labels()
	}
	return nil
}

// deviceBases are the joiner's device-facing bases for the device whose
// request ctx serves, in the family it asked over.
func (a *App) deviceBases(ctx context.Context) (base, secure string) {
	local := endpoints.Local(ctx)
	if !local.IsValid() {
		return "", ""
	}
	return a.Endpoints.Base(local), a.Endpoints.SecureBase(local)
}
