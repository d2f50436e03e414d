package rest

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
)

// What the overview and every console stream update summarise, kept
// between calls: decoding 100,000 device records costs about 400 ms and an
// hour of a boot storm's events several hundred, while the console asks
// for them every poll (500 ms) and every overview refresh (5 s per tab).
// A recount after device writes decodes only the devices whose record
// changed (their core.Stamp moved).

// consoleCounts holds the device tally and the onboarding marks.
type consoleCounts struct {
	// tallyMu is held while the devices are counted: concurrent callers
	// share one scan.
	tallyMu sync.Mutex
	tally   *deviceTally

	obMu sync.Mutex
	ob   onboardingMarks
}

// deviceTally is every device counted by its cluster ("" for none), as of
// one generation of the devices aggregate (core.Generations).
type deviceTally struct {
	gen       uint64
	all       deviceCounts
	byCluster map[string]*deviceCounts
	marks     map[string]deviceMark // by device ID
	pass      uint32                // the count that made it; marks of this count carry it
}

// deviceMark is what the tally counted of one device record.
type deviceMark struct {
	stamp                core.Stamp
	cluster, state, kind string
	refused              bool
	pass                 uint32
}

// deviceCounts is the overview's device counts as the tallies keep them:
// the client package's view, with the counting methods.
type deviceCounts client.DeviceCounts

func newDeviceCounts() deviceCounts {
	return deviceCounts{ByState: map[string]int{}, ByKind: map[string]int{}}
}

func (n *deviceCounts) add(m *deviceCounts) {
	n.Total += m.Total
	n.Unmatched += m.Unmatched
	for k, v := range m.ByState {
		n.ByState[k] += v
	}
	for k, v := range m.ByKind {
		n.ByKind[k] += v
	}
}

func (n *deviceCounts) count(m *deviceMark) {
	n.Total++
	n.ByState[m.state]++
	n.ByKind[m.kind]++
	if m.refused {
		n.Unmatched++
	}
}

// deviceTally is the current tally: the one kept while no device was
// written since it was counted (every write of the devices aggregate
// makes a new generation), else a fresh count. A store that does not
// count its writes is counted on every call.
func (s *Door) deviceTally() (*deviceTally, error) {
	g, ok := s.st.(core.Generations)
	if !ok {
		return s.countDevices(nil)
	}
	s.counts.tallyMu.Lock()
	defer s.counts.tallyMu.Unlock()
	gen := g.Generation(core.AggDevices) // before reading: see core.Generations
	if t := s.counts.tally; t != nil && t.gen >= gen {
		return t, nil
	}
	t, err := s.countDevices(s.counts.tally)
	if err != nil {
		return nil, err
	}
	t.gen = gen
	s.counts.tally = t
	return t, nil
}

// countDevices counts every device: from prev's mark when the device's
// record has the Stamp it had then (prev may be nil), else from the record.
// prev's marks are taken over and updated in place (100,000 of them are
// some 20 MB to build again; the caller holds tallyMu).
func (s *Door) countDevices(prev *deviceTally) (*deviceTally, error) {
	t := &deviceTally{all: newDeviceCounts(), byCluster: map[string]*deviceCounts{}}
	if prev != nil && prev.marks != nil {
		t.marks, t.pass = prev.marks, prev.pass+1
		prev.marks = nil // a failed count leaves prev without them: it is not reused
	} else {
		t.marks = map[string]deviceMark{}
	}
	err := s.queries.ReadScoped(devices.AllScope, func(r devices.Reader) error {
		var last string // devices of one cluster often come in a row
		var c *deviceCounts
		return r.DeviceStamps(func(id string, st core.Stamp) (bool, error) {
			m, ok := t.marks[id]
			if !ok || m.stamp != st {
				d, err := r.DeviceByID(id)
				if err != nil {
					return false, err
				}
				m = deviceMark{stamp: st, cluster: d.Cluster, state: string(d.State), kind: string(d.Kind), refused: d.Refusal.Refused()}
			}
			m.pass = t.pass
			t.marks[id] = m
			if c == nil || m.cluster != last {
				if c = t.byCluster[m.cluster]; c == nil {
					n := newDeviceCounts()
					c = &n
					t.byCluster[m.cluster] = c
				}
				last = m.cluster
			}
			c.count(&m)
			return true, nil
		})
	})
	if err != nil {
		return t, err
	}
	for id, m := range t.marks {
		if m.pass != t.pass {
			delete(t.marks, id) // a device deleted since
		}
	}
	for _, c := range t.byCluster {
		t.all.add(c)
	}
	return t, nil
}

// onboardingMarks are the member.joined events of the last hour, read
// once: the first call reads the hour back from the newest event (at most
// onboardingScanMax events, as one overview did before), later calls read
// only the device events appended since (the log is append-only and its
// sequence numbers follow commit order, as the stream hub relies on).
type onboardingMarks struct {
	started bool
	seq     uint64       // device events up to seq have been read
	joined  []core.Event // seq order; only the fields the overview reads
}

// onboardingMarkMax bounds the marks kept: more joins in an hour than
// this and the oldest are forgotten.
const onboardingMarkMax = onboardingScanMax

// joinedMark is e reduced to what the histogram and the user-key filter
// (eventFilter) read.
func joinedMark(e core.Event) core.Event {
	m := core.Event{Seq: e.Seq, Time: e.Time, Type: e.Type, Cluster: e.Cluster}
	if a, ok := e.Fields["account"]; ok {
		m.Fields = map[string]string{"account": a}
	}
	return m
}

// onboardingJoined counts the member.joined events at or after from that
// keep accepts (all when keep is nil) into onboardingBuckets buckets of
// onboardingBucket, oldest first.
func (s *Door) onboardingJoined(from time.Time, keep func(core.Event) bool) ([]int, error) {
	s.counts.obMu.Lock()
	defer s.counts.obMu.Unlock()
	m := &s.counts.ob
	err := s.queries.ReadScoped(devices.AllScope, func(r devices.Reader) error {
		if !m.started {
			var back []core.Event
			scanned := 0
			err := r.EventsBackward(core.DeviceEvents, "", 0, func(e core.Event) (bool, error) {
				m.seq = max(m.seq, e.Seq)
				if e.Time.Before(from) {
					return false, nil
				}
				if e.Type == joinedEvent {
					back = append(back, joinedMark(e))
				}
				scanned++
				return scanned < onboardingScanMax, nil
			})
			if err != nil {
				return err
			}
			slices.Reverse(back)
			m.joined, m.started = back, true
			return nil
		}
		return r.Events(core.DeviceEvents, "", m.seq, func(e core.Event) (bool, error) {
			m.seq = max(m.seq, e.Seq)
			if e.Type == joinedEvent && !e.Time.Before(from) {
				m.joined = append(m.joined, joinedMark(e))
			}
			return true, nil
		})
	})
	if err != nil {
		m.started = false // read the hour again next time
		return nil, err
	}
	// The window moved: forget what left it, and the oldest past the bound.
	m.joined = slices.DeleteFunc(m.joined, func(e core.Event) bool { return e.Time.Before(from) })
	if n := len(m.joined); n > onboardingMarkMax {
		m.joined = slices.Delete(m.joined, 0, n-onboardingMarkMax)
	}
	joined := make([]int, onboardingBuckets)
	for _, e := range m.joined {
		if keep != nil && !keep(e) {
			continue
		}
		if i := int(e.Time.Sub(from) / onboardingBucket); i >= 0 && i < onboardingBuckets {
			joined[i]++
		}
	}
	return joined, nil
}

// clone is n with maps of its own.
func (n deviceCounts) clone() deviceCounts {
	n.ByState, n.ByKind = maps.Clone(n.ByState), maps.Clone(n.ByKind)
	return n
}
