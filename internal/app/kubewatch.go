package app

import (
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/kubewatch"
	"github.com/ztpd/ztpd/joiner"
)

// observerCertValidity is how long the watch's client certificates are
// valid; kubewatch replaces them at half of it.
const observerCertValidity = 12 * time.Hour

// buildWatch wires ztpd's watch of its clusters: kubewatch reaches every
// cluster with an API endpoint as the joiner's observer identity, and what
// it sees goes to the joiner (members) and the clusters service (state).
func (a *App) buildWatch() error {
	// client-go logs through klog: into ztpd's structured log instead of
	// unstructured stderr.
	klog.SetSlogLogger(a.Log.With("part", "client-go"))
	w := &clusterWatch{st: a.Store, j: a.Joiner, cs: a.Clusters, log: a.Log.With("part", "kubewatch"), seen: map[string]time.Time{}}
	m, err := kubewatch.New(kubewatch.Options{
		Targets: w, Sink: w, Labeler: a.Joiner,
		// ztpd.io and its subdomains (label.ztpd.io): the joiner's prefixes.
		Prefixes:        []string{strings.TrimSuffix(joiner.LabelPrefix, "/")},
		Logger:          w.log,
		ProbeInterval:   a.Cfg.API.ClusterProbeInterval.D(),
		RefreshInterval: 5 * time.Second,
		// Labels follow device changes (a SONiC upgrade) within a minute.
		ResyncPeriod: time.Minute,
		Registerer:   a.Metrics,
	})
	if err != nil {
		return err
	}
	a.Watch = m
	a.AddSingleton(runnerFunc{"kubewatch", m.Run})
	return nil
}

// clusterWatch adapts the store, the joiner and the clusters service to
// kubewatch's Targets and Sink.
type clusterWatch struct {
	st  core.Store
	j   *joiner.Service
	cs  *clusters.Service
	log *slog.Logger

	mu   sync.Mutex
	seen map[string]time.Time // cluster -> last APISeen call
}

// WatchTargets lists every provisioned cluster with an API endpoint.
func (w *clusterWatch) WatchTargets() ([]kubewatch.Target, error) {
	type cl struct{ id, name, endpoint string }
	var cls []cl
	err := w.st.View(func(tx core.Tx) error {
		return tx.Clusters().List("", func(c core.Cluster) (bool, error) {
			switch c.State {
			case core.ClusterCreated, core.ClusterError, core.ClusterDestroying, core.ClusterDestroyed:
				return true, nil
			}
			rt, err := tx.Clusters().JoinState(c.ID)
			if errors.Is(err, core.ErrNotFound) {
				return true, nil
			}
			if err != nil {
				return false, err
			}
			if rt.APIEndpoint != "" {
				cls = append(cls, cl{c.ID, c.Name, rt.APIEndpoint})
			}
			return true, nil
		})
	})
	if err != nil {
		return nil, err
	}
	out := make([]kubewatch.Target, 0, len(cls))
	for _, c := range cls {
		ca, err := w.j.CACertPEM(c.id)
		if err != nil {
			w.log.Warn("cluster CA unavailable: not watching", "cluster", c.name, "err", err)
			continue
		}
		id := c.id
		if cert, key, token, ok, err := w.j.ExternalWatchCredentials(id); err != nil {
			w.log.Warn("external cluster's kubeconfig unavailable: not watching", "cluster", c.name, "err", err)
			continue
		} else if ok {
			// A cluster ztpd did not build: watched as the registered
			// kubeconfig's identity, bound to ztpd's onboarding role.
			t := kubewatch.Target{ClusterID: id, Name: c.name, Endpoint: c.endpoint, CACertPEM: ca, BearerToken: token}
			if token == "" {
				t.Credentials = func(time.Time) ([]byte, []byte, error) { return cert, key, nil }
			}
			out = append(out, t)
			continue
		}
		out = append(out, kubewatch.Target{ClusterID: id, Name: c.name, Endpoint: c.endpoint, CACertPEM: ca,
			Credentials: func(time.Time) ([]byte, []byte, error) {
				_, _, cert, key, err := w.j.ObserverCredentials(id, observerCertValidity)
				return cert, key, err
			}})
	}
	return out, nil
}

func (w *clusterWatch) NodeSeen(clusterID string, n kubewatch.Node) {
	err := w.j.NodeSeen(clusterID, joiner.ObservedNode{Name: n.Name, Ready: string(n.Ready), Reason: n.Reason,
		ControlPlane: n.ControlPlane, Created: n.Created})
	if err != nil {
		w.log.Warn("recording a Node", "cluster", clusterID, "node", n.Name, "err", err)
	}
}

func (w *clusterWatch) NodeGone(clusterID, name string) {
	if err := w.j.NodeGone(clusterID, name); err != nil {
		w.log.Warn("recording a deleted Node", "cluster", clusterID, "node", name, "err", err)
	}
}

func (w *clusterWatch) CSRSeen(clusterID string, c kubewatch.CSR) {
	if !c.Approved {
		return // a denied request gave nobody a certificate
	}
	if err := w.j.CSRSeen(clusterID, c.NodeName, c.Requester); err != nil {
		w.log.Warn("recording a kubelet certificate request", "cluster", clusterID, "node", c.NodeName, "err", err)
	}
}

// apiSeenEvery bounds how often a reachable cluster is reported to the
// joiner (which marks it initialised and makes its RBAC once).
const apiSeenEvery = time.Minute

func (w *clusterWatch) ClusterSeen(clusterID string, h kubewatch.Health) {
	if h.APIReachable {
		w.mu.Lock()
		due := h.ObservedAt.Sub(w.seen[clusterID]) >= apiSeenEvery
		if due {
			w.seen[clusterID] = h.ObservedAt
		}
		w.mu.Unlock()
		if due {
			if err := w.j.APISeen(clusterID); err != nil {
				w.log.Warn("recording a reachable API server", "cluster", clusterID, "err", err)
			}
		}
	}
	err := w.cs.ObserveHealth(clusterID, clusters.Health{APIReachable: h.APIReachable, Err: h.Err, Nodes: h.Nodes,
		ReadyNodes: h.ReadyNodes, ControlPlanes: h.ControlPlanes, ReadyControlPlanes: h.ReadyControlPlanes, At: h.ObservedAt})
	if err != nil {
		w.log.Warn("recording a cluster observation", "cluster", clusterID, "err", err)
	}
}

// observerIdentity is kubewatch's identity and RBAC, for the joiner to mint
// certificates for and to create in each cluster.
func observerIdentity() (joiner.Observer, error) {
	role, binding := kubewatch.RBAC()
	o := joiner.Observer{User: kubewatch.ObserverUser, Groups: []string{kubewatch.ObserverGroup}}
	for _, obj := range []any{role, binding} {
		b, err := json.Marshal(obj)
		if err != nil {
			return joiner.Observer{}, err
		}
		o.RBAC = append(o.RBAC, b)
	}
	return o, nil
}
