package core

import (
	"errors"
	"io"
	"net/netip"
)

// ErrNotFound is returned by repository getters when a record does not exist.
var ErrNotFound = errors.New("not found")

// Store persists the domain as typed repositories. Its implementations own
// the storage schema (collections, keys, indexes, encodings); nothing outside
// them knows it, so a distributed store can replace bbolt by implementing
// these interfaces and passing the conformance suite in storetest.
type Store interface {
	// View runs fn in a read-only, consistent snapshot.
	View(fn func(Tx) error) error
	// Update runs fn in a read-write transaction and makes it durable (fsync,
	// or a quorum's) before returning nil. On a store shared by several
	// appliances (etcd) fn runs again when another appliance changed what
	// it read, so it must only touch the Tx and set, not accumulate, what
	// it hands back.
	Update(fn func(Tx) error) error
	// Batch is Update for hot paths: concurrent callers share one durable
	// commit. fn may run more than once, so it must only touch the Tx.
	Batch(fn func(Tx) error) error
	// Backup writes a consistent copy of the whole store to w.
	Backup(w io.Writer) (int64, error)
	// Close flushes and releases the store and its lock.
	Close() error
}

// Tx is one transaction over every repository: a change to several
// aggregates in one Tx is atomic.
type Tx interface {
	Devices() Devices
	Leases() Leases
	Clusters() Clusters
	Versions() Versions
	Memberships() Memberships
	Tokens() Tokens
	Secrets() Secrets
	Events() Events
	Images() Images
	APIKeys() APIKeys
	Jobs() Jobs
	Settings() Settings
	Desired() DesiredStates
	Rollouts() Rollouts
	// Writable reports whether the transaction may write.
	Writable() bool
}

// Visit is called for each record of a listing, in key order; returning
// false stops the listing.
type Visit[T any] func(T) (bool, error)

// Listing order and cursors: every List visits records in a stable order
// (their key) after a cursor; Cursor(T) of a visited record resumes after
// it. Cursors are opaque strings; API pages hand them out base64-wrapped.

// Devices is the repository of device records, by ID (the normalised MAC).
type Devices interface {
	Get(id string) (Device, error)
	// Put stores d and keeps the serial-number and fixed-address lookups
	// current; a fixed address already bound to another device is refused.
	Put(d Device) error
	Delete(id string) error
	// BySerial is the device that holds serial. A serial other devices
	// stated too (Device.SerialConflict) is refused as ambiguous
	// (KindConflict, naming every candidate): an action by serial could
	// reach the wrong device.
	BySerial(serial string) (Device, error)
	// SerialHolder is the ID of the device whose record holds serial (the
	// index's entry, if that device still carries it). Put never moves the
	// entry away from such a device.
	SerialHolder(serial string) (id string, ok bool, err error)
	// ByFixedIP is the device an operator bound to ip (approved or not).
	ByFixedIP(ip string) (Device, error)
	List(after string, fn Visit[Device]) error
	// ListState visits the devices in state, in ID order after after,
	// through an index: the cost is the devices visited, not the fleet.
	ListState(state DeviceState, after string, fn Visit[Device]) error
	// ListCluster visits the devices of cluster (ID), in ID order after
	// after, through an index: the cost is the cluster's devices visited,
	// not the fleet. Devices in no cluster are listed by no cluster.
	ListCluster(cluster, after string, fn Visit[Device]) error
	Count() (int, error)
	// Stamp is device id's Stamp (ErrNotFound without one); ListStamps
	// visits every device's ID and Stamp in ID order after after, without
	// decoding any.
	Stamp(id string) (Stamp, error)
	ListStamps(after string, fn func(id string, s Stamp) (bool, error)) error
}

// Leases is the repository of address bindings, by address (IPv4 and IPv6
// in one table, keyed by the address as netip.Addr.String writes it).
type Leases interface {
	Get(ip string) (Lease, error)
	Put(l Lease) error
	Delete(ip string) error
	List(after string, fn Visit[Lease]) error
	// ListMAC visits the leases bound to mac, in address order, through
	// an index: the cost is that MAC's leases, not every lease.
	ListMAC(mac string, fn Visit[Lease]) error
	Count() (int, error)
}

// Clusters is the repository of clusters, by ID, with unique names.
type Clusters interface {
	Get(id string) (Cluster, error)
	// Put stores c; a name used by another cluster is refused.
	Put(c Cluster) error
	Delete(id string) error
	ByName(name string) (Cluster, error)
	List(after string, fn Visit[Cluster]) error

	// JoinState is the joiner's bookkeeping of a cluster's membership.
	JoinState(cluster string) (JoinState, error)
	PutJoinState(cluster string, st JoinState) error
	DeleteJoinState(cluster string) error
	// JoinStates lists the clusters that have one, by cluster ID.
	JoinStates(fn func(cluster string, st JoinState) (bool, error)) error
}

// Versions is the repository of Kubernetes versions, by ID.
type Versions interface {
	Get(id string) (Version, error)
	Put(v Version) error
	Delete(id string) error
	List(after string, fn Visit[Version]) error
}

// Memberships is the repository of memberships, by device ID, with the
// roster of each cluster's active members (device and role).
type Memberships interface {
	Get(device string) (Membership, error)
	Put(m Membership) error
	Delete(device string) error
	List(after string, fn Visit[Membership]) error

	// Enlist puts device on cluster's roster as role; Delist takes it off.
	Enlist(cluster, device, role string) error
	Delist(cluster, device string) error
	// Roster visits cluster's active members in device order.
	Roster(cluster string, fn func(device, role string) (bool, error)) error
	// Stamp is device's membership's Stamp (ErrNotFound without one).
	Stamp(device string) (Stamp, error)
}

// Stamp identifies one stored state of a record within this process: while
// a record's Stamp is unchanged, so is the record. Whoever keeps something
// derived from many records (a cluster's roster, the console's device
// counts) compares Stamps and decodes only the records that moved, instead
// of the store caching every decoded record (at 100,000 devices
// those caches were a third of the heap, and marking them on every
// collection set the API's tail latency). The zero Stamp is no record.
type Stamp [2]uint64

// Tokens is the repository of credential records, by kind and ID, with
// each cluster's pool of pre-issued kubeadm tokens and the one live
// enrollment of each device.
type Tokens interface {
	Get(kind, id string) (Token, error)
	// Put stores t under t.Kind and t.ID.
	Put(t Token) error
	Delete(kind, id string) error
	// List visits all tokens in (kind, id) order; Cursor is TokenCursor.
	List(after string, fn Visit[Token]) error
	// ListKind visits the tokens of one kind in ID order.
	ListKind(kind string, fn Visit[Token]) error

	// Pool holds the IDs of cluster's kubeadm tokens not yet handed out.
	PoolAdd(cluster, id string) error
	PoolRemove(cluster, id string) error
	Pool(cluster string, fn func(id string) (bool, error)) error

	// Enrollment is the ID of the live enrollment of a device, looked up by
	// its MAC (or, without one, its serial).
	Enrollment(device EnrollmentKey) (id string, ok bool, err error)
	SetEnrollment(device EnrollmentKey, id string) error
	ClearEnrollment(device EnrollmentKey) error
}

// EnrollmentKey names a device for its enrollment: its MAC, or its serial
// when the MAC is not known.
type EnrollmentKey struct{ MAC, Serial string }

// TokenCursor is the listing cursor of t.
func TokenCursor(t Token) string { return t.Kind + "/" + t.ID }

// Secrets holds sealed key material by owner (e.g. a cluster ID). The
// values are opaque to the store: sealing is the owner's business.
type Secrets interface {
	Get(owner string) ([]byte, bool, error)
	// Put stores sealed, a JSON document, as given.
	Put(owner string, sealed []byte) error
	Delete(owner string) error
	// List visits every owner and its document in owner order (the key
	// check at open counts sealed data and names the keys it needs).
	List(fn func(owner string, sealed []byte) (bool, error)) error
}

// EventStream is one of the two event streams.
type EventStream int

const (
	DeviceEvents EventStream = iota // DHCP, ZTP fetches, refusals: high volume
	AuditEvents                     // what operators and API keys did, issued credentials
)

// StreamOf is the stream events of type typ belong to.
func StreamOf(typ string) EventStream {
	if IsAudit(typ) {
		return AuditEvents
	}
	return DeviceEvents
}

// Events is the append-only event log: two streams sharing one sequence,
// so they merge in order.
type Events interface {
	// Append stores e under the next sequence number (and the current time
	// when e.Time is zero) and returns the number.
	Append(e Event) (uint64, error)
	// List visits stream's events with sequence numbers above after.
	List(stream EventStream, after uint64, fn Visit[Event]) error
	// ListBackward visits stream's events with sequence numbers below
	// before (all when before is 0), newest first: the newest n without
	// reading the whole log.
	ListBackward(stream EventStream, before uint64, fn Visit[Event]) error
	// ListDevice visits stream's events naming device (Event.Device) with
	// sequence numbers above after, in order, through an index: it reads
	// that device's events only, not the log.
	ListDevice(stream EventStream, device string, after uint64, fn Visit[Event]) error
	// ListDeviceBackward is ListDevice newest first, below before (all
	// when before is 0).
	ListDeviceBackward(stream EventStream, device string, before uint64, fn Visit[Event]) error
	Count(stream EventStream) (int, error)
	// Prune deletes the oldest events of stream so that at most keep
	// remain, in bounded steps: more reports that some are left to prune.
	Prune(stream EventStream, keep int) (n int, more bool, err error)
}

// Images is the repository of image records, by sha256, with unique names.
type Images interface {
	Get(sha string) (Image, error)
	Put(im Image) error
	Delete(sha string) error
	List(after string, fn Visit[Image]) error
	Count() (int, error)
	// ByName is the sha256 an image name points to.
	ByName(name string) (sha string, err error)
	SetName(name, sha string) error
	DeleteName(name string) error
	// Names visits every name and the sha256 it points to, in name order.
	Names(fn func(name, sha string) (bool, error)) error
	// WithPrefix visits the images whose sha256 starts with prefix.
	WithPrefix(prefix string, fn Visit[Image]) error
}

// APIKeys is the repository of API key records, by key.
type APIKeys interface {
	Get(key string) (APIKey, error)
	Put(k APIKey) error
	Delete(key string) error
	List(fn Visit[APIKey]) error
	Count() (int, error)
}

// Jobs is the repository of asynchronous API jobs, by ID.
type Jobs interface {
	Get(id string) (Job, error)
	Put(j Job) error
	Delete(id string) error
	List(fn Visit[Job]) error
}

// DesiredStates is the repository of devices' desired states, by device
// ID.
type DesiredStates interface {
	Get(device string) (DesiredState, error)
	Put(d DesiredState) error
	Delete(device string) error
	List(after string, fn Visit[DesiredState]) error
}

// Rollouts is the repository of rollouts, by ID.
type Rollouts interface {
	Get(id string) (Rollout, error)
	Put(r Rollout) error
	Delete(id string) error
	// List visits every rollout in ID order (IDs sort by creation).
	List(after string, fn Visit[Rollout]) error
}

// Settings holds appliance-wide values that are chosen once and kept (for
// example the CloudStack zone ID), by name.
type Settings interface {
	Get(name string) (string, bool, error)
	Put(name, value string) error
}

// Aggregate names one repository for change tracking.
type Aggregate int

const (
	AggDevices Aggregate = iota
	AggLeases
	AggClusters
	AggVersions
	AggMemberships
	AggTokens
	AggSecrets
	AggEvents
	AggImages
	AggAPIKeys
	AggJobs
	AggSettings
	AggDesired
	AggRollouts
	NumAggregates
)

// Generations is implemented by stores that count writes per aggregate, so a
// reader can reuse what it derived from some aggregates, exactly until one of
// them changes: note Generation(as...) before reading them and treat the
// result as current while Generation(as...) still returns that number. The
// number grows once a write transaction that touched any of as has ended
// (a write still in progress may not be counted yet, as it may not be
// visible yet).
type Generations interface {
	Generation(as ...Aggregate) uint64
}

// DeviceFinder answers from memory which device holds an address right now.
// The DHCP server knows a client's facts (kind, serial) the moment it ACKs,
// while the device record may reach the store a group commit later; content
// serving asks it when the store has the lease but not yet the device.
type DeviceFinder interface {
	DeviceByIP(ip netip.Addr) (Device, bool)
}
