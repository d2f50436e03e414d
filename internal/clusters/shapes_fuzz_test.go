package clusters

import (
	"testing"
)

type fuzzProfiles map[string]string

func (p fuzzProfiles) ProfileCluster(name string) (string, bool) { c, ok := p[name]; return c, ok }

func (p fuzzProfiles) LoadedProfiles() []ProfileSummary {
	var out []ProfileSummary
	for name, c := range p {
		out = append(out, ProfileSummary{Name: name, Cluster: c})
	}
	return out
}

// FuzzNodeShapes: per-role maps are accepted only with node types worker
// or control (any case), or etcd for a cluster with etcd nodes, known
// offerings stored by ID, and loaded profiles (by name or template ID)
// that name no other cluster, stored by profile name.
func FuzzNodeShapes(f *testing.F) {
	f.Add("worker", "ztpd-large", "control", "leaf")
	f.Add("ETCD", "ztpd-small", "worker", "pinned")
	f.Add(" Control", "nosuch", "gpu", "")
	f.Add("worker", "ztpd-small", "control", TemplateID("leaf"))
	f.Add("worker", "ztpd-small", "worker", TemplateID("pinned"))
	f.Fuzz(func(t *testing.T, t1, off, t2, prof string) {
		s := &Service{opts: Options{Profiles: fuzzProfiles{"leaf": "", "pinned": "other"}}}
		for _, etcd := range []int{0, 3} {
			if no, err := resolveNodeOfferings(map[string]string{t1: off}, etcd); err == nil {
				for k, id := range no {
					o, ok := OfferingByID(id)
					if (k != NodeWorker && k != NodeControl && (k != NodeEtcd || etcd == 0)) || !ok || o.ID != id {
						t.Fatalf("offerings %q=%q accepted as %q=%q (%d etcd nodes)", t1, off, k, id, etcd)
					}
				}
			}
			if nt, err := s.resolveNodeTemplates("c1", map[string]string{t2: prof}, etcd); err == nil {
				for k, p := range nt {
					if (k != NodeWorker && k != NodeControl && (k != NodeEtcd || etcd == 0)) || p != "leaf" {
						t.Fatalf("templates %q=%q accepted as %q=%q (%d etcd nodes)", t2, prof, k, p, etcd)
					}
				}
			}
		}
	})
}
