package client

import (
	"encoding/json"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// The REST API's views (/api/v1), the CloudStack API's objects
// (/client/api), the admin socket's answers and the request bodies the
// CLI sends: the JSON the server answers and the CLI decodes, declared
// once. The server builds them from domain values; a field added here
// appears on both sides.

// ErrorBody is the REST API's error answer.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail says what went wrong: a stable code, a message, and the
// request ID the server logged it under.
type ErrorDetail struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	RequestID string `json:"request_id,omitempty"`
}

// CSErrorBody is a CloudStack error answer (inside the command's envelope,
// or a failed job's jobresult).
type CSErrorBody struct {
	ErrorCode   int    `json:"errorcode"`
	CSErrorCode int    `json:"cserrorcode"`
	ErrorText   string `json:"errortext"`
}

// VersionRef names a cluster's Kubernetes version.
type VersionRef struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	SemVer string `json:"semver"`
}

// Member is a device in a cluster as the REST API shows it.
type Member struct {
	Device   string           `json:"device"`
	Role     string           `json:"role"`
	State    core.DeviceState `json:"state"`
	Version  string           `json:"version,omitempty"`
	IP       string           `json:"ip,omitempty"`
	Hostname string           `json:"hostname,omitempty"`
	// NodeName is the Node ztpd matches this member by; Node is that Node
	// as the cluster last showed it; Reported is the device's own word.
	NodeName string                `json:"node_name,omitempty"`
	Node     *core.NodeObservation `json:"node,omitempty"`
	Reported string                `json:"reported,omitempty"`
}

// Cluster is a cluster as the REST API shows it (openapi.json Cluster).
type Cluster struct {
	ID           string            `json:"id"`
	Name         string            `json:"name"`
	Description  string            `json:"description"`
	Account      string            `json:"account"`
	State        core.ClusterState `json:"state"`
	Version      VersionRef        `json:"version"`
	Size         int               `json:"size"`
	ControlNodes int               `json:"control_nodes"`
	OfferingID   string            `json:"offering_id"`
	OfferingName string            `json:"offering_name"`
	CPU          int               `json:"cpu"`
	MemoryMB     int               `json:"memory_mb"`
	Endpoint     string            `json:"endpoint"`
	JoinMethod   string            `json:"join_method"`
	// Type is CloudManaged (ztpd built it) or ExternalManaged (an existing
	// cluster ztpd onboards devices into).
	Type         string   `json:"type"`
	Keypair      string   `json:"keypair,omitempty"`
	NetworkID    string   `json:"network_id,omitempty"`
	ExternalLBIP string   `json:"external_lb_ip,omitempty"`
	Members      []Member `json:"members"`
	// Observed is the cluster as ztpd's watch of its API server last saw
	// it (absent until ztpd first tried); Waiting says what a Starting
	// cluster waits for.
	Observed  *core.ClusterObservation `json:"observed,omitempty"`
	Waiting   string                   `json:"waiting,omitempty"`
	Created   time.Time                `json:"created"`
	UpdatedAt time.Time                `json:"updated_at"`
	// NodeOfferings and NodeTemplates are the per-role shapes: node type
	// (worker, control) to the offering ID, and to the profile, its
	// members get; CNIConfiguration names the CNI configuration applied.
	NodeOfferings    map[string]string `json:"node_offerings,omitempty"`
	NodeTemplates    map[string]string `json:"node_templates,omitempty"`
	CNIConfiguration string            `json:"cni_configuration,omitempty"`
	// EtcdNodes is the number of dedicated etcd nodes (0: etcd on the
	// control planes); EtcdIPs their addresses by node name.
	EtcdNodes int               `json:"etcd_nodes,omitempty"`
	EtcdIPs   map[string]string `json:"etcd_ips,omitempty"`
}

// CNIConfiguration is a registered CNI configuration (openapi.json
// CNIConfiguration): a manifest applied to the clusters created with it,
// its {{ ds.meta_data.NAME }} parameters substituted.
type CNIConfiguration struct {
	ID       string    `json:"id"`
	Name     string    `json:"name"`
	Manifest string    `json:"manifest"`
	Params   []string  `json:"params"`
	Account  string    `json:"account"`
	Created  time.Time `json:"created"`
}

// CNIConfigurationCreate is POST /api/v1/cni-configurations (openapi.json
// CNIConfigurationCreate): the manifest as text, the names of the
// parameters it uses as {{ ds.meta_data.NAME }}.
type CNIConfigurationCreate struct {
	Name     string   `json:"name"`
	Manifest string   `json:"manifest"`
	Params   []string `json:"params"`
}

// Job is an asynchronous job as the REST API shows it (openapi.json Job).
type Job struct {
	ID           string       `json:"id"`
	Command      string       `json:"command"`
	Status       string       `json:"status"`
	InstanceType string       `json:"instance_type"`
	InstanceID   string       `json:"instance_id"`
	Error        *ErrorDetail `json:"error,omitempty"`
	Cluster      *Cluster     `json:"cluster,omitempty"`
	// Abandoned names the members a forced delete left on their nodes.
	Abandoned []AbandonedNode `json:"abandoned,omitempty"`
	Created   time.Time       `json:"created"`
	Completed *time.Time      `json:"completed,omitempty"`
}

// AbandonedNode is a member a forced delete could not take out of its
// cluster (openapi.json AbandonedNode).
type AbandonedNode struct {
	Device string `json:"device"`
	Node   string `json:"node,omitempty"`
	Reason string `json:"reason"`
}

// Device is a device as the REST API shows it (openapi.json Device).
type Device struct {
	ID          string            `json:"id"`
	Kind        core.DeviceKind   `json:"kind"`
	MAC         string            `json:"mac"`
	Serial      string            `json:"serial,omitempty"`
	Product     string            `json:"product,omitempty"`
	Platform    string            `json:"platform,omitempty"`
	Hostname    string            `json:"hostname,omitempty"`
	ClientID    string            `json:"client_id,omitempty"`
	VendorClass string            `json:"vendor_class,omitempty"`
	SONiCVer    string            `json:"sonic_version,omitempty"`
	IP          string            `json:"ip,omitempty"`
	Subnet      string            `json:"subnet,omitempty"`
	RelayAddr   string            `json:"relay_addr,omitempty"`
	CircuitID   string            `json:"circuit_id,omitempty"`
	RemoteID    string            `json:"remote_id,omitempty"`
	Position    string            `json:"position,omitempty"` // the cabling plan's slot it was last leased through
	BaseMAC     string            `json:"base_mac,omitempty"`
	FixedIP     string            `json:"fixed_ip,omitempty"`
	State       core.DeviceState  `json:"state"`
	Approved    bool              `json:"approved,omitempty"`
	Cluster     string            `json:"cluster,omitempty"`
	Role        string            `json:"role,omitempty"`
	Profile     string            `json:"profile,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Refusal     Refusal           `json:"refusal,omitzero"`
	// SerialConflict: other devices stated this device's serial (or it
	// stated theirs); the serial resolves to no device until resolved.
	SerialConflict *SerialConflict `json:"serial_conflict,omitempty"`
	// CablingMismatch: the LLDP neighbours the device reported differ from
	// those its planned position expects (the console's cabling badge).
	CablingMismatch *CablingMismatch `json:"cabling_mismatch,omitempty"`
	FirstSeen       time.Time        `json:"first_seen"`
	LastSeen        time.Time        `json:"last_seen"`
	UpdatedAt       time.Time        `json:"updated_at"`
}

// Refusal is why a device's last ZTP request got no content
// (openapi.json DeviceRefusal).
type Refusal struct {
	What   string    `json:"what"`
	Kind   string    `json:"kind"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// Refused reports whether the device's last request was refused.
func (r Refusal) Refused() bool { return r.Kind != "" || r.Reason != "" }

// CablingMismatch is how a device's LLDP neighbours differ from its
// planned position's (openapi.json CablingMismatch).
type CablingMismatch struct {
	Position   string    `json:"position"`
	Mismatches []string  `json:"mismatches"`
	At         time.Time `json:"at"`
}

// SerialConflict is a serial several devices stated (openapi.json
// SerialConflict).
type SerialConflict struct {
	Serial string   `json:"serial"`
	With   []string `json:"with"`
}

// Lease is a lease as the REST API shows it (openapi.json Lease).
type Lease struct {
	IP        string          `json:"ip"`
	MAC       string          `json:"mac"`
	ClientID  string          `json:"client_id,omitempty"`
	Hostname  string          `json:"hostname,omitempty"`
	Subnet    string          `json:"subnet"`
	State     core.LeaseState `json:"state"`
	Start     time.Time       `json:"start"`
	Expiry    time.Time       `json:"expiry"`
	Reserved  bool            `json:"reserved,omitempty"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// Event is an event as the REST API shows it (openapi.json Event).
type Event struct {
	Seq     uint64            `json:"seq"`
	Time    time.Time         `json:"time"`
	Type    string            `json:"type"`
	Device  string            `json:"device,omitempty"`
	Cluster string            `json:"cluster,omitempty"`
	Message string            `json:"message,omitempty"`
	Fields  map[string]string `json:"fields,omitempty"`
}

// Image is an artifact of the image store as the REST API shows it
// (openapi.json Image).
type Image struct {
	SHA256   string    `json:"sha256"`
	Name     string    `json:"name"`
	Kind     string    `json:"kind"`
	Platform string    `json:"platform,omitempty"`
	Version  string    `json:"version,omitempty"`
	Size     int64     `json:"size"`
	Created  time.Time `json:"created"`
}

// ImageAdded is the admin socket's answer to an image added ("ztpd image
// add"): the image, and whether that content was stored already.
type ImageAdded struct {
	Image   Image `json:"image"`
	Existed bool  `json:"existed"`
}

// Token is a token without its secret hash (openapi.json Token).
type Token struct {
	ID          string    `json:"id"`
	Kind        string    `json:"kind"`
	Cluster     string    `json:"cluster,omitempty"`
	Device      string    `json:"device,omitempty"`
	Usages      []string  `json:"usages,omitempty"`
	Description string    `json:"description,omitempty"`
	Expires     time.Time `json:"expires,omitzero"`
	UsedAt      time.Time `json:"used_at,omitzero"`
	Revoked     bool      `json:"revoked"`
	Created     time.Time `json:"created"`
}

// Version is a Kubernetes version as the REST API shows it
// (openapi.json Version).
type Version struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	SemVer      string    `json:"semver"`
	ImageID     string    `json:"image_id,omitempty"`
	ISOName     string    `json:"iso_name,omitempty"`
	ISOURL      string    `json:"iso_url,omitempty"`
	Checksum    string    `json:"checksum,omitempty"`
	ZoneID      string    `json:"zone_id,omitempty"`
	State       string    `json:"state"`
	MinCPU      int       `json:"min_cpu"`
	MinMemoryMB int       `json:"min_memory_mb"`
	Created     time.Time `json:"created"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// APIKeyInfo is an API key as the REST API and the admin socket show it
// (openapi.json APIKey): never its secret.
type APIKeyInfo struct {
	APIKey  string    `json:"api_key"`
	Name    string    `json:"name,omitempty"`
	Account string    `json:"account"`
	Role    string    `json:"role"`
	Created time.Time `json:"created"`
}

// NewAPIKey is the answer to an API key's creation: the only time its
// secret is shown.
type NewAPIKey struct {
	APIKeyInfo
	SecretKey string `json:"secret_key"`
}

// VersionAdded is the admin socket's answer to a Kubernetes version added
// from an ISO ("ztpd kube-version add"): what a real CloudStack's
// addKubernetesSupportedVersion needs (url and checksum).
type VersionAdded struct {
	Version  Version `json:"version"`
	Image    Image   `json:"image"`
	URL      string  `json:"url"`
	Checksum string  `json:"checksum"` // CloudStack form: {SHA-256}<hex>
}

// Offering is a service offering (openapi.json Offering); its field
// names are CloudStack's.
type Offering struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	DisplayText string `json:"displaytext"`
	CPU         int    `json:"cpunumber"`
	MemoryMB    int    `json:"memory"`
	CPUSpeedMHz int    `json:"cpuspeed"`
}

// Refusals is the answer of /api/v1/refusals (openapi.json RefusalList).
type Refusals struct {
	// Since is when the server began recording them (its start); absent
	// when nothing records them (no server runs on this data directory).
	Since time.Time        `json:"since,omitzero"`
	Items []AddressRefusal `json:"items"`
}

// AddressRefusal is what was refused to an address without a lease.
type AddressRefusal struct {
	Addr      string    `json:"addr"`
	What      string    `json:"what"`
	Kind      string    `json:"kind"`
	Reason    string    `json:"reason"`
	Transport string    `json:"transport"`
	Count     int       `json:"count"`
	First     time.Time `json:"first"`
	Last      time.Time `json:"last"`
}

// Desired is a device's desired state as the REST API shows it
// (openapi.json DesiredState).
type Desired struct {
	Device            string            `json:"device"`
	Mode              core.DeviceMode   `json:"mode,omitempty"`
	Cluster           string            `json:"cluster,omitempty"`
	Role              string            `json:"role,omitempty"`
	Image             string            `json:"image,omitempty"`
	KubernetesVersion string            `json:"kubernetes_version,omitempty"`
	Labels            map[string]string `json:"labels"`
	Hooks             map[string]string `json:"hooks"`
	Generation        uint64            `json:"generation"`
	UpdatedAt         time.Time         `json:"updated_at,omitzero"`
	UpdatedBy         string            `json:"updated_by,omitempty"`
	Operation         *Operation        `json:"operation,omitempty"`
	Agent             *Agent            `json:"agent,omitempty"`
	// Profile names the profile whose desired: block gives the device
	// defaults; Explicit is then what was set on the device itself (what
	// PUT changes), which wins over them. The fields above are the two
	// overlaid.
	Profile  string      `json:"profile,omitempty"`
	Explicit *DesiredSet `json:"explicit,omitempty"`
}

// DesiredSet is what was set on a device itself, of what a profile
// may default (openapi.json DesiredState.explicit).
type DesiredSet struct {
	Mode              core.DeviceMode   `json:"mode,omitempty"`
	Image             string            `json:"image,omitempty"`
	KubernetesVersion string            `json:"kubernetes_version,omitempty"`
	Labels            map[string]string `json:"labels"`
	Hooks             map[string]string `json:"hooks"`
}

// Operation is the work handed to a device's agent (openapi.json
// AgentOperation).
type Operation struct {
	ID       string    `json:"id"`
	Kind     string    `json:"kind"`
	Rollout  string    `json:"rollout,omitempty"`
	State    string    `json:"state"`
	Reason   string    `json:"reason,omitempty"`
	Created  time.Time `json:"created"`
	Finished time.Time `json:"finished,omitzero"`
	Steps    []Step    `json:"steps"`
}

// Step is one step of an operation and what the agent said of it
// (openapi.json AgentStep).
type Step struct {
	Name     string            `json:"name"`
	Action   string            `json:"action"`
	Args     map[string]string `json:"args,omitempty"`
	State    string            `json:"state"`
	ExitCode int               `json:"exit_code"`
	Output   string            `json:"output,omitempty"`
	Started  time.Time         `json:"started,omitzero"`
	Finished time.Time         `json:"finished,omitzero"`
	Attempts int               `json:"attempts"`
}

// Agent is a device agent's last contact (openapi.json AgentStatus).
type Agent struct {
	LastSeen time.Time `json:"last_seen"`
	IP       string    `json:"ip,omitempty"`
	BootID   string    `json:"boot_id,omitempty"`
	Version  string    `json:"version,omitempty"`
}

// Rollout is a rollout as the REST API shows it (openapi.json Rollout).
type Rollout struct {
	ID                    string            `json:"id"`
	Cluster               string            `json:"cluster,omitempty"`
	Kind                  core.RolloutKind  `json:"kind"`
	State                 core.RolloutState `json:"state"`
	Reason                string            `json:"reason,omitempty"`
	Target                string            `json:"target,omitempty"`
	TargetID              string            `json:"target_id,omitempty"`
	Mode                  core.DeviceMode   `json:"mode,omitempty"`
	MaxUnavailable        int               `json:"max_unavailable"`
	DrainTimeout          string            `json:"drain_timeout"`
	StepTimeout           string            `json:"step_timeout"`
	Hooks                 map[string]string `json:"hooks"`
	Selector              map[string]string `json:"selector,omitempty"`
	ContinueOnHookFailure bool              `json:"continue_on_hook_failure"`
	Rollback              string            `json:"rollback,omitempty"`
	OnFailure             string            `json:"on_failure,omitempty"`
	NodeTimeout           string            `json:"node_timeout,omitempty"`
	Job                   string            `json:"job,omitempty"`
	CreatedBy             string            `json:"created_by,omitempty"`
	Created               time.Time         `json:"created"`
	UpdatedAt             time.Time         `json:"updated_at"`
	Finished              time.Time         `json:"finished,omitzero"`
	Nodes                 []RolloutNode     `json:"nodes"`
	// Counts is the number of nodes in each phase that has any.
	Counts map[string]int `json:"counts"`
	// Canary and Gate as started; GateStatus where the gate is.
	Canary      *RolloutCanary `json:"canary,omitempty"`
	Gate        *RolloutGate   `json:"gate,omitempty"`
	GateStatus  *GateStatus    `json:"gate_status,omitempty"`
	Fingerprint string         `json:"fingerprint,omitempty"`
}

// RolloutCanary is the nodes a rollout does before its gate
// (openapi.json RolloutCanary).
type RolloutCanary struct {
	Count    int               `json:"count,omitempty"`
	Selector map[string]string `json:"selector,omitempty"`
}

// RolloutGate is what lets a rollout go on past its canary
// (openapi.json RolloutGate).
type RolloutGate struct {
	Mode    string `json:"mode,omitempty"`
	Soak    string `json:"soak,omitempty"`
	URL     string `json:"url,omitempty"`
	Script  string `json:"script,omitempty"`
	Timeout string `json:"timeout,omitempty"`
}

// GateStatus is where a rollout's gate is (openapi.json GateStatus).
type GateStatus struct {
	Phase  string      `json:"phase"`
	Reason string      `json:"reason,omitempty"`
	Since  time.Time   `json:"since,omitzero"`
	Until  time.Time   `json:"until,omitzero"`
	By     string      `json:"by,omitempty"`
	Checks []GateCheck `json:"checks"`
}

// GateCheck is one check of a gate and its last result.
type GateCheck struct {
	Name    string    `json:"name"`
	OK      bool      `json:"ok"`
	Detail  string    `json:"detail,omitempty"`
	Checked time.Time `json:"checked"`
}

// RolloutPlan is what a rollout would do if started now: the answer to
// POST /api/v1/rollouts?dry_run=true (openapi.json RolloutPlan).
type RolloutPlan struct {
	Cluster         string         `json:"cluster,omitempty"`
	Kind            string         `json:"kind"`
	Target          string         `json:"target,omitempty"`
	MaxUnavailable  int            `json:"max_unavailable"`
	Canary          *RolloutCanary `json:"canary,omitempty"`
	Gate            *RolloutGate   `json:"gate,omitempty"`
	Batches         []PlanBatch    `json:"batches"`
	Skipped         []PlanNode     `json:"skipped"`
	Estimate        string         `json:"estimate"`
	EstimateSeconds float64        `json:"estimate_seconds"`
	EstimateBasis   string         `json:"estimate_basis"`
	Fingerprint     string         `json:"fingerprint"`
	Warnings        []string       `json:"warnings,omitempty"`
}

// PlanBatch is nodes of a plan that go at the same time.
type PlanBatch struct {
	Canary bool       `json:"canary"`
	Nodes  []PlanNode `json:"nodes"`
}

// PlanNode is one node of a plan.
type PlanNode struct {
	Device   string            `json:"device"`
	NodeName string            `json:"node_name,omitempty"`
	Role     string            `json:"role,omitempty"`
	Current  string            `json:"current,omitempty"`
	Target   string            `json:"target,omitempty"`
	Ready    bool              `json:"ready"`
	Skip     string            `json:"skip,omitempty"`
	Hooks    map[string]string `json:"hooks,omitempty"`
	Steps    []string          `json:"steps,omitempty"`
	Blocks   []DrainBlock      `json:"drain_blocks,omitempty"`
	Estimate string            `json:"estimate,omitempty"`
}

// DrainBlock is a pod whose eviction PodDisruptionBudgets refuse now.
type DrainBlock struct {
	Pod                string `json:"pod"`
	Budget             string `json:"budget"`
	AllowedDisruptions int32  `json:"allowed_disruptions"`
}

// RolloutNode is one device's progress through a rollout
// (openapi.json RolloutNode).
type RolloutNode struct {
	Device    string    `json:"device"`
	NodeName  string    `json:"node_name,omitempty"`
	Role      string    `json:"role,omitempty"`
	Phase     string    `json:"phase"`
	Reason    string    `json:"reason,omitempty"`
	Operation string    `json:"operation,omitempty"`
	Cordoned  bool      `json:"cordoned"`
	Canary    bool      `json:"canary,omitempty"`
	Previous  string    `json:"previous,omitempty"`
	Started   time.Time `json:"started,omitzero"`
	Finished  time.Time `json:"finished,omitzero"`
}

// CSVM is a cluster member as CloudStack's virtualmachines list shows it.
type CSVM struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	DisplayName string `json:"displayname"`
	Hostname    string `json:"hostname,omitempty"`
	State       string `json:"state"`
	IPAddress   string `json:"ipaddress,omitempty"`
	ZoneID      string `json:"zoneid"`
	ZoneName    string `json:"zonename"`
	Created     string `json:"created,omitempty"`
	// ztpd extensions: the membership as the joiner sees it.
	ZTPDRole  string `json:"ztpdrole"`
	ZTPDState string `json:"ztpdstate"`
	// The member's Node as the cluster shows it: name, Ready condition
	// (True, False, Unknown) and when ztpd saw it change.
	ZTPDNode      string `json:"ztpdnode,omitempty"`
	ZTPDNodeReady string `json:"ztpdnodeready,omitempty"`
	ZTPDNodeSeen  string `json:"ztpdnodeseen,omitempty"`
	// ZTPDManualUpgrade: rolling upgrades leave this node out (added with
	// manualupgrade=true).
	ZTPDManualUpgrade bool `json:"ztpdmanualupgrade,omitempty"`
}

// CSCluster is CloudStack's kubernetescluster object.
type CSCluster struct {
	ID                    string `json:"id"`
	Name                  string `json:"name"`
	Description           string `json:"description"`
	Account               string `json:"account"`
	DomainID              string `json:"domainid"`
	Domain                string `json:"domain"`
	ZoneID                string `json:"zoneid"`
	ZoneName              string `json:"zonename"`
	KubernetesVersionID   string `json:"kubernetesversionid"`
	KubernetesVersionName string `json:"kubernetesversionname"`
	ServiceOfferingID     string `json:"serviceofferingid"`
	ServiceOfferingName   string `json:"serviceofferingname"`
	Size                  int    `json:"size"`
	ControlNodes          int    `json:"controlnodes"`
	MasterNodes           int    `json:"masternodes"`
	CPUNumber             string `json:"cpunumber"`
	Memory                string `json:"memory"`
	State                 string `json:"state"`
	Endpoint              string `json:"endpoint"`
	Keypair               string `json:"keypair"`
	NetworkID             string `json:"networkid"`
	VirtualMachines       []CSVM `json:"virtualmachines"`
	IPAddress             string `json:"ipaddress"`
	Created               string `json:"created"`
	AutoscalingEnabled    bool   `json:"autoscalingenabled"`
	MinSize               int    `json:"minsize"`
	MaxSize               int    `json:"maxsize"`
	ClusterType           string `json:"clustertype"`
	// CloudStack 4.21/4.22's: the offering each node type runs on, the
	// etcd nodes and their addresses (by node name), whether the CSI
	// driver is set up, and the nodes' template (ztpd: the template
	// listTemplates shows for the profile the workers' node template
	// names, and that profile's name).
	ControlOfferingID   string            `json:"controlofferingid,omitempty"`
	ControlOfferingName string            `json:"controlofferingname,omitempty"`
	CSIEnabled          bool              `json:"csienabled"`
	EtcdNodes           int               `json:"etcdnodes"`
	EtcdIPs             map[string]string `json:"etcdips,omitempty"`
	EtcdOfferingID      string            `json:"etcdofferingid,omitempty"`
	EtcdOfferingName    string            `json:"etcdofferingname,omitempty"`
	WorkerOfferingID    string            `json:"workerofferingid,omitempty"`
	WorkerOfferingName  string            `json:"workerofferingname,omitempty"`
	TemplateID          string            `json:"templateid,omitempty"`
	TemplateName        string            `json:"templatename,omitempty"`
	// ztpd extensions: each node type's template (nodetemplates) by its
	// template ID, and the profile it names.
	ZTPDNodeTemplates map[string]string `json:"ztpdnodetemplates,omitempty"`
	ZTPDNodeProfiles  map[string]string `json:"ztpdnodeprofiles,omitempty"`
	// ztpd extensions: the cluster as ztpd's watch of its API server last
	// saw it, and what a Starting cluster waits for.
	ZTPDAPIReachable *bool  `json:"ztpdapireachable,omitempty"`
	ZTPDLastSeen     string `json:"ztpdlastseen,omitempty"`
	ZTPDReadyNodes   *int   `json:"ztpdreadynodes,omitempty"`
	ZTPDWaiting      string `json:"ztpdwaiting,omitempty"`
	// The registered CNI configuration the cluster was created with
	// (4.21), and what applying it came to (ztpd: applied or failed, with
	// the objects applied or why).
	CNIConfigurationID string `json:"cniconfigurationid,omitempty"`
	CNIConfigName      string `json:"cniconfigname,omitempty"`
	ZTPDCNIState       string `json:"ztpdcnistate,omitempty"`
	ZTPDCNIMessage     string `json:"ztpdcnimessage,omitempty"`
}

// CSVersion is CloudStack's kubernetessupportedversion object.
type CSVersion struct {
	ID                  string `json:"id"`
	Name                string `json:"name"`
	SemanticVersion     string `json:"semanticversion"`
	ISOID               string `json:"isoid"`
	ISOName             string `json:"isoname"`
	ISOState            string `json:"isostate"`
	ISOURL              string `json:"isourl"`
	ZoneID              string `json:"zoneid,omitempty"`
	ZoneName            string `json:"zonename,omitempty"`
	State               string `json:"state"`
	MinCPUNumber        int    `json:"mincpunumber"`
	MinMemory           int    `json:"minmemory"`
	SupportsHA          bool   `json:"supportsha"`
	SupportsAutoscaling bool   `json:"supportsautoscaling"`
	DirectDownload      bool   `json:"directdownload"`
	Created             string `json:"created"`
}

// CSJob is queryAsyncJobResult's answer.
type CSJob struct {
	AccountID       string          `json:"accountid"`
	UserID          string          `json:"userid"`
	Cmd             string          `json:"cmd"`
	JobStatus       int             `json:"jobstatus"`
	JobProcStatus   int             `json:"jobprocstatus"`
	JobResultCode   int             `json:"jobresultcode"`
	JobResultType   string          `json:"jobresulttype"`
	JobResult       json.RawMessage `json:"jobresult,omitempty"`
	JobInstanceType string          `json:"jobinstancetype"`
	JobInstanceID   string          `json:"jobinstanceid"`
	Created         string          `json:"created"`
	Completed       string          `json:"completed,omitempty"`
	JobID           string          `json:"jobid"`
}

// Page is one page of a list answer.
type Page[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// EventsPage is a page of /api/v1/events. A page without next_cursor
// carries last_seq: every event up to it was considered, so
// since=<last_seq> resumes with the next one.
type EventsPage struct {
	Items      []Event `json:"items"`
	NextCursor string  `json:"next_cursor,omitempty"`
	LastSeq    *uint64 `json:"last_seq,omitempty"`
}

// DeviceCounts is the device summary of the overview (openapi.json
// DeviceCounts), also sent with every console stream update.
type DeviceCounts struct {
	Total     int            `json:"total"`
	ByState   map[string]int `json:"by_state"`
	ByKind    map[string]int `json:"by_kind"`
	Unmatched int            `json:"unmatched"`
}

// Onboarding is the onboarding rate (openapi.json Onboarding).
type Onboarding struct {
	BucketSeconds int       `json:"bucket_seconds"`
	Joined        []int     `json:"joined"` // oldest bucket first
	From          time.Time `json:"from"`
}

// ClusterHealth is a cluster's line in the overview.
type ClusterHealth struct {
	ID             string            `json:"id"`
	Name           string            `json:"name"`
	State          core.ClusterState `json:"state"`
	MembersReady   int               `json:"members_ready"`
	MembersDesired int               `json:"members_desired"`
}

// Overview is GET /api/v1/overview (openapi.json Overview).
type Overview struct {
	Devices    DeviceCounts    `json:"devices"`
	Onboarding Onboarding      `json:"onboarding"`
	Pools      []PoolUse       `json:"pools"`
	Clusters   []ClusterHealth `json:"clusters"`
	Events     []Event         `json:"events"` // newest first
	Warnings   []string        `json:"warnings"`
}

// PoolUse is one DHCP subnet's dynamic pool use (openapi.json PoolUse).
// Size counts the addresses the pools can hand out (network, broadcast
// and router addresses excluded); Reserved the reservations' addresses
// inside the pools; Used the other pool addresses held by a lease, an
// offer or a decline quarantine; Free the rest: Size = Reserved + Used +
// Free.
type PoolUse struct {
	Name       string `json:"name"`
	Subnet     string `json:"subnet"`      // prefix, e.g. 10.99.1.0/24
	RangeStart string `json:"range_start"` // first pool's start ("" without pools)
	RangeEnd   string `json:"range_end"`   // last pool's end
	Size       int    `json:"size"`
	Used       int    `json:"used"`
	Reserved   int    `json:"reserved"`
	Free       int    `json:"free"`
}

// Preview is what a device fetches (openapi.json DevicePreview),
// secrets masked.
type Preview struct {
	Kind      core.DeviceKind `json:"kind"`
	Profile   string          `json:"profile"`
	ByDefault bool            `json:"by_default,omitempty"`
	Fetches   []Fetch         `json:"fetches"`
	Documents []Document      `json:"documents"`
	Installer *Image          `json:"installer,omitempty"`
	Notes     []string        `json:"notes"`
	Warnings  []string        `json:"warnings"`
}

// Document is one document a device gets, as text.
type Document struct {
	Name        string `json:"name"`
	ContentType string `json:"content_type"`
	Body        string `json:"body"`
}

// CSAPIParam is a parameter of a command listApis describes.
type CSAPIParam struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Type        string `json:"type"`
	Required    bool   `json:"required"`
	Length      int    `json:"length"`
	Since       string `json:"since,omitempty"`
}

// CSAPIResponse is a field of a command's answer listApis describes.
type CSAPIResponse struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Type        string `json:"type"`
}

// CSAPI is one command as listApis describes it.
type CSAPI struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	IsAsync     bool            `json:"isasync"`
	Since       string          `json:"since"`
	Type        string          `json:"type"`
	Related     string          `json:"related"`
	Params      []CSAPIParam    `json:"params"`
	Response    []CSAPIResponse `json:"response"`
}

// Fetch is one request a device makes, in order: what it is and its URL.
type Fetch struct {
	What string `json:"what"`
	URL  string `json:"url"`
}

// JobAccepted is the answer to a request that started an asynchronous job
// (202, Location: the job).
type JobAccepted struct {
	Job Job `json:"job"`
}

// The CloudStack objects below keep their fields in JSON name order:
// ztpd answered them from maps, which encode sorted, and clients have
// seen them so.

// CSClusterConfig is getKubernetesClusterConfig's clusterconfig object.
type CSClusterConfig struct {
	ConfigData string `json:"configdata"`
	ID         string `json:"id"`
	Name       string `json:"name"`
}

// CSZone is listZones' zone object.
type CSZone struct {
	AllocationState       string `json:"allocationstate"`
	Description           string `json:"description"`
	ID                    string `json:"id"`
	LocalStorageEnabled   bool   `json:"localstorageenabled"`
	Name                  string `json:"name"`
	NetworkType           string `json:"networktype"`
	SecurityGroupsEnabled bool   `json:"securitygroupsenabled"`
	Type                  string `json:"type"`
}

// CSOffering is listServiceOfferings' serviceoffering object.
type CSOffering struct {
	CPUNumber    int    `json:"cpunumber"`
	CPUSpeed     int    `json:"cpuspeed"`
	DisplayText  string `json:"displaytext"`
	ID           string `json:"id"`
	IsCustomized bool   `json:"iscustomized"`
	IsSystem     bool   `json:"issystem"`
	Memory       int    `json:"memory"`
	Name         string `json:"name"`
	OfferHA      bool   `json:"offerha"`
	State        string `json:"state"`
	StorageType  string `json:"storagetype"`
}

// CSTemplate is listTemplates' template object: a loaded profile, which
// ztpd offers as a template its clusters' node templates name.
type CSTemplate struct {
	Account       string `json:"account"`
	Bootable      bool   `json:"bootable"`
	CrossZones    bool   `json:"crossZones"`
	DisplayText   string `json:"displaytext"`
	Domain        string `json:"domain"`
	DomainID      string `json:"domainid"`
	ForCKS        bool   `json:"forcks"`
	ID            string `json:"id"`
	IsExtractable bool   `json:"isextractable"`
	IsFeatured    bool   `json:"isfeatured"`
	IsPublic      bool   `json:"ispublic"`
	IsReady       bool   `json:"isready"`
	Name          string `json:"name"`
	OSTypeName    string `json:"ostypename,omitempty"`
	Status        string `json:"status"`
	TemplateType  string `json:"templatetype"`
	ZoneID        string `json:"zoneid"`
	ZoneName      string `json:"zonename"`
	// ztpd extension: the cluster the profile assigns its devices to (a
	// node template of another cluster is refused).
	ZTPDCluster string `json:"ztpdcluster,omitempty"`
}

// RolloutStart is POST /api/v1/rollouts (openapi.json RolloutStart). A
// field left out is the server's default; an empty map is sent, a nil one
// is not.
type RolloutStart struct {
	Cluster               string            `json:"cluster,omitempty"`
	Kind                  string            `json:"kind"`
	Target                string            `json:"target,omitempty"`
	Devices               []string          `json:"devices,omitzero"`
	Selector              map[string]string `json:"selector,omitzero"`
	Mode                  string            `json:"mode,omitempty"`
	MaxUnavailable        int               `json:"max_unavailable,omitempty"`
	DrainTimeout          string            `json:"drain_timeout,omitempty"`
	StepTimeout           string            `json:"step_timeout,omitempty"`
	Hooks                 map[string]string `json:"hooks,omitzero"`
	ContinueOnHookFailure bool              `json:"continue_on_hook_failure,omitempty"`
	Canary                *RolloutCanary    `json:"canary,omitempty"`
	Gate                  *RolloutGate      `json:"gate,omitempty"`
	// PlanFingerprint, when set, is the fingerprint of the plan the
	// operator was shown: the start is refused (409) if the plan differs now.
	PlanFingerprint string `json:"plan_fingerprint,omitempty"`
	// Rollback is auto or manual, OnFailure stop or continue, NodeTimeout
	// a Go duration (openapi.json RolloutStart).
	Rollback    string `json:"rollback,omitempty"`
	OnFailure   string `json:"on_failure,omitempty"`
	NodeTimeout string `json:"node_timeout,omitempty"`
}

// DesiredChange is PUT /api/v1/devices/{id}/desired (openapi.json
// DesiredChange): a field left out stays as it is; null or "" clears a
// target, null or {} clears labels or hooks, a map replaces them whole.
type DesiredChange struct {
	Mode              Optional[core.DeviceMode]   `json:"mode,omitzero"`
	Cluster           Optional[string]            `json:"cluster,omitzero"` // ID or name
	Role              Optional[string]            `json:"role,omitzero"`
	Image             Optional[string]            `json:"image,omitzero"`
	KubernetesVersion Optional[string]            `json:"kubernetes_version,omitzero"`
	Labels            Optional[map[string]string] `json:"labels,omitzero"`
	Hooks             Optional[map[string]string] `json:"hooks,omitzero"`
}

// DesiredChanged is the answer to PUT /api/v1/devices/{id}/desired: the
// new desired state and the rollout a change of mode started (202).
type DesiredChanged struct {
	Desired Desired  `json:"desired"`
	Rollout *Rollout `json:"rollout,omitempty"`
}

// Optional is a request body field that may be left out (Set false: the
// server keeps what it has), null (Set with the zero Value) or a value.
// With omitzero, a field left out is not sent.
type Optional[T any] struct {
	Set   bool
	Value T
}

// Some is an Optional set to v.
func Some[T any](v T) Optional[T] { return Optional[T]{Set: true, Value: v} }

// IsZero reports a field left out, for omitzero.
func (o Optional[T]) IsZero() bool { return !o.Set }

// MarshalJSON encodes the value (a nil map or pointer as null).
func (o Optional[T]) MarshalJSON() ([]byte, error) { return json.Marshal(o.Value) }

// UnmarshalJSON marks the field set: null leaves the zero value.
func (o *Optional[T]) UnmarshalJSON(b []byte) error {
	*o = Optional[T]{Set: true}
	if string(b) == "null" {
		return nil
	}
	return json.Unmarshal(b, &o.Value)
}

// DeviceTLS is the device HTTPS listener's key pair as the admin socket
// shows it (ztpd device-tls show|rotate).
type DeviceTLS struct {
	// Source is "store" (generated, shared by the group) or "files".
	Source string `json:"source"`
	// Phase is the rotation's: steady, next or switched.
	Phase string `json:"phase"`
	// ServingPin is the pin of the certificate the listeners present.
	ServingPin string `json:"serving_pin"`
	// Pins are what documents name now, the serving one first.
	Pins    []string  `json:"pins"`
	Created time.Time `json:"created"`
	// SwitchAt is when the listeners move to the next pair (phase next);
	// OldPinUntil is when documents stop naming the old pin (switched).
	SwitchAt    time.Time `json:"switch_at,omitzero"`
	OldPinUntil time.Time `json:"old_pin_until,omitzero"`
	Grace       string    `json:"grace"`
}

// Position is a slot of the cabling plan (openapi.json Position): how the
// network proves it (the relay's address and the relay agent information
// it adds) and what the device there is. As a PUT body, source is ignored.
type Position struct {
	Name        string            `json:"name"`
	Relay       string            `json:"relay"`
	CircuitID   string            `json:"circuit_id,omitempty"`
	RemoteID    string            `json:"remote_id,omitempty"`
	InterfaceID string            `json:"interface_id,omitempty"`
	Role        string            `json:"role,omitempty"`
	Cluster     string            `json:"cluster,omitempty"`
	Profile     string            `json:"profile,omitempty"`
	Address     string            `json:"address,omitempty"`
	Serial      string            `json:"serial,omitempty"`
	Rack        string            `json:"rack,omitempty"`
	Port        string            `json:"port,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Fields      map[string]string `json:"fields,omitempty"`
	// Source is where the position is defined: "FILE:LINE" of a plan
	// file, or "api" for one stored through the API (only those can be
	// changed through it).
	Source string `json:"source,omitempty"`
}

// PositionImport is the body of POST /api/v1/positions/import: positions
// stored through the API together, all or none.
type PositionImport struct {
	Items []Position `json:"items"`
}

// PositionImported says how many positions an import added and replaced.
type PositionImported struct {
	Created  int `json:"created"`
	Replaced int `json:"replaced"`
}
