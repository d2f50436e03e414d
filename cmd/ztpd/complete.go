package main

// Shell completion of the names commands take: clusters, devices, versions,
// images, tokens, rollouts, CNI configurations and API keys, listed live from the server (the admin socket
// on the appliance, the API elsewhere), and the fixed values of enum flags.

import (
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
)

// maxCompletions bounds what one completion lists: a shell offers no more
// than a person can read, and a 10,000-switch fabric must not stall a TAB.
const maxCompletions = 2000

// nameSource lists the values a name argument or flag can take.
type nameSource func(opts *rootOptions, f *apiFlags) ([]string, error)

func restNames[T any](path string, names func(T) []string) nameSource {
	return func(opts *rootOptions, f *apiFlags) ([]string, error) {
		c, err := newAPIClient(opts, f)
		if err != nil {
			return nil, err
		}
		list, err := client.All[T](c.Client, path, nil, maxCompletions)
		if err != nil {
			return nil, err
		}
		var out []string
		for _, v := range list {
			out = append(out, names(v)...)
		}
		return out, nil
	}
}

var (
	clusterNames = restNames("/api/v1/clusters", func(v client.Cluster) []string { return []string{v.Name} })
	versionNames = restNames("/api/v1/versions", func(v client.Version) []string { return []string{v.Name} })
	imageNames   = restNames("/api/v1/images", func(v client.Image) []string { return []string{v.Name} })
	tokenIDs     = restNames("/api/v1/tokens", func(v client.Token) []string { return []string{v.ID} })
	rolloutIDs   = restNames("/api/v1/rollouts", func(v client.Rollout) []string { return []string{v.ID} })
	cniNames     = restNames(cniPath, func(v client.CNIConfiguration) []string { return []string{v.Name} })
	deviceNames  = restNames("/api/v1/devices", func(d client.Device) []string {
		if d.Serial != "" {
			return []string{d.ID, d.Serial}
		}
		return []string{d.ID}
	})
	apiKeyNames nameSource = func(opts *rootOptions, _ *apiFlags) ([]string, error) {
		var keys []client.APIKeyInfo
		if err := adminDo(opts, "GET", "/admin/apikeys", nil, &keys); err != nil {
			return nil, err
		}
		var out []string
		for _, k := range keys {
			out = append(out, k.APIKey)
		}
		return out, nil
	}
)

// argNames says which commands take which kind of name as their argument.
var argNames = map[string]nameSource{
	"cluster show": clusterNames, "cluster kubeconfig": clusterNames, "cluster members": clusterNames,
	"cluster scale": clusterNames, "cluster upgrade": clusterNames, "cluster start": clusterNames,
	"cluster stop": clusterNames, "cluster delete": clusterNames,
	"device show": deviceNames, "device approve": deviceNames, "device reset": deviceNames,
	"device desired get": deviceNames, "device desired set": deviceNames,
	"rollout show": rolloutIDs, "rollout watch": rolloutIDs, "rollout pause": rolloutIDs,
	"rollout resume": rolloutIDs, "rollout abort": rolloutIDs,
	"kube-version delete": versionNames, "kube-version enable": versionNames, "kube-version disable": versionNames,
	"image rm": imageNames,
	"cni show": cniNames, "cni delete": cniNames,
	"token revoke":  tokenIDs,
	"apikey revoke": apiKeyNames,
}

// flagNames says which flags name what; the key is "<command> --<flag>",
// "* --<flag>" for every command that has the flag.
var flagNames = map[string]nameSource{
	"* --cluster":                  clusterNames,
	"* --device":                   deviceNames,
	"cluster create --version":     versionNames,
	"cluster create --cni":         cniNames,
	"cluster upgrade --version":    versionNames,
	"cluster list --state":         fixed(clusterStates()...),
	"device list --state":          fixed(deviceStates()...),
	"device list --kind":           fixed("sonic", "onie", "vm", "unknown"),
	"profile check --kind":         fixed("sonic", "onie", "vm", "unknown"),
	"lease list --state":           fixed("active", "released", "expired", "declined"),
	"image add --kind":             fixed("sonic-installer", "onie-installer", "binaries-iso", "file"),
	"image list --kind":            fixed("sonic-installer", "onie-installer", "binaries-iso", "file"),
	"token list --kind":            fixed("kubeadm", "k3s", "enrollment", "certificate-key"),
	"token revoke --kind":          fixed("kubeadm", "k3s", "enrollment", "certificate-key"),
	"apikey create --role":         fixed("admin", "user"),
	"cluster create --join-method": fixed("kubeadm", "k3s", "sonic"),
	"device desired set --mode":    fixed("cluster", "standalone"),
	"device desired set --role":    fixed("control-plane", "worker"),
	"device desired set --image":   imageNames,
	"rollout start --kind":         fixed("image", "kubernetes", "remove"),
	"rollout start --mode":         fixed("standalone"),
	"rollout start --devices":      deviceNames,
	"rollout list --state":         fixed("running", "paused", "aborted", "failed", "succeeded"),
}

func fixed(values ...string) nameSource {
	return func(*rootOptions, *apiFlags) ([]string, error) { return values, nil }
}

func deviceStates() []string {
	s := []string{"unmatched", "refused"}
	for _, st := range []core.DeviceState{core.StateDiscovered, core.StateLeased, core.StateZTPServed, core.StateConfigServed,
		core.StateImageServed, core.StateWaiting, core.StateJoinIssued, core.StateJoined, core.StateNotReady, core.StateLost,
		core.StateFailed, core.StateLeaving, core.StateLeft} {
		s = append(s, string(st))
	}
	return s
}

func clusterStates() []string {
	var s []string
	for _, st := range []core.ClusterState{core.ClusterCreated, core.ClusterStarting, core.ClusterRunning, core.ClusterStopping,
		core.ClusterStopped, core.ClusterScaling, core.ClusterUpgrading, core.ClusterAlert, core.ClusterRecovering,
		core.ClusterError, core.ClusterDestroying, core.ClusterDestroyed} {
		s = append(s, string(st))
	}
	return s
}

// completeNames attaches the completions above to every command of root.
func completeNames(root *cobra.Command, opts *rootOptions) {
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		path := strings.TrimPrefix(c.CommandPath(), root.Name()+" ")
		if src, ok := argNames[path]; ok && c.ValidArgsFunction == nil {
			c.ValidArgsFunction = func(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
				if len(args) > 0 {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				return completeFrom(cmd, opts, src, prefix)
			}
		}
		c.Flags().VisitAll(func(fl *pflag.Flag) {
			src, ok := flagNames[path+" --"+fl.Name]
			if !ok {
				src, ok = flagNames["* --"+fl.Name]
			}
			if !ok {
				return
			}
			_ = c.RegisterFlagCompletionFunc(fl.Name, func(cmd *cobra.Command, _ []string, prefix string) ([]string, cobra.ShellCompDirective) {
				return completeFrom(cmd, opts, src, prefix)
			})
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// completeFrom lists src's values that start with prefix. Errors (no server,
// no credentials) complete nothing rather than print into the shell; the
// command itself says what is wrong when run.
func completeFrom(cmd *cobra.Command, opts *rootOptions, src nameSource, prefix string) ([]string, cobra.ShellCompDirective) {
	quiet := *opts
	quiet.logLevel = "error"
	quiet.output = "json"
	names, err := src(&quiet, apiFlagsOf(cmd))
	if err != nil {
		cobra.CompDebugln("completion: "+err.Error(), true)
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	seen := map[string]bool{}
	for _, n := range names {
		if n != "" && strings.HasPrefix(n, prefix) && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// apiFlagsOf reads the API connection flags given on the command line being
// completed (they are the group's persistent flags).
func apiFlagsOf(cmd *cobra.Command) *apiFlags {
	f := &apiFlags{}
	str := func(name string) string {
		if fl := cmd.Flag(name); fl != nil {
			return fl.Value.String()
		}
		return ""
	}
	f.url, f.key, f.secret, f.caFile = str("api-url"), str("api-key"), str("secret-key"), str("api-ca")
	f.insecure = str("insecure") == "true"
	return f
}
