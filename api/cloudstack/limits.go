package cloudstack

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
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

// honoured accepts every value: a parameter of a newer release ztpd
// serves in full, listed with the release that added it.
func honoured(*csRequest) string { return "" }

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

// nodeMap reads a per-role map parameter (name[i].node=TYPE with
// name[i].VALUEKEY=VALUE, as CloudStack's nodeofferings and
// nodetemplates) into node type to value; the service checks the types
// and values.
func nodeMap(r *csRequest, name, valueKey string) (map[string]string, *csError) {
	entries := r.entries(name)
	if len(entries) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(entries))
	for _, e := range entries {
		t, v := strings.ToLower(strings.TrimSpace(e["node"])), strings.TrimSpace(e[valueKey])
		if t == "" || v == "" {
			return nil, &csError{code: csParamError, cscode: csInvalidValue,
				text: fmt.Sprintf("Invalid value for parameter %s: each entry needs node and %s", name, valueKey)}
		}
		if prev, dup := out[t]; dup && prev != v {
			return nil, &csError{code: csParamError, cscode: csInvalidValue,
				text: fmt.Sprintf("Invalid value for parameter %s: node type %s is given twice", name, t)}
		}
		out[t] = v
	}
	return out, nil
}

// etcdNodeTypeNeedsEtcdNodes refuses a create's per-role map naming the
// etcd node type without etcd nodes (etcdnodes 0: etcd runs on the control
// planes, so no node is of type etcd).
func etcdNodeTypeNeedsEtcdNodes(name string) func(*csRequest) string {
	return func(r *csRequest) string {
		if n, e := r.integer("etcdnodes", 0); e == nil && n > 0 {
			return ""
		}
		for _, e := range r.entries(name) {
			if strings.EqualFold(strings.TrimSpace(e["node"]), clusters.NodeEtcd) {
				return "node type etcd needs etcd nodes (etcdnodes): without them etcd runs on the control planes (kubeadm's stacked etcd)"
			}
		}
		return ""
	}
}

// etcdNodeCount refuses an etcdnodes other than 0 or an odd 1 to 7.
func etcdNodeCount(r *csRequest) string {
	n, e := r.integer("etcdnodes", 0)
	if e != nil {
		return "" // the create's own parsing answers a non-number
	}
	if err := clusters.CheckEtcdNodes(n); err != nil {
		return fmt.Sprintf("use 0 (etcd on the control planes) or an odd number of dedicated etcd nodes from 1 to %d: an even count tolerates no more failed members than one fewer", clusters.MaxEtcdNodes)
	}
	if n > 0 && r.str("clustertype") == core.ClusterExternalManaged {
		return "an ExternalManaged cluster's etcd is its administrators', not nodes ztpd builds"
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
	{"clustertype", "string", "4.19.0", "CloudManaged (the default) or ExternalManaged (with kubeconfig)", func(r *csRequest) string {
		switch v := r.str("clustertype"); v {
		case "CloudManaged", "ExternalManaged":
			return ""
		default:
			return "Unable to resolve cluster type " + v + " to a supported value (CloudManaged, ExternalManaged)"
		}
	}},
	{"etcdnodes", "long", "4.21.0", "0 (etcd on the control planes, kubeadm's stacked etcd) or an odd 1 to 7: external etcd on that many dedicated members of role etcd, with the cluster's own etcd CA and keys made on the nodes",
		etcdNodeCount},
	{"nodeofferings", "map", "4.21.0", "node type (worker, control, etcd with etcdnodes) to the service offering its nodes get: nodeofferings[0].node=worker&nodeofferings[0].offering=ID; the workers' stands in for serviceofferingid", etcdNodeTypeNeedsEtcdNodes("nodeofferings")},
	{"nodetemplates", "map", "4.21.0", "node type (worker, control, etcd with etcdnodes) to the profile its nodes get, by its template ID (listTemplates) or name (ztpd has no VM templates; a profile says what a device runs): nodetemplates[0].node=worker&nodetemplates[0].template=ID", etcdNodeTypeNeedsEtcdNodes("nodetemplates")},
	{"hypervisor", "string", "4.21.0", "not supported: " + whyNoVMs, never(whyNoVMs)},
	{"cniconfigurationid", "uuid", "4.21.0", "a registered CNI configuration (listCniConfiguration), applied once the first control plane's API server answers", honoured},
	{"cniconfigdetails", "map", "4.21.0", "the CNI configuration's parameter values: cniconfigdetails[0].NAME=VALUE (or [0].key=NAME with [0].value=VALUE)", honoured},
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
	{"nodeofferings", "map", "4.21.0", "node type (worker, control, etcd of a cluster with etcd nodes) to a new, not smaller, service offering for its nodes", honoured},
}
