package clusters

import (
	"slices"
	"strings"

	"github.com/ztpd/ztpd/internal/core"
)

// Templates (CloudStack's listTemplates, and the template IDs
// createKubernetesCluster's nodetemplates takes): ztpd has no VM images,
// a device's profile says what it runs, so each loaded profile is offered
// as a template. Its ID is derived from the profile's name, so it is the
// same after a restart and on every appliance of a group without being
// stored, and a client that kept it finds the profile again.

// ProfileSummary is what a template shows of a loaded profile.
type ProfileSummary struct {
	Name    string
	Cluster string   // the cluster it assigns its devices to, "" for none
	Role    string   // the role it gives, "" for none
	Kinds   []string // the device kinds it matches, none for any
	SONiC   string   // the SONiC version it installs or pins, "" for none
	Switch  bool     // it gives SONiC switches their configuration
	VM      bool     // it gives VMs their cloud-init
}

// Template is a loaded profile as a CloudStack template.
type Template struct {
	ID          string
	Name        string // the profile's
	DisplayText string
	OSTypeName  string // "SONiC" for a switch profile, "" when the profile does not say
	Cluster     string // the cluster the profile assigns its devices to, "" for none
}

// TemplateID is the template ID of the profile named name.
func TemplateID(name string) string { return nameUUID("template/" + name) }

// Template filters of listTemplates.
const (
	TemplatesFeatured         = "featured"
	TemplatesSelf             = "self"
	TemplatesSelfExecutable   = "selfexecutable"
	TemplatesSharedExecutable = "sharedexecutable"
	TemplatesExecutable       = "executable"
	TemplatesCommunity        = "community"
	TemplatesAll              = "all"
)

// TemplateFilter selects templates to list: Filter is CloudStack's
// templatefilter; the others are "" for any.
type TemplateFilter struct {
	Filter, ID, Name, Keyword, ZoneID string
}

// ListTemplates lists the loaded profiles as templates, by name. They are
// the appliance's, public and featured, owned by no account: featured,
// executable and all (admins only, as in CloudStack) list them; self,
// selfexecutable and sharedexecutable (templates an account registered or
// was given) and community (public ones not featured) list none.
func (s *Service) ListTemplates(caller Caller, f TemplateFilter) ([]Template, error) {
	switch strings.ToLower(f.Filter) {
	case TemplatesFeatured, TemplatesExecutable:
	case TemplatesAll:
		if !caller.Admin {
			return nil, core.Errorf(core.KindInvalid, "Filter all can be specified by admin only")
		}
	case TemplatesSelf, TemplatesSelfExecutable, TemplatesSharedExecutable, TemplatesCommunity:
		return nil, nil
	default:
		return nil, core.Errorf(core.KindInvalid, "Please specify a valid template filter (featured, self, selfexecutable, sharedexecutable, executable, community or all), not %q", f.Filter)
	}
	if f.ZoneID != "" && f.ZoneID != s.zone.ID {
		return nil, nil
	}
	kw := strings.ToLower(f.Keyword)
	var out []Template
	for _, p := range s.loadedProfiles() {
		t := templateOf(p)
		if (f.ID != "" && t.ID != f.ID) || (f.Name != "" && t.Name != f.Name) ||
			(kw != "" && !strings.Contains(strings.ToLower(t.Name), kw)) {
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

func (s *Service) loadedProfiles() []ProfileSummary {
	if s.opts.Profiles == nil {
		return nil
	}
	ps := s.opts.Profiles.LoadedProfiles()
	slices.SortFunc(ps, func(a, b ProfileSummary) int { return strings.Compare(a.Name, b.Name) })
	return ps
}

// nodeTemplateProfile is the profile a node template names: a loaded
// profile by its template ID, else ref itself as a profile name.
func (s *Service) nodeTemplateProfile(ref string) (name string, byID bool) {
	if !looksLikeUUID(ref) {
		return ref, false
	}
	for _, p := range s.loadedProfiles() {
		if TemplateID(p.Name) == strings.ToLower(ref) {
			return p.Name, true
		}
	}
	return ref, true
}

func looksLikeUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case !strings.ContainsRune("0123456789abcdefABCDEF", c):
			return false
		}
	}
	return true
}

func templateOf(p ProfileSummary) Template {
	t := Template{ID: TemplateID(p.Name), Name: p.Name, Cluster: p.Cluster}
	var what []string
	switch {
	case p.Switch || p.SONiC != "" || slices.Contains(p.Kinds, string(core.KindSONiC)) || slices.Contains(p.Kinds, string(core.KindONIE)):
		t.OSTypeName = "SONiC"
		what = append(what, "switches")
		if p.SONiC != "" {
			t.OSTypeName += " " + p.SONiC
		}
	case p.VM || slices.Contains(p.Kinds, string(core.KindVM)):
		what = append(what, "VMs (cloud-init)")
	default:
		what = append(what, "devices")
	}
	if p.Role != "" {
		what = append(what, "role "+p.Role)
	}
	if p.Cluster != "" {
		what = append(what, "only for cluster "+p.Cluster)
	}
	t.DisplayText = "ztpd profile " + p.Name + ": " + strings.Join(what, ", ")
	return t
}
