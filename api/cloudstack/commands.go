package cloudstack

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ztpd/ztpd/api/bodycache"
	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// csTime formats times as CloudStack does (yyyy-MM-dd'T'HH:mm:ssZ).
func csTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05-0700")
}

const (
	javaUserK8s  = "org.apache.cloudstack.api.command.user.kubernetes."
	javaAdminK8s = "org.apache.cloudstack.api.command.admin.kubernetes."
)

var clusterFields = []string{"id", "name", "description", "account", "domainid", "domain", "zoneid", "zonename", "kubernetesversionid",
	"kubernetesversionname", "serviceofferingid", "serviceofferingname", "size", "controlnodes", "masternodes",
	"cpunumber", "memory", "state", "endpoint", "keypair", "networkid", "virtualmachines", "ipaddress",
	"created", "autoscalingenabled", "minsize", "maxsize", "clustertype", "controlofferingid", "controlofferingname",
	"csienabled", "etcdnodes", "etcdips", "etcdofferingid", "etcdofferingname", "workerofferingid", "workerofferingname", "templateid", "templatename",
	"cniconfigurationid", "cniconfigname"}

var versionFields = []string{"id", "name", "semanticversion", "isoid", "isoname", "isostate", "isourl", "zoneid",
	"zonename", "state", "mincpunumber", "minmemory", "supportsha", "supportsautoscaling", "directdownload", "created"}

var asyncFields = []string{"jobid"}

func (d *Door) commandTable() map[string]*command {
	page := []paramDef{{"page", "integer", false, "page number, from 1"}, {"pagesize", "integer", false, "items per page (-1: all)"}}
	idParam := paramDef{"id", "uuid", true, "the ID of the Kubernetes cluster"}
	cmds := []*command{
		{Name: "addKubernetesSupportedVersion", Desc: "Add a supported Kubernetes version", Admin: true,
			JavaClass: javaAdminK8s + "version.AddKubernetesSupportedVersionCmd",
			Params: []paramDef{
				{"semanticversion", "string", true, "the semantic version of the Kubernetes version, e.g. 1.31.4"},
				{"name", "string", false, "the name of the version (default v<semanticversion>)"},
				{"url", "string", false, "the URL of the binaries ISO (required)"},
				{"checksum", "string", false, "the checksum of the binaries ISO, e.g. {SHA-256}<hex>"},
				{"mincpunumber", "integer", false, "minimum vCPUs per node (>= 2)"},
				{"minmemory", "integer", false, "minimum memory per node in MiB (>= 2048)"},
				{"zoneid", "uuid", false, "the zone the version is for"},
				{"directdownload", "boolean", false, "ignored: ztpd serves ISOs itself"},
			}, Response: versionFields, run: (*Door).csAddVersion},
		{Name: "deleteKubernetesSupportedVersion", Desc: "Delete a Kubernetes version", Admin: true, Async: true,
			JavaClass: javaAdminK8s + "version.DeleteKubernetesSupportedVersionCmd",
			Params: []paramDef{{"id", "uuid", true, "the ID of the Kubernetes version"},
				{"deleteiso", "boolean", false, "also delete the binaries ISO from the image store"}},
			Response: asyncFields, run: (*Door).csDeleteVersion},
		{Name: "updateKubernetesSupportedVersion", Desc: "Enable or disable a Kubernetes version", Admin: true,
			JavaClass: javaAdminK8s + "version.UpdateKubernetesSupportedVersionCmd",
			Params: []paramDef{{"id", "uuid", true, "the ID of the Kubernetes version"},
				{"state", "string", true, "Enabled or Disabled"}},
			Response: versionFields, run: (*Door).csUpdateVersion},
		{Name: "listKubernetesSupportedVersions", Desc: "List supported Kubernetes versions",
			JavaClass: javaUserK8s + "version.ListKubernetesSupportedVersionsCmd",
			Params: append([]paramDef{{"id", "uuid", false, "the ID of the version"}, {"keyword", "string", false, "part of the name"},
				{"zoneid", "uuid", false, "versions available in this zone"},
				{"minimumsemanticversion", "string", false, "at least this version"},
				{"minimumkubernetesversionid", "uuid", false, "at least this version's semantic version"}}, page...),
			Response: versionFields, run: (*Door).csListVersions},
		{Name: "createKubernetesCluster", Desc: "Create a Kubernetes cluster", Async: true,
			JavaClass: javaUserK8s + "cluster.CreateKubernetesClusterCmd",
			Params: []paramDef{
				{"name", "string", true, "the cluster name"},
				{"description", "string", false, "the cluster description"},
				{"zoneid", "uuid", true, "the zone (listZones)"},
				{"kubernetesversionid", "uuid", false, "the Kubernetes version (required for CloudManaged; ExternalManaged: what joining VMs install, by default the API server's)"},
				{"serviceofferingid", "uuid", false, "the node service offering (listServiceOfferings; required for CloudManaged)"},
				{"size", "long", false, "the number of worker nodes (required for CloudManaged; ExternalManaged: how many devices ztpd onboards, 0 for no cap)"},
				{"kubeconfig", "string", false, "ztpd, ExternalManaged: the kubeconfig text (POST) of an identity bound to ztpd's onboarding role; stored sealed, never shown again"},
				{"controlnodes", "long", false, "the number of control-plane nodes (default 1; > 1 needs 1.16.0+)"},
				{"masternodes", "long", false, "alias of controlnodes"},
				{"keypair", "string", false, "SSH key pair name"},
				{"networkid", "uuid", false, "network ID (recorded)"},
				{"externalloadbalanceripaddress", "string", false, "external load balancer address for HA clusters"},
				{"noderootdisksize", "long", false, "node root disk size in GiB (recorded)"},
				{"joinmethod", "string", false, "ztpd: kubeadm (default), k3s or sonic (a switch fabric: a kubeadm cluster whose control plane is the first VM or server admitted as control-plane; its switches are the workers)"},
			}, Limits: createLimits, Response: append([]string{"id"}, asyncFields...), run: (*Door).csCreateCluster},
		{Name: "startKubernetesCluster", Desc: "Start a stopped Kubernetes cluster (or recover one in Alert)", Async: true,
			JavaClass: javaUserK8s + "cluster.StartKubernetesClusterCmd",
			Params:    []paramDef{idParam}, Response: asyncFields, run: (*Door).csStartCluster},
		{Name: "stopKubernetesCluster", Desc: "Stop a running Kubernetes cluster", Async: true,
			JavaClass: javaUserK8s + "cluster.StopKubernetesClusterCmd",
			Params:    []paramDef{idParam}, Response: asyncFields, run: (*Door).csStopCluster},
		{Name: "deleteKubernetesCluster", Desc: "Delete a Kubernetes cluster", Async: true,
			JavaClass: javaUserK8s + "cluster.DeleteKubernetesClusterCmd",
			Params:    []paramDef{idParam, {"cleanup", "boolean", false, "ignored"}, {"expunge", "boolean", false, "ignored"}},
			Response:  asyncFields, run: (*Door).csDeleteCluster},
		{Name: "scaleKubernetesCluster", Desc: "Scale a created, running or stopped Kubernetes cluster", Async: true,
			JavaClass: javaUserK8s + "cluster.ScaleKubernetesClusterCmd",
			Params: []paramDef{idParam, {"size", "long", false, "the new number of worker nodes"},
				{"serviceofferingid", "uuid", false, "a new, not smaller, service offering"},
				{"nodeids", "list", false, "the IDs of the worker nodes to remove (comma-separated; their virtualmachines IDs)"}},
			Limits: scaleLimits, Response: asyncFields, run: (*Door).csScaleCluster},
		{Name: "upgradeKubernetesCluster", Desc: "Upgrade a running Kubernetes cluster", Async: true,
			JavaClass: javaUserK8s + "cluster.UpgradeKubernetesClusterCmd",
			Params:    []paramDef{idParam, {"kubernetesversionid", "uuid", true, "the version to upgrade to"}},
			Response:  asyncFields, run: (*Door).csUpgradeCluster},
		{Name: "listKubernetesClusters", Desc: "List Kubernetes clusters",
			JavaClass: javaUserK8s + "cluster.ListKubernetesClustersCmd",
			Params: append([]paramDef{{"id", "uuid", false, "the cluster ID"}, {"name", "string", false, "the cluster name"},
				{"state", "string", false, "the cluster state"}, {"keyword", "string", false, "part of name or description"},
				{"listall", "boolean", false, "admin keys: list every account's clusters (default: the key's account)"},
				{"account", "string", false, "only this account's clusters (admin keys: any account)"},
				{"domainid", "uuid", false, "ignored: ztpd has one domain, ROOT"},
				{"clustertype", "string", false, "CloudManaged (clusters ztpd built) or ExternalManaged (existing clusters registered from a kubeconfig)"}}, page...),
			Response: clusterFields, run: (*Door).csListClusters},
		{Name: "getKubernetesClusterConfig", Desc: "Get the kubeconfig of a Kubernetes cluster",
			JavaClass: javaUserK8s + "cluster.GetKubernetesClusterConfigCmd",
			Params:    []paramDef{idParam}, Response: []string{"id", "name", "configdata"}, run: (*Door).csClusterConfig},
		{Name: "queryAsyncJobResult", Desc: "Get the status and result of an asynchronous job",
			JavaClass: "org.apache.cloudstack.api.command.user.job.QueryAsyncJobResultCmd",
			Params:    []paramDef{{"jobid", "uuid", true, "the job ID"}},
			Response: []string{"jobid", "jobstatus", "jobprocstatus", "jobresultcode", "jobresulttype", "jobresult",
				"jobinstancetype", "jobinstanceid", "cmd", "created", "completed", "userid", "accountid"},
			run: (*Door).csQueryJob},
		{Name: "listZones", Desc: "List availability zones (ztpd has one)",
			JavaClass: "org.apache.cloudstack.api.command.user.zone.ListZonesCmd",
			Params: append([]paramDef{{"id", "uuid", false, "the zone ID"}, {"name", "string", false, "the zone name"},
				{"keyword", "string", false, "part of the name"}, {"available", "boolean", false, "ignored"}}, page...),
			Response: []string{"id", "name", "allocationstate", "networktype"}, run: (*Door).csListZones},
		{Name: "listServiceOfferings", Desc: "List the node service offerings",
			JavaClass: "org.apache.cloudstack.api.command.user.offering.ListServiceOfferingsCmd",
			Params: append([]paramDef{{"id", "uuid", false, "the offering ID"}, {"name", "string", false, "the offering name"},
				{"keyword", "string", false, "part of the name"}}, page...),
			Response: []string{"id", "name", "displaytext", "cpunumber", "cpuspeed", "memory"}, run: (*Door).csListOfferings},
		{Name: "listCapabilities", Desc: "List the capabilities of this API",
			JavaClass: "org.apache.cloudstack.api.command.user.config.ListCapabilitiesCmd",
			Response: []string{"allowusercreateprojects", "apilimitinterval", "apilimitmax", "cloudstackversion",
				"kubernetesclusterexperimentalfeaturesenabled", "kubernetesserviceenabled", "userpublictemplateenabled"},
			run: (*Door).csCapabilities},
		{Name: "listApis", Desc: "List the APIs available to the caller",
			JavaClass: "org.apache.cloudstack.api.command.user.discovery.ListApisCmd",
			Params:    []paramDef{{"name", "string", false, "one API by name"}},
			Response:  []string{"name", "description", "isasync", "params", "response"}, run: (*Door).csListApis},
	}
	cmds = append(cmds, nodeCommands()...)
	cmds = append(cmds, cniCommands()...)
	cmds = append(cmds, templateCommands()...)
	m := make(map[string]*command, len(cmds))
	for _, c := range cmds {
		if c.Since == "" && (strings.HasPrefix(c.JavaClass, javaUserK8s) || strings.HasPrefix(c.JavaClass, javaAdminK8s)) {
			c.Since = "4.14.0" // the Kubernetes service's first release
		}
		m[strings.ToLower(c.Name)] = c
	}
	return m
}

// ---- object renderers ----

// vmState maps a membership state to the VM state CloudStack clients know.
func vmState(s core.DeviceState) string {
	switch s {
	case core.StateJoined, core.StateNotReady:
		return "Running"
	case core.StateLost:
		return "Unknown"
	case core.StateLeaving:
		return "Stopping"
	case core.StateFailed:
		return "Error"
	case core.StateLeft:
		return "Stopped"
	}
	return "Starting"
}

func renderCluster(v clusters.ClusterView) client.CSCluster {
	c := v.Cluster
	endpoint, ip := v.Endpoint()
	out := client.CSCluster{ID: c.ID, Name: c.Name, Description: c.Description, Account: core.ClusterAccount(c),
		DomainID: v.Domain.ID, Domain: v.Domain.Name, ZoneID: v.Zone.ID, ZoneName: v.Zone.Name,
		KubernetesVersionID: c.VersionID, KubernetesVersionName: v.Version.Name,
		ServiceOfferingID: c.ServiceOfferingID, ServiceOfferingName: v.Offering.Name,
		Size: c.Size, ControlNodes: c.ControlNodes, MasterNodes: c.ControlNodes,
		CPUNumber: fmt.Sprint(v.Cores()), Memory: fmt.Sprint(v.MemoryMB()), State: string(c.State),
		Endpoint: endpoint, Keypair: c.Keypair, NetworkID: c.NetworkID, IPAddress: ip,
		Created: csTime(c.Created), ClusterType: c.TypeName(), VirtualMachines: make([]client.CSVM, 0, len(v.Members)),
		// A role runs on its per-role offering, else the cluster's; ztpd
		// installs no CSI driver (createLimits).
		ControlOfferingID: v.RoleOffering(clusters.NodeControl).ID, ControlOfferingName: v.RoleOffering(clusters.NodeControl).Name,
		WorkerOfferingID: v.RoleOffering(clusters.NodeWorker).ID, WorkerOfferingName: v.RoleOffering(clusters.NodeWorker).Name,
		EtcdNodes: c.EtcdNodes}
	if c.EtcdNodes > 0 {
		out.EtcdOfferingID, out.EtcdOfferingName = v.RoleOffering(clusters.NodeEtcd).ID, v.RoleOffering(clusters.NodeEtcd).Name
		out.EtcdIPs = v.EtcdIPs()
	}
	if len(c.NodeTemplates) > 0 {
		// A node template is a profile, its ID the one listTemplates shows.
		out.ZTPDNodeProfiles = c.NodeTemplates
		out.ZTPDNodeTemplates = make(map[string]string, len(c.NodeTemplates))
		for t, name := range c.NodeTemplates {
			out.ZTPDNodeTemplates[t] = clusters.TemplateID(name)
		}
		if name := clusters.RoleProfile(c, clusters.NodeWorker); name != "" {
			out.TemplateID, out.TemplateName = clusters.TemplateID(name), name
		}
	}
	if o := c.Observed; o != nil {
		reachable, ready := o.APIReachable, o.ReadyNodes
		out.ZTPDAPIReachable, out.ZTPDReadyNodes = &reachable, &ready
		if !o.LastSeen.IsZero() {
			out.ZTPDLastSeen = csTime(o.LastSeen)
		}
	}
	if c.State == core.ClusterStarting {
		out.ZTPDWaiting = clusters.StartingReason(c)
	}
	if c.CNI != nil {
		out.CNIConfigurationID, out.CNIConfigName = c.CNI.ConfigID, c.CNI.Name
		out.ZTPDCNIState = "pending"
		if o := c.Observed; o != nil && o.CNI != nil {
			out.ZTPDCNIState = o.CNI.State
			out.ZTPDCNIMessage = o.CNI.Message
			if o.CNI.State == clusters.CNIStateApplied {
				out.ZTPDCNIMessage = fmt.Sprintf("%d objects applied %s", o.CNI.Objects, csTime(o.CNI.At))
			}
		}
	}
	for _, m := range v.Members {
		vm := client.CSVM{ID: m.DeviceID, Name: m.DeviceID, DisplayName: m.DeviceID,
			State: vmState(m.State), ZoneID: v.Zone.ID, ZoneName: v.Zone.Name, Created: csTime(m.Created),
			ZTPDRole: m.Role, ZTPDState: string(m.State), ZTPDNode: m.NodeName,
			ZTPDManualUpgrade: clusters.IsManualUpgrade(c, m.DeviceID)}
		if n := m.Node; n != nil && !n.Deleted {
			vm.ZTPDNodeReady, vm.ZTPDNodeSeen = n.Ready, csTime(n.Seen)
		}
		vm.IPAddress = m.IP
		if m.Hostname != "" {
			vm.Name, vm.DisplayName, vm.Hostname = m.Hostname, m.Hostname, m.Hostname
		}
		out.VirtualMachines = append(out.VirtualMachines, vm)
	}
	return out
}

func (d *Door) renderVersion(v core.Version) client.CSVersion {
	out := client.CSVersion{ID: v.ID, Name: v.Name, SemanticVersion: v.SemVer, ISOID: v.ImageID, ISOName: v.ISOName,
		ISOState: "Ready", ISOURL: v.ISOURL, State: v.State, MinCPUNumber: v.MinCPU, MinMemory: v.MinMemoryMB,
		SupportsHA: clusters.SupportsHA(v.SemVer), SupportsAutoscaling: clusters.SupportsAutoscaling(v.SemVer),
		Created: csTime(v.Created)}
	if out.ISOName == "" {
		out.ISOName = v.Name + "-Kubernetes-Binaries-ISO"
	}
	if v.ZoneID != "" {
		z := d.clusters.Zone()
		out.ZoneID, out.ZoneName = z.ID, z.Name
	}
	return out
}

// ---- versions ----

func (d *Door) csAddVersion(r *csRequest) (any, *csError) {
	cpu, e := r.integer("mincpunumber", 0)
	if e != nil {
		return nil, e
	}
	mem, e := r.integer("minmemory", 0)
	if e != nil {
		return nil, e
	}
	spec := clusters.VersionSpec{Name: r.str("name"), SemVer: r.str("semanticversion"), URL: r.str("url"),
		Checksum: r.str("checksum"), MinCPU: cpu, MinMemoryMB: mem, ZoneID: r.str("zoneid")}
	v, err := d.clusters.AddVersion(r.ctx, r.caller, spec)
	if err != nil {
		return nil, domainError(err)
	}
	return versionAnswer{d.renderVersion(v)}, nil
}

func (d *Door) csUpdateVersion(r *csRequest) (any, *csError) {
	v, err := d.clusters.SetVersionState(r.ctx, r.caller, r.str("id"), r.str("state"))
	if err != nil {
		return nil, domainError(err)
	}
	return versionAnswer{d.renderVersion(v)}, nil
}

func (d *Door) csDeleteVersion(r *csRequest) (any, *csError) {
	return asyncJob(d.clusters.DeleteVersion(r.ctx, r.caller, r.str("id"), r.boolean("deleteiso")))
}

func (d *Door) csListVersions(r *csRequest) (any, *csError) {
	page, size, e := paging(r)
	if e != nil {
		return nil, e
	}
	f := clusters.VersionFilter{ID: r.str("id"), Keyword: r.str("keyword"), ZoneID: r.str("zoneid"), MinSemVer: r.str("minimumsemanticversion")}
	if id := r.str("minimumkubernetesversionid"); id != "" {
		if f.MinSemVer != "" {
			return nil, &csError{code: csParamError, cscode: csInvalidValue, text: "Both parameters minimumsemanticversion and minimumkubernetesversionid can not be passed together"}
		}
		mv, err := d.clusters.GetVersion(r.ctx, id)
		if err != nil {
			return nil, &csError{code: csParamError, cscode: csInvalidValue, text: "Invalid minimumkubernetesversionid passed"}
		}
		f.MinSemVer = mv.SemVer
	}
	vs, err := d.clusters.ListVersions(r.ctx, f)
	if err != nil {
		return nil, domainError(err)
	}
	items := []client.CSVersion{}
	for _, v := range pageOf(vs, page, size) {
		items = append(items, d.renderVersion(v))
	}
	return listBody("kubernetessupportedversion", len(vs), items), nil
}

// ---- clusters ----

func (d *Door) csCreateCluster(r *csRequest) (any, *csError) {
	size, e := r.integer("size", 0)
	if e != nil {
		return nil, e
	}
	if r.str("clustertype") == core.ClusterExternalManaged {
		c, j, err := d.clusters.RegisterExternal(r.ctx, r.caller, clusters.ExternalSpec{Name: r.str("name"), Description: r.str("description"),
			ZoneID: r.str("zoneid"), Kubeconfig: []byte(r.str("kubeconfig")), VersionID: r.str("kubernetesversionid"), Size: size})
		if err != nil {
			return nil, domainError(err)
		}
		return jobStarted{ID: c.ID, JobID: j.ID}, nil
	}
	nodeOfferings, e := nodeMap(r, "nodeofferings", "offering")
	if e != nil {
		return nil, e
	}
	nodeTemplates, e := nodeMap(r, "nodetemplates", "template")
	if e != nil {
		return nil, e
	}
	// CloudStack 4.19 made these optional for ExternalManaged only; 4.21
	// takes the workers' offering from nodeofferings.
	for _, name := range []string{"kubernetesversionid", "serviceofferingid", "size"} {
		if r.str(name) == "" && (name != "serviceofferingid" || nodeOfferings[clusters.NodeWorker] == "") {
			return nil, paramMissing(r.cmd.Name, name)
		}
	}
	control, e := r.integer("controlnodes", 0)
	if e != nil {
		return nil, e
	}
	if control == 0 {
		if control, e = r.integer("masternodes", 1); e != nil {
			return nil, e
		}
	}
	disk, e := r.integer("noderootdisksize", 0)
	if e != nil {
		return nil, e
	}
	etcd, e := r.integer("etcdnodes", 0)
	if e != nil {
		return nil, e
	}
	spec := clusters.ClusterSpec{Name: r.str("name"), Description: r.str("description"), ZoneID: r.str("zoneid"),
		VersionID: r.str("kubernetesversionid"), ServiceOfferingID: r.str("serviceofferingid"), Size: size,
		ControlNodes: control, Keypair: r.str("keypair"), NetworkID: r.str("networkid"),
		ExternalLBIP: r.str("externalloadbalanceripaddress"), NodeRootDiskSize: int64(disk), JoinMethod: r.str("joinmethod"),
		CNIConfigID: r.str("cniconfigurationid"), CNIDetails: cniDetails(r),
		NodeOfferings: nodeOfferings, NodeTemplates: nodeTemplates, EtcdNodes: etcd}
	c, j, err := d.clusters.CreateCluster(r.ctx, r.caller, spec)
	if err != nil {
		return nil, domainError(err)
	}
	return jobStarted{ID: c.ID, JobID: j.ID}, nil
}

func asyncJob(j core.Job, err error) (any, *csError) {
	if err != nil {
		return nil, domainError(err)
	}
	return jobStarted{JobID: j.ID}, nil
}

func (d *Door) csStartCluster(r *csRequest) (any, *csError) {
	return asyncJob(d.clusters.StartCluster(r.ctx, r.caller, r.str("id")))
}

func (d *Door) csStopCluster(r *csRequest) (any, *csError) {
	return asyncJob(d.clusters.StopCluster(r.ctx, r.caller, r.str("id")))
}

func (d *Door) csDeleteCluster(r *csRequest) (any, *csError) {
	// CloudStack has no force: a delete whose members cannot be taken out
	// fails (the REST API's ?force=true goes on).
	return asyncJob(d.clusters.DeleteCluster(r.ctx, r.caller, r.str("id"), clusters.DeleteOptions{}))
}

func (d *Door) csScaleCluster(r *csRequest) (any, *csError) {
	size, e := r.integer("size", 0)
	if e != nil {
		return nil, e
	}
	if r.has("size") && size < 1 {
		return nil, &csError{code: csParamError, cscode: csInvalidValue, text: fmt.Sprintf("Kubernetes cluster ID: %s cannot be scaled for size, %d", r.str("id"), size)}
	}
	var remove []string
	for _, id := range strings.Split(r.str("nodeids"), ",") {
		if id = strings.TrimSpace(id); id != "" {
			remove = append(remove, id)
		}
	}
	nodeOfferings, e := nodeMap(r, "nodeofferings", "offering")
	if e != nil {
		return nil, e
	}
	return asyncJob(d.clusters.ScaleClusterShapes(r.ctx, r.caller, r.str("id"), size, r.str("serviceofferingid"), nodeOfferings, remove...))
}

func (d *Door) csUpgradeCluster(r *csRequest) (any, *csError) {
	return asyncJob(d.clusters.UpgradeCluster(r.ctx, r.caller, r.str("id"), r.str("kubernetesversionid")))
}

// csListClusters. Query plan: the clusters (one record each) filtered in
// memory, then for each cluster on the page its roster index
// (member/<cluster>/<device>) and each member's membership and device
// record: the work grows with the members listed, which CloudStack's answer
// carries in full (virtualmachines). The rendered answer is kept for the
// store generation it read (bodycache.Cache), each cluster's JSON for its
// fingerprint (renderCache), and its gzip form is made once: while nothing
// changes, a request costs a cache lookup and the write of the body.
func (d *Door) csListClusters(r *csRequest) (any, *csError) {
	page, size, e := paging(r)
	if e != nil {
		return nil, e
	}
	switch t := r.str("clustertype"); t {
	case "", core.ClusterCloudManaged, core.ClusterExternalManaged:
	default:
		return nil, &csError{code: csParamError, cscode: csInvalidValue,
			text: "Unable to resolve cluster type " + t + " to a supported value (CloudManaged, ExternalManaged)"}
	}
	f := clusters.ClusterFilter{ID: r.str("id"), Name: r.str("name"), State: r.str("state"), Keyword: r.str("keyword"), Type: r.str("clustertype"),
		ListAll: r.boolean("listall"), Account: r.str("account")}
	gen, ok := d.clusters.ViewsGeneration()
	if !ok {
		b, e := d.renderClusterList(r, f, page, size)
		if e != nil {
			return nil, e
		}
		return wholeBody{Raw: b.Body}, nil
	}
	// Keyed by the caller's key too: what a key may see is the key's.
	key := bodycache.Key(r.cmd.Name, r.cred.APIKey, string(r.cred.Role), f.ID, f.Name, f.State, f.Keyword, f.Type,
		strconv.FormatBool(f.ListAll), f.Account, strconv.Itoa(page), strconv.Itoa(size))
	b, err := d.bodies.GetRendering(key, gen, func() (bodycache.Rendering, error) {
		b, e := d.renderClusterList(r, f, page, size)
		if e != nil {
			return bodycache.Rendering{}, e
		}
		return b, nil
	})
	if err != nil {
		if e, ok := err.(*csError); ok {
			return nil, e
		}
		return nil, domainError(err)
	}
	return wholeBody(b), nil
}

// renderClusterList renders a whole listKubernetesClusters answer. Its
// gzip form is joined from each cluster's cached compressed segment: at
// 100,000 members the answer is 31 MB of JSON, and compressing it whole
// again whenever one cluster's status changed took ~0.8 s, which every
// request for it waited out.
func (d *Door) renderClusterList(r *csRequest, f clusters.ClusterFilter, page, size int) (bodycache.Rendering, *csError) {
	// The request may end before a rendering that others wait for.
	ctx := context.WithoutCancel(r.ctx)
	views, total, err := d.clusters.ListClusters(ctx, r.caller, f, page, size)
	if err != nil {
		return bodycache.Rendering{}, domainError(err)
	}
	key := r.cmd.responseKey()
	if total == 0 {
		return bodycache.Rendering{Body: []byte(`{"` + key + `":{}}`)}, nil
	}
	items := make([]*renderEntry, 0, len(views))
	for _, v := range views {
		e, err := d.renders.get(v)
		if err != nil {
			return bodycache.Rendering{}, domainError(err)
		}
		items = append(items, e)
	}
	// Assembled by hand: the items are already valid JSON, and encoding a
	// []json.RawMessage would re-scan every byte of them. parts are the
	// body's pieces in order: head, item, comma, item, ..., tail.
	parts := make([][]byte, 0, 2*len(items)+1)
	parts = append(parts, []byte(`{"`+key+`":{"count":`+strconv.Itoa(total)+`,"kubernetescluster":[`))
	for i, it := range items {
		if i > 0 {
			parts = append(parts, comma)
		}
		parts = append(parts, it.json)
	}
	parts = append(parts, tail)
	return bodycache.Rendering{Body: bytes.Join(parts, nil), Gzip: func() []byte {
		segs := make([][]byte, len(parts)) // the head's is made by GzipJoin
		for i, it := range items {
			segs[2*i+1] = it.deflated()
		}
		for i := 2; i < len(segs)-1; i += 2 {
			segs[i] = commaSegment
		}
		segs[len(segs)-1] = tailSegment
		return httpserve.GzipJoin(parts, segs)
	}}, nil
}

var (
	comma, tail               = []byte(","), []byte("]}}")
	commaSegment, tailSegment = httpserve.DeflateSegment(comma), httpserve.DeflateSegment(tail)
)

// wholeBody is a complete response body, envelope included (see csWriteOK),
// gzipped too when it came from the response cache.
type wholeBody bodycache.Body

// renderCache keeps each cluster's encoded kubernetescluster object by the
// view's fingerprint, which changes with any record the view was built
// from; listing unchanged clusters then costs no JSON encoding.
type renderCache struct {
	mu sync.Mutex
	m  map[string]*renderEntry
}

// renderEntry is one cluster's encoded object and, once a gzipped answer
// needed it, its compressed segment (httpserve.DeflateSegment).
type renderEntry struct {
	fp   uint64
	json []byte

	deflateOnce sync.Once
	deflate     []byte
}

func (e *renderEntry) deflated() []byte {
	e.deflateOnce.Do(func() { e.deflate = httpserve.DeflateSegment(e.json) })
	return e.deflate
}

func (rc *renderCache) get(v clusters.ClusterView) (*renderEntry, error) {
	if v.Fingerprint == 0 {
		b, err := json.Marshal(renderCluster(v))
		return &renderEntry{json: b}, err
	}
	rc.mu.Lock()
	e, ok := rc.m[v.Cluster.ID]
	rc.mu.Unlock()
	if ok && e.fp == v.Fingerprint {
		return e, nil
	}
	b, err := json.Marshal(renderCluster(v))
	if err != nil {
		return nil, err
	}
	e = &renderEntry{fp: v.Fingerprint, json: b}
	rc.mu.Lock()
	if rc.m == nil || len(rc.m) > 10000 {
		rc.m = map[string]*renderEntry{}
	}
	rc.m[v.Cluster.ID] = e
	rc.mu.Unlock()
	return e, nil
}

func (d *Door) csClusterConfig(r *csRequest) (any, *csError) {
	c, cfg, err := d.clusters.Kubeconfig(r.ctx, r.caller, r.str("id"))
	if err != nil {
		return nil, domainError(err)
	}
	return clusterConfigAnswer{client.CSClusterConfig{ID: c.ID, Name: c.Name, ConfigData: string(cfg)}}, nil
}

// ---- async jobs ----

func (d *Door) csQueryJob(r *csRequest) (any, *csError) {
	j, err := d.clusters.GetJob(r.ctx, r.caller, r.str("jobid"))
	if err != nil {
		return nil, domainError(err)
	}
	out := client.CSJob{AccountID: j.Owner, UserID: j.Owner, JobStatus: int(j.Status), JobResultType: "object",
		JobInstanceType: j.InstanceType, JobInstanceID: j.InstanceID, Created: csTime(j.Created),
		Completed: csTime(j.Completed), JobID: j.ID, Cmd: j.Command}
	if c := d.commands[strings.ToLower(j.Command)]; c != nil {
		out.Cmd = c.JavaClass
	}
	var result any
	switch j.Status {
	case core.JobSucceeded:
		switch {
		case j.Success:
			result = jobSuccess{Success: true, DisplayText: successText(j)}
		case j.Cluster != nil:
			v, err := d.clusters.View(r.ctx, *j.Cluster)
			if err != nil {
				return nil, domainError(err)
			}
			result = clusterAnswer{renderCluster(v)}
		default:
			result = jobSuccess{Success: true}
		}
	case core.JobFailed:
		e := domainError(&core.Error{Kind: j.ErrorKind, Msg: j.Error})
		out.JobResultCode = e.code
		result = jobFailure{ErrorCode: e.code, ErrorText: j.Error}
	}
	if result != nil {
		raw, _ := json.Marshal(result)
		out.JobResult = raw
	}
	return out, nil
}

func successText(j core.Job) string {
	switch j.Command {
	case "stopKubernetesCluster":
		return "Kubernetes cluster stopped"
	case "deleteKubernetesCluster":
		if len(j.Abandoned) > 0 {
			// A forced delete (REST or CLI) queried through CloudStack.
			parts := make([]string, len(j.Abandoned))
			for i, a := range j.Abandoned {
				parts[i] = fmt.Sprintf("%s (device %s): %s", cmp.Or(a.Node, "no Node"), a.Device, a.Reason)
			}
			nodes := "nodes"
			if len(parts) == 1 {
				nodes = "node"
			}
			return fmt.Sprintf("Kubernetes cluster deleted; %d %s abandoned: %s", len(parts), nodes, strings.Join(parts, "; "))
		}
		return "Kubernetes cluster deleted"
	case "deleteKubernetesSupportedVersion":
		return "Kubernetes version deleted"
	}
	return "done"
}

// ---- discovery ----

func (d *Door) csListZones(r *csRequest) (any, *csError) {
	z := d.clusters.Zone()
	match := (!r.has("id") || r.str("id") == z.ID) && (!r.has("name") || strings.EqualFold(r.str("name"), z.Name)) &&
		(!r.has("keyword") || strings.Contains(z.Name, strings.ToLower(r.str("keyword"))))
	if !match {
		return listBody("zone", 0, nil), nil
	}
	zone := client.CSZone{ID: z.ID, Name: z.Name, Description: "ztpd appliance", AllocationState: "Enabled",
		NetworkType: "Advanced", Type: "Core"}
	return listBody("zone", 1, []client.CSZone{zone}), nil
}

func (d *Door) csListOfferings(r *csRequest) (any, *csError) {
	page, size, e := paging(r)
	if e != nil {
		return nil, e
	}
	var items []client.CSOffering
	for _, o := range clusters.Offerings {
		if r.has("id") && r.str("id") != o.ID || r.has("name") && r.str("name") != o.Name ||
			r.has("keyword") && !strings.Contains(o.Name, strings.ToLower(r.str("keyword"))) {
			continue
		}
		items = append(items, client.CSOffering{ID: o.ID, Name: o.Name, DisplayText: o.DisplayText,
			CPUNumber: o.CPU, CPUSpeed: o.CPUSpeedMHz, Memory: o.MemoryMB, StorageType: "shared", State: "Active"})
	}
	return listBody("serviceoffering", len(items), pageOf(items, page, size)), nil
}

func (d *Door) csCapabilities(r *csRequest) (any, *csError) {
	return capabilityAnswer{capability{CloudStackVersion: "4.20.0 (ztpd)", KubernetesServiceEnabled: true}}, nil
}

func (d *Door) csListApis(r *csRequest) (any, *csError) {
	var out []client.CSAPI
	for _, c := range d.commands {
		if c.Admin && !r.cred.IsAdmin() {
			continue
		}
		if r.has("name") && !strings.EqualFold(r.str("name"), c.Name) {
			continue
		}
		a := client.CSAPI{Name: c.Name, Description: c.Desc, IsAsync: c.Async, Since: c.Since, Type: "object",
			Params: []client.CSAPIParam{}, Response: []client.CSAPIResponse{}}
		for _, p := range c.Params {
			a.Params = append(a.Params, client.CSAPIParam{Name: p.Name, Description: p.Desc, Type: p.Type, Required: p.Required, Length: 255})
		}
		for _, l := range c.Limits {
			a.Params = append(a.Params, client.CSAPIParam{Name: l.Name, Description: l.Desc, Type: l.Type, Length: 255, Since: l.Since})
		}
		for _, f := range c.Response {
			a.Response = append(a.Response, client.CSAPIResponse{Name: f, Description: f, Type: "string"})
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if r.has("name") && len(out) == 0 {
		return nil, &csError{code: csParamError, cscode: csInvalidValue, text: fmt.Sprintf("API with name %s either does not exist or is not available for the caller", r.str("name"))}
	}
	return listBody("api", len(out), out), nil
}
