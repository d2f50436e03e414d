package clusters

import (
	"errors"
	"fmt"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// Health is one look at a cluster through its API server (ztpd's watch).
type Health struct {
	APIReachable       bool
	Err                string // why the API server did not answer
	Nodes              int
	ReadyNodes         int
	ControlPlanes      int
	ReadyControlPlanes int
	At                 time.Time
}

// storeSeenEvery bounds how often an unchanged observation is written just
// to move LastSeen forward.
const storeSeenEvery = 30 * time.Second

// ObserveHealth applies one observation to the cluster's state, honestly:
//
//	Starting -> Running  the API server answers and the desired number of
//	                     control-plane Nodes are registered and Ready;
//	Running  -> Alert    the API server does not answer, or fewer Nodes are
//	                     Ready than desired, for longer than AlertAfter;
//	Alert    -> Running  healthy again.
//
// Other states (a job in flight, Stopped, Error) are left to their jobs;
// the observation is still recorded.
func (s *Service) ObserveHealth(clusterID string, h Health) error {
	if h.At.IsZero() {
		h.At = now()
	}
	// Most probes change nothing worth storing: decide from a read, and
	// take a write transaction only when there is something to write.
	var due bool
	err := s.st.View(func(tx core.Tx) error {
		c, err := tx.Clusters().Get(clusterID)
		if err != nil {
			return err
		}
		_, to, _, changed := s.observe(c, h)
		due = to != "" || changed
		return nil
	})
	if errors.Is(err, core.ErrNotFound) {
		return nil
	}
	if err == nil && !due {
		s.maybeApplyCNI(clusterID, h)
		return nil
	}
	if err != nil {
		return err
	}
	// A change of state is logged once committed: fn may run again (a
	// shared store).
	var name, reason string
	var from, to core.ClusterState
	err = s.st.Update(func(tx core.Tx) error {
		to = ""
		c, err := tx.Clusters().Get(clusterID)
		if errors.Is(err, core.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		obs, next, why, changed := s.observe(c, h)
		if next == "" && !changed {
			return nil
		}
		obs.StoredAt = h.At
		c.Observed = &obs
		if next == "" {
			return tx.Clusters().Put(c)
		}
		name, from, to, reason = c.Name, c.State, next, why
		return s.setState(tx, &c, to, reason)
	})
	if err == nil && to != "" {
		s.log.Info("cluster state from its API server", "cluster", name, "from", from, "to", to, "reason", reason)
	}
	if err == nil {
		s.maybeApplyCNI(clusterID, h)
	}
	return err
}

// observe applies h to c's last observation: the new observation, the
// state to move to ("" for none) and why, and whether the observation
// changed enough to be stored.
func (s *Service) observe(c core.Cluster, h Health) (obs core.ClusterObservation, to core.ClusterState, reason string, changed bool) {
	var prev core.ClusterObservation
	if c.Observed != nil {
		prev = *c.Observed
	}
	obs = prev
	obs.APIReachable, obs.Error = h.APIReachable, h.Err
	if h.APIReachable {
		obs.LastSeen = h.At
		obs.Nodes, obs.ReadyNodes, obs.ControlPlanes, obs.ReadyControlPlanes = h.Nodes, h.ReadyNodes, h.ControlPlanes, h.ReadyControlPlanes
		obs.Error = ""
	}
	wantCP := max(c.ControlNodes, 1)
	desired := wantCP + c.Size
	if c.IsExternal() {
		// ztpd neither built nor sizes a cluster it only onboards into:
		// it is healthy while its API server answers.
		wantCP, desired = 0, 0
	}
	healthy := h.APIReachable && obs.ReadyNodes >= desired
	switch {
	case healthy:
		obs.UnhealthySince = time.Time{}
	case obs.UnhealthySince.IsZero():
		obs.UnhealthySince = h.At
	}
	obs.Waiting = ""
	if c.State == core.ClusterStarting && !(h.APIReachable && obs.ReadyControlPlanes >= wantCP) {
		obs.Waiting = startingWait(c, obs, wantCP)
	}
	switch c.State {
	case core.ClusterStarting:
		if h.APIReachable && obs.ReadyControlPlanes >= wantCP {
			to, reason = core.ClusterRunning, fmt.Sprintf("API server answers; %d of %d control-plane Nodes Ready", obs.ReadyControlPlanes, wantCP)
		}
	case core.ClusterRunning:
		if !healthy && h.At.Sub(obs.UnhealthySince) >= s.opts.AlertAfter {
			to, reason = core.ClusterAlert, unhealthyReason(obs, desired, h.At)
		}
	case core.ClusterAlert:
		if healthy {
			to, reason = core.ClusterRunning, fmt.Sprintf("healthy again: API server answers, %d of %d Nodes Ready", obs.ReadyNodes, desired)
		}
	}
	if to == core.ClusterRunning && !healthy {
		// The alert time counts from Running: a cluster whose workers
		// are still joining when its control plane comes up is not
		// already late.
		obs.UnhealthySince = h.At
	}
	// A change of reachability, counts or health is stored at once; one of
	// the texts alone at most every storeSeenEvery: an unreachable API
	// server's error text alternates between probes and watches (timeouts,
	// refusals, the informer that failed last), and every write of a
	// cluster re-renders every cluster listing (at 100,000 members, seconds
	// of CPU each).
	structural := prev.APIReachable != obs.APIReachable || (prev.Error == "") != (obs.Error == "") || prev.Nodes != obs.Nodes ||
		prev.ReadyNodes != obs.ReadyNodes || prev.ControlPlanes != obs.ControlPlanes ||
		prev.ReadyControlPlanes != obs.ReadyControlPlanes || !prev.UnhealthySince.Equal(obs.UnhealthySince)
	texts := prev.Error != obs.Error || prev.Waiting != obs.Waiting
	changed = structural || texts && h.At.Sub(prev.StoredAt) >= storeSeenEvery || obs.LastSeen.Sub(prev.LastSeen) >= storeSeenEvery
	return obs, to, reason, changed
}

// startingWait says what a Starting cluster waits for.
func startingWait(c core.Cluster, obs core.ClusterObservation, wantCP int) string {
	switch {
	case !obs.APIReachable && obs.Error != "":
		return "waiting for its API server to answer: " + obs.Error
	case !obs.APIReachable:
		return "waiting for its first control plane to start the API server"
	case obs.ReadyControlPlanes < wantCP:
		return fmt.Sprintf("waiting for its control-plane Nodes: %d of %d registered and Ready", obs.ReadyControlPlanes, wantCP)
	}
	return "waiting for ztpd's next look at its API server"
}

func unhealthyReason(obs core.ClusterObservation, desired int, at time.Time) string {
	for_ := at.Sub(obs.UnhealthySince).Truncate(time.Second)
	if !obs.APIReachable {
		msg := fmt.Sprintf("API server not answering for %s", for_)
		if obs.Error != "" {
			msg += ": " + obs.Error
		}
		return msg
	}
	return fmt.Sprintf("%d of %d Nodes Ready for %s", obs.ReadyNodes, desired, for_)
}

// StartingReason says what a Starting cluster waits for, from its last
// observation.
func StartingReason(c core.Cluster) string {
	if c.Observed == nil {
		return "waiting for its first control plane to start the API server; ztpd has not reached it yet"
	}
	if w := c.Observed.Waiting; w != "" {
		return w
	}
	return startingWait(c, *c.Observed, max(c.ControlNodes, 1))
}
