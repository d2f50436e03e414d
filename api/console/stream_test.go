package console

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/devices"
	"github.com/ztpd/ztpd/internal/httpserve"
)

// sessMessage is one Server-Sent Events message.
type sessMessage struct {
	event, data string
	comment     bool
}

type sessUpdate struct {
	LastSeq      uint64          `json:"last_seq"`
	Devices      []client.Device `json:"devices"`
	More         bool            `json:"more"`
	Events       []client.Event  `json:"events"`
	Counts       map[string]any  `json:"counts"`
	Rollouts     []string        `json:"rollouts"`
	RolloutsMore bool            `json:"rollouts_more"`
}

// sessStream is an open /ui/stream: its messages arrive on msgs, which is
// closed when the stream ends.
type sessStream struct {
	resp *http.Response
	msgs chan sessMessage
}

func (b *sessBrowser) stream(t *testing.T) *sessStream {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.base+StreamPath, nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := b.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	for k, want := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no"} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("stream %s: %q, want %q", k, got, want)
		}
	}
	s := &sessStream{resp: resp, msgs: make(chan sessMessage, 1024)}
	t.Cleanup(func() { resp.Body.Close() })
	go func() {
		defer close(s.msgs)
		rd := bufio.NewReader(resp.Body)
		var m sessMessage
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == "":
				s.msgs <- m
				m = sessMessage{}
			case strings.HasPrefix(line, ":"):
				m.comment = true
			case strings.HasPrefix(line, "event: "):
				m.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				m.data += strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return s
}

// next is the next message within d; ok false when the stream ended or
// nothing came.
func (s *sessStream) next(t *testing.T, d time.Duration) (sessMessage, bool) {
	t.Helper()
	select {
	case m, ok := <-s.msgs:
		return m, ok
	case <-time.After(d):
		return sessMessage{}, false
	}
}

func (s *sessStream) hello(t *testing.T) uint64 {
	t.Helper()
	m, ok := s.next(t, 5*time.Second)
	if !ok || m.event != "hello" {
		t.Fatalf("first message: %+v %v", m, ok)
	}
	var h struct {
		LastSeq uint64 `json:"last_seq"`
	}
	if err := json.Unmarshal([]byte(m.data), &h); err != nil {
		t.Fatalf("hello %q: %v", m.data, err)
	}
	return h.LastSeq
}

// update waits for the next update within d.
func (s *sessStream) update(t *testing.T, d time.Duration) (sessUpdate, bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		m, ok := s.next(t, time.Until(deadline))
		if !ok {
			return sessUpdate{}, false
		}
		if m.event != "update" {
			continue
		}
		var u sessUpdate
		if err := json.Unmarshal([]byte(m.data), &u); err != nil {
			t.Fatalf("update %q: %v", m.data, err)
		}
		return u, true
	}
}

// ended reports whether the stream ends within d.
func (s *sessStream) ended(d time.Duration) bool {
	deadline := time.After(d)
	for {
		select {
		case _, ok := <-s.msgs:
			if !ok {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// sessPutDevices stores n devices (IDs from mac(i)) in state st, each with
// an event, in one transaction: a storm landing within one interval.
func sessPutDevices(t *testing.T, st core.Store, n int, mac func(int) string, cluster string, state core.DeviceState) {
	t.Helper()
	now := time.Now().UTC()
	err := st.Update(func(tx core.Tx) error {
		for i := range n {
			id := mac(i)
			if err := tx.Devices().Put(core.Device{ID: id, MAC: id, Kind: core.KindVM, Cluster: cluster, State: state,
				FirstSeen: now, LastSeen: now, UpdatedAt: now}); err != nil {
				return err
			}
			if _, err := tx.Events().Append(core.Event{Type: "dhcp.ack", Device: id, Cluster: cluster, Message: "leased"}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func sessMAC(prefix byte) func(int) string {
	return func(i int) string { return fmt.Sprintf("02:%02x:00:00:%02x:%02x", prefix, i>>8, i&0xff) }
}

// TestConsoleStreamUpdates: a signed-in console's stream says hello, then
// sends a device's new record and its event when the devices service
// records a state change; without a session the stream is a 401.
func TestConsoleStreamUpdates(t *testing.T) {
	e := newEnv(t, envOpts{})
	anon := sessNewBrowser(t, e)
	if r := anon.do(http.MethodGet, StreamPath, nil); r.status != http.StatusUnauthorized || sessErrorCode(t, r) != "unauthorized" {
		t.Fatalf("stream without a session: %d %s", r.status, r.body)
	}
	b := sessNewBrowser(t, e)
	b.mustSignIn(e, e.admin.APIKey, e.adminSec)
	s := b.stream(t)
	seq := s.hello(t)

	svc := devices.New(devices.Options{Store: e.st})
	t.Cleanup(func() { svc.Close() })
	mac := "02:00:00:00:0c:01"
	dev := core.Device{ID: mac, MAC: mac, Kind: core.KindSONiC, Serial: "SN-STREAM-1", IP: "10.99.12.1"}
	svc.ObserveDHCP(dev, true)
	svc.Progress(devices.Progress{Device: dev, Profile: "leaf", Next: core.StateZTPServed,
		Event: core.Event{Type: "ztp.served", Device: mac, Message: "ztp.json served"}})
	svc.Flush()

	deadline := time.Now().Add(5 * time.Second)
	for {
		u, ok := s.update(t, time.Until(deadline))
		if !ok {
			t.Fatal("no update with the device in ztp-served")
		}
		if u.LastSeq <= seq {
			t.Errorf("update last_seq %d not after hello's %d", u.LastSeq, seq)
		}
		var got *client.Device
		for i := range u.Devices {
			if u.Devices[i].ID == mac {
				got = &u.Devices[i]
			}
		}
		if got == nil || got.State != core.StateZTPServed {
			continue // the lease's commit may come first
		}
		if got.Serial != "SN-STREAM-1" || u.More {
			t.Errorf("device %+v more %v", *got, u.More)
		}
		served := false
		for _, ev := range u.Events {
			served = served || (ev.Type == "ztp.served" && ev.Device == mac)
		}
		if !served {
			t.Errorf("events %+v lack ztp.served", u.Events)
		}
		if total, _ := u.Counts["total"].(float64); total != 1 {
			t.Errorf("counts %v", u.Counts)
		}
		break
	}
}

// TestConsoleStreamCoalesces: 2,000 device changes within one interval
// reach a subscriber as at most two messages, none over 500 devices, with
// more=true so the page refetches.
func TestConsoleStreamCoalesces(t *testing.T) {
	e := newEnv(t, envOpts{})
	b := sessNewBrowser(t, e)
	b.mustSignIn(e, e.admin.APIKey, e.adminSec)
	s := b.stream(t)
	s.hello(t)
	sessPutDevices(t, e.st, 2000, sessMAC(0x10), "", core.StateLeased)

	var updates []sessUpdate
	for {
		u, ok := s.update(t, 2*time.Second)
		if !ok {
			break
		}
		updates = append(updates, u)
	}
	if len(updates) == 0 || len(updates) > 2 {
		t.Fatalf("%d updates for 2,000 changes in one interval, want 1 or 2", len(updates))
	}
	more := false
	for _, u := range updates {
		if len(u.Devices) > streamMaxDevices || len(u.Events) > streamMaxEvents {
			t.Fatalf("update of %d devices and %d events", len(u.Devices), len(u.Events))
		}
		more = more || u.More
		for i := 1; i < len(u.Events); i++ {
			if u.Events[i].Seq <= u.Events[i-1].Seq {
				t.Fatalf("events not oldest first: %d then %d", u.Events[i-1].Seq, u.Events[i].Seq)
			}
		}
	}
	last := updates[len(updates)-1]
	if !more || last.Counts["total"].(float64) != 2000 {
		t.Fatalf("more %v counts %v", more, last.Counts)
	}
	if n := len(last.Events); n != streamMaxEvents || last.Events[n-1].Seq != last.LastSeq {
		t.Fatalf("events: %d, newest %d, last_seq %d", n, last.Events[n-1].Seq, last.LastSeq)
	}

	// Ten storms of 200 within a second: at most one message per interval.
	start := time.Now()
	for i := range 10 {
		sessPutDevices(t, e.st, 200, sessMAC(byte(0x20+i)), "", core.StateZTPServed)
		time.Sleep(100 * time.Millisecond)
	}
	n := 0
	for {
		if _, ok := s.update(t, 1500*time.Millisecond); !ok {
			break
		}
		n++
	}
	if elapsed := time.Since(start); n == 0 || n > int(elapsed/streamInterval)+1 {
		t.Fatalf("%d updates in %s for ten storms", n, elapsed)
	}
	t.Logf("2,000 changes in one transaction: %d update(s); 10x200 over 1 s: %d updates", len(updates), n)
}

// TestConsoleStreamTenancy: a user key's stream carries only its
// account's devices and events, and counts only those.
func TestConsoleStreamTenancy(t *testing.T) {
	e, _, _, mine, theirs, _ := tenancyEnv(t)
	b := sessNewBrowser(t, e)
	b.mustSignIn(e, e.user.APIKey, e.userSec)
	s := b.stream(t)
	s.hello(t)
	sessPutDevices(t, e.st, 5, sessMAC(0x30), theirs.ID, core.StateJoined)
	sessPutDevices(t, e.st, 3, sessMAC(0x31), mine.ID, core.StateJoinIssued)
	sessPutDevices(t, e.st, 5, sessMAC(0x32), theirs.ID, core.StateJoined)

	seen := map[string]bool{}
	for {
		u, ok := s.update(t, 2*time.Second)
		if !ok {
			break
		}
		for _, d := range u.Devices {
			if d.Cluster != mine.ID {
				t.Fatalf("user stream carries device %s of cluster %s", d.ID, d.Cluster)
			}
			seen[d.ID] = true
		}
		for _, ev := range u.Events {
			if ev.Cluster != mine.ID {
				t.Fatalf("user stream carries event %+v", ev)
			}
		}
		if total := u.Counts["total"].(float64); total != 4 { // the tenancy device and these 3
			t.Fatalf("user counts %v", u.Counts)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("user saw %d of its 3 devices", len(seen))
	}
}

// TestConsoleStreamEnds: a stream ends when its key is revoked (at its
// next update), when the API is closed, and when the HTTP server shuts
// down (without waiting out the shutdown grace).
func TestConsoleStreamEnds(t *testing.T) {
	e := newEnv(t, envOpts{})
	revoked := sessNewBrowser(t, e)
	revoked.mustSignIn(e, e.user.APIKey, e.userSec)
	rs := revoked.stream(t)
	rs.hello(t)
	closed := sessNewBrowser(t, e)
	closed.mustSignIn(e, e.admin.APIKey, e.adminSec)
	cs := closed.stream(t)
	cs.hello(t)

	if _, err := e.keys.Revoke(e.user.APIKey); err != nil {
		t.Fatal(err)
	}
	sessPutDevices(t, e.st, 1, sessMAC(0x40), "", core.StateLeased)
	if !rs.ended(3 * time.Second) {
		t.Fatal("the revoked key's stream did not end")
	}
	if _, ok := cs.update(t, 3*time.Second); !ok {
		t.Fatal("the admin's stream got no update")
	}
	e.srv.Close()
	if !cs.ended(2 * time.Second) {
		t.Fatal("the stream did not end with the API")
	}
	if r := closed.do(http.MethodGet, StreamPath, nil); r.status != http.StatusServiceUnavailable {
		t.Fatalf("stream after Close: %d %s", r.status, r.body)
	}

	// Through httpserve as ztpd serve runs it: the listener's shutdown ends
	// the stream at once.
	srv := e.compose(envOpts{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- httpserve.Serve(ctx, httpserve.NewServer(srv.Handler(), httpserve.Limits{}, nil), ln, 30*time.Second)
	}()
	jar, _ := cookiejar.New(nil)
	b := &sessBrowser{t: t, base: "http://" + ln.Addr().String(), http: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	if r := b.signIn(e.admin.APIKey, e.adminSec, "/"); r.cookie == nil {
		t.Fatalf("sign-in: %d", r.status)
	}
	u, _ := url.Parse(b.base)
	if len(jar.Cookies(u)) != 1 {
		t.Fatal("no cookie kept")
	}
	ss := b.stream(t)
	ss.hello(t)
	start := time.Now()
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not shut down within 10 s with a stream open")
	}
	if !ss.ended(time.Second) {
		t.Fatal("the stream outlived its server")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("shutdown with a stream open took %s", d)
	}
}

// TestConsoleStreamPendingIsBounded: however many polls merge into a
// subscriber that does not read, its pending update holds at most 500
// devices and 50 events (the newest), and says more.
func TestConsoleStreamPendingIsBounded(t *testing.T) {
	var pending streamUpdate
	seq := uint64(0)
	for poll := range 40 {
		var u streamUpdate
		for i := range 400 {
			seq++
			id := sessMAC(byte(poll))(i)
			u.addDevice(core.Device{ID: id, State: core.StateLeased})
			u.addEvent(core.Event{Seq: seq, Device: id})
		}
		u.lastSeq = seq
		pending.merge(u)
		if len(pending.devices) > streamMaxDevices || len(pending.events) > streamMaxEvents {
			t.Fatalf("poll %d: %d devices, %d events pending", poll, len(pending.devices), len(pending.events))
		}
	}
	if !pending.more || pending.lastSeq != seq || pending.events[0].Seq != seq-streamMaxEvents+1 || pending.events[streamMaxEvents-1].Seq != seq {
		t.Fatalf("more %v last_seq %d events %d..%d", pending.more, pending.lastSeq, pending.events[0].Seq, pending.events[len(pending.events)-1].Seq)
	}
	msg, err := appendStreamUpdate(nil, pending)
	if err != nil || len(msg) > 512<<10 {
		t.Fatalf("message of %d bytes: %v", len(msg), err)
	}
}
