package kv

import (
	"sync"

	"github.com/ztpd/ztpd/internal/core"
)

// internTable shares the copies of the strings that repeat across records
// (states, roles, kinds, subnet, cluster and profile names, versions,
// label keys and values): JSON decoding allocates each one anew, and the
// decode caches hold every device, lease and membership, so at 100,000
// devices the repeats were millions of small objects for the collector to
// walk. Only short strings are kept, and the table starts over
// once it holds internMax of them, so a device stating a new hostname with
// every request cannot grow it.
type internTable struct {
	mu sync.Mutex
	m  map[string]string
}

const (
	internMax    = 4096
	internMaxLen = 64
)

var interned internTable

// of returns the shared copy of s, keeping s as that copy when there is
// none yet.
func (t *internTable) of(s string) string {
	if s == "" || len(s) > internMaxLen {
		return s
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.m[s]; ok {
		return v
	}
	if t.m == nil || len(t.m) >= internMax {
		t.m = make(map[string]string, 256)
	}
	t.m[s] = s
	return s
}

// internStrings replaces the repeating strings of a freshly decoded record
// with their shared copies. Fields unique to a record (IDs, MACs,
// addresses, serials, hostnames) are left alone.
func internStrings(v any) {
	in := interned.of
	switch r := v.(type) {
	case *core.Device:
		r.Kind = core.DeviceKind(in(string(r.Kind)))
		r.State = core.DeviceState(in(string(r.State)))
		r.Subnet, r.Cluster, r.Role, r.Profile = in(r.Subnet), in(r.Cluster), in(r.Role), in(r.Profile)
		r.Product, r.Platform, r.SONiCVer, r.VendorClass = in(r.Product), in(r.Platform), in(r.SONiCVer), in(r.VendorClass)
		r.RelayAddr = in(r.RelayAddr)
		if len(r.Labels) > 0 {
			labels := make(map[string]string, len(r.Labels))
			for k, val := range r.Labels {
				labels[in(k)] = in(val)
			}
			r.Labels = labels
		}
		r.Refusal.What, r.Refusal.Kind = in(r.Refusal.What), in(r.Refusal.Kind)
	case *core.Membership:
		r.Cluster, r.Role, r.Version, r.Method = in(r.Cluster), in(r.Role), in(r.Version), in(r.Method)
		r.State = core.DeviceState(in(string(r.State)))
		r.Reported, r.WaitReason = in(r.Reported), in(r.WaitReason)
		for i := range r.History {
			h := &r.History[i]
			h.State, h.Reason = core.DeviceState(in(string(h.State))), in(h.Reason)
		}
	case *core.Lease:
		r.Subnet = in(r.Subnet)
		r.State = core.LeaseState(in(string(r.State)))
	}
}
