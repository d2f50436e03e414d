package clusters

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/semver"
)

// Version states.
const (
	VersionEnabled  = "Enabled"
	VersionDisabled = "Disabled"
)

// VersionSpec is a new Kubernetes version.
type VersionSpec struct {
	Name        string // default v<semver>
	SemVer      string // required, MAJOR.MINOR.PATCH >= 1.11.0
	URL         string // where the binaries ISO is served (http/https), required
	Checksum    string // of the ISO; "{SHA-256}hex", "sha256:hex" or plain hex
	MinCPU      int    // default and floor 2
	MinMemoryMB int    // default and floor 2048
	ZoneID      string // optional; must be this appliance's zone
	ImageID     string // sha256 of the ISO in the image store, when ztpd holds it
	ISOName     string
}

var versionNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$`)

// AddVersion registers a Kubernetes version. Admins only.
func (s *Service) AddVersion(ctx context.Context, caller Caller, spec VersionSpec) (core.Version, error) {
	if !caller.Admin {
		return core.Version{}, core.Errorf(core.KindPermission, "Kubernetes version management is for admins only")
	}
	sv, err := semver.Parse(spec.SemVer)
	if err != nil {
		return core.Version{}, &core.Error{Kind: core.KindInvalid, Msg: err.Error()}
	}
	if sv.Less(semver.MinKubernetes) {
		return core.Version{}, core.Errorf(core.KindInvalid, "New supported Kubernetes version cannot be added as %s is minimum version supported by Kubernetes Service", MinVersion)
	}
	if err := semver.Provisionable(sv); err != nil {
		return core.Version{}, &core.Error{Kind: core.KindInvalid, Msg: err.Error()}
	}
	if spec.MinCPU == 0 {
		spec.MinCPU = MinNodeCPU
	}
	if spec.MinMemoryMB == 0 {
		spec.MinMemoryMB = MinNodeMemoryMB
	}
	if spec.MinCPU < MinNodeCPU {
		return core.Version{}, core.Errorf(core.KindInvalid, "Invalid value for mincpunumber parameter. Minimum %d vCPUs required.", MinNodeCPU)
	}
	if spec.MinMemoryMB < MinNodeMemoryMB {
		return core.Version{}, core.Errorf(core.KindInvalid, "Invalid value for minmemory parameter. Minimum %dMB memory required", MinNodeMemoryMB)
	}
	if spec.ZoneID != "" && spec.ZoneID != s.zone.ID {
		return core.Version{}, core.Errorf(core.KindInvalid, "Invalid zone specified")
	}
	u, err := url.Parse(spec.URL)
	if spec.URL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return core.Version{}, core.Errorf(core.KindInvalid, "Invalid URL for ISO specified, %s", spec.URL)
	}
	if spec.Checksum != "" {
		if _, err := normalizeChecksum(spec.Checksum); err != nil {
			return core.Version{}, &core.Error{Kind: core.KindInvalid, Msg: err.Error()}
		}
	}
	if spec.Name == "" {
		spec.Name = "v" + sv.String()
	}
	if !versionNameRE.MatchString(spec.Name) {
		return core.Version{}, core.Errorf(core.KindInvalid, "Invalid name %q: use letters, digits and . _ + -", spec.Name)
	}
	v := core.Version{ID: newUUID(), Name: spec.Name, SemVer: sv.String(), ImageID: spec.ImageID,
		ISOName: spec.ISOName, ISOURL: spec.URL, Checksum: spec.Checksum, ZoneID: spec.ZoneID,
		State: VersionEnabled, MinCPU: spec.MinCPU, MinMemoryMB: spec.MinMemoryMB, Created: now()}
	v.UpdatedAt = v.Created
	err = s.st.Update(func(tx core.Tx) error {
		taken := false
		err := scanVersions(tx, func(o core.Version) bool {
			taken = o.Name == v.Name
			return !taken
		})
		if err != nil {
			return err
		}
		if taken {
			return core.Errorf(core.KindConflict, "A Kubernetes version named %s already exists", v.Name)
		}
		if err := tx.Versions().Put(v); err != nil {
			return err
		}
		_, err = tx.Events().Append(core.Event{Type: "version.added",
			Message: fmt.Sprintf("Kubernetes version %s (%s) added", v.Name, v.SemVer),
			Fields:  map[string]string{"version": v.ID, "semver": v.SemVer, "url": v.ISOURL}})
		if err != nil {
			return err
		}
		return appendWrite(tx, caller, "addKubernetesSupportedVersion", "", "", "Kubernetes version "+v.Name+" added",
			map[string]string{"version": v.ID})
	})
	return v, err
}

// normalizeChecksum accepts "{SHA-256}hex", "sha256:hex", "{MD5}hex" or plain
// hex (CloudStack treats plain hex as MD5) and returns it unchanged when valid.
func normalizeChecksum(c string) (string, error) {
	body := c
	if i := strings.IndexByte(c, '}'); strings.HasPrefix(c, "{") && i > 0 {
		body = c[i+1:]
	} else if i := strings.IndexByte(c, ':'); i > 0 {
		body = c[i+1:]
	}
	if len(body) < 32 || strings.Trim(strings.ToLower(body), "0123456789abcdef") != "" {
		//lint:ignore ST1005 CloudStack's wording
		return "", fmt.Errorf("Invalid checksum %q: use hex digits, optionally prefixed with {SHA-256}", c)
	}
	return c, nil
}

func scanVersions(tx core.Tx, fn func(core.Version) bool) error {
	return tx.Versions().List("", func(v core.Version) (bool, error) { return fn(v), nil })
}

func scanClusters(tx core.Tx, fn func(core.Cluster) bool) error {
	return tx.Clusters().List("", func(c core.Cluster) (bool, error) { return fn(c), nil })
}

// VersionFilter selects versions; empty fields match all.
type VersionFilter struct {
	ID        string
	Keyword   string // substring of the name
	ZoneID    string // versions of this zone or of every zone
	MinSemVer string // at least this version
	State     string
}

// ListVersions returns the matching versions, oldest first.
func (s *Service) ListVersions(ctx context.Context, f VersionFilter) ([]core.Version, error) {
	var minV semver.Version
	if f.MinSemVer != "" {
		var err error
		if minV, err = semver.Parse(f.MinSemVer); err != nil {
			return nil, &core.Error{Kind: core.KindInvalid, Msg: err.Error()}
		}
	}
	out := []core.Version{}
	err := s.st.View(func(tx core.Tx) error {
		if f.ID != "" {
			v, err := tx.Versions().Get(f.ID)
			if err == nil {
				out = append(out, v)
			}
			return nil
		}
		return scanVersions(tx, func(v core.Version) bool {
			out = append(out, v)
			return true
		})
	})
	if err != nil {
		return nil, err
	}
	kept := out[:0]
	for _, v := range out {
		if f.Keyword != "" && !strings.Contains(strings.ToLower(v.Name), strings.ToLower(f.Keyword)) {
			continue
		}
		if f.ZoneID != "" && v.ZoneID != "" && v.ZoneID != f.ZoneID {
			continue
		}
		if f.State != "" && !strings.EqualFold(v.State, f.State) {
			continue
		}
		if f.MinSemVer != "" {
			sv, err := semver.Parse(v.SemVer)
			if err != nil || sv.Compare(minV) < 0 {
				continue
			}
		}
		kept = append(kept, v)
	}
	sort.SliceStable(kept, func(i, j int) bool { return kept[i].Created.Before(kept[j].Created) })
	return kept, nil
}

// GetVersion loads one version by ID or name.
func (s *Service) GetVersion(ctx context.Context, ref string) (core.Version, error) {
	var v core.Version
	err := s.st.View(func(tx core.Tx) error {
		var err error
		v, err = versionByRef(tx, ref)
		return err
	})
	return v, err
}

func versionByRef(tx core.Tx, ref string) (core.Version, error) {
	if v, err := tx.Versions().Get(ref); err == nil {
		return v, nil
	}
	var found core.Version
	err := scanVersions(tx, func(v core.Version) bool {
		if v.Name == ref {
			found = v
			return false
		}
		return true
	})
	if err != nil {
		return found, err
	}
	if found.ID == "" {
		return found, core.Errorf(core.KindNotFound, "Unable to find Kubernetes version %s", ref)
	}
	return found, nil
}

// SetVersionState enables or disables a version. Admins only. A disabled
// version cannot be used by new clusters or upgrades; running clusters keep it.
func (s *Service) SetVersionState(ctx context.Context, caller Caller, ref, state string) (core.Version, error) {
	if !caller.Admin {
		return core.Version{}, core.Errorf(core.KindPermission, "Kubernetes version management is for admins only")
	}
	switch {
	case strings.EqualFold(state, VersionEnabled):
		state = VersionEnabled
	case strings.EqualFold(state, VersionDisabled):
		state = VersionDisabled
	default:
		return core.Version{}, core.Errorf(core.KindInvalid, "Invalid value for state parameter: %q (use Enabled or Disabled)", state)
	}
	var v core.Version
	err := s.st.Update(func(tx core.Tx) error {
		var err error
		if v, err = versionByRef(tx, ref); err != nil {
			return err
		}
		if v.State == state {
			return nil
		}
		v.State = state
		v.UpdatedAt = now()
		if err := tx.Versions().Put(v); err != nil {
			return err
		}
		_, err = tx.Events().Append(core.Event{Type: "version.state",
			Message: fmt.Sprintf("Kubernetes version %s is now %s", v.Name, state),
			Fields:  map[string]string{"version": v.ID, "state": state}})
		if err != nil {
			return err
		}
		return appendWrite(tx, caller, "updateKubernetesSupportedVersion", "", "", "Kubernetes version "+v.Name+" set "+state,
			map[string]string{"version": v.ID})
	})
	return v, err
}

// DeleteVersion removes a version no cluster uses (asynchronous, as in
// CloudStack). With deleteISO its binaries ISO leaves the image store too,
// unless another version still uses it. Admins only.
func (s *Service) DeleteVersion(ctx context.Context, caller Caller, ref string, deleteISO bool) (core.Job, error) {
	if !caller.Admin {
		return core.Job{}, core.Errorf(core.KindPermission, "Kubernetes version management is for admins only")
	}
	var j core.Job
	err := s.st.Update(func(tx core.Tx) error {
		v, err := versionByRef(tx, ref)
		if err != nil {
			return err
		}
		var users []string
		err = scanClusters(tx, func(c core.Cluster) bool {
			if c.VersionID == v.ID {
				users = append(users, c.Name)
			}
			return true
		})
		if err != nil {
			return err
		}
		if len(users) > 0 {
			return core.Errorf(core.KindInUse, "Unable to delete Kubernetes version ID: %s. Existing clusters currently using the version: %s", v.ID, strings.Join(users, ", "))
		}
		j = newJob("deleteKubernetesSupportedVersion", InstanceVersion, v.ID, caller)
		j.Appliance = s.opts.Appliance
		j.Params.DeleteISO = deleteISO
		if err := appendWrite(tx, caller, j.Command, "", "", "deletion of Kubernetes version "+v.Name+" accepted (job "+j.ID+")",
			map[string]string{"version": v.ID, "job": j.ID}); err != nil {
			return err
		}
		return tx.Jobs().Put(j)
	})
	if err != nil {
		return core.Job{}, err
	}
	s.start(j, s.runDeleteVersion)
	return j, nil
}

func (s *Service) runDeleteVersion(ctx context.Context, j *core.Job) error {
	var removed core.Version
	var isoShared bool
	err := s.st.Update(func(tx core.Tx) error {
		v, err := tx.Versions().Get(j.InstanceID)
		if err != nil {
			return err
		}
		inUse := false
		if err := scanClusters(tx, func(c core.Cluster) bool {
			inUse = c.VersionID == v.ID
			return !inUse
		}); err != nil {
			return err
		}
		if inUse {
			return core.Errorf(core.KindInUse, "Unable to delete Kubernetes version ID: %s. Existing clusters currently using the version.", v.ID)
		}
		if err := scanVersions(tx, func(o core.Version) bool {
			isoShared = o.ID != v.ID && o.ImageID != "" && o.ImageID == v.ImageID
			return !isoShared
		}); err != nil {
			return err
		}
		if err := tx.Versions().Delete(v.ID); err != nil {
			return err
		}
		removed = v
		_, err = tx.Events().Append(core.Event{Type: "version.deleted",
			Message: fmt.Sprintf("Kubernetes version %s (%s) deleted", v.Name, v.SemVer),
			Fields:  map[string]string{"version": v.ID}})
		return err
	})
	if err != nil {
		return s.failJob(j, err)
	}
	if j.Params.DeleteISO && removed.ImageID != "" && !isoShared && s.opts.Images != nil {
		if _, err := s.opts.Images.Remove(removed.ImageID); err != nil && core.KindOf(err) != core.KindNotFound {
			return s.failJob(j, fmt.Errorf("version deleted, but its ISO was not: %w", err))
		}
	}
	return s.succeed(j, nil, true)
}

// failJob stores a job's failure; it returns the cause (or a storage error).
func (s *Service) failJob(j *core.Job, cause error) error {
	if err := s.fail(j, cause); err != nil {
		return err
	}
	return cause
}

// succeed stores a job's success with the cluster it leaves (if any).
func (s *Service) succeed(j *core.Job, c *core.Cluster, plain bool) error {
	j.Status = core.JobSucceeded
	j.Cluster = c
	j.Success = plain
	j.Completed = now()
	return s.st.Update(func(tx core.Tx) error { return tx.Jobs().Put(*j) })
}
