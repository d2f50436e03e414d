package rest

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/clusters"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// consoleDeps are the parts only the web console's REST additions use
// (Deps has their description).
type consoleDeps struct {
	pools      PoolLister
	preview    DevicePreviewer
	imageStore ISOStore
	isoBaseURL string
	config     func() any
	warnings   func() []string
}

// routeConsoleREST registers the REST routes the web console added:
// the overview, pool use, device previews, API keys, image
// upload and deletion, the effective configuration and the warnings.
func (s *Door) routeConsoleREST(e *gin.Engine, g *gin.RouterGroup) {
	admin := requireAdmin
	g.GET("/overview", s.overview)
	g.GET("/pools", s.listPools)
	g.GET("/devices/:id/preview", admin, s.previewDevice)
	g.GET("/apikeys", admin, s.listAPIKeys)
	g.POST("/apikeys", admin, s.createAPIKey)
	g.DELETE("/apikeys/:key", admin, s.revokeAPIKey)
	// The upload streams its body: it is not read by restAuth (see
	// holdUploadBody), so it is registered outside the group.
	e.POST(Path+"images", s.holdUploadBody, s.restAuth, admin, s.uploadImage)
	g.DELETE("/images/:ref", admin, s.deleteImage)
	g.GET("/settings/config", admin, s.settingsConfig)
	// Warnings name profiles, clusters and images of every account: the
	// appliance's administrators' business.
	g.GET("/warnings", admin, s.listWarnings)
}

// deviceCounts counts the devices by state and kind; own, when not nil,
// keeps only the devices of those clusters (a user key's view, see
// ownClusters). Unmatched are the devices whose last ZTP request got no
// content, whatever their state (listDevices' state=unmatched). The counts
// come from the tally of the current generation of the devices (one scan
// per device write shared by every view: counts.go).
func (s *Door) deviceCounts(own map[string]bool) (deviceCounts, error) {
	t, err := s.deviceTally()
	if err != nil {
		return deviceCounts{}, err
	}
	if own == nil {
		return t.all.clone(), nil
	}
	n := newDeviceCounts()
	for id, ok := range own {
		if c := t.byCluster[id]; ok && c != nil {
			n.add(c)
		}
	}
	return n, nil
}

// DeviceCounts are deviceCounts as the client package shows them: the
// console's live stream sends them with its updates.
func (s *Door) DeviceCounts(own map[string]bool) (client.DeviceCounts, error) {
	n, err := s.deviceCounts(own)
	return client.DeviceCounts(n), err
}

// Onboarding histogram: devices becoming joined over the last hour.
const (
	onboardingBucket  = 5 * time.Minute
	onboardingBuckets = 12
	// joinedEvent marks a member whose Node became Ready: its device's
	// state is joined from then on (joiner/observe.go).
	joinedEvent = "member." + string(core.StateJoined)
	// onboardingScanMax bounds the events read back: a boot storm's hour
	// is at most this many events deep for the histogram, and a user
	// key's newest events are looked for that deep.
	onboardingScanMax = 500_000
)

// overview is the console's first page in one answer. A user key sees
// its account's clusters and their devices and events only (as
// listDevices and listEvents) and no warnings (they name other accounts'
// clusters); pools are the appliance's.
func (s *Door) overview(c *gin.Context) {
	sc, ok := s.scopeOf(c)
	if !ok {
		return
	}
	out := client.Overview{Pools: s.poolUse(), Clusters: []client.ClusterHealth{}, Events: []client.Event{}, Warnings: []string{}}
	if sc.All() { // an admin key
		out.Warnings = s.currentWarnings()
	}
	counts, err := s.deviceCounts(sc.Clusters())
	if err != nil {
		s.restFail(c, err)
		return
	}
	out.Devices = client.DeviceCounts(counts)
	keep := eventFilter(sc)
	if out.Onboarding, out.Events, err = s.recentEvents(keep, 10); err != nil {
		s.restFail(c, err)
		return
	}
	ctx := context.WithoutCancel(c.Request.Context())
	views, _, err := s.clusters.ListClusters(ctx, callerOf(c), clusters.ClusterFilter{ListAll: credOf(c).IsAdmin()}, 0, 0)
	if err != nil {
		s.restFail(c, err)
		return
	}
	for _, v := range views {
		h := client.ClusterHealth{ID: v.Cluster.ID, Name: v.Cluster.Name, State: v.Cluster.State, MembersDesired: v.Nodes()}
		for _, m := range v.Members {
			if m.State == core.StateJoined {
				h.MembersReady++
			}
		}
		out.Clusters = append(out.Clusters, h)
	}
	httpserve.WriteJSON(c.Writer, http.StatusOK, out)
}

// eventFilter is what events the caller sees: all for admin keys; for a
// user key those of its clusters and those naming its account (listEvents).
func eventFilter(sc devices.Scope) func(core.Event) bool {
	if sc.All() {
		return nil
	}
	return sc.SeesEvent
}

// recentEvents is the onboarding histogram of the last hour (device
// stream, from the marks kept between calls: counts.go) and the
// newest n events of both streams, newest first, that keep accepts (read
// back at most onboardingScanMax events per stream).
func (s *Door) recentEvents(keep func(core.Event) bool, n int) (client.Onboarding, []client.Event, error) {
	now := s.now().UTC()
	from := now.Add(-onboardingBuckets * onboardingBucket).Truncate(time.Second)
	ob := client.Onboarding{BucketSeconds: int(onboardingBucket / time.Second), From: from}
	var err error
	if ob.Joined, err = s.onboardingJoined(from, keep); err != nil {
		return ob, nil, err
	}
	var newest []core.Event
	err = s.queries.ReadScoped(devices.AllScope, func(r devices.Reader) error {
		for _, st := range []core.EventStream{core.DeviceEvents, core.AuditEvents} {
			kept, scanned := 0, 0
			err := r.EventsBackward(st, "", 0, func(e core.Event) (bool, error) {
				scanned++
				if keep == nil || keep(e) {
					newest = append(newest, e)
					kept++
				}
				return kept < n && scanned < onboardingScanMax, nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	// Both streams share one sequence: newest first across them.
	slices.SortFunc(newest, func(a, b core.Event) int { return cmp.Compare(b.Seq, a.Seq) })
	out := make([]client.Event, 0, n)
	for _, e := range newest[:min(n, len(newest))] {
		out = append(out, restEventOf(e))
	}
	return ob, out, err
}

// currentWarnings are the startup warnings as they stand now.
func (s *Door) currentWarnings() []string {
	var w []string
	if s.console.warnings != nil {
		w = s.console.warnings()
	}
	if w == nil {
		w = []string{}
	}
	return w
}
