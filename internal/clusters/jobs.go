package clusters

import (
	"context"
	"fmt"
	"time"

	"github.com/ztpd/ztpd/internal/core"
)

// JobStatus uses CloudStack's numbering.
type JobStatus int

const (
	JobPending   JobStatus = 0
	JobSucceeded JobStatus = 1
	JobFailed    JobStatus = 2
)

// Instance types of jobs, as CloudStack names them.
const (
	InstanceCluster = "KubernetesCluster"
	InstanceVersion = "KubernetesSupportedVersion"
)

// Job is an asynchronous operation. It is stored in the jobs bucket when it
// is accepted and again when it ends, so its outcome can be queried after a
// restart; a job a restart interrupted is recorded as failed.
type Job struct {
	ID           string    `json:"id"`
	Command      string    `json:"command"` // CloudStack command name, e.g. scaleKubernetesCluster
	InstanceType string    `json:"instance_type"`
	InstanceID   string    `json:"instance_id"`
	Owner        string    `json:"owner,omitempty"`   // API key of the caller
	Account      string    `json:"account,omitempty"` // the caller's account
	Status       JobStatus `json:"status"`
	// ErrorKind and Error describe a failed job.
	ErrorKind Kind   `json:"error_kind,omitempty"`
	Error     string `json:"error,omitempty"`
	// Cluster is the cluster as the job left it (cluster jobs that keep it).
	Cluster *core.Cluster `json:"cluster,omitempty"`
	// Success marks jobs whose result is a plain success (stop, delete).
	Success   bool      `json:"success,omitempty"`
	Created   time.Time `json:"created"`
	Completed time.Time `json:"completed,omitzero"`

	// What the job does and how a crash mid-way is resolved.
	Params    JobParams         `json:"params"`
	FailState core.ClusterState `json:"fail_state,omitempty"`
}

// JobParams are the inputs a job needs after it was accepted.
type JobParams struct {
	Size       int    `json:"size,omitempty"`
	OfferingID string `json:"offering_id,omitempty"`
	VersionID  string `json:"version_id,omitempty"`
	DeleteISO  bool   `json:"delete_iso,omitempty"`
	// Target is the state the job moves the cluster to on success.
	Target core.ClusterState `json:"target,omitempty"`
}

// Done reports whether the job has ended.
func (j Job) Done() bool { return j.Status != JobPending }

// GetJob loads a job. A user may read its account's jobs (and, for jobs
// from before accounts, the ones its key started); admins read all.
func (s *Service) GetJob(ctx context.Context, caller Caller, id string) (Job, error) {
	var j Job
	err := s.st.View(func(tx core.Tx) error {
		ok, err := tx.Get(core.BucketJobs, id, &j)
		if err != nil {
			return err
		}
		if !ok {
			return errorf(KindNotFound, "Unable to find async job with id %s", id)
		}
		return nil
	})
	if err != nil {
		return j, err
	}
	if !caller.Admin && !(j.Account != "" && j.Account == caller.AccountName()) && !(j.Account == "" && j.Owner == caller.APIKey) {
		return Job{}, errorf(KindNotFound, "Unable to find async job with id %s", id)
	}
	return j, nil
}

// WaitJob blocks until the job has ended or ctx is done, and returns it.
func (s *Service) WaitJob(ctx context.Context, id string) (Job, error) {
	s.doneMu.Lock()
	ch := s.done[id]
	s.doneMu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			return Job{}, ctx.Err()
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
func newJob(command, instType, instID string, caller Caller) Job {
	return Job{ID: newUUID(), Command: command, InstanceType: instType, InstanceID: instID,
		Owner: caller.APIKey, Account: caller.AccountName(), Status: JobPending, Created: now()}
}

// start runs work for an accepted (already stored) job in the background.
// work returns the job's final record fields; finish stores them.
func (s *Service) start(j Job, work func(ctx context.Context, j *Job) error) {
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
func (s *Service) fail(j *Job, cause error) error {
	j.Status = JobFailed
	j.ErrorKind = KindOf(cause)
	j.Error = cause.Error()
	j.Completed = now()
	return s.st.Update(func(tx core.Tx) error {
		if j.InstanceType == InstanceCluster && j.FailState != "" {
			c, err := core.GetCluster(tx, j.InstanceID)
			if err == nil && c.State != j.FailState && CanTransition(c.State, j.FailState) {
				if err := s.setState(tx, &c, j.FailState, fmt.Sprintf("%s failed: %s", j.Command, cause)); err != nil {
					return err
				}
				j.Cluster = &c
			}
		}
		return tx.Put(core.BucketJobs, j.ID, j)
	})
}

// Recover resolves jobs a previous process left pending: each is marked
// failed (CloudStack errorcode 530) and its cluster leaves the transient
// state for the job's failure state. Call it once at start, before serving.
func (s *Service) Recover() (int, error) {
	var pending []Job
	err := s.st.View(func(tx core.Tx) error {
		return tx.Scan(core.BucketJobs, "", func(_ string, v []byte) (bool, error) {
			var j Job
			if err := core.Decode(v, &j); err != nil {
				return false, err
			}
			if !j.Done() {
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
		cause := errorf(KindInternal, "job interrupted by a restart of ztpd before it finished; the operation may be retried")
		if err := s.fail(j, cause); err != nil {
			return i, err
		}
		s.log.Warn("job interrupted by restart marked failed", "job", j.ID, "command", j.Command, "instance", j.InstanceID)
	}
	return len(pending), nil
}

// PruneJobs deletes finished jobs older than the retention period.
func (s *Service) PruneJobs() (int, error) {
	cutoff := now().Add(-s.opts.JobRetention)
	var doomed []string
	err := s.st.View(func(tx core.Tx) error {
		return tx.Scan(core.BucketJobs, "", func(k string, v []byte) (bool, error) {
			var j Job
			if err := core.Decode(v, &j); err != nil {
				return false, err
			}
			if j.Done() && j.Completed.Before(cutoff) {
				doomed = append(doomed, k)
			}
			return true, nil
		})
	})
	if err != nil || len(doomed) == 0 {
		return 0, err
	}
	err = s.st.Update(func(tx core.Tx) error {
		for _, k := range doomed {
			if err := tx.Delete(core.BucketJobs, k); err != nil {
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
