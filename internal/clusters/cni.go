package clusters

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ztpd/ztpd/internal/core"
)

// CNI configurations (CloudStack 4.21's registerCniConfiguration,
// listCniConfiguration, deleteCniConfiguration; cniconfigurationid and
// cniconfigdetails on createKubernetesCluster): a Kubernetes manifest an
// admin registers, with named parameters, applied to a cluster created
// with it once its first control plane's API server answers (server-side
// apply as ztpd's cluster-admin identity). Only an admin registers or
// deletes one, so what is applied with cluster-admin rights is what an
// admin uploaded; the parameters take the values the cluster's creator
// gave, in a charset that cannot change the manifest's structure. No
// device-supplied value ever lands in it.

// ManifestApplier applies a manifest to a cluster through its API server
// and returns how many objects it applied.
type ManifestApplier interface {
	ApplyManifest(ctx context.Context, clusterID string, manifest []byte) (objects int, err error)
}

// CNIConfig is a registered CNI configuration.
type CNIConfig struct {
	ID       string    `json:"id"`
	Name     string    `json:"name"`
	Manifest string    `json:"manifest"`
	Params   []string  `json:"params,omitempty"`
	Account  string    `json:"account"`
	Owner    string    `json:"owner,omitempty"` // API key that registered it
	Created  time.Time `json:"created"`
}

// CNISpec is a configuration to register: Content is the manifest,
// base64-encoded as CloudStack takes user data; Params the names of its
// parameters, comma-separated.
type CNISpec struct {
	Name    string
	Content string
	Params  string
}

// CNIFilter selects configurations to list.
type CNIFilter struct {
	ID, Name, Keyword string
}

const (
	cniIndexSetting   = "cni-configurations" // JSON list of IDs
	cniSettingPrefix  = "cni-configuration/"
	maxCNIManifest    = 1 << 20 // CloudStack's cniconfig length
	maxCNIConfigs     = 256
	maxCNIValue       = 253
	cniApplyAttempts  = 10
	cniApplyBackoff   = 30 * time.Second
	CNIStateApplied   = "applied"
	CNIStateFailed    = "failed"
	cniPlaceholderFmt = "{{ ds.meta_data.%s }}"
)

// cniPlaceholder is a parameter's place in a manifest, in the form
// CloudStack's user data variables take: {{ ds.meta_data.NAME }}.
var (
	cniPlaceholder = regexp.MustCompile(`\{\{\s*ds\.meta_data\.([A-Za-z0-9_.-]*)\s*\}\}`)
	cniParamName   = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,62}$`)
	// cniValue keeps a value within one YAML scalar: no quotes, spaces,
	// newlines, '#', ':' followed by space or flow characters.
	cniValue = regexp.MustCompile(`^[A-Za-z0-9._:/@,=+-]*$`)
	cniName  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9 ._-]{0,127}$`)
)

func cniSetting(id string) string { return cniSettingPrefix + id }

func cniIndex(tx core.Tx) ([]string, error) {
	v, ok, err := tx.Settings().Get(cniIndexSetting)
	if err != nil || !ok || v == "" {
		return nil, err
	}
	var ids []string
	if err := json.Unmarshal([]byte(v), &ids); err != nil {
		return nil, fmt.Errorf("CNI configuration index: %w", err)
	}
	return ids, nil
}

func putCNIIndex(tx core.Tx, ids []string) error {
	b, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	return tx.Settings().Put(cniIndexSetting, string(b))
}

func getCNI(tx core.Tx, id string) (CNIConfig, bool, error) {
	v, ok, err := tx.Settings().Get(cniSetting(id))
	if err != nil || !ok || v == "" {
		return CNIConfig{}, false, err
	}
	var c CNIConfig
	if err := json.Unmarshal([]byte(v), &c); err != nil {
		return CNIConfig{}, false, fmt.Errorf("CNI configuration %s: %w", id, err)
	}
	return c, true, nil
}

func allCNI(tx core.Tx) ([]CNIConfig, error) {
	ids, err := cniIndex(tx)
	if err != nil {
		return nil, err
	}
	out := make([]CNIConfig, 0, len(ids))
	for _, id := range ids {
		c, ok, err := getCNI(tx, id)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, c)
		}
	}
	return out, nil
}

// cniByRef finds a configuration by ID or name.
func cniByRef(tx core.Tx, ref string) (CNIConfig, error) {
	all, err := allCNI(tx)
	if err != nil {
		return CNIConfig{}, err
	}
	for _, c := range all {
		if c.ID == ref || c.Name == ref {
			return c, nil
		}
	}
	return CNIConfig{}, core.Errorf(core.KindNotFound, "Unable to find CNI configuration with ID: %s", ref)
}

// ParseCNIParams splits CloudStack's comma-separated params and checks
// each name.
func ParseCNIParams(v string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !cniParamName.MatchString(p) {
			return nil, core.Errorf(core.KindInvalid, "CNI configuration parameter %q: a name is a letter, then up to 62 letters, digits, _ or -", p)
		}
		if slices.Contains(out, p) {
			return nil, core.Errorf(core.KindInvalid, "CNI configuration parameter %s is declared twice", p)
		}
		out = append(out, p)
	}
	return out, nil
}

// DecodeCNIContent decodes a manifest as CloudStack's cniconfig carries
// it (base64, standard or URL alphabet, padded or not) and checks that it
// is UTF-8 text within the size CloudStack allows.
func DecodeCNIContent(content string) (string, error) {
	content = strings.TrimSpace(content)
	if content == "" {
		return "", core.Errorf(core.KindInvalid, "cniconfig is empty")
	}
	var raw []byte
	var err error
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if raw, err = enc.DecodeString(content); err == nil {
			break
		}
	}
	if err != nil {
		return "", core.Errorf(core.KindInvalid, "cniconfig is not base64-encoded (CloudStack takes it as user data is taken: base64)")
	}
	if len(raw) > maxCNIManifest {
		return "", core.Errorf(core.KindInvalid, "cniconfig is %d bytes decoded; at most %d", len(raw), maxCNIManifest)
	}
	if !utf8.Valid(raw) || strings.ContainsRune(string(raw), 0) {
		return "", core.Errorf(core.KindInvalid, "cniconfig is not UTF-8 text")
	}
	return string(raw), nil
}

// CheckCNIPlaceholders refuses a manifest whose placeholders name a
// parameter not declared in params.
func CheckCNIPlaceholders(manifest string, params []string) error {
	for _, m := range cniPlaceholder.FindAllStringSubmatch(manifest, -1) {
		if !slices.Contains(params, m[1]) {
			return core.Errorf(core.KindInvalid, "the CNI configuration uses %s, but %q is not among its params (%s)",
				m[0], m[1], strings.Join(params, ","))
		}
	}
	return nil
}

// RenderCNI substitutes the parameters' values into manifest. Every
// declared parameter must have a value and every value must be a plain
// YAML scalar (CheckCNIDetails).
func RenderCNI(manifest string, params []string, details map[string]string) (string, error) {
	if err := CheckCNIDetails(params, details); err != nil {
		return "", err
	}
	return cniPlaceholder.ReplaceAllStringFunc(manifest, func(m string) string {
		name := cniPlaceholder.FindStringSubmatch(m)[1]
		return details[name]
	}), nil
}

// CheckCNIDetails checks cniconfigdetails against a configuration's
// params: each parameter has a value, no value names an undeclared
// parameter, and each value is a plain YAML scalar.
func CheckCNIDetails(params []string, details map[string]string) error {
	for k, v := range details {
		if !slices.Contains(params, k) {
			return core.Errorf(core.KindInvalid, "cniconfigdetails names %q, which is not a parameter of the CNI configuration (%s)", k, strings.Join(params, ","))
		}
		if len(v) > maxCNIValue || !cniValue.MatchString(v) {
			return core.Errorf(core.KindInvalid, "cniconfigdetails %s: a value is up to %d letters, digits and . _ : / @ , = + - (an address, CIDR, name or number)", k, maxCNIValue)
		}
	}
	for _, p := range params {
		if _, ok := details[p]; !ok {
			return core.Errorf(core.KindInvalid, "the CNI configuration's parameter %s has no value in cniconfigdetails", p)
		}
	}
	return nil
}

// clusterCNI resolves a create's CNI configuration and checks its values.
func clusterCNI(tx core.Tx, ref string, details map[string]string) (*core.ClusterCNI, error) {
	if ref == "" {
		return nil, core.Errorf(core.KindInvalid, "cniconfigdetails given without cniconfigurationid")
	}
	cfg, err := cniByRef(tx, ref)
	if err != nil {
		return nil, core.Errorf(core.KindInvalid, "Unable to find CNI configuration with ID: %s", ref)
	}
	details = matchParamCase(cfg.Params, details)
	if err := CheckCNIDetails(cfg.Params, details); err != nil {
		return nil, err
	}
	if len(details) == 0 {
		details = nil
	}
	return &core.ClusterCNI{ConfigID: cfg.ID, Name: cfg.Name, Details: details}, nil
}

// RegisterCNI stores a CNI configuration (admins only: it is applied with
// cluster-admin rights).
func (s *Service) RegisterCNI(ctx context.Context, caller Caller, spec CNISpec) (CNIConfig, error) {
	if !caller.Admin {
		return CNIConfig{}, core.Errorf(core.KindPermission, "registering CNI configurations is for admins only: they are applied with cluster-admin rights")
	}
	if !cniName.MatchString(spec.Name) {
		return CNIConfig{}, core.Errorf(core.KindInvalid, "Invalid CNI configuration name %q (up to 128 letters, digits, space, . _ -)", spec.Name)
	}
	manifest, err := DecodeCNIContent(spec.Content)
	if err != nil {
		return CNIConfig{}, err
	}
	params, err := ParseCNIParams(spec.Params)
	if err != nil {
		return CNIConfig{}, err
	}
	if err := CheckCNIPlaceholders(manifest, params); err != nil {
		return CNIConfig{}, err
	}
	cfg := CNIConfig{ID: newUUID(), Name: spec.Name, Manifest: manifest, Params: params, Account: caller.AccountName(),
		Owner: caller.APIKey, Created: now()}
	err = s.st.Update(func(tx core.Tx) error {
		ids, err := cniIndex(tx)
		if err != nil {
			return err
		}
		if len(ids) >= maxCNIConfigs {
			return core.Errorf(core.KindInvalid, "%d CNI configurations are registered, the most ztpd keeps; delete one first", len(ids))
		}
		for _, id := range ids {
			if c, ok, err := getCNI(tx, id); err != nil {
				return err
			} else if ok && c.Name == cfg.Name {
				return core.Errorf(core.KindConflict, "A CNI configuration with name %s already exists", cfg.Name)
			}
		}
		b, err := json.Marshal(cfg)
		if err != nil {
			return err
		}
		if err := tx.Settings().Put(cniSetting(cfg.ID), string(b)); err != nil {
			return err
		}
		if err := putCNIIndex(tx, append(ids, cfg.ID)); err != nil {
			return err
		}
		return appendWrite(tx, caller, "registerCniConfiguration", "", "",
			fmt.Sprintf("CNI configuration %s registered (%d bytes, params %s)", cfg.Name, len(manifest), strings.Join(params, ",")),
			map[string]string{"cni_configuration": cfg.ID})
	})
	return cfg, err
}

// ListCNI lists the registered configurations matching f (every caller
// may list them: any account may create a cluster with one).
func (s *Service) ListCNI(ctx context.Context, caller Caller, f CNIFilter) ([]CNIConfig, error) {
	var out []CNIConfig
	err := s.st.View(func(tx core.Tx) error {
		all, err := allCNI(tx)
		if err != nil {
			return err
		}
		kw := strings.ToLower(f.Keyword)
		for _, c := range all {
			if (f.ID != "" && c.ID != f.ID) || (f.Name != "" && c.Name != f.Name) ||
				(kw != "" && !strings.Contains(strings.ToLower(c.Name), kw)) {
				continue
			}
			out = append(out, c)
		}
		return nil
	})
	return out, err
}

// DeleteCNI removes a configuration (admins only); one a cluster was
// created with is in use until that cluster is deleted.
func (s *Service) DeleteCNI(ctx context.Context, caller Caller, ref string) (CNIConfig, error) {
	if !caller.Admin {
		return CNIConfig{}, core.Errorf(core.KindPermission, "deleting CNI configurations is for admins only")
	}
	var cfg CNIConfig
	err := s.st.Update(func(tx core.Tx) error {
		var err error
		if cfg, err = cniByRef(tx, ref); err != nil {
			return err
		}
		var users []string
		err = tx.Clusters().List("", func(c core.Cluster) (bool, error) {
			if c.CNI != nil && c.CNI.ConfigID == cfg.ID {
				users = append(users, c.Name)
			}
			return true, nil
		})
		if err != nil {
			return err
		}
		if len(users) > 0 {
			return core.Errorf(core.KindInUse, "CNI configuration %s is in use by Kubernetes cluster(s) %s", cfg.Name, strings.Join(users, ", "))
		}
		ids, err := cniIndex(tx)
		if err != nil {
			return err
		}
		if err := tx.Settings().Put(cniSetting(cfg.ID), ""); err != nil {
			return err
		}
		if err := putCNIIndex(tx, slices.DeleteFunc(ids, func(id string) bool { return id == cfg.ID })); err != nil {
			return err
		}
		return appendWrite(tx, caller, "deleteCniConfiguration", "", "", "CNI configuration "+cfg.Name+" deleted",
			map[string]string{"cni_configuration": cfg.ID})
	})
	return cfg, err
}

// maybeApplyCNI starts applying c's CNI configuration when it is due: the
// cluster has one, its API server answers and a control plane's Node has
// registered (the first control plane is up; its Node becomes Ready only
// once a CNI runs), and it was not applied yet (a failure is tried again
// after a growing pause, cniApplyAttempts times).
func (s *Service) maybeApplyCNI(clusterID string, h Health) {
	if s.opts.CNI == nil || !h.APIReachable || h.ControlPlanes < 1 {
		return
	}
	var due bool
	_ = s.st.View(func(tx core.Tx) error {
		c, err := tx.Clusters().Get(clusterID)
		if err != nil || c.CNI == nil {
			return nil
		}
		switch c.State {
		case core.ClusterDestroying, core.ClusterDestroyed, core.ClusterStopped, core.ClusterStopping:
			return nil
		}
		var out *core.CNIOutcome
		if c.Observed != nil {
			out = c.Observed.CNI
		}
		due = out == nil || (out.State == CNIStateFailed && out.Attempts < cniApplyAttempts &&
			!s.opts.Now().Before(out.At.Add(time.Duration(out.Attempts)*cniApplyBackoff)))
		return nil
	})
	if !due {
		return
	}
	if _, busy := s.cniApplying.LoadOrStore(clusterID, struct{}{}); busy {
		return
	}
	s.jobsWG.Add(1)
	go func() {
		defer s.jobsWG.Done()
		defer s.cniApplying.Delete(clusterID)
		if err := s.applyCNI(s.ctx, clusterID); err != nil && !errors.Is(err, context.Canceled) {
			s.log.Warn("CNI configuration not applied", "cluster", clusterID, "err", err)
		}
	}()
}

// applyCNI applies c's CNI configuration and records the outcome in its
// observed state and as a "cluster.cni" event.
func (s *Service) applyCNI(ctx context.Context, clusterID string) error {
	var c core.Cluster
	var cfg CNIConfig
	var found bool
	err := s.st.View(func(tx core.Tx) error {
		var err error
		if c, err = tx.Clusters().Get(clusterID); err != nil {
			return err
		}
		if c.CNI == nil {
			return nil
		}
		cfg, found, err = getCNI(tx, c.CNI.ConfigID)
		return err
	})
	if err != nil || c.CNI == nil {
		return err
	}
	var objects int
	var applyErr error
	if !found {
		applyErr = fmt.Errorf("CNI configuration %s (%s) no longer exists", c.CNI.Name, c.CNI.ConfigID)
	} else {
		manifest, err := RenderCNI(cfg.Manifest, cfg.Params, c.CNI.Details)
		if err != nil {
			applyErr = err
		} else {
			actx, cancel := context.WithTimeout(ctx, s.opts.OpTimeout)
			objects, applyErr = s.opts.CNI.ApplyManifest(actx, clusterID, []byte(manifest))
			cancel()
		}
	}
	if applyErr != nil && ctx.Err() != nil {
		return ctx.Err() // stopping: not an outcome of the configuration
	}
	at := s.opts.Now().UTC()
	return s.st.Update(func(tx core.Tx) error {
		cur, err := tx.Clusters().Get(clusterID)
		if errors.Is(err, core.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		var obs core.ClusterObservation
		if cur.Observed != nil {
			obs = *cur.Observed
		}
		out := core.CNIOutcome{State: CNIStateApplied, Objects: objects, At: at, Attempts: 1}
		if obs.CNI != nil {
			out.Attempts = obs.CNI.Attempts + 1
		}
		msg := fmt.Sprintf("Kubernetes cluster %s: CNI configuration %s applied (%d objects)", cur.Name, c.CNI.Name, objects)
		if applyErr != nil {
			out.State, out.Message = CNIStateFailed, applyErr.Error()
			msg = fmt.Sprintf("Kubernetes cluster %s: CNI configuration %s not applied (attempt %d of %d): %s",
				cur.Name, c.CNI.Name, out.Attempts, cniApplyAttempts, applyErr)
		}
		obs.CNI = &out
		cur.Observed = &obs
		if err := tx.Clusters().Put(cur); err != nil {
			return err
		}
		_, err = tx.Events().Append(core.Event{Type: "cluster.cni", Cluster: cur.ID, Message: msg,
			Fields: map[string]string{"cni_configuration": c.CNI.ConfigID, "outcome": out.State}})
		return err
	})
}

// matchParamCase renames each detail to the spelling of the parameter it
// names without regard to case (CloudStack's door lowercases parameter
// names); a detail naming none keeps its name, to be refused.
func matchParamCase(params []string, details map[string]string) map[string]string {
	out := make(map[string]string, len(details))
	for k, v := range details {
		name := k
		for _, p := range params {
			if strings.EqualFold(p, k) {
				name = p
				break
			}
		}
		out[name] = v
	}
	return out
}
