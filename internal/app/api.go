package app

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ztpd/ztpd/api"
	"github.com/ztpd/ztpd/api/auth"
	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/images/imagestore"
	"github.com/ztpd/ztpd/internal/apikeys"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/hosturl"
	"github.com/ztpd/ztpd/internal/profile"
	"github.com/ztpd/ztpd/internal/rollout"
	"github.com/ztpd/ztpd/ztp/content"
	"github.com/ztpd/ztpd/ztp/dhcp"
)

// buildAPI wires API keys, the clusters service and the API front ends.
func (a *App) buildAPI() error {
	a.APIKeys = apikeys.New(a.Store, a.Keys)
	var mem clusters.Membership
	var cni clusters.ManifestApplier
	if a.Joiner != nil {
		mem = rollout.NewClusterMembership(a.Joiner, a.Rollouts, a.nodeOps, a.Log)
		cni = rollout.NewManifestApplier(a.Joiner)
	}
	cs, err := clusters.New(a.Store, mem, clusters.Options{Log: a.Log.With("part", "clusters"), Images: a.Images, Appliance: a.applianceName(),
		KubeconfigTTL: a.Cfg.API.KubeconfigTTL.D(), AlertAfter: a.Cfg.API.ClusterAlertAfter.D(),
		StartTimeout: a.Cfg.API.ClusterStartTimeout.D(), CNI: cni, Profiles: loadedProfiles{a}})
	if err != nil {
		return err
	}
	a.Clusters = cs
	a.OnClose(func() error { return a.closeClusters(cs) })

	sigs := auth.DefaultSignaturePolicy()
	sigs.RequireExpiryREST = a.Cfg.API.RequireExpiryREST
	sigs.RequireExpiryCloudStack = a.Cfg.API.RequireExpiryCloudStack
	sigs.AllowUnversionedCloudStackWrites = a.Cfg.API.CloudStackUnversionedWrites == "allow"
	sigs.MaxLifetime = a.Cfg.API.MaxSignatureLifetime.D()
	deps := api.Deps{Log: a.Log.With("part", "api"), Metrics: a.Metrics, Store: a.Store, Clusters: cs, Keys: a.APIKeys,
		Images: a.Images, Refusals: a.ZTP, AuthFailuresPerMinute: a.Cfg.API.AuthFailuresPerMinute, Signatures: &sigs,
		Preview: profilePreviewer{a}, ImageStore: a.Images, ISOBaseURL: a.Endpoints.ISOs(), Config: a.redactedConfig,
		Warnings: a.Warnings, Desired: a.Desired, Rollouts: a.Rollouts, Positions: a.Positions}
	if a.DHCP != nil {
		deps.Pools = dhcpPools{a.DHCP}
	}
	srv := api.New(deps)
	a.apiLocal = srv.LocalHandler()
	a.apiDevice = srv.Handler()
	// Off loopback the API gets a listener of its own, with TLS unless the
	// operator opted out (config.APIListener); Serve runs it. Otherwise the
	// main listener serves it.
	if addr, useTLS := a.Cfg.APIListener(); addr == "" {
		a.apiOnMain = srv.Handler()
	} else {
		a.apiOwn = &apiListen{addr: addr, useTLS: useTLS, handler: a.apiGuard("api").Wrap(srv.Handler())}
	}
	a.AddSingleton(runnerFunc{"job-pruner", func(ctx context.Context) error { return cs.RunPruner(ctx, time.Hour) }})
	// One appliance sweeps; each move re-reads the cluster in its own
	// transaction, so a sweep racing a leadership change moves it once.
	a.AddSingleton(runnerFunc{"start-timeout", func(ctx context.Context) error {
		return cs.RunStartTimeouts(ctx, min(time.Minute, a.Cfg.API.ClusterStartTimeout.D()/4))
	}})
	a.addOrphanReaper(cs)

	a.OnStart(func() error {
		n, err := cs.Recover()
		if err != nil {
			return fmt.Errorf("recovering async jobs: %w", err)
		}
		if n > 0 {
			a.Log.Warn("async jobs interrupted by the last shutdown were marked failed", "count", n)
		}
		return api.Bootstrap(a.APIKeys, os.Stdout, a.Cfg.API.AdminKeyFile, a.Log)
	})
	return nil
}

// runnerFunc adapts a function to Runner.
type runnerFunc struct {
	name string
	run  func(context.Context) error
}

func (r runnerFunc) Name() string                  { return r.name }
func (r runnerFunc) Run(ctx context.Context) error { return r.run(ctx) }

// dhcpPools is the DHCP server's pool use as the API shows it.
type dhcpPools struct{ srv *dhcp.Server }

func (p dhcpPools) Pools() []client.PoolUse {
	var out []client.PoolUse
	for _, u := range p.srv.Pools() {
		out = append(out, client.PoolUse{Name: u.Name, Subnet: u.Prefix, RangeStart: u.RangeStart, RangeEnd: u.RangeEnd,
			Size: u.Size, Used: u.Used, Reserved: u.Reserved, Free: u.Free})
	}
	return out
}

// profilePreviewer is the profiles in use as the API needs them: device
// previews rendered as serving renders them (the same options as "ztpd
// profile check --device", resolved from this process's configuration),
// and which profiles name an image.
type profilePreviewer struct{ a *App }

func (p profilePreviewer) PreviewDevice(d core.Device) (*content.Preview, error) {
	a := p.a
	opt := content.PreviewOptions{DefaultProfile: a.Cfg.ZTP.DefaultProfile, Base: a.Endpoints.Base(netip.Addr{}),
		MetadataBase: a.metadataBase(), Images: a.Images}
	if a.DeviceTLS != nil {
		opt.SecureBase, opt.TLSPin = a.Endpoints.SecureBase(netip.Addr{}), a.DeviceTLS.PinList()
	}
	return content.PreviewDevice(a.profiles.Load(), &d, opt)
}

// metadataBase is where a VM's cloud-init asks for meta-data: the DHCP
// server's address on port 80 (http.metadata_addr, or http.addr on port
// 80), which is the advertised address unless a listener names its own.
func (a *App) metadataBase() string {
	for _, addr := range []string{a.Cfg.HTTP.MetadataAddr, a.Cfg.HTTP.Addr} {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || port != "80" {
			continue
		}
		if ip, err := netip.ParseAddr(host); err == nil && !ip.IsUnspecified() {
			return hosturl.Base("http", host, "")
		}
		break
	}
	if adv := a.Endpoints.Advertise(); adv.IsValid() && !adv.IsUnspecified() {
		return hosturl.Base("http", adv.String(), "")
	}
	return "http://<dhcp-server-addr>"
}

// loadedProfiles answers the clusters service which profiles a node
// template may name: those loaded now.
type loadedProfiles struct{ a *App }

func (l loadedProfiles) ProfileCluster(name string) (string, bool) {
	p := l.a.profiles.Load().Get(name)
	if p == nil {
		return "", false
	}
	return p.Cluster, true
}

func (l loadedProfiles) LoadedProfiles() []clusters.ProfileSummary {
	ps := l.a.profiles.Load().Profiles()
	out := make([]clusters.ProfileSummary, 0, len(ps))
	for _, p := range ps {
		s := clusters.ProfileSummary{Name: p.Name, Cluster: p.Cluster, Role: p.Role, Kinds: p.Match.Kind, VM: p.VM != nil,
			// What only a SONiC switch is given.
			Switch: p.HWSKU.Src != "" || p.ConfigDB != nil || len(p.Sections) > 0 || len(p.ZTPOptions) > 0 || p.Role == "sonic"}
		if sc := p.SONiC(); sc != nil {
			s.SONiC = sc.Version
		}
		out = append(out, s)
	}
	return out
}

func (p profilePreviewer) ProfilesNaming(im core.Image) []string {
	var out []string
	installer := im.Kind == imagestore.KindSONiCInstaller || im.Kind == imagestore.KindONIEInstaller
	for _, pr := range p.a.profiles.Load().Profiles() {
		sc := pr.SONiC()
		switch {
		case sc == nil:
		case sc.Image != "":
			if named, err := p.a.Images.Resolve(sc.Image); err == nil && named.SHA256 == im.SHA256 {
				out = append(out, pr.Name)
			}
		case installer && sc.Version != "" && profile.BuildVersion(im.Version) == sc.Version:
			out = append(out, pr.Name)
		}
	}
	return out
}

// secretSetting names configuration keys whose values are secrets. The
// configuration holds none today (key material lives in files it names,
// and paths are shown); any such key added later is redacted here.
var secretSetting = regexp.MustCompile(`(?i)(password|passphrase|secret|psk|community|(^|_)token$|(^|_)key$)`)

// redactedConfig is the effective configuration (defaults applied) as
// the API shows it, read only: the YAML keys of the config file, with
// the value of every secret-named key replaced by "********".
func (a *App) redactedConfig() any {
	raw, err := yaml.Marshal(a.Cfg)
	if err != nil {
		return map[string]any{"error": "configuration could not be encoded"}
	}
	var v any
	if err := yaml.Unmarshal(raw, &v); err != nil {
		return map[string]any{"error": "configuration could not be encoded"}
	}
	return redactSettings(v)
}

func redactSettings(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, val := range t {
			if secretSetting.MatchString(k) && !strings.HasSuffix(k, "_file") && val != nil && val != "" {
				t[k] = "********"
				continue
			}
			t[k] = redactSettings(val)
		}
	case map[any]any: // a mapping with keys that are not all strings
		m := make(map[string]any, len(t))
		for k, val := range t {
			m[fmt.Sprint(k)] = val
		}
		return redactSettings(m)
	case []any:
		for i := range t {
			t[i] = redactSettings(t[i])
		}
	case string: // a URL's user and password (a DHCP option's server URL)
		return settingUserinfo.ReplaceAllString(t, "${1}********@")
	}
	return v
}

// settingUserinfo is the user information of a URL in a setting's value.
var settingUserinfo = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@"'<>]+@`)
