package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/api/client"
)

func init() { register(newEventsCmd) }

// eventView is an event as the REST API answers it, with its cluster's
// name beside the ID.
type eventView struct {
	client.Event
	ClusterName string `json:"cluster_name,omitempty"`
}

// eventViews are events to print, their clusters' names still unset.
func eventViews(items []client.Event) []eventView {
	if items == nil {
		return nil
	}
	out := make([]eventView, len(items))
	for i, e := range items {
		out[i] = eventView{Event: e}
	}
	return out
}

// eventsFollowEvery is how often --follow asks for new events.
const eventsFollowEvery = time.Second

func newEventsCmd(opts *rootOptions) *cobra.Command {
	f := &apiFlags{}
	var device, cluster, typ, since string
	var limit int
	var follow bool
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Show what devices and operators did: DHCP, ZTP fetches, refusals, joins, API writes",
		Long: `Show the event log, oldest first: the newest --limit events that match, then
with --follow every new one as it is recorded (Ctrl-C stops). Events of one
device tell its story: its lease, each ZTP document it fetched or was refused
(with the reason), its approval, join and Node. --device takes a MAC address
or serial number, --cluster a cluster name or ID, --type an event type or its
prefix (ztp, dhcp, join, device, cluster, api). With -o json, --follow writes
one JSON object per line.

Refusals of addresses that hold no lease are not events (nothing is stored
for them): see "ztpd device list --state refused".`,
		Example: `  ztpd events
  ztpd events --device 52:54:00:12:34:56
  ztpd events --type ztp --since 10m
  ztpd events --cluster edge-1 --follow`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > 1000 {
				return fmt.Errorf("--limit %d: give 1..1000", limit)
			}
			from, err := visSince(since)
			if err != nil {
				return err
			}
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			q := url.Values{"type": {typ}}
			if q.Get("type") == "" {
				q.Del("type")
			}
			if device != "" {
				id, err := visDeviceRef(c, device)
				if err != nil {
					return err
				}
				q.Set("device", id)
			}
			if cluster != "" {
				id, err := visClusterRef(c, cluster)
				if err != nil {
					return err
				}
				q.Set("cluster", id)
			}
			if !from.IsZero() {
				q.Set("from", from.UTC().Format(time.RFC3339Nano))
			}
			names := visClusterNames(c)
			out := &eventsOut{opts: opts, w: os.Stdout, names: names, lines: follow,
				refresh: func() visNames { return visClusterNames(c) }}
			first := url.Values{}
			maps.Copy(first, q)
			first.Set("tail", strconv.Itoa(limit))
			var p client.EventsPage
			if err := c.REST("GET", "/api/v1/events", first, nil, &p); err != nil {
				return err
			}
			if !follow {
				return out.all(eventViews(p.Items))
			}
			if err := out.write(eventViews(p.Items)); err != nil {
				return err
			}
			if p.LastSeq == nil {
				return fmt.Errorf("this server does not say how far its event log goes (last_seq); --follow needs a newer ztpd")
			}
			stop := make(chan os.Signal, 1)
			signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(stop)
			return eventsFollow(c, q, *p.LastSeq, out, stop)
		},
	}
	addAPIFlags(cmd, f)
	fl := cmd.Flags()
	fl.StringVar(&device, "device", "", "only this device's events (MAC address or serial number)")
	fl.StringVar(&cluster, "cluster", "", "only this cluster's events (name or ID)")
	fl.StringVar(&typ, "type", "", "only events of this type or type prefix, e.g. ztp or ztp.refused")
	fl.StringVar(&since, "since", "", "only events of the last DURATION (10m, 2h) or from an RFC 3339 time")
	fl.IntVar(&limit, "limit", 50, "show the newest N matching events (1..1000)")
	fl.BoolVarP(&follow, "follow", "f", false, "keep printing new events as they are recorded")
	return cmd
}

// eventsFollow polls for events after seq (every page of each poll, then
// since=last_seq), so that none is lost or printed twice, until stop. A
// server that stops answering (ztpd restarting: its admin socket is gone
// for a moment) is waited for, said once on status, and followed again
// from seq when it is back.
func eventsFollow(c *apiClient, q url.Values, seq uint64, out *eventsOut, stop <-chan os.Signal) error {
	tick := time.NewTicker(eventsFollowEvery)
	defer tick.Stop()
	lost := false
	for {
		select {
		case <-stop:
			return nil
		case <-tick.C:
		}
		pq := url.Values{}
		maps.Copy(pq, q)
		pq.Set("since", strconv.FormatUint(seq, 10))
		pq.Set("limit", "1000")
		for {
			var p client.EventsPage
			if err := c.REST("GET", "/api/v1/events", pq, nil, &p); err != nil {
				var ue *url.Error
				if !errors.As(err, &ue) {
					return err // an answer: not a connection lost
				}
				if !lost {
					lost = true
					fmt.Fprintf(os.Stderr, "ztpd: ztpd stopped answering (restarting?); reconnecting (%v)\n", err)
				}
				break
			}
			if lost {
				lost = false
				fmt.Fprintln(os.Stderr, "ztpd: reconnected")
			}
			if err := out.write(eventViews(p.Items)); err != nil {
				return err
			}
			if p.NextCursor != "" {
				pq.Set("cursor", p.NextCursor)
				continue
			}
			if p.LastSeq != nil && *p.LastSeq > seq {
				seq = *p.LastSeq
			}
			break
		}
	}
}

// eventsOut prints events: a table (lines as they come with --follow) or
// JSON (an array, or one object per line with --follow).
type eventsOut struct {
	opts  *rootOptions
	w     io.Writer
	names visNames
	lines bool
	// refresh reads the cluster names again, when an event names a
	// cluster unknown to names (created since they were read); nil: never.
	refresh func() visNames
	// unnamed are the cluster IDs a refresh did not name (deleted, or not
	// visible to the caller): not asked about again.
	unnamed map[string]bool
}

func (o *eventsOut) named(list []eventView) []eventView {
	for i := range list {
		id := list[i].Cluster
		if id == "" {
			continue
		}
		if _, known := o.names[id]; !known && o.refresh != nil && !o.unnamed[id] {
			if o.names == nil {
				o.names = visNames{}
			}
			maps.Copy(o.names, o.refresh()) // a failed read keeps the names known
			if _, known := o.names[id]; !known {
				if o.unnamed == nil {
					o.unnamed = map[string]bool{}
				}
				o.unnamed[id] = true
			}
		}
		if name := o.names[id]; name != "" {
			list[i].ClusterName = name
		}
	}
	return list
}

// all prints one answer.
func (o *eventsOut) all(list []eventView) error {
	list = o.named(list)
	if list == nil {
		list = []eventView{}
	}
	if o.opts.output == "json" {
		return printResult(o.opts, o.w, list, nil)
	}
	if len(list) == 0 {
		fmt.Fprintln(os.Stderr, "no events match")
		return nil
	}
	return o.write(list)
}

// write prints events one line (or JSON object) each.
func (o *eventsOut) write(list []eventView) error {
	list = o.named(list)
	if o.opts.output == "json" {
		enc := json.NewEncoder(o.w)
		for _, e := range list {
			if err := enc.Encode(e); err != nil {
				return err
			}
		}
		return nil
	}
	for _, e := range list {
		if _, err := fmt.Fprintln(o.w, eventLine(e)); err != nil {
			return err
		}
	}
	return nil
}

// eventLine is one event for a person: local time, type, device, cluster
// name, and the message or, without one, the event's fields.
func eventLine(e eventView) string {
	who := dash(e.Device)
	if e.ClusterName != "" {
		who += " " + e.ClusterName
	} else if e.Cluster != "" {
		who += " " + e.Cluster
	}
	return fmt.Sprintf("%s  %-18s %-17s %s", e.Time.Local().Format("2006-01-02 15:04:05"), e.Type, who, eventText(e))
}

// eventText is an event's message followed by its fields (addr, state,
// profile, ...), sorted.
func eventText(e eventView) string {
	var parts []string
	if e.Message != "" {
		parts = append(parts, e.Message)
	}
	for _, k := range slices.Sorted(maps.Keys(e.Fields)) {
		parts = append(parts, k+"="+e.Fields[k])
	}
	return strings.Join(parts, " ")
}
