// Package desired owns each device's desired state: what the
// operator wants it to run (mode, cluster and role, SONiC image,
// Kubernetes version, labels, hooks) and the one operation its agent is
// asked to do now, with what the agent reported of each step.
//
// Operators change the targets (Set), over the defaults of the device's
// profile (Options.Defaults, its desired: block), which what is set on
// the device overrides field by field (Overlay); rollouts hand out and
// take back operations (Assign, Withdraw) once they have cordoned and
// drained the device's Node; device agents read their document and
// report steps (AgentDocument, AgentReport), authenticated by the
// credential issued at join and the address they ask from. Every change
// is an event.
package desired

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/positions"
	"github.com/ztpd/ztpd/internal/semver"
)

// metrics are the agents' channel's metrics.
type metrics struct {
	agentReports  *prometheus.CounterVec
	agentsRefused prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		agentReports: f.NewCounterVec(prometheus.CounterOpts{
			Name: "ztpd_agent_step_reports_total", Help: "Device agents' step reports recorded, by state.",
		}, []string{"state"}),
		agentsRefused: f.NewCounter(prometheus.CounterOpts{
			Name: "ztpd_agent_refused_total", Help: "Device agent requests refused (credential unknown, wrong, revoked or from another address).",
		}),
	}
}

// Authenticator says which device an agent's request comes from (the
// joiner: the credential issued at join, checked against the holder of
// the request's address).
type Authenticator interface {
	AuthenticateAgent(ctx context.Context, credential string, remote netip.Addr) (device string, err error)
}

// Options configure the service.
type Options struct {
	// Auth authenticates agents; nil refuses every agent.
	Auth Authenticator
	// ImageURL is the device-facing URL of an image store blob by sha256.
	ImageURL func(sha string) string
	// JoinSection mints what a device's join step needs to join cluster
	// through the normal join path (a fresh enrollment secret bound to the
	// device, the join URL, its MAC, serial and hostname): the arguments
	// are added to the document the device's own agent fetches and are
	// never stored (the joiner keeps the secret's hash). Nil: join steps
	// carry no enrollment and fail.
	JoinSection func(ctx context.Context, device, cluster string) (map[string]string, error)
	// PollInterval is how often agents are told to poll (default 60 s).
	PollInterval time.Duration
	// FastPoll says whether a device's agent should poll every
	// FastPollInterval instead (its node is in a running rollout: the
	// rollout waits for the agent to notice its operation). Nil: never.
	// It is asked at every poll of every agent, so it must be cheap.
	FastPoll func(device string) bool
	// FastPollInterval is that shorter interval (default 5 s, whole
	// seconds, at least 1 s).
	FastPollInterval time.Duration
	// NextPoll says whether a device's agent should poll every
	// NextPollInterval, shorter still (its node is next in a running
	// rollout: in flight, or among the next to start, so its operation
	// comes within about a node's time and every second its agent takes
	// to notice is the rollout's). Nil: never. Asked at every poll of
	// every agent, before FastPoll, so it must be cheap.
	NextPoll func(device string) bool
	// NextPollInterval is that interval (default 1 s, whole seconds, at
	// least 1 s).
	NextPollInterval time.Duration
	// Defaults is a device's desired-state defaults and the name of the
	// profile they come from (its desired: block): what an operator sets
	// on the device itself wins over them, field by field (Overlay). Nil,
	// or a zero state: none. Asked outside any store transaction, at
	// every read of a device's state and every poll of its agent.
	Defaults func(device string) (defaults core.DesiredState, profile string)
	// Neighbors takes the LLDP neighbours a device's agent reports (the
	// joiner compares them with the device's planned position). Nil: the
	// reports are accepted and not judged.
	Neighbors func(ctx context.Context, device string, ns []positions.Neighbor) error
	Now       func() time.Time
	Log       *slog.Logger
	// Registerer takes the service's metrics (nil: kept, not exported).
	Registerer prometheus.Registerer
}

// Service is the owner of desired states.
type Service struct {
	st      core.Store
	opts    Options
	metrics *metrics

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every agent report
}

// New builds the service.
func New(st core.Store, opts Options) *Service {
	if opts.PollInterval <= 0 {
		opts.PollInterval = time.Minute
	}
	if opts.FastPollInterval <= 0 {
		opts.FastPollInterval = DefaultFastPollInterval
	}
	if opts.NextPollInterval <= 0 {
		opts.NextPollInterval = DefaultNextPollInterval
	}
	// The document carries whole seconds.
	opts.FastPollInterval = max(opts.FastPollInterval.Round(time.Second), time.Second)
	opts.NextPollInterval = max(opts.NextPollInterval.Round(time.Second), time.Second)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.ImageURL == nil {
		opts.ImageURL = func(string) string { return "" }
	}
	return &Service{st: st, opts: opts, metrics: newMetrics(opts.Registerer), changed: make(chan struct{})}
}

// DefaultFastPollInterval is Options.FastPollInterval's default.
const DefaultFastPollInterval = 5 * time.Second

// DefaultNextPollInterval is Options.NextPollInterval's default: the few
// devices next in a rollout (at most twice its max_unavailable) poll
// every second.
const DefaultNextPollInterval = time.Second

// MaxOutput bounds the step output kept (the agent sends its tail).
const MaxOutput = 16 << 10

// Errors agents and callers see.
var (
	// ErrStaleOperation: a report for an operation that is not the
	// device's current one (withdrawn, or replaced); the agent drops it.
	ErrStaleOperation = &core.Error{Kind: core.KindConflict, Msg: "operation is not this device's current one"}
	// ErrAgentRefused is every refusal an agent sees.
	ErrAgentRefused = &core.Error{Kind: core.KindRefused, Msg: "agent credential refused"}
	// ErrStarted: the agent has started the operation; it is not
	// withdrawn.
	ErrStarted = &core.Error{Kind: core.KindState, Msg: "the agent has started the operation"}
	// ErrBusy: the device's agent is still doing another operation.
	ErrBusy = &core.Error{Kind: core.KindConflict, Msg: "device has an operation in progress"}
)

// Get is a device's effective desired state: what was set on the device
// over its profile's defaults (Layers). A device nobody set one for has
// its profile's defaults, or the zero state, at generation 0.
func (s *Service) Get(device string) (core.DesiredState, error) {
	l, err := s.Layers(device)
	return l.Effective, err
}

// Layers is how a device's desired state is made.
type Layers struct {
	// Effective is Explicit over Defaults (Overlay): what the device is
	// shown and its agent's document carries.
	Effective core.DesiredState
	// Explicit is what operators and rollouts set on the device (the
	// stored state; what Set changes).
	Explicit core.DesiredState
	// Defaults is the desired: block of the device's profile, named by
	// Profile ("" and zero without one).
	Defaults core.DesiredState
	Profile  string
}

// Layers reads a device's desired state with its profile's defaults.
func (s *Service) Layers(device string) (Layers, error) {
	var l Layers
	l.Defaults, l.Profile = s.defaults(device) // outside the transaction
	err := s.st.View(func(tx core.Tx) error {
		var err error
		l.Explicit, err = s.get(tx, device)
		return err
	})
	l.Effective = Overlay(l.Defaults, l.Explicit)
	return l, err
}

// defaults are Options.Defaults for device (none without it).
func (s *Service) defaults(device string) (core.DesiredState, string) {
	if s.opts.Defaults == nil {
		return core.DesiredState{}, ""
	}
	d, profile := s.opts.Defaults(device)
	return d, profile
}

// Overlay is explicit over defaults, field by field: the mode, image and
// Kubernetes version explicit sets win, the others are the defaults'
// (a device whose state names a cluster does not take a standalone
// default); labels and hooks merge key by key, explicit's winning.
// Everything else (cluster, role, generation, the operation, the agent)
// is explicit's.
func Overlay(defaults, explicit core.DesiredState) core.DesiredState {
	out := explicit
	if out.Mode == "" && !(defaults.Mode == core.ModeStandalone && out.Cluster != "") {
		out.Mode = defaults.Mode
	}
	if out.Image == "" {
		out.Image = defaults.Image
	}
	if out.KubernetesVersion == "" {
		out.KubernetesVersion = defaults.KubernetesVersion
	}
	out.Labels = overlayMap(defaults.Labels, explicit.Labels)
	out.Hooks = overlayMap(defaults.Hooks, explicit.Hooks)
	return out
}

func overlayMap(defaults, explicit map[string]string) map[string]string {
	if len(defaults) == 0 {
		return explicit
	}
	out := maps.Clone(defaults)
	maps.Copy(out, explicit)
	return out
}

func (s *Service) get(tx core.Tx, device string) (core.DesiredState, error) {
	d, err := tx.Desired().Get(device)
	if errors.Is(err, core.ErrNotFound) {
		if _, err := tx.Devices().Get(device); err != nil {
			if errors.Is(err, core.ErrNotFound) {
				return d, core.Errorf(core.KindNotFound, "device %s not found", device)
			}
			return d, err
		}
		return core.DesiredState{Device: device}, nil
	}
	return d, err
}

// List visits the stored desired states in device order after after.
func (s *Service) List(after string, fn func(core.DesiredState) bool) error {
	return s.st.View(func(tx core.Tx) error {
		return tx.Desired().List(after, func(d core.DesiredState) (bool, error) { return fn(d), nil })
	})
}

// Change is an operator's change of a desired state; nil fields are left
// as they are, an empty string clears a target.
type Change struct {
	Mode              *core.DeviceMode
	Cluster           *string
	Role              *string
	Image             *string
	KubernetesVersion *string
	// Labels and Hooks replace the whole map when not nil.
	Labels map[string]string
	Hooks  map[string]string
}

// Set applies an operator's change (by names who, for the audit trail).
func (s *Service) Set(ctx context.Context, by, device string, ch Change) (core.DesiredState, error) {
	if err := ctx.Err(); err != nil {
		return core.DesiredState{}, err
	}
	var out core.DesiredState
	err := s.st.Update(func(tx core.Tx) error {
		d, err := s.get(tx, device)
		if err != nil {
			return err
		}
		old := d
		if err := applyChange(tx, &d, ch); err != nil {
			return err
		}
		what := describeChange(old, d)
		if what == "" {
			out = d
			return nil // nothing changes: no new generation, no event
		}
		d.Generation++
		d.UpdatedAt, d.UpdatedBy = s.opts.Now().UTC(), by
		if err := tx.Desired().Put(d); err != nil {
			return err
		}
		out = d
		_, err = tx.Events().Append(core.Event{Type: "desired.changed", Device: device, Cluster: d.Cluster,
			Message: fmt.Sprintf("desired state of %s (generation %d): %s", device, d.Generation, what),
			Fields:  map[string]string{"by": by, "generation": fmt.Sprint(d.Generation)},
			Time:    d.UpdatedAt,
		})
		return err
	})
	if err == nil {
		s.opts.Log.Info("desired state changed", "device", device, "generation", out.Generation, "by", by)
	}
	return out, err
}

func applyChange(tx core.Tx, d *core.DesiredState, ch Change) error {
	if ch.Mode != nil {
		switch *ch.Mode {
		case core.ModeCluster, core.ModeStandalone, "":
			d.Mode = *ch.Mode
		default:
			return core.Errorf(core.KindInvalid, "mode %q: want cluster or standalone", *ch.Mode)
		}
	}
	if ch.Cluster != nil {
		if *ch.Cluster != "" {
			c, err := tx.Clusters().Get(*ch.Cluster)
			if errors.Is(err, core.ErrNotFound) {
				if c, err = tx.Clusters().ByName(*ch.Cluster); errors.Is(err, core.ErrNotFound) {
					return core.Errorf(core.KindInvalid, "cluster %q not found", *ch.Cluster)
				}
			}
			if err != nil {
				return err
			}
			d.Cluster = c.ID
		} else {
			d.Cluster = ""
		}
	}
	if ch.Role != nil {
		switch *ch.Role {
		case "", "control-plane", "worker":
			d.Role = *ch.Role
		default:
			return core.Errorf(core.KindInvalid, "role %q: want control-plane or worker", *ch.Role)
		}
	}
	if ch.Image != nil {
		if *ch.Image != "" {
			if _, err := ResolveImage(tx, *ch.Image); err != nil {
				return err
			}
		}
		d.Image = *ch.Image
	}
	if ch.KubernetesVersion != nil {
		if v := *ch.KubernetesVersion; v != "" {
			sv, err := semver.Parse(v)
			if err != nil {
				return core.Errorf(core.KindInvalid, "kubernetes version %q: %v", v, err)
			}
			d.KubernetesVersion = sv.Tag()
		} else {
			d.KubernetesVersion = ""
		}
	}
	if ch.Labels != nil {
		for k, v := range ch.Labels {
			if errs := validation.IsQualifiedName(k); len(errs) > 0 {
				return core.Errorf(core.KindInvalid, "label key %q: %s", k, strings.Join(errs, "; "))
			}
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				return core.Errorf(core.KindInvalid, "label %s value %q: %s", k, v, strings.Join(errs, "; "))
			}
		}
		d.Labels = maps.Clone(ch.Labels)
		if len(d.Labels) == 0 {
			d.Labels = nil
		}
	}
	if ch.Hooks != nil {
		if err := CheckHooks(tx, ch.Hooks); err != nil {
			return err
		}
		d.Hooks = maps.Clone(ch.Hooks)
		if len(d.Hooks) == 0 {
			d.Hooks = nil
		}
	}
	if d.Mode == core.ModeStandalone && d.Cluster != "" {
		return core.Errorf(core.KindInvalid, "a standalone device names no cluster (%s)", d.Cluster)
	}
	return nil
}

// CheckHooks validates hook phases and that each names a stored image.
func CheckHooks(tx core.Tx, hooks map[string]string) error {
	for phase, image := range hooks {
		if !slices.Contains(core.HookPhases, phase) {
			return core.Errorf(core.KindInvalid, "hook phase %q: want one of %s", phase, strings.Join(core.HookPhases, ", "))
		}
		if _, err := ResolveImage(tx, image); err != nil {
			return fmt.Errorf("hook %s: %w", phase, err)
		}
	}
	return nil
}

// ResolveImage finds an image store entry by name or sha256.
func ResolveImage(tx core.Tx, ref string) (core.Image, error) {
	sha := ref
	if s, err := tx.Images().ByName(ref); err == nil {
		sha = s
	} else if !errors.Is(err, core.ErrNotFound) {
		return core.Image{}, err
	}
	im, err := tx.Images().Get(sha)
	if errors.Is(err, core.ErrNotFound) {
		return im, core.Errorf(core.KindInvalid, "image %q is not in the image store", ref)
	}
	return im, err
}

// describeChange says what differs between two desired states ("" when
// nothing does).
func describeChange(a, b core.DesiredState) string {
	var parts []string
	diff := func(what, x, y string) {
		if x != y {
			parts = append(parts, fmt.Sprintf("%s %s -> %s", what, orNone(x), orNone(y)))
		}
	}
	diff("mode", string(a.Mode), string(b.Mode))
	diff("cluster", a.Cluster, b.Cluster)
	diff("role", a.Role, b.Role)
	diff("image", a.Image, b.Image)
	diff("kubernetes", a.KubernetesVersion, b.KubernetesVersion)
	if !maps.Equal(a.Labels, b.Labels) {
		parts = append(parts, "labels")
	}
	if !maps.Equal(a.Hooks, b.Hooks) {
		parts = append(parts, "hooks")
	}
	return strings.Join(parts, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// Assign hands an operation to a device's agent, after mutate (optional)
// set the targets it moves the device to. A device whose agent has an
// unfinished operation is refused (ErrBusy), unless it is the same one
// (a rollout resumed after a restart).
func (s *Service) Assign(ctx context.Context, by, device string, op core.AgentOperation, mutate func(*core.DesiredState)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.opts.Now().UTC()
	op.State, op.Created, op.Finished, op.Reason = core.StepPending, now, time.Time{}, ""
	for i := range op.Steps {
		op.Steps[i].State = core.StepPending
	}
	return s.st.Update(func(tx core.Tx) error {
		d, err := s.get(tx, device)
		if err != nil {
			return err
		}
		if cur := d.Operation; cur != nil && !cur.Done() {
			if cur.ID == op.ID {
				return nil
			}
			return fmt.Errorf("%w: %s (%s)", ErrBusy, cur.ID, cur.Kind)
		}
		if mutate != nil {
			mutate(&d)
		}
		d.Operation = &op
		d.Generation++
		d.UpdatedAt, d.UpdatedBy = now, by
		if err := tx.Desired().Put(d); err != nil {
			return err
		}
		names := make([]string, len(op.Steps))
		for i, st := range op.Steps {
			names[i] = st.Name
		}
		_, err = tx.Events().Append(core.Event{Type: "desired.operation", Device: device, Cluster: d.Cluster, Time: now,
			Message: fmt.Sprintf("operation %s (%s) handed to the agent of %s: %s", op.ID, op.Kind, device, strings.Join(names, ", ")),
			Fields:  map[string]string{"operation": op.ID, "kind": op.Kind, "rollout": op.Rollout, "by": by}})
		return err
	})
}

// Withdraw takes back an operation the agent has not started (an aborted
// rollout): the agent's first report is answered "stale" and it runs
// nothing. One the agent has started is not withdrawn (ErrStarted): a step
// half done is worse than a step finished.
func (s *Service) Withdraw(ctx context.Context, device, opID, reason string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.opts.Now().UTC()
	return s.st.Update(func(tx core.Tx) error {
		d, err := s.get(tx, device)
		if err != nil {
			return err
		}
		op := d.Operation
		if op == nil || op.ID != opID || op.Done() {
			return nil
		}
		if op.State != core.StepPending {
			return ErrStarted // the agent is at it: it finishes
		}
		op.State, op.Reason, op.Finished = core.OpWithdrawn, reason, now
		d.Generation++
		d.UpdatedAt = now
		if err := tx.Desired().Put(d); err != nil {
			return err
		}
		_, err = tx.Events().Append(core.Event{Type: "desired.withdrawn", Device: device, Cluster: d.Cluster, Time: now,
			Message: fmt.Sprintf("operation %s withdrawn from %s: %s", opID, device, reason)})
		return err
	})
}

// Operation is a device's current (or last) operation, nil when none.
func (s *Service) Operation(device string) (*core.AgentOperation, error) {
	var d core.DesiredState
	err := s.st.View(func(tx core.Tx) error {
		var err error
		d, err = s.get(tx, device) // operations are the device's own, never a profile's
		return err
	})
	if err != nil {
		return nil, err
	}
	return d.Operation, nil
}

// Changed is closed at the next agent report: waiters re-read then.
func (s *Service) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

func (s *Service) notify() {
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// WaitOperation waits until the device's operation opID has ended (or is
// no longer the device's) and returns it as it ended.
func (s *Service) WaitOperation(ctx context.Context, device, opID string) (*core.AgentOperation, error) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		ch := s.Changed()
		op, err := s.Operation(device)
		if err != nil {
			return nil, err
		}
		if op == nil || op.ID != opID {
			return op, ErrStaleOperation
		}
		if op.Done() {
			return op, nil
		}
		select {
		case <-ctx.Done():
			return op, ctx.Err()
		case <-ch:
		case <-tick.C:
		}
	}
}

// Document is what an agent reads: its targets and the operation to do
// now, with every URL it needs.
type Document struct {
	Device            string            `json:"device"`
	Generation        uint64            `json:"generation"`
	Mode              core.DeviceMode   `json:"mode,omitempty"`
	Cluster           string            `json:"cluster,omitempty"`
	Role              string            `json:"role,omitempty"`
	KubernetesVersion string            `json:"kubernetes_version,omitempty"`
	Image             *DocumentImage    `json:"image"`
	Labels            map[string]string `json:"labels,omitempty"`
	PollSeconds       int               `json:"poll_seconds"`
	Operation         *DocumentOp       `json:"operation"`
}

// DocumentImage is the target image and where to fetch it.
type DocumentImage struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
	URL    string `json:"url"`
}

// DocumentOp is the operation as the agent runs it.
type DocumentOp struct {
	ID    string         `json:"id"`
	Kind  string         `json:"kind"`
	Steps []DocumentStep `json:"steps"`
}

// DocumentStep is one step: an action and its arguments.
type DocumentStep struct {
	Name   string            `json:"name"`
	Action string            `json:"action"`
	Args   map[string]string `json:"args,omitempty"`
}

// agentSeenEvery bounds how often a poll alone is written down.
const agentSeenEvery = 5 * time.Minute

// AgentDocument authenticates an agent and answers its document: the
// device's effective targets (its profile's defaults under what was set
// on it) and its operation.
func (s *Service) AgentDocument(ctx context.Context, credential string, remote netip.Addr) (Document, error) {
	device, err := s.authenticate(ctx, credential, remote)
	if err != nil {
		return Document{}, err
	}
	now := s.opts.Now().UTC()
	defaults, _ := s.defaults(device) // outside the transaction
	var doc Document
	var seen bool
	err = s.st.View(func(tx core.Tx) error {
		explicit, err := s.get(tx, device)
		if err != nil {
			return err
		}
		d := Overlay(defaults, explicit)
		seen = now.Sub(d.Agent.LastSeen) >= agentSeenEvery || d.Agent.IP != remote.String()
		doc = Document{Device: device, Generation: d.Generation, Mode: d.Mode, Cluster: d.Cluster, Role: d.Role,
			KubernetesVersion: d.KubernetesVersion, Labels: d.Labels, PollSeconds: s.pollSeconds(device)}
		if d.Image != "" {
			if im, err := ResolveImage(tx, d.Image); err == nil {
				doc.Image = &DocumentImage{Name: im.Name, SHA256: im.SHA256, URL: s.opts.ImageURL(im.SHA256)}
			}
		}
		if op := d.Operation; op != nil && !op.Done() {
			dop := &DocumentOp{ID: op.ID, Kind: op.Kind}
			for _, st := range op.Steps {
				args := maps.Clone(st.Args)
				if sha := args["sha256"]; sha != "" && args["url"] == "" {
					if args == nil {
						args = map[string]string{}
					}
					args["url"] = s.opts.ImageURL(sha)
				}
				dop.Steps = append(dop.Steps, DocumentStep{Name: st.Name, Action: st.Action, Args: args})
			}
			doc.Operation = dop
		}
		return nil
	})
	if err == nil && doc.Operation != nil && s.opts.JoinSection != nil {
		err = s.addJoinSection(ctx, device, &doc)
	}
	if err == nil && seen {
		err = s.st.Update(func(tx core.Tx) error {
			d, err := s.get(tx, device)
			if err != nil {
				return err
			}
			d.Agent.LastSeen, d.Agent.IP = now, remote.String()
			return tx.Desired().Put(d)
		})
	}
	return doc, err
}

// addJoinSection gives the operation's pending join step its enrollment.
// A device that may not join now gets the step without one (the agent
// fails it, saying so) and the reason is logged.
func (s *Service) addJoinSection(ctx context.Context, device string, doc *Document) error {
	for i := range doc.Operation.Steps {
		st := &doc.Operation.Steps[i]
		if st.Action != "join" {
			continue
		}
		if done, err := s.stepDone(device, doc.Operation.ID, st.Name); err != nil || done {
			return err
		}
		sec, err := s.opts.JoinSection(ctx, device, st.Args["cluster"])
		if err != nil {
			if core.KindOf(err) == core.KindInternal {
				return err
			}
			s.opts.Log.Info("join step without an enrollment", "device", device, "reason", err.Error())
			return nil
		}
		if st.Args == nil {
			st.Args = map[string]string{}
		}
		maps.Copy(st.Args, sec)
		return nil
	}
	return nil
}

func (s *Service) stepDone(device, opID, step string) (bool, error) {
	op, err := s.Operation(device)
	if err != nil || op == nil || op.ID != opID {
		return true, err
	}
	st, ok := op.Step(step)
	return !ok || st.State == core.StepSucceeded, nil
}

// pollSeconds is the interval device's agent is told to poll at.
func (s *Service) pollSeconds(device string) int {
	every := s.opts.PollInterval
	switch {
	case s.opts.NextPoll != nil && s.opts.NextPollInterval < every && s.opts.NextPoll(device):
		every = s.opts.NextPollInterval
	case s.opts.FastPoll != nil && s.opts.FastPollInterval < every && s.opts.FastPoll(device):
		every = s.opts.FastPollInterval
	}
	return int(every / time.Second)
}

func (s *Service) authenticate(ctx context.Context, credential string, remote netip.Addr) (string, error) {
	if s.opts.Auth == nil {
		return "", ErrAgentRefused
	}
	device, err := s.opts.Auth.AuthenticateAgent(ctx, credential, remote)
	if err != nil {
		if core.KindOf(err) != core.KindRefused {
			return "", err
		}
		// The agent learns only that it was refused; the log says why.
		s.opts.Log.Info("agent refused", "remote", remote, "reason", err.Error())
		s.metrics.agentsRefused.Inc()
		return "", ErrAgentRefused
	}
	return device, nil
}

// Report is one step report from an agent.
type Report struct {
	Operation    string `json:"operation"`
	Step         string `json:"step"`
	State        string `json:"state"` // running | succeeded | failed
	ExitCode     int    `json:"exit_code"`
	Output       string `json:"output"`
	BootID       string `json:"boot_id"`
	AgentVersion string `json:"agent_version"`
}

// AgentReport authenticates an agent and records its step report.
// AgentNeighbors takes the LLDP neighbours the agent of the device behind
// credential and remote reports; what they mean for the device's cabling
// is Options.Neighbors'.
func (s *Service) AgentNeighbors(ctx context.Context, credential string, remote netip.Addr, ns []positions.Neighbor) error {
	device, err := s.authenticate(ctx, credential, remote)
	if err != nil {
		return err
	}
	if err := positions.CheckNeighbors(ns); err != nil {
		return core.Errorf(core.KindInvalid, "lldp_neighbors: %v", err)
	}
	if s.opts.Neighbors == nil || len(ns) == 0 {
		return nil
	}
	return s.opts.Neighbors(ctx, device, ns)
}

func (s *Service) AgentReport(ctx context.Context, credential string, remote netip.Addr, r Report) error {
	device, err := s.authenticate(ctx, credential, remote)
	if err != nil {
		return err
	}
	switch r.State {
	case core.StepRunning, core.StepSucceeded, core.StepFailed:
	default:
		return core.Errorf(core.KindInvalid, "state %q: want running, succeeded or failed", r.State)
	}
	if len(r.Output) > MaxOutput {
		r.Output = r.Output[len(r.Output)-MaxOutput:]
	}
	// Shown in terminals (ztpd device show) and pages: no control
	// sequences; the tail kept within MaxOutput, whole runes.
	r.Output = core.PrintableText(r.Output)
	for len(r.Output) > MaxOutput {
		_, n := utf8.DecodeRuneInString(r.Output)
		r.Output = r.Output[n:]
	}
	if !utf8.ValidString(r.BootID) || len(r.BootID) > 64 || len(r.AgentVersion) > 32 {
		return core.Errorf(core.KindInvalid, "boot_id or agent_version malformed")
	}
	now := s.opts.Now().UTC()
	var msg string
	repeated := false
	err = s.st.Update(func(tx core.Tx) error {
		repeated = false // fn may run again
		d, err := s.get(tx, device)
		if err != nil {
			return err
		}
		op := d.Operation
		if op == nil || op.ID != r.Operation {
			return ErrStaleOperation
		}
		st, ok := op.Step(r.Step)
		if !ok {
			return core.Errorf(core.KindInvalid, "operation %s has no step %q", op.ID, r.Step)
		}
		if finished(st.State) && st.State == r.State && st.ExitCode == r.ExitCode {
			// The agent resends a report whose answer it lost: accepted,
			// changing nothing.
			repeated = true
			return nil
		}
		if op.Done() {
			return ErrStaleOperation
		}
		if err := reportInOrder(op, st, r); err != nil {
			return err
		}
		st.State, st.ExitCode, st.Output = r.State, r.ExitCode, r.Output
		switch r.State {
		case core.StepRunning:
			st.Attempts++
			if st.Started.IsZero() {
				st.Started = now
			}
			st.Finished = time.Time{}
			if op.State != core.OpRollingBack {
				op.State = core.StepRunning
			}
			msg = fmt.Sprintf("step %s (%s) running", st.Name, st.Action)
			if st.Attempts > 1 {
				msg += fmt.Sprintf(" again (attempt %d: resumed after an interruption)", st.Attempts)
			}
		case core.StepSucceeded:
			st.Finished = now
			msg = fmt.Sprintf("step %s (%s) succeeded", st.Name, st.Action)
			switch {
			case st == op.OnFailureRollback():
				op.State, op.Finished = core.OpRolledBack, now
				msg += "; operation rolled back after: " + op.Reason
			case allSucceeded(op):
				op.State, op.Finished = core.StepSucceeded, now
				msg += "; operation done"
			}
		case core.StepFailed:
			st.Finished = now
			failure := fmt.Sprintf("step %s (%s) failed with exit status %d", st.Name, st.Action, r.ExitCode)
			switch rb := op.OnFailureRollback(); {
			case rb == st:
				op.State, op.Finished = core.StepFailed, now
				op.Reason += "; rollback failed: " + failure
			case rb != nil:
				// Not finished: the agent goes on with the rollback step.
				op.State, op.Reason = core.OpRollingBack, failure
				failure += "; rolling back"
			default:
				op.State, op.Finished, op.Reason = core.StepFailed, now, failure
			}
			msg = failure
		}
		d.Agent = core.AgentStatus{LastSeen: now, IP: remote.String(), BootID: r.BootID, Version: r.AgentVersion}
		if err := tx.Desired().Put(d); err != nil {
			return err
		}
		_, err = tx.Events().Append(core.Event{Type: "agent.step", Device: device, Cluster: d.Cluster, Time: now,
			Message: fmt.Sprintf("%s: operation %s (%s) %s", device, op.ID, op.Kind, msg),
			Fields:  map[string]string{"operation": op.ID, "step": st.Name, "state": r.State, "exit_code": fmt.Sprint(r.ExitCode)}})
		return err
	})
	if err != nil || repeated {
		return err
	}
	s.opts.Log.Info("agent step", "device", device, "operation", r.Operation, "step", r.Step, "state", r.State, "exit_code", r.ExitCode)
	s.metrics.agentReports.WithLabelValues(r.State).Inc()
	s.notify()
	return nil
}

func finished(state string) bool { return state == core.StepSucceeded || state == core.StepFailed }

// reportInOrder refuses a report that would move an operation backwards:
// the agent runs steps in order and never runs a succeeded one again, so a
// report on a finished step, or on a step whose predecessors have not all
// succeeded, is an old report sent again (or made up), never news.
func reportInOrder(op *core.AgentOperation, st *core.AgentStep, r Report) error {
	if finished(st.State) {
		return core.Errorf(core.KindInvalid, "step %s of operation %s already %s; a %s report of it is stale", st.Name, op.ID, st.State, r.State)
	}
	rb := op.OnFailureRollback()
	switch {
	case st == rb && op.State != core.OpRollingBack:
		return core.Errorf(core.KindInvalid, "step %s of operation %s runs only after another step failed", st.Name, op.ID)
	case st == rb:
		return nil
	case op.State == core.OpRollingBack:
		return core.Errorf(core.KindInvalid, "operation %s is rolling back; a %s report of step %s is stale", op.ID, r.State, st.Name)
	}
	for i := range op.Steps {
		prev := &op.Steps[i]
		if prev == st {
			return nil
		}
		if prev.State != core.StepSucceeded {
			return core.Errorf(core.KindInvalid, "step %s of operation %s reported before step %s succeeded", st.Name, op.ID, prev.Name)
		}
	}
	return nil
}

func allSucceeded(op *core.AgentOperation) bool {
	rb := op.OnFailureRollback()
	for i := range op.Steps {
		if st := &op.Steps[i]; st != rb && st.State != core.StepSucceeded {
			return false
		}
	}
	return true
}
