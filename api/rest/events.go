package rest

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
)

func restEventOf(e core.Event) client.Event {
	return client.Event{Seq: e.Seq, Time: e.Time, Type: e.Type, Device: e.Device, Cluster: e.Cluster, Message: e.Message, Fields: e.Fields}
}

// listEvents pages through the device and audit streams, alone or merged
// in sequence order. ?since=<seq> starts after that sequence number, like
// a cursor (whichever is later wins); ?from=<RFC 3339 time> keeps events
// from that time on; ?tail=<n> answers the newest n matching events
// (oldest first) in one page. A page without next_cursor carries last_seq:
// every event up to it was considered, so since=<last_seq> resumes with
// nothing lost and nothing repeated (ztpd events --follow).
func (s *Door) listEvents(c *gin.Context) {
	limit, pos, ok := listParams(c)
	if !ok {
		return
	}
	after, ok := parseEventPos(pos)
	if !ok {
		Refuse(c, core.KindInvalid, "malformed cursor")
		return
	}
	if v := c.Query("since"); v != "" {
		seq, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			Refuse(c, core.KindInvalid, "since must be an event sequence number")
			return
		}
		after = max(after, seq)
	}
	tail := 0
	if v := c.Query("tail"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			Refuse(c, core.KindInvalid, "tail must be 1.."+strconv.Itoa(maxLimit))
			return
		}
		tail = n
	}
	var from time.Time
	if v := c.Query("from"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			Refuse(c, core.KindInvalid, "from must be an RFC 3339 time, e.g. 2026-12-03T10:00:00Z")
			return
		}
		from = t
	}
	typ, device, cluster := c.Query("type"), c.Query("device"), c.Query("cluster")
	// A user key sees its clusters' events and those naming its account
	// (its writes, also of clusters since deleted).
	sc, ok := s.scopeOf(c)
	if !ok {
		return
	}
	var keep func(core.Event) bool
	if typ != "" || device != "" || cluster != "" || !sc.All() || !from.IsZero() {
		keep = func(e core.Event) bool {
			return sc.SeesEvent(e) &&
				(typ == "" || e.Type == typ || strings.HasPrefix(e.Type, typ+".")) &&
				(device == "" || e.Device == device) && (cluster == "" || e.Cluster == cluster) &&
				(from.IsZero() || !e.Time.Before(from))
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
		Refuse(c, core.KindInvalid, "stream must be all, device or audit")
		return
	}
	// Events change all the time: not worth keeping in the response cache.
	if tail > 0 {
		s.writeAppended(c, func(buf []byte) ([]byte, error) {
			return s.appendEventsTail(buf, streams, device, tail, after, keep)
		})
		return
	}
	s.writeAppended(c, func(buf []byte) ([]byte, error) {
		return s.appendEventsPage(buf, streams, device, limit, after, keep)
	})
}

// Query plan of ?device= (one device's events must not cost a scan of
// the whole log). Without it a listing reads the
// stream's log from its cursor (or, for tail, from its newest end) and
// keep filters; with it, listStream and listStreamBackward walk the device
// index instead (kv: one key range per stream and device, in sequence
// order) and read only that device's events: O(the device's events), not
// O(the log), which was 4 s a request at 1,000,000 events. keep still
// filters each of them (type, cluster, from, a user key's clusters).
//
// The answers stay those of the whole-log scan: besides the device's
// events, that scan visits other devices' events, which keep rejects but
// which move last_seq and, on a full page, make next_cursor. Of those only
// the stream's newest matters (the scan ends there), so the index listings
// visit it too, where the scan would have reached it: after the device's
// events forward, before them backward. keep must therefore reject events
// of other devices, which it does whenever device is set.

// listStream visits st's events after sequence number after in order:
// all of them, or with device set the device's and then the stream's
// newest (see the query plan above).
func listStream(r devices.Reader, st core.EventStream, device string, after uint64, fn core.Visit[core.Event]) error {
	if device == "" {
		return r.Events(st, "", after, fn)
	}
	visited, stopped := after, false
	err := r.Events(st, device, after, func(e core.Event) (bool, error) {
		visited = e.Seq
		ok, err := fn(e)
		stopped = !ok || err != nil
		return ok, err
	})
	if err != nil || stopped {
		return err
	}
	newest, ok, err := newestEvent(r, st)
	if err != nil || !ok || newest.Seq <= visited || newest.Device == device {
		return err
	}
	_, err = fn(newest)
	return err
}

// listStreamBackward visits st's events newest first: all of them, or
// with device set the stream's newest and then the device's.
func listStreamBackward(r devices.Reader, st core.EventStream, device string, fn core.Visit[core.Event]) error {
	if device == "" {
		return r.EventsBackward(st, "", 0, fn)
	}
	newest, ok, err := newestEvent(r, st)
	if err != nil {
		return err
	}
	if ok && newest.Device != device {
		if ok, err := fn(newest); !ok || err != nil {
			return err
		}
	}
	return r.EventsBackward(st, device, 0, fn)
}

// newestEvent is st's newest event; ok is false when st is empty.
func newestEvent(r devices.Reader, st core.EventStream) (newest core.Event, ok bool, err error) {
	err = r.EventsBackward(st, "", 0, func(e core.Event) (bool, error) {
		newest, ok = e, true
		return false, nil
	})
	return newest, ok, err
}

// appendEventsTail appends the newest n events after sequence number after
// that keep accepts, oldest first, and last_seq.
func (s *Door) appendEventsTail(buf []byte, streams []core.EventStream, device string, n int, after uint64,
	keep func(core.Event) bool) ([]byte, error) {
	err := s.queries.ReadScoped(devices.AllScope, func(r devices.Reader) error {
		scanned := after
		var newest []core.Event
		for _, st := range streams {
			// Newest first, so only as much of the log is read as the
			// answer needs (a device's recent events, not all 200,000).
			kept := 0
			err := listStreamBackward(r, st, device, func(e core.Event) (bool, error) {
				if e.Seq <= after {
					return false, nil
				}
				scanned = max(scanned, e.Seq)
				if keep != nil && !keep(e) {
					return true, nil
				}
				newest = append(newest, e)
				kept++
				return kept < n, nil
			})
			if err != nil {
				return err
			}
		}
		slices.SortFunc(newest, func(a, b core.Event) int { return cmp.Compare(a.Seq, b.Seq) })
		newest = newest[max(0, len(newest)-n):]
		buf = append(buf, `{"items":[`...)
		for i, e := range newest {
			if i > 0 {
				buf = append(buf, ',')
			}
			var err error
			if buf, err = AppendEventView(buf, e); err != nil {
				return err
			}
		}
		buf = appendLastSeq(appendPageEnd(buf, false, ""), scanned)
		return nil
	})
	return buf, err
}

// appendLastSeq adds last_seq to a page object buf ends with.
func appendLastSeq(buf []byte, seq uint64) []byte {
	buf = append(buf[:len(buf)-1], `,"last_seq":`...)
	return append(strconv.AppendUint(buf, seq, 10), '}')
}

// appendEventsPage appends one page of events after sequence number
// after. From one stream it is an ordinary listing; from several, whose
// sequence numbers share one order, each contributes up to limit+1 kept
// events and the page is their merge in sequence order.
func (s *Door) appendEventsPage(buf []byte, streams []core.EventStream, device string, limit int, after uint64,
	keep func(core.Event) bool) ([]byte, error) {
	err := s.queries.ReadScoped(devices.AllScope, func(r devices.Reader) error {
		// scanned: the newest event considered; a page that ends the
		// listing carries it as last_seq.
		scanned := after
		if len(streams) == 1 {
			more := false
			list := func(pos string, fn core.Visit[core.Event]) error {
				after, _ := parseEventPos(pos)
				return listStream(r, streams[0], device, after, func(e core.Event) (bool, error) {
					ok, err := fn(e)
					if ok && err == nil {
						scanned = max(scanned, e.Seq)
					} else if err == nil {
						more = true // visited past a full page
					}
					return ok, err
				})
			}
			var err error
			buf, err = appendPage(buf, list, eventPos(after), limit, func(e core.Event) string { return eventPos(e.Seq) }, keep, AppendEventView)
			if err == nil && !more {
				buf = appendLastSeq(buf, scanned)
			}
			return err
		}
		// Each stream is in sequence order already: merge, do not sort.
		// The lists grow as needed: a device has few events, and reserving
		// limit+1 per stream was half of what a request allocated.
		lists := make([][]core.Event, len(streams))
		for i, st := range streams {
			err := listStream(r, st, device, after, func(e core.Event) (bool, error) {
				scanned = max(scanned, e.Seq)
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
				// Every stream was listed to its end: all of it considered.
				buf = appendLastSeq(appendPageEnd(buf, false, ""), scanned)
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
			if buf, err = AppendEventView(buf, e); err != nil {
				return err
			}
		}
	})
	return buf, err
}
