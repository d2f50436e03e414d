package positions

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ztpd/ztpd/internal/core"
)

// settingKey is where the positions added through the API are stored (a
// JSON list): the plan files stay the operator's, never rewritten.
const settingKey = "positions"

// Service owns the plan in use: the positions of the plan files and those
// stored through the API, checked together. Apply is handed each plan
// before it is used (the DHCP server and content take it); a plan Apply
// refuses is not used.
type Service struct {
	files []string
	store core.Store
	apply func(*Plan) error

	mu   sync.Mutex // one change at a time
	plan atomic.Pointer[Plan]
	used atomic.Bool // a plan was read and used (Use, or a change saved)
}

// NewService reads the plan files under files (a file, or a directory's
// *.yaml, *.yml and *.csv) and the positions stored in st; apply (nil:
// none) takes each plan before it is used.
func NewService(files []string, st core.Store, apply func(*Plan) error) *Service {
	s := &Service{files: files, store: st, apply: apply}
	s.plan.Store(&Plan{})
	return s
}

// Plan is the plan in use (empty, never nil, before the first Reload).
func (s *Service) Plan() *Plan { return s.plan.Load() }

// Reload reads the plan files and the stored positions again and, when the
// whole plan is valid and applied, uses it; on any error the plan in use
// stays.
func (s *Service) Reload() error {
	pl, err := s.Read()
	if err != nil {
		return err
	}
	return s.Use(pl)
}

// Read reads and checks the plan files and the stored positions, without
// using the plan: a caller that loads more (the profiles) checks them
// together before anything changes.
func (s *Service) Read() (*Plan, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	stored, err := s.stored()
	if err != nil {
		return nil, err
	}
	return Load(s.files, stored)
}

// Use applies pl (from Read) and keeps it as the plan in use.
func (s *Service) Use(pl *Plan) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.apply != nil {
		if err := s.apply(pl); err != nil {
			return err
		}
	}
	s.plan.Store(pl)
	s.used.Store(true)
	return nil
}

// Current is the plan in use, or, in a process that never loaded one (a
// CLI command that opened the store in-process rather than asking the
// server), the plan the files and the stored positions make now.
func (s *Service) Current() (*Plan, error) {
	if s.used.Load() {
		return s.Plan(), nil
	}
	return s.Read()
}

func (s *Service) stored() ([]*Position, error) {
	if s.store == nil {
		return nil, nil
	}
	var raw string
	var ok bool
	if err := s.store.View(func(tx core.Tx) error {
		var err error
		raw, ok, err = tx.Settings().Get(settingKey)
		return err
	}); err != nil {
		return nil, err
	}
	if !ok || raw == "" {
		return nil, nil
	}
	var ps []*Position
	if err := json.Unmarshal([]byte(raw), &ps); err != nil {
		return nil, &core.CorruptError{Collection: "settings", Keys: []string{settingKey}, Count: 1, Err: err}
	}
	for _, p := range ps {
		p.File, p.Line = "", 0
	}
	return ps, nil
}

// Get returns the position called name.
func (s *Service) Get(name string) (*Position, error) {
	pl, err := s.Current()
	if err != nil {
		return nil, err
	}
	if p := pl.Get(name); p != nil {
		return p, nil
	}
	return nil, core.Errorf(core.KindNotFound, "no position named %q", name)
}

// Put adds or replaces the stored position p.Name for an administrator;
// it reports whether p is new. A position of a plan file is the file's:
// Put refuses to shadow it. The whole plan is checked with p in it, and
// applied, before p is stored.
func (s *Service) Put(c core.Caller, p *Position) (created bool, err error) {
	n, err := s.PutMany(c, []*Position{p})
	return n == 1, err
}

// PutMany adds or replaces the stored positions ps together, for an
// administrator: all of them or, on any problem, none (every problem is
// reported). It returns how many were new.
func (s *Service) PutMany(c core.Caller, ps []*Position) (created int, err error) {
	if !c.Admin {
		return 0, core.Errorf(core.KindPermission, "the cabling plan is managed by administrators")
	}
	// Each position's own problems are reported with the whole plan's
	// (Build checks both), so one answer lists them all.
	in := make(map[string]*Position, len(ps))
	for i, p := range ps {
		p = p.Clone()
		p.File, p.Line = "", 0
		ps[i] = p
		in[p.Name] = p
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	stored, err := s.stored()
	if err != nil {
		return 0, err
	}
	files, err := Load(s.files, nil)
	if err != nil {
		// The files' own problems come with the whole plan's below.
		files = &Plan{}
	}
	for _, p := range ps {
		if o := files.Get(p.Name); o != nil {
			return 0, core.Errorf(core.KindConflict, "position %q is defined at %s: change it there", p.Name, o.Where())
		}
	}
	next := make([]*Position, 0, len(stored)+len(ps))
	for _, o := range stored {
		if in[o.Name] == nil {
			next = append(next, o)
		}
	}
	created = len(ps) - (len(stored) - len(next)) // less those that replace one
	next = append(next, ps...)
	return created, s.save(next)
}

// Delete removes the stored position name for an administrator.
func (s *Service) Delete(c core.Caller, name string) error {
	if !c.Admin {
		return core.Errorf(core.KindPermission, "the cabling plan is managed by administrators")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if files, err := Load(s.files, nil); err == nil && files.Get(name) != nil {
		return core.Errorf(core.KindConflict, "position %q is defined at %s: remove it there", name, files.Get(name).Where())
	}
	stored, err := s.stored()
	if err != nil {
		return err
	}
	next := stored[:0:0]
	for _, o := range stored {
		if o.Name != name {
			next = append(next, o)
		}
	}
	if len(next) == len(stored) {
		return core.Errorf(core.KindNotFound, "no position named %q", name)
	}
	return s.save(next)
}

// save checks and applies the plan with stored as the API's positions,
// then stores them; a plan that does not check out changes nothing.
func (s *Service) save(stored []*Position) error {
	pl, err := Load(s.files, stored)
	if err != nil {
		var es Errors
		if errors.As(err, &es) {
			return core.Errorf(core.KindInvalid, "the cabling plan would not be valid: %s", oneLine(es))
		}
		return err
	}
	if s.store == nil {
		return core.Errorf(core.KindUnavailable, "no store to keep positions in")
	}
	raw, err := json.Marshal(stored)
	if err != nil {
		return err
	}
	if s.apply != nil {
		if err := s.apply(pl); err != nil {
			return core.Errorf(core.KindInvalid, "the cabling plan would not be served: %v", err)
		}
	}
	if err := s.store.Update(func(tx core.Tx) error { return tx.Settings().Put(settingKey, string(raw)) }); err != nil {
		if s.apply != nil {
			_ = s.apply(s.Plan()) // served before: it applies again
		}
		return err
	}
	s.plan.Store(pl)
	s.used.Store(true)
	return nil
}

// oneLine is every problem of es on one line, for an API answer.
func oneLine(es Errors) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}
