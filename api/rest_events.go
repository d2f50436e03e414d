package api

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/internal/core"
)

// restEvent is an event as the REST API shows it (openapi.json Event).
type restEvent struct {
	Seq     uint64            `json:"seq"`
	Time    time.Time         `json:"time"`
	Type    string            `json:"type"`
	Device  string            `json:"device,omitempty"`
	Cluster string            `json:"cluster,omitempty"`
	Message string            `json:"message,omitempty"`
	Fields  map[string]string `json:"fields,omitempty"`
}

func restEventOf(e core.Event) restEvent {
	return restEvent{Seq: e.Seq, Time: e.Time, Type: e.Type, Device: e.Device, Cluster: e.Cluster, Message: e.Message, Fields: e.Fields}
}

// listEvents pages through the device and audit streams, alone or merged
// in sequence order. ?since=<seq> starts after that sequence number, like
// a cursor (whichever is later wins).
func (s *Server) listEvents(c *gin.Context) {
	limit, pos, ok := listParams(c)
	if !ok {
		return
	}
	after, ok := parseEventPos(pos)
	if !ok {
		restRefuse(c, core.KindInvalid, "malformed cursor")
		return
	}
	if v := c.Query("since"); v != "" {
		seq, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			restRefuse(c, core.KindInvalid, "since must be an event sequence number")
			return
		}
		after = max(after, seq)
	}
	typ, device, cluster := c.Query("type"), c.Query("device"), c.Query("cluster")
	// A user key sees its clusters' events and those naming its account
	// (its writes, also of clusters since deleted).
	own, ok := s.ownClusters(c)
	if !ok {
		return
	}
	account := callerOf(c).AccountName()
	var keep func(core.Event) bool
	if typ != "" || device != "" || cluster != "" || own != nil {
		keep = func(e core.Event) bool {
			return (own == nil || (e.Cluster != "" && own[e.Cluster]) || e.Fields["account"] == account) &&
				(typ == "" || e.Type == typ || strings.HasPrefix(e.Type, typ+".")) &&
				(device == "" || e.Device == device) && (cluster == "" || e.Cluster == cluster)
		}
	}
	var streams []core.EventStream
	switch c.DefaultQuery("stream", "all") {
	case "all":
		streams = []core.EventStream{core.DeviceEvents, core.AuditEvents}
	case "device":
		streams = []core.EventStream{core.DeviceEvents}
	case "audit":
		streams = []core.EventStream{core.AuditEvents}
	default:
		restRefuse(c, core.KindInvalid, "stream must be all, device or audit")
		return
	}
	// Events change all the time: not worth keeping in the response cache.
	s.writeRendered(c, func() (any, error) { return s.eventsPage(streams, limit, after, keep) })
}

// eventsPage reads one page of events after sequence number after. From
// one stream it is an ordinary listing; from several, whose sequence
// numbers share one order, each contributes up to limit+1 kept events and
// the page is their merge in sequence order.
func (s *Server) eventsPage(streams []core.EventStream, limit int, after uint64, keep func(core.Event) bool) (page[restEvent], error) {
	var out page[restEvent]
	err := s.st.View(func(tx core.Tx) error {
		if len(streams) == 1 {
			list := func(pos string, fn core.Visit[core.Event]) error {
				after, _ := parseEventPos(pos)
				return tx.Events().List(streams[0], after, fn)
			}
			var err error
			out, err = collect(list, eventPos(after), limit, func(e core.Event) string { return eventPos(e.Seq) }, keep, restEventOf)
			return err
		}
		var all []core.Event
		for _, st := range streams {
			n := 0
			err := tx.Events().List(st, after, func(e core.Event) (bool, error) {
				if keep != nil && !keep(e) {
					return true, nil
				}
				all = append(all, e)
				n++
				return n <= limit, nil
			})
			if err != nil {
				return err
			}
		}
		slices.SortFunc(all, func(a, b core.Event) int { return cmp.Compare(a.Seq, b.Seq) })
		more := len(all) > limit
		if more {
			all = all[:limit]
		}
		out = page[restEvent]{Items: make([]restEvent, 0, len(all))}
		for i := range all {
			out.Items = append(out.Items, restEventOf(all[i]))
		}
		if more {
			out.NextCursor = cursorOf(eventPos(all[len(all)-1].Seq))
		}
		return nil
	})
	return out, err
}
