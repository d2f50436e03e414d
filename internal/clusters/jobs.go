package clusters

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// Instance types of jobs, as CloudStack names them.
const (
	InstanceCluster = "KubernetesCluster"
	InstanceVersion = "KubernetesSupportedVersion"
)

// GetJob loads a job. A user may read its account's jobs (and, for jobs
// from before accounts, the ones its key started); admins read all.
func (s *Service) GetJob(ctx context.Context, caller Caller, id string) (core.Job, error) {
	var j core.Job
	err := s.st.View(func(tx core.Tx) error {
		var err error
		j, err = tx.Jobs().Get(id)
		if errors.Is(err, core.ErrNotFound) {
			return core.Errorf(core.KindNotFound, "Unable to find async job with id %s", id)
		}
		return err
	})
	if err != nil {
		return j, err
	}
	if !caller.Admin && !(j.Account != "" && j.Account == caller.AccountName()) && !(j.Account == "" && j.Owner == caller.APIKey) {
		return core.Job{}, core.Errorf(core.KindNotFound, "Unable to find async job with id %s", id)
	}
	return j, nil
}

// WaitJob blocks until the job has ended or ctx is done, and returns it.
func (s *Service) WaitJob(ctx context.Context, id string) (core.Job, error) {
	s.doneMu.Lock()
	ch := s.done[id]
	s.doneMu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			return core.Job{}, ctx.Err()
		}
	}
	for {
		j, err := s.GetJob(ctx, LocalAdmin, id)
		if err != nil || j.Done() {
			return j, err
		}
		select {
		case <-ctx.Done():
			return j, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// newJob fills the common fields of a job record.
func newJob(command, instType, instID string, caller Caller) core.Job {
	return core.Job{ID: newUUID(), Command: command, InstanceType: instType, InstanceID: instID,
		Owner: caller.APIKey, Account: caller.AccountName(), Status: core.JobPending, Created: now()}
}

// start runs work for an accepted (already stored) job in the background.
// work returns the job's final record fields; finish stores them.
func (s *Service) start(j core.Job, work func(ctx context.Context, j *core.Job) error) {
	ch := make(chan struct{})
	s.doneMu.Lock()
	s.done[j.ID] = ch
	s.doneMu.Unlock()
	s.jobsWG.Add(1)
	go func() {
		defer s.jobsWG.Done()
		defer func() {
			s.doneMu.Lock()
			delete(s.done, j.ID)
			s.doneMu.Unlock()
			close(ch)
		}()
		if s.ctx.Err() != nil {
			return // shutting down: the job stays pending; Recover fails it
		}
		err := work(s.ctx, &j)
		if s.ctx.Err() != nil && err != nil {
			return // interrupted by shutdown, not failed on its own
		}
		if err != nil {
			s.log.Warn("job failed", "job", j.ID, "command", j.Command, "instance", j.InstanceID, "err", err)
		} else {
			s.log.Info("job done", "job", j.ID, "command", j.Command, "instance", j.InstanceID)
		}
	}()
}

// fail records a failed job and applies its failure state to the cluster in
// one transaction.
func (s *Service) fail(j *core.Job, cause error) error {
	j.Status = core.JobFailed
	j.ErrorKind = core.KindOf(cause)
	j.Error = cause.Error()
	j.Completed = now()
	cluster := j.Cluster
	return s.st.Update(func(tx core.Tx) error {
		j.Cluster = cluster // fn may run again (a shared store): not a run's cluster before
		if j.InstanceType == InstanceCluster && j.FailState != "" {
			c, err := tx.Clusters().Get(j.InstanceID)
			// A cluster being deleted (a forced delete overtook this job)
			// stays Destroying: only the delete's own failure leaves it.
			deleting := c.State == core.ClusterDestroying && j.Command != opDelete.command
			if err == nil && c.State != j.FailState && CanTransition(c.State, j.FailState) && !deleting {
				if err := s.setState(tx, &c, j.FailState, fmt.Sprintf("%s failed: %s", j.Command, cause)); err != nil {
					return err
				}
				j.Cluster = &c
			}
		}
		return tx.Jobs().Put(*j)
	})
}

// Recover resolves jobs a previous process left pending: each is marked
// failed (CloudStack errorcode 530) and its cluster leaves the transient
// state for the job's failure state. Call it once at start, before serving.
func (s *Service) Recover() (int, error) {
	return s.failUnfinished(func(j core.Job) bool { return j.Appliance == s.opts.Appliance },
		"job interrupted by a restart of ztpd before it finished; the operation may be retried")
}

// FailOrphans marks failed the unfinished jobs of appliances that are gone
// (alive says which are not): several appliances share the store, and the
// one running a job died with it. The group's leader calls it.
func (s *Service) FailOrphans(alive func(appliance string) bool) (int, error) {
	return s.failUnfinished(func(j core.Job) bool { return j.Appliance != "" && !alive(j.Appliance) },
		"the appliance running this job stopped before it finished; the operation may be retried")
}

func (s *Service) failUnfinished(match func(core.Job) bool, why string) (int, error) {
	var pending []core.Job
	err := s.st.View(func(tx core.Tx) error {
		return tx.Jobs().List(func(j core.Job) (bool, error) {
			if !j.Done() && match(j) {
				pending = append(pending, j)
			}
			return true, nil
		})
	})
	if err != nil {
		return 0, err
	}
	for i := range pending {
		j := &pending[i]
		if err := s.fail(j, core.Errorf(core.KindInternal, "%s", why)); err != nil {
			return i, err
		}
		s.log.Warn("unfinished job marked failed", "job", j.ID, "command", j.Command, "instance", j.InstanceID,
			"appliance", j.Appliance, "why", why)
	}
	return len(pending), nil
}

// PruneJobs deletes finished jobs older than the retention period.
func (s *Service) PruneJobs() (int, error) {
	cutoff := now().Add(-s.opts.JobRetention)
	var doomed []string
	err := s.st.View(func(tx core.Tx) error {
		return tx.Jobs().List(func(j core.Job) (bool, error) {
			if j.Done() && j.Completed.Before(cutoff) {
				doomed = append(doomed, j.ID)
			}
			return true, nil
		})
	})
	if err != nil || len(doomed) == 0 {
		return 0, err
	}
	err = s.st.Update(func(tx core.Tx) error {
		for _, id := range doomed {
			if err := tx.Jobs().Delete(id); err != nil {
				return err
			}
		}
		return nil
	})
	return len(doomed), err
}

// RunPruner prunes finished jobs every interval until ctx ends.
func (s *Service) RunPruner(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if n, err := s.PruneJobs(); err != nil {
			s.log.Warn("pruning async jobs", "err", err)
		} else if n > 0 {
			s.log.Info("pruned finished async jobs", "count", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
