// Package core holds the domain of ztpd: devices, leases, clusters, versions,
// tokens, memberships, images and events, and the Store interface that persists
// them. Transports (DHCP, TFTP, HTTP, API) and services build on these types; the
// package itself imports no transport and no storage engine.
package core

import (
	"fmt"
	"net"
	"strings"
	"time"
)

// DeviceKind is what a client was classified as from its DHCP request or HTTP headers.
type DeviceKind string

const (
	KindSONiC   DeviceKind = "sonic"   // SONiC ZTP: option 77 "SONiC-ZTP"
	KindONIE    DeviceKind = "onie"    // ONIE installer: option 60 "onie_vendor:<platform>"
	KindVM      DeviceKind = "vm"      // CloudStack VM: reservation, MAC prefix or vendor class
	KindUnknown DeviceKind = "unknown" // anything else
)

// DeviceState is how far a device has come through onboarding. States only move
// forward (see StateRank), except for failed/leaving/left which an operator or the
// joiner sets explicitly.
type DeviceState string

const (
	StateDiscovered   DeviceState = "discovered"    // seen on DHCP
	StateLeased       DeviceState = "leased"        // holds an acknowledged lease
	StateZTPServed    DeviceState = "ztp-served"    // fetched ztp.json / user-data
	StateConfigServed DeviceState = "config-served" // fetched config_db.json / metadata
	StateImageServed  DeviceState = "image-served"  // fetched an installer or image
	StateWaiting      DeviceState = "waiting"       // enrolled, waiting for approval or room in its cluster
	StateJoinIssued   DeviceState = "join-issued"   // received its join bundle
	StateJoined       DeviceState = "joined"        // its Node is registered and Ready in the cluster
	StateNotReady     DeviceState = "not-ready"     // its Node is registered but reports NotReady
	StateLost         DeviceState = "lost"          // its Node stopped reporting (Ready Unknown)
	StateFailed       DeviceState = "failed"        // reported a failed join
	StateLeaving      DeviceState = "leaving"       // marked to leave by a scale-down or delete
	StateLeft         DeviceState = "left"          // removed from its cluster
)

var stateRank = map[DeviceState]int{
	StateDiscovered: 0, StateLeased: 1, StateZTPServed: 2, StateConfigServed: 3,
	StateImageServed: 4, StateWaiting: 5, StateJoinIssued: 6, StateJoined: 7,
	// A member the cluster sees as not ready or lost is still a member:
	// re-fetching its ztp.json must not move it back.
	StateNotReady: 7, StateLost: 7,
}

// StateRank orders the forward onboarding states; -1 for states outside the
// forward path (failed, leaving, left).
func StateRank(s DeviceState) int {
	if r, ok := stateRank[s]; ok {
		return r
	}
	return -1
}

// Advance reports the state a device should have after reaching next: progress
// never moves backwards, so a re-fetched ztp.json does not undo "joined".
func Advance(cur, next DeviceState) DeviceState {
	rc, rn := StateRank(cur), StateRank(next)
	if rn < 0 || rc < 0 || rn > rc {
		return next
	}
	return cur
}

// Device is one client ztpd has seen. Its ID is the normalised MAC address.
type Device struct {
	ID          string            `json:"id"`
	Kind        DeviceKind        `json:"kind"`
	MAC         string            `json:"mac"`
	Serial      string            `json:"serial,omitempty"`
	Product     string            `json:"product,omitempty"`  // SONiC product name
	Platform    string            `json:"platform,omitempty"` // ONIE platform
	Hostname    string            `json:"hostname,omitempty"`
	ClientID    string            `json:"client_id,omitempty"` // option 61, printable or hex
	VendorClass string            `json:"vendor_class,omitempty"`
	SONiCVer    string            `json:"sonic_version,omitempty"`
	IP          string            `json:"ip,omitempty"`
	Subnet      string            `json:"subnet,omitempty"` // subnet name
	RelayAddr   string            `json:"relay_addr,omitempty"`
	CircuitID   string            `json:"circuit_id,omitempty"` // option 82 circuit id, as the relay sent it
	RemoteID    string            `json:"remote_id,omitempty"`  // option 82 remote id, as the relay sent it
	Position    string            `json:"position,omitempty"`   // the cabling plan's slot its last lease was granted through
	BaseMAC     string            `json:"base_mac,omitempty"`   // SONiC BASE-MAC-ADDRESS; may differ from the management MAC
	FixedIP     string            `json:"fixed_ip,omitempty"`   // operator-declared static address (served without a lease once approved)
	State       DeviceState       `json:"state"`
	Approved    bool              `json:"approved,omitempty"`
	Cluster     string            `json:"cluster,omitempty"` // cluster ID
	Role        string            `json:"role,omitempty"`    // control-plane | worker | sonic
	Profile     string            `json:"profile,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	// Refusal is why the device's last ZTP request got no content (no
	// profile matches it, a stated fact contradicts its record, ...); zero
	// once it is served again.
	Refusal Refusal `json:"refusal,omitzero"`
	// SerialConflict, when set, says that another device stated this
	// device's serial, or that this device stated a serial another device
	// holds. The serial stays with the device that held it first and
	// resolving the serial is refused as ambiguous (AmbiguousSerial).
	// Rare, hence a pointer; treated as immutable (replaced, never changed).
	SerialConflict *SerialConflict `json:"serial_conflict,omitempty"`
	// CablingMismatch, when set, says that the LLDP neighbours the device
	// last reported differ from those its planned position expects: the
	// device's cabling warning. Rare, hence a pointer; treated as
	// immutable (replaced, never changed).
	CablingMismatch *CablingMismatch `json:"cabling_mismatch,omitempty"`
	FirstSeen       time.Time        `json:"first_seen"`
	LastSeen        time.Time        `json:"last_seen"`
	UpdatedAt       time.Time        `json:"updated_at"`
}

// Refusal is a ZTP request a device (the holder of its address) made and
// got no content for.
type Refusal struct {
	What   string    `json:"what"`   // the document asked for: ztp.json, config_db.json, meta-data, ...
	Kind   string    `json:"kind"`   // no-profile, mismatch, bad-fact, forbidden, waiting (RefusalWaiting)
	Reason string    `json:"reason"` // what the device was told
	At     time.Time `json:"at"`     // when it was recorded (at most every 30 s for a device retrying)
}

// CablingMismatch is how a device's reported LLDP neighbours differ from
// its planned position's.
type CablingMismatch struct {
	Position   string    `json:"position"`   // the position whose plan was compared
	Mismatches []string  `json:"mismatches"` // per local port: what was expected, what was seen
	At         time.Time `json:"at"`
}

// SerialConflict is a serial that several devices stated.
type SerialConflict struct {
	Serial string   `json:"serial"`
	With   []string `json:"with"` // the other devices' IDs
}

// RefusalWaiting is the Refusal kind of a device told to come back later
// (its cluster does not exist yet, it awaits approval, its image is not
// stored yet): Reason says what it waits for.
const RefusalWaiting = "waiting"

// Refused reports whether r records a refusal.
func (r Refusal) Refused() bool { return r.Kind != "" || r.Reason != "" }

// AddressRefusal is what was refused to an address that holds no lease
// and no binding. Such requests are never stored (made-up devices must not
// fill the store); a running server keeps the recent ones in memory.
type AddressRefusal struct {
	Addr      string    `json:"addr"`
	What      string    `json:"what"` // the last document asked for
	Kind      string    `json:"kind"` // no-holder, bad-fact, ...
	Reason    string    `json:"reason"`
	Transport string    `json:"transport"` // http or tftp
	Count     int       `json:"count"`     // requests refused since First
	First     time.Time `json:"first"`
	Last      time.Time `json:"last"`
}

// LeaseState is the life of one address binding.
type LeaseState string

const (
	LeaseActive   LeaseState = "active"
	LeaseReleased LeaseState = "released" // client sent RELEASE; address reusable
	LeaseExpired  LeaseState = "expired"
	LeaseDeclined LeaseState = "declined" // client sent DECLINE; address quarantined until Expiry
)

// Lease binds an address (IPv4 from ztp/dhcp, IPv6 from ztp/dhcp6) to a
// client. Leases are keyed by address, so an address can never be bound to
// two clients in the store. ClientID is the DHCPv4 client identifier, or
// the DHCPv6 DUID in hex; MAC is empty for a DHCPv6 client whose MAC is
// unknown (such a lease holds its address for DHCP but identifies no
// device: LeaseHolds).
type Lease struct {
	IP        string     `json:"ip"`
	MAC       string     `json:"mac"`
	ClientID  string     `json:"client_id,omitempty"`
	Hostname  string     `json:"hostname,omitempty"`
	Subnet    string     `json:"subnet"`
	State     LeaseState `json:"state"`
	Start     time.Time  `json:"start"`
	Expiry    time.Time  `json:"expiry"`
	Reserved  bool       `json:"reserved,omitempty"`
	UpdatedAt time.Time  `json:"updated_at"`
}

// ClusterState follows CloudStack's Kubernetes cluster state machine.
type ClusterState string

const (
	ClusterCreated    ClusterState = "Created"
	ClusterStarting   ClusterState = "Starting"
	ClusterRunning    ClusterState = "Running"
	ClusterStopping   ClusterState = "Stopping"
	ClusterStopped    ClusterState = "Stopped"
	ClusterScaling    ClusterState = "Scaling"
	ClusterUpgrading  ClusterState = "Upgrading"
	ClusterAlert      ClusterState = "Alert"
	ClusterRecovering ClusterState = "Recovering"
	ClusterError      ClusterState = "Error"
	ClusterDestroying ClusterState = "Destroying"
	ClusterDestroyed  ClusterState = "Destroyed"
)

// Cluster is a Kubernetes cluster ztpd provisions members for.
type Cluster struct {
	ID                string       `json:"id"`
	Name              string       `json:"name"`
	Description       string       `json:"description,omitempty"`
	ZoneID            string       `json:"zone_id,omitempty"`
	VersionID         string       `json:"version_id"`
	ServiceOfferingID string       `json:"service_offering_id,omitempty"`
	Size              int          `json:"size"`          // desired worker count
	ControlNodes      int          `json:"control_nodes"` // desired control-plane count
	State             ClusterState `json:"state"`
	// Observed is what ztpd last saw of the cluster through its API
	// server (nil: never reached).
	Observed     *ClusterObservation `json:"observed,omitempty"`
	Keypair      string              `json:"keypair,omitempty"`
	NetworkID    string              `json:"network_id,omitempty"`
	ExternalLBIP string              `json:"external_lb_ip,omitempty"`
	Endpoint     string              `json:"endpoint,omitempty"`    // https://<ip>:6443/
	JoinMethod   string              `json:"join_method,omitempty"` // kubeadm | k3s | sonic
	// Type is CloudStack's clustertype: "" (CloudManaged, a cluster ztpd
	// built) or ClusterExternalManaged (one it did not build and only
	// onboards devices into, through a registered kubeconfig).
	Type      string    `json:"type,omitempty"`
	Owner     string    `json:"owner,omitempty"`   // API key id of the creator
	Account   string    `json:"account,omitempty"` // owning account (see ClusterAccount)
	Created   time.Time `json:"created"`
	UpdatedAt time.Time `json:"updated_at"`
	// StateSince is when the cluster entered State (zero in records
	// stored before it was kept: UpdatedAt stands in). The start timeout
	// counts from it.
	StateSince time.Time `json:"state_since,omitzero"`
	// ManualUpgrade are the member devices rolling upgrades leave out
	// (CloudStack's manualupgrade on addNodesToKubernetesCluster).
	ManualUpgrade []string `json:"manual_upgrade,omitempty"`
	// CNI is the registered CNI configuration applied to the cluster once
	// its first control plane's API server answers (nil: the binaries
	// ISO's network.yaml, as before).
	CNI *ClusterCNI `json:"cni,omitempty"`
	// NodeOfferings and NodeTemplates are the per-role shapes (CloudStack
	// 4.21's nodeofferings and nodetemplates): node type ("control",
	// "worker") to the service offering ID, and to the profile name, a
	// member of that role gets. A type not named takes ServiceOfferingID
	// and the profile its device matches.
	NodeOfferings map[string]string `json:"node_offerings,omitempty"`
	NodeTemplates map[string]string `json:"node_templates,omitempty"`
	// EtcdNodes is the number of dedicated etcd nodes (CloudStack 4.21's
	// etcdnodes): 0 runs etcd on the control planes (kubeadm's stacked
	// etcd), an odd 1 to 7 builds the cluster with external etcd on
	// members of role etcd.
	EtcdNodes int `json:"etcd_nodes,omitempty"`
}

// ClusterCNI is the CNI configuration a cluster was created with: the
// registered configuration's ID and name, and the values its parameters
// take (cniconfigdetails), given by the cluster's creator.
type ClusterCNI struct {
	ConfigID string            `json:"config_id"`
	Name     string            `json:"name"`
	Details  map[string]string `json:"details,omitempty"`
}

// CNIOutcome is what applying a cluster's CNI configuration came to.
type CNIOutcome struct {
	State    string    `json:"state"` // applied | failed
	Message  string    `json:"message,omitempty"`
	Objects  int       `json:"objects,omitempty"`
	Attempts int       `json:"attempts"`
	At       time.Time `json:"at"`
}

// ClusterObservation is the cluster as ztpd's watch of its API server last
// saw it. The clusters service derives Starting/Running/Alert from it.
type ClusterObservation struct {
	APIReachable bool `json:"api_reachable"`
	// LastSeen is the last time the API server answered.
	LastSeen time.Time `json:"last_seen,omitzero"`
	// Nodes, ReadyNodes and ReadyControlPlanes count the cluster's Nodes.
	Nodes              int `json:"nodes"`
	ReadyNodes         int `json:"ready_nodes"`
	ControlPlanes      int `json:"control_planes"`
	ReadyControlPlanes int `json:"ready_control_planes"`
	// Error is why the API server was not reachable, when it was not.
	Error string `json:"error,omitempty"`
	// UnhealthySince is when the cluster last stopped being healthy
	// (API unreachable or fewer Ready Nodes than desired); zero while
	// healthy. Alert follows once it lasts longer than the alert time.
	UnhealthySince time.Time `json:"unhealthy_since,omitzero"`
	// Waiting says what a Starting cluster still waits for.
	Waiting string `json:"waiting,omitempty"`
	// StoredAt is when this observation was last written: a change of
	// only its texts (Error, Waiting) waits for storeSeenEvery after it.
	StoredAt time.Time `json:"stored_at,omitzero"`
	// CNI is the outcome of applying the cluster's CNI configuration
	// (nil: none to apply, or not tried yet).
	CNI *CNIOutcome `json:"cni,omitempty"`
}

// Cluster types (CloudStack's clustertype).
const (
	ClusterCloudManaged    = "CloudManaged"
	ClusterExternalManaged = "ExternalManaged"
)

// IsExternal reports whether ztpd did not build c: it holds no CA key for
// it and only onboards devices into it.
func (c Cluster) IsExternal() bool { return c.Type == ClusterExternalManaged }

// TypeName is c's CloudStack clustertype.
func (c Cluster) TypeName() string {
	if c.IsExternal() {
		return ClusterExternalManaged
	}
	return ClusterCloudManaged
}

// AdminAccount is the account of admin API keys (unless given another) and
// of the local admin; clusters without an account belong to it.
const AdminAccount = "admin"

// ClusterAccount is the account owning c: the account of the API key that
// created it; clusters from before accounts existed belong to AdminAccount.
func ClusterAccount(c Cluster) string {
	if c.Account == "" {
		return AdminAccount
	}
	return c.Account
}

// Version is a Kubernetes version ztpd supports, backed by a binaries ISO.
type Version struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	SemVer      string    `json:"semver"`
	ImageID     string    `json:"image_id,omitempty"` // sha256 of the ISO in the image store
	ISOName     string    `json:"iso_name,omitempty"`
	ISOURL      string    `json:"iso_url,omitempty"`
	Checksum    string    `json:"checksum,omitempty"`
	ZoneID      string    `json:"zone_id,omitempty"`
	State       string    `json:"state"` // Enabled | Disabled
	MinCPU      int       `json:"min_cpu"`
	MinMemoryMB int       `json:"min_memory_mb"`
	Created     time.Time `json:"created"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// Token is a credential record. Only a hash of the secret is stored.
type Token struct {
	ID          string    `json:"id"`   // kubeadm token id, k3s id, or enrollment id
	Kind        string    `json:"kind"` // kubeadm | k3s | enrollment | certificate-key
	SecretHash  string    `json:"secret_hash"`
	Cluster     string    `json:"cluster,omitempty"`
	Device      string    `json:"device,omitempty"`
	Usages      []string  `json:"usages,omitempty"`
	Groups      []string  `json:"groups,omitempty"`
	Description string    `json:"description,omitempty"`
	Expires     time.Time `json:"expires,omitzero"`
	UsedAt      time.Time `json:"used_at,omitzero"`
	Revoked     bool      `json:"revoked,omitempty"`
	Created     time.Time `json:"created"`
	// BindMAC and BindSerial tie an enrollment to one device.
	BindMAC    string `json:"bind_mac,omitempty"`
	BindSerial string `json:"bind_serial,omitempty"`
	// BindIP ties an enrollment to the address its device held when it
	// was issued: the secret is worth nothing presented from elsewhere.
	BindIP string `json:"bind_ip,omitempty"`
	// InitIssued: the kubeadm token was in the first control plane's init
	// configuration, so kubeadm init creates it in the cluster.
	InitIssued bool `json:"init_issued,omitempty"`
}

// Membership records a device's place in a cluster and how it got there.
type Membership struct {
	Device    string            `json:"device"`
	Cluster   string            `json:"cluster"`
	Role      string            `json:"role"`
	Version   string            `json:"version,omitempty"`
	State     DeviceState       `json:"state"`
	History   []StateTransition `json:"history"`
	Created   time.Time         `json:"created"`
	UpdatedAt time.Time         `json:"updated_at"`

	// What the joiner needs to re-issue and revoke.
	Method string `json:"join_method,omitempty"`
	// NodeName is the Kubernetes node name ztpd put in the bundle: the
	// exact key that matches the cluster's Node to this device.
	NodeName string `json:"node_name,omitempty"`
	// Node is the member's Node as the cluster last showed it.
	Node *NodeObservation `json:"node,omitempty"`
	// Reported is the device's own last report (joined or failed), kept
	// as a hint: the cluster's Node decides joined.
	Reported   string    `json:"reported,omitempty"`
	ReportedAt time.Time `json:"reported_at,omitzero"`
	// KubeletCertBy is who requested the Node's kubelet client certificate
	// (the CSR's user): the bootstrap credential ztpd issued to this device.
	// Impostor is set when it was anyone else: the Node is then not this
	// member's, whatever its name.
	KubeletCertBy string `json:"kubelet_cert_by,omitempty"`
	Impostor      string `json:"impostor,omitempty"`
	TokenID       string `json:"token_id,omitempty"`
	ReportID      string `json:"report_id,omitempty"`
	// AgentID is the device agent's credential; it outlives
	// the membership when the device stays under ztpd's care standalone.
	AgentID    string `json:"agent_id,omitempty"`
	IP         string `json:"ip,omitempty"`
	WaitReason string `json:"wait_reason,omitempty"`
	// IssuedAt is when the bundle was first handed out: re-issues are
	// allowed only within the joiner's reissue window of it.
	IssuedAt time.Time `json:"issued_at,omitzero"`
}

// NodeObservation is a member's Node as the cluster showed it.
type NodeObservation struct {
	Ready        string    `json:"ready"` // True | False | Unknown
	Reason       string    `json:"reason,omitempty"`
	ControlPlane bool      `json:"control_plane,omitempty"`
	Registered   time.Time `json:"registered,omitzero"` // the Node's creation
	Seen         time.Time `json:"seen"`                // when ztpd last saw it change
	Deleted      bool      `json:"deleted,omitempty"`
}

// JoinState is the joiner's bookkeeping of one cluster's membership.
type JoinState struct {
	KubernetesVersion string `json:"kubernetes_version"`
	Algorithm         string `json:"algorithm"` // key algorithm of the cluster CA
	FirstControlPlane string `json:"first_control_plane,omitempty"`
	Initialized       bool   `json:"initialized,omitempty"` // the API server has answered ztpd
	ControlPlanes     int    `json:"control_planes"`        // active, including the first
	Workers           int    `json:"workers"`               // active, including switches
	// EtcdMembers counts the active members of role etcd (a cluster with
	// etcd nodes); FirstEtcd is the one that starts the etcd cluster, the
	// others join it by member add.
	EtcdMembers int    `json:"etcd_members,omitempty"`
	FirstEtcd   string `json:"first_etcd,omitempty"`
	APIEndpoint string `json:"api_endpoint,omitempty"`
	Suspended   bool   `json:"suspended,omitempty"` // cluster stopped: no joins
	// AdminBinding: the ClusterRoleBinding giving ztpd's kubeconfig group
	// cluster-admin exists in the cluster (created or found by ztpd).
	AdminBinding bool `json:"admin_binding,omitempty"`
	// AdminBindingRetry: creating it failed (API server not reachable
	// yet); the sweeper tries again.
	AdminBindingRetry bool `json:"admin_binding_retry,omitempty"`
}

// APIKey is a stored API key: the secret is kept sealed (to sign with) and
// hashed (to compare), never in the clear.
type APIKey struct {
	APIKey       string    `json:"api_key"`
	Name         string    `json:"name,omitempty"`
	Account      string    `json:"account,omitempty"` // empty: derived from the role
	Role         string    `json:"role"`
	SecretSealed []byte    `json:"secret_sealed"`
	SecretHash   string    `json:"secret_hash"` // hex SHA-256 of the secret
	Created      time.Time `json:"created"`
}

// JobStatus uses CloudStack's numbering.
type JobStatus int

const (
	JobPending   JobStatus = 0
	JobSucceeded JobStatus = 1
	JobFailed    JobStatus = 2
)

// Job is an asynchronous operation. It is stored when it is accepted and
// again when it ends, so its outcome can be queried after a restart; a job
// a restart interrupted is recorded as failed.
type Job struct {
	ID           string    `json:"id"`
	Command      string    `json:"command"` // CloudStack command name, e.g. scaleKubernetesCluster
	InstanceType string    `json:"instance_type"`
	InstanceID   string    `json:"instance_id"`
	Owner        string    `json:"owner,omitempty"`   // API key of the caller
	Account      string    `json:"account,omitempty"` // the caller's account
	Status       JobStatus `json:"status"`
	// ErrorKind and Error describe a failed job.
	ErrorKind ErrorKind `json:"error_kind,omitempty"`
	Error     string    `json:"error,omitempty"`
	// Cluster is the cluster as the job left it (cluster jobs that keep it).
	Cluster *Cluster `json:"cluster,omitempty"`
	// Success marks jobs whose result is a plain success (stop, delete).
	Success bool `json:"success,omitempty"`
	// Abandoned names the members a forced delete could not take out of
	// their cluster: the cluster was destroyed with their nodes left as
	// they were.
	Abandoned []AbandonedNode `json:"abandoned,omitempty"`
	Created   time.Time       `json:"created"`
	Completed time.Time       `json:"completed,omitzero"`
	// Appliance is the appliance running the job (several appliances
	// share a store; "" on one box): only it recovers the job at its
	// restart, and the others fail it when that appliance is gone.
	Appliance string `json:"appliance,omitempty"`

	// What the job does and how a crash mid-way is resolved.
	Params    JobParams    `json:"params"`
	FailState ClusterState `json:"fail_state,omitempty"`
}

// JobParams are the inputs a job needs after it was accepted.
type JobParams struct {
	Size       int    `json:"size,omitempty"`
	OfferingID string `json:"offering_id,omitempty"`
	// NodeOfferings are the per-role offerings a scale sets (node type
	// to offering ID), merged into the cluster's.
	NodeOfferings map[string]string `json:"node_offerings,omitempty"`
	VersionID     string            `json:"version_id,omitempty"`
	DeleteISO     bool              `json:"delete_iso,omitempty"`
	// Force deletes a cluster even when its members cannot be taken out
	// of it first (they are recorded as abandoned).
	Force bool `json:"force,omitempty"`
	// Remove names the worker members a scale-down takes out (CloudStack's
	// nodeids), instead of the newest.
	Remove []string `json:"remove,omitempty"`
	// Add names the devices an add-nodes job admits into the cluster;
	// Control admits them as control planes, ManualUpgrade leaves them
	// out of rolling upgrades.
	Add           []string `json:"add,omitempty"`
	Control       bool     `json:"control,omitempty"`
	ManualUpgrade bool     `json:"manual_upgrade,omitempty"`
	// Target is the state the job moves the cluster to on success.
	Target ClusterState `json:"target,omitempty"`
}

// AbandonedNode is a member a forced delete left on its node: the
// device, its Node's name, and why taking it out failed.
type AbandonedNode struct {
	Device string `json:"device"`
	Node   string `json:"node,omitempty"`
	Reason string `json:"reason"`
}

// Done reports whether the job has ended.
func (j Job) Done() bool { return j.Status != JobPending }

// StateTransition is one entry of a membership's history.
type StateTransition struct {
	State  DeviceState `json:"state"`
	At     time.Time   `json:"at"`
	Reason string      `json:"reason,omitempty"`
}

// Image is a file in the content-addressed image store.
type Image struct {
	SHA256   string    `json:"sha256"`
	Name     string    `json:"name"`
	Kind     string    `json:"kind"` // sonic-installer | onie-installer | binaries-iso | file
	Platform string    `json:"platform,omitempty"`
	Version  string    `json:"version,omitempty"`
	Size     int64     `json:"size"`
	Created  time.Time `json:"created"`
}

// Event is one append-only record of something that happened.
type Event struct {
	Seq     uint64            `json:"seq"`
	Time    time.Time         `json:"time"`
	Type    string            `json:"type"` // e.g. dhcp.ack, ztp.served, join.issued
	Device  string            `json:"device,omitempty"`
	Cluster string            `json:"cluster,omitempty"`
	Message string            `json:"message,omitempty"`
	Fields  map[string]string `json:"fields,omitempty"`
}

// NormalizeMAC returns the canonical lower-case colon form of a hardware
// address, or an error naming the bad input.
func NormalizeMAC(s string) (string, error) {
	hw, err := net.ParseMAC(strings.TrimSpace(s))
	if err != nil {
		return "", fmt.Errorf("invalid MAC address %q", s)
	}
	return hw.String(), nil
}
