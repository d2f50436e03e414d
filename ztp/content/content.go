// Package content is the ZTP content service: it identifies the device behind
// a request, picks its profile, renders what it gets (ztp.json,
// config_db.json, ONIE installer, cloud-init metadata) and records its
// progress. The HTTP and TFTP transports are thin front ends over it, so both
// serve exactly the same documents.
//
// Identification is the one rule of core.HolderOf: the device is the holder
// of the address the request comes from (an active lease, or an
// operator-declared binding for a static device). The SONiC headers
// (SERIAL-NUMBER, BASE-MAC-ADDRESS, PRODUCT-NAME, SONiC-VERSION) and ONIE
// headers only add facts the record does not have yet; a header that
// contradicts the record is refused (403), and one outside its character
// set too (400). A request from an address nobody holds gets a 403, is
// counted and logged, and creates no record.
//
// Per-device documents are bound to their device: /ztp/config/<id>/... is
// only answered to the holder of device <id>'s address.
package content

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/positions"
	"github.com/ztpd/ztpd/internal/profile"
	"github.com/ztpd/ztpd/internal/ratelimit"
	"github.com/ztpd/ztpd/ztp/endpoints"
)

// JoinProvider supplies cluster-join material; the joiner implements it. A
// nil provider means profiles that name a cluster get no join section.
type JoinProvider interface {
	// ZTPSection returns the body of the ztp.json section that joins dev to
	// r.Cluster (a section with a "plugin" url), or nil for none. It is named
	// "NN-join" and runs last.
	ZTPSection(ctx context.Context, dev core.Device, r profile.Result) (map[string]any, error)
	// KubernetesMaster returns the API server for config_db's
	// KUBERNETES_MASTER|SERVER when dev joins by the SONiC (ctrmgrd) method,
	// or nil when it joins otherwise.
	KubernetesMaster(ctx context.Context, dev core.Device, r profile.Result) (*KubeMaster, error)
	// UserData returns the cloud-config that joins a VM to r.Cluster.
	UserData(ctx context.Context, dev core.Device, r profile.Result) ([]byte, error)
	// JoinData returns a VM's join data (JSON: its files and commands,
	// secrets included), asked over the device HTTPS listener; a wait
	// while the VM may not join yet, a core.KindState error once it was
	// handed out for good.
	// csrs are the etcd certificate signing requests the VM's waiter sent
	// (a cluster with etcd nodes: its keys are made on the VM).
	JoinData(ctx context.Context, dev core.Device, r profile.Result, csrs EtcdCSRs) ([]byte, error)
}

// EtcdCSRs are the PEM certificate signing requests a VM's join waiter
// sends for the etcd keys it made (a cluster with etcd nodes): an etcd
// node's server and peer keys, the first control plane's
// apiserver-etcd-client key. The joiner signs only those of the role it
// gives the VM, for the names the VM holds.
type EtcdCSRs struct {
	Server string `json:"server,omitempty"`
	Peer   string `json:"peer,omitempty"`
	Client string `json:"client,omitempty"`
}

// Images is the part of the image store the service uses.
type Images interface {
	Resolve(ref string) (core.Image, error)
	List(kind string) ([]core.Image, error)
	// OpenContext opens an image's content; with several appliances it
	// may first fetch a missing blob from a peer, for as long as ctx lets
	// it (the device's request).
	OpenContext(ctx context.Context, im core.Image) (*os.File, error)
}

// Options configure a Service: resolved values and the parts it uses.
type Options struct {
	Store core.Store
	// Devices records each fetch (device progress and events).
	Devices *devices.Service
	Images  Images
	// Binaries reads Kubernetes versions' binaries from their ISOs
	// (images/binaries.Service); nil: none are served.
	Binaries Binaries
	// Join supplies cluster-join sections; nil: profiles that name a
	// cluster get no join section.
	Join JoinProvider
	// Pending answers what the DHCP server knows of a device before its
	// record is committed; nil without DHCP.
	Pending core.DeviceFinder
	Log     *slog.Logger
	// Endpoints builds every URL handed to devices.
	Endpoints endpoints.Endpoints
	// DefaultProfile is given to devices no profile matches; "" = 404.
	DefaultProfile string
	// FilesDir is served read-only by name (TFTP <path>, HTTP /files/<path>);
	// "" disables it.
	FilesDir string
	// Bindings are the operator-declared addresses (DHCP reservations) that
	// identify static devices without a lease; nil for none.
	Bindings core.Bindings
	// Registerer gets content serving's metrics; nil keeps them unexported.
	Registerer prometheus.Registerer
	// DevicePins are the pins of the device HTTPS listener's certificate
	// as curl --pinnedpubkey takes them; nil without the listener (then
	// Endpoints has no secure base either).
	DevicePins func() string
}

// Service renders and serves ZTP content.
type Service struct {
	opt      Options
	log      *slog.Logger
	profiles atomic.Pointer[profile.Set]
	plan     atomic.Pointer[positions.Plan] // the cabling plan; nil without one
	imgs     imageCache
	files    *os.Root
	now      func() time.Time
	metrics  *metrics

	logRefusal *ratelimit.Keyed
	recent     refusalTable // refusals of addresses that hold no lease (refusal.go)
	waits      waitTable    // what each waiting device was last told (waiting.go)
}

// New builds a Service. Profiles are set with SetProfiles.
func New(opt Options) (*Service, error) {
	s := &Service{logRefusal: ratelimit.New(1, refuseLogEvery, 4096), opt: opt, log: opt.Log, now: func() time.Time { return time.Now().UTC() },
		metrics: newMetrics(opt.Registerer)}
	if s.log == nil {
		s.log = slog.Default()
	}
	if opt.Store != nil && opt.Devices == nil {
		return nil, errors.New("content: a devices service is required to record fetches")
	}
	if opt.FilesDir != "" {
		var err error
		if err := os.MkdirAll(opt.FilesDir, 0o755); err != nil {
			return nil, fmt.Errorf("files directory: %w", err)
		}
		if s.files, err = os.OpenRoot(opt.FilesDir); err != nil {
			return nil, fmt.Errorf("files directory: %w", err)
		}
	}
	s.profiles.Store(&profile.Set{})
	return s, nil
}

// Close releases the files root. (What is still queued is recorded by the
// devices service, which closes after its reporters.)
func (s *Service) Close() error {
	if s.files != nil {
		return s.files.Close()
	}
	return nil
}

// SetProfiles swaps in a loaded profile set; it checks that the default
// profile exists in it. (The app checks the plan's profiles against the
// set before both are swapped in: CheckPlanProfiles.)
func (s *Service) SetProfiles(set *profile.Set) error {
	if s.opt.DefaultProfile != "" && set.Get(s.opt.DefaultProfile) == nil {
		return fmt.Errorf("ztp.default_profile: no profile named %q is loaded", s.opt.DefaultProfile)
	}
	s.profiles.Store(set)
	// Profiles are loaded by a serving process (App.Start), never by
	// offline CLI use: refusals are recorded from then on.
	s.recent.start(s.now())
	return nil
}

// Profiles returns the current profile set.
func (s *Service) Profiles() *profile.Set { return s.profiles.Load() }

// Client is who is asking: addresses and whatever it said about itself.
type Client struct {
	Addr      netip.Addr // source address
	Local     netip.Addr // address the request arrived on
	Transport string     // "http" or "tftp"
	// Secure: the request came over the device HTTPS listener.
	Secure bool
	// SONiC ZTP headers.
	Serial, BaseMAC, Product, SONiCVersion string
	// ONIE headers.
	ONIE *ONIE
	// EtcdCSRs are what a join waiter's request carried (JoinData only).
	EtcdCSRs EtcdCSRs
	// Neighbor is the MAC of the link-local neighbour the request came
	// from (ONIE's link-local discovery: no DHCP, so no lease), as the
	// network tells it (the neighbour table, or the address's EUI-64
	// interface id); "" otherwise. Only ONIEInstaller takes it as the
	// holder: an installer is public, so the neighbour's word names the
	// device it records and entitles it to nothing else.
	Neighbor string
	// neighborHolds: identify takes Neighbor as the holder of Addr.
	neighborHolds bool
	// stated is what the request states about its device, once identify
	// has checked it (none before, or when it was refused); serialHolder
	// the device that holds the serial it states, when that is not the
	// requester. Set by identify, read by learn and the records.
	stated       devices.Facts
	serialHolder string
}

// ONIE is what the ONIE installer tells about itself in its HTTP headers.
type ONIE struct {
	Serial, MAC, Vendor, Machine, MachineRev, Arch, Version string
}

// Platform is the ONIE platform string, <arch>-<machine>-r<rev> as ONIE's
// onie_platform; empty when arch or machine is missing.
func (o *ONIE) Platform() string {
	if o == nil || o.Arch == "" || o.Machine == "" {
		return ""
	}
	p := o.Arch + "-" + o.Machine
	if o.MachineRev != "" {
		p += "-r" + o.MachineRev
	}
	return p
}

func (c *Client) hasSONiCHeaders() bool {
	return c.Serial != "" || c.BaseMAC != "" || c.Product != "" || c.SONiCVersion != ""
}

// Error is a refusal with an HTTP status and a reason for the client.
type Error struct {
	Status int
	Reason string
	Kind   string // why, for metrics and logs: one of the Refused* values or ""
	// Detail is for the server's log only (paths, system errors): Reason is
	// what a device may read.
	Detail string
	// Wait, on a 503, says the device only has to come back later (its
	// image is not stored yet): a wait (core.KindWaiting), not a failure.
	Wait bool
}

// Why identity refused a request.
const (
	RefusedNoHolder = "no-holder" // the address holds no lease and no binding
	RefusedMismatch = "mismatch"  // a stated fact contradicts the device's record
	RefusedFact     = "bad-fact"  // a stated fact is outside its character set
)

func (e *Error) Error() string {
	if e.Detail != "" {
		return e.Reason + ": " + e.Detail
	}
	return e.Reason
}

// ErrorKind is the refusal in the one error model (core.ErrorKind), whose
// HTTP status (httpserve.StatusOf) is e.Status: 400 invalid, 403 refused,
// 404 not found, 409 state, 503 unavailable.
func (e *Error) ErrorKind() core.ErrorKind {
	switch e.Status {
	case 400:
		return core.KindInvalid
	case 403:
		return core.KindRefused
	case 404:
		return core.KindNotFound
	case 409:
		return core.KindState
	case 503:
		if e.Wait {
			return core.KindWaiting
		}
		return core.KindUnavailable
	}
	return core.KindInternal
}

// Unwrap makes core.KindOf (and errors.As to *core.Error) see the
// classified refusal.
func (e *Error) Unwrap() error { return &core.Error{Kind: e.ErrorKind(), Msg: e.Reason} }

func notFound(format string, args ...any) error {
	return &Error{Status: 404, Reason: fmt.Sprintf(format, args...)}
}

func forbidden(format string, args ...any) error {
	return &Error{Status: 403, Reason: fmt.Sprintf(format, args...)}
}

// waitFor is a 503 that tells the device what it waits for, the operator
// having yet to provide it (an image); the device retries.
func waitFor(format string, args ...any) error {
	return &Error{Status: 503, Reason: fmt.Sprintf(format, args...), Wait: true}
}

// unavailable is a server-side problem the operator must fix (missing image,
// failing joiner); the switch retries later.
func unavailable(format string, args ...any) error {
	return &Error{Status: 503, Reason: fmt.Sprintf(format, args...)}
}

// BaseURL is the http://host[:port] prefix of URLs handed to c.
func (s *Service) BaseURL(c *Client) string {
	var local netip.Addr
	if c != nil {
		local = c.Local
	}
	return s.opt.Endpoints.Base(local)
}

// env is what templates rendered for the device behind c are given.
func (s *Service) env(c *Client) profile.Env {
	var local netip.Addr
	if c != nil {
		local = c.Local
	}
	e := profile.Env{BaseURL: s.opt.Endpoints.Base(local)}
	if s.opt.DevicePins != nil {
		e.SecureBaseURL, e.TLSPin = s.opt.Endpoints.SecureBase(local), s.opt.DevicePins()
	}
	return e
}

// pick returns the profile for f: the first match, else the default.
func (s *Service) pick(f *profile.Facts) (*profile.Profile, error) {
	p, _, err := Pick(s.profiles.Load(), s.opt.DefaultProfile, f)
	return p, err
}

// Pick is how a profile is chosen for a device with facts f, by the server
// and by `ztpd profile check`: the profile the device's planned position
// names, else the one its cluster's node template names for its role,
// else the first profile of set that matches, else the default profile
// (byDefault), else a 404 refusal.
func Pick(set *profile.Set, defaultProfile string, f *profile.Facts) (p *profile.Profile, byDefault bool, err error) {
	if pos := f.Position; pos != nil && pos.Profile != "" {
		if p := set.Get(pos.Profile); p != nil {
			return p, false, nil
		}
		return nil, false, notFound("position %s names profile %q, which is not loaded", pos.Name, pos.Profile)
	}
	if f.ClusterProfile != "" {
		if p := set.Get(f.ClusterProfile); p != nil {
			return p, false, nil
		}
		return nil, false, notFound("the node template of device %s's cluster role names profile %q, which is not loaded", f.ID, f.ClusterProfile)
	}
	if p := set.Match(f); p != nil {
		return p, false, nil
	}
	if defaultProfile != "" {
		if p := set.Get(defaultProfile); p != nil {
			return p, true, nil
		}
	}
	return nil, false, notFound("no profile matches device %s (kind %s, serial %q, product %q, platform %q, ip %s, subnet %q) and no default profile is configured",
		f.ID, f.Kind, f.Serial, f.Product, f.Platform, f.IP, f.Subnet)
}

// resolve identifies c, applies what it says about itself and picks its
// profile.
func (s *Service) resolve(c *Client) (core.Device, bool, *profile.Profile, error) {
	var dev core.Device
	var stored bool
	err := s.opt.Store.View(func(tx core.Tx) error {
		var err error
		dev, stored, err = s.identify(tx, c)
		if err != nil {
			return err
		}
		return moved(tx, s.plan.Load(), &dev)
	})
	if err != nil {
		return dev, stored, nil, err
	}
	learn(&dev, c)
	if err := placed(s.plan.Load(), &dev); err != nil {
		return dev, stored, nil, err
	}
	p, err := s.pick(s.facts(&dev))
	return dev, stored, p, err
}

// Served is a rendered document and who it was for.
type Served struct {
	Body    []byte
	Device  core.Device
	Profile string
}

// progress moves the device forward to next and appends an event (through
// the recorder's group commit).
func (s *Service) progress(c *Client, dev core.Device, profileName string, next core.DeviceState, evType string, fields map[string]string) {
	ev := core.Event{Time: s.now(), Type: evType, Device: dev.ID, Fields: make(map[string]string, len(fields)+4)}
	ev.Fields["transport"] = c.Transport
	ev.Fields["addr"] = addrString(c.Addr)
	if profileName != "" {
		ev.Fields["profile"] = profileName
	}
	for k, v := range fields {
		ev.Fields[k] = v
	}
	s.opt.Devices.Progress(devices.Progress{Device: dev, Facts: c.stated, Profile: profileName, Next: next, Event: ev})
	s.waits.over(dev.ID)
}

// Flush waits until every fetch so far is recorded in the store.
func (s *Service) Flush() { s.opt.Devices.Flush() }
