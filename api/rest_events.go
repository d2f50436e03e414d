package api

import (
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
	s.writeAppended(c, func(buf []byte) ([]byte, error) { return s.appendEventsPage(buf, streams, limit, after, keep) })
}

// appendEventsPage appends one page of events after sequence number
// after. From one stream it is an ordinary listing; from several, whose
// sequence numbers share one order, each contributes up to limit+1 kept
// events and the page is their merge in sequence order.
func (s *Server) appendEventsPage(buf []byte, streams []core.EventStream, limit int, after uint64, keep func(core.Event) bool) ([]byte, error) {
	err := s.st.View(func(tx core.Tx) error {
		if len(streams) == 1 {
			list := func(pos string, fn core.Visit[core.Event]) error {
				after, _ := parseEventPos(pos)
				return tx.Events().List(streams[0], after, fn)
			}
			var err error
			buf, err = appendPage(buf, list, eventPos(after), limit, func(e core.Event) string { return eventPos(e.Seq) }, keep, appendEventView)
			return err
		}
		// Each stream is in sequence order already: merge, do not sort.
		lists := make([][]core.Event, len(streams))
		for i, st := range streams {
			lists[i] = make([]core.Event, 0, limit+1)
			err := tx.Events().List(st, after, func(e core.Event) (bool, error) {
				if keep != nil && !keep(e) {
					return true, nil
				}
				lists[i] = append(lists[i], e)
				return len(lists[i]) <= limit, nil
			})
			if err != nil {
				return err
			}
		}
		buf = append(buf, `{"items":[`...)
		var last uint64
		for n := 0; ; n++ {
			next := -1
			for i, l := range lists {
				if len(l) > 0 && (next < 0 || l[0].Seq < lists[next][0].Seq) {
					next = i
				}
			}
			if next < 0 {
				buf = appendPageEnd(buf, false, "")
				return nil
			}
			if n == limit {
				buf = appendPageEnd(buf, true, eventPos(last))
				return nil
			}
			if n > 0 {
				buf = append(buf, ',')
			}
			e := lists[next][0]
			lists[next] = lists[next][1:]
			last = e.Seq
			var err error
			if buf, err = appendEventView(buf, e); err != nil {
				return err
			}
		}
	})
	return buf, err
}
