package cloudstack

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ztpd/ztpd/internal/clusters"
)

// A limit is a parameter newer CloudStack takes that ztpd honours only in
// some values (or in none): a value it cannot honour is refused with 431
// naming the parameter and why, never dropped. Parameters CloudStack does
// not know are ignored, as CloudStack ignores them.
type limit struct {
	Name  string
	Type  string // as paramDef's; "map" for name[i].key=value parameters
	Since string // the CloudStack release that added it ("" before 4.14)
	Desc  string // what CloudStack does with it and which values ztpd takes
	// refuse says why r's value cannot be honoured, "" when it can.
	refuse func(r *csRequest) string
}

// present reports whether r carries l (a map parameter as any of its entries).
func (l limit) present(r *csRequest) bool {
	if l.Type != "map" {
		return r.has(l.Name)
	}
	return len(r.entries(l.Name)) > 0
}

// shown is l's value in r as the refusal quotes it.
func (l limit) shown(r *csRequest) string {
	if l.Type != "map" {
		return r.str(l.Name)
	}
	var parts []string
	for _, e := range r.entries(l.Name) {
		keys := make([]string, 0, len(e))
		for k := range e {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		kv := make([]string, len(keys))
		for i, k := range keys {
			kv[i] = k + ":" + e[k]
		}
		parts = append(parts, "{"+strings.Join(kv, ",")+"}")
	}
	return strings.Join(parts, ",")
}

// checkLimits refuses the first parameter of r whose value ztpd cannot honour.
func checkLimits(r *csRequest) *csError {
	for _, l := range r.cmd.Limits {
		if !l.present(r) {
			continue
		}
		if why := l.refuse(r); why != "" {
			return &csError{code: csParamError, cscode: csInvalidValue,
				text: fmt.Sprintf("ztpd cannot honour parameter %s=%s: %s", l.Name, l.shown(r), why)}
		}
	}
	return nil
}

// entries are the name[i].key=value entries of map parameter name, by index.
func (r *csRequest) entries(name string) []map[string]string {
	byIndex := map[string]map[string]string{}
	prefix := name + "["
	for k, v := range r.p {
		rest, ok := strings.CutPrefix(k, prefix)
		if !ok {
			continue
		}
		idx, key, ok := strings.Cut(rest, "].")
		if !ok {
			continue
		}
		if byIndex[idx] == nil {
			byIndex[idx] = make(map[string]string, 2) // one entry: node and offering, key and value
		}
		byIndex[idx][key] = v
	}
	idxs := make([]string, 0, len(byIndex))
	for i := range byIndex {
		idxs = append(idxs, i)
	}
	sort.Slice(idxs, func(a, b int) bool {
		if len(idxs[a]) != len(idxs[b]) {
			return len(idxs[a]) < len(idxs[b])
		}
		return idxs[a] < idxs[b]
	})
	out := make([]map[string]string, len(idxs))
	for i, idx := range idxs {
		out[i] = byIndex[idx]
	}
	return out
}

// never is the refusal of a parameter no value of which ztpd honours.
func never(why string) func(*csRequest) string {
	return func(*csRequest) string { return why }
}

// onlyFalse accepts a boolean parameter when false.
func onlyFalse(name, why string) func(*csRequest) string {
	return func(r *csRequest) string {
		if r.boolean(name) {
			return why
		}
		return ""
	}
}

// onlyZero accepts a number parameter when 0.
func onlyZero(name, why string) func(*csRequest) string {
	return func(r *csRequest) string {
		if strings.TrimSpace(r.str(name)) == "0" {
			return ""
		}
		return why
	}
}

// sameOffering accepts per-role offerings (nodeofferings) that each name
// the command's serviceofferingid: ztpd gives every role of a cluster its
// one offering.
func sameOffering(r *csRequest) string {
	want, ok := clusters.OfferingByID(r.str("serviceofferingid"))
	for _, e := range r.entries("nodeofferings") {
		off, found := clusters.OfferingByID(e["offering"])
		if !ok || !found || off.ID != want.ID {
			return "ztpd gives every node of a cluster the cluster's one service offering; name serviceofferingid instead, or the same offering for every node type"
		}
		switch strings.ToLower(e["node"]) {
		case "control", "worker":
		case "etcd":
			return "ztpd runs etcd on the control planes (kubeadm's stacked etcd), not on etcd nodes"
		default:
			return fmt.Sprintf("node type %q is none of control, worker, etcd", e["node"])
		}
	}
	return ""
}

const (
	whyAutoscaling = "Autoscaling is not supported by ztpd: devices join by provisioning, not by VM deployment"
	whyNoVMs       = "ztpd provisions devices that boot by themselves (switches, servers, VMs others run), not VMs it deploys"
)

// createLimits are createKubernetesCluster's parameters of CloudStack 4.19
// to 4.22 (and the older docker registry ones) that ztpd honours only in
// some values.
var createLimits = []limit{
	{"clustertype", "string", "4.19.0", "CloudManaged (the default); ExternalManaged is not supported by ztpd", func(r *csRequest) string {
		switch v := r.str("clustertype"); v {
		case "CloudManaged":
			return ""
		case "ExternalManaged":
			return "ztpd registers no clusters it did not create"
		default:
			return "Unable to resolve cluster type " + v + " to a supported value (CloudManaged, ExternalManaged)"
		}
	}},
	{"etcdnodes", "long", "4.21.0", "0 only: ztpd runs etcd on the control planes (kubeadm's stacked etcd)",
		onlyZero("etcdnodes", "ztpd runs etcd on the control planes (kubeadm's stacked etcd), not on dedicated etcd nodes")},
	{"nodeofferings", "map", "4.21.0", "node type to service offering: only control and worker, each with serviceofferingid", sameOffering},
	{"nodetemplates", "map", "4.21.0", "not supported: a device's profile, not a template, says what it runs",
		never("a device's profile says what it runs; ztpd deploys no templates")},
	{"hypervisor", "string", "4.21.0", "not supported: " + whyNoVMs, never(whyNoVMs)},
	{"cniconfigurationid", "uuid", "4.21.0", "not supported: the CNI is the binaries ISO's network.yaml",
		never("the CNI is the one in the Kubernetes version's binaries ISO (network.yaml); ztpd keeps no CNI configurations")},
	{"cniconfigdetails", "map", "4.21.0", "not supported (see cniconfigurationid)",
		never("ztpd keeps no CNI configurations to fill in")},
	{"enablecsi", "boolean", "4.22.0", "false only: ztpd installs no CSI driver",
		onlyFalse("enablecsi", "ztpd installs no CloudStack CSI driver: there are no CloudStack volumes behind its devices")},
	{"asnumber", "long", "", "not supported: ztpd sets up no routed (BGP) network for a cluster",
		never("ztpd sets up no routed network for a cluster, so there is no AS to number")},
	{"projectid", "uuid", "", "not supported: ztpd has no projects",
		never("ztpd has no projects; a cluster belongs to the account of the key that creates it")},
	{"dockerregistryusername", "string", "", "not supported: " + whyRegistry, never(whyRegistry)},
	{"dockerregistrypassword", "string", "", "not supported: " + whyRegistry, never(whyRegistry)},
	{"dockerregistryurl", "string", "", "not supported: " + whyRegistry, never(whyRegistry)},
	{"dockerregistryemail", "string", "", "not supported: " + whyRegistry, never(whyRegistry)},
}

const whyRegistry = "ztpd configures no private image registry on the nodes; the binaries ISO carries the images"

// scaleLimits are scaleKubernetesCluster's.
var scaleLimits = []limit{
	{"autoscalingenabled", "boolean", "", "false only: " + whyAutoscaling, onlyFalse("autoscalingenabled", whyAutoscaling)},
	{"minsize", "long", "", "not supported: autoscaling only", never(whyAutoscaling)},
	{"maxsize", "long", "", "not supported: autoscaling only", never(whyAutoscaling)},
	{"nodeofferings", "map", "4.21.0", "node type to service offering: only control and worker, each with serviceofferingid", sameOffering},
}
