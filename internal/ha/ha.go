// Package ha coordinates appliances that share one etcd store:
// who is alive, which of the 256 DHCP load-balancing buckets (RFC 3074)
// each one answers, which address blocks each may allocate from, and which
// one runs the singletons (cluster watch, rollouts, retention).
//
// Every appliance holds a session: an etcd lease of TTL seconds that it
// keeps alive, with its session key (meta/ha-session/<name>, read by every
// lease commit as a fence) and its published Info attached. Liveness is
// the session key's existence; everything an appliance holds (claims, the
// leader key) is attached to the same lease, so it all goes at once when
// the appliance dies or is cut off.
//
// Safety, in the order things happen when an appliance A dies:
//  1. A stops answering anything once its own deadline passes: the send
//     time of its last acknowledged keepalive plus the TTL, which is never
//     later than the moment etcd expires the lease.
//  2. etcd deletes A's keys at expiry (revision D); no commit of A can
//     succeed after D, because each reads A's session key (the fence).
//  3. A survivor that sees the deletion waits until its lease mirror has
//     applied everything up to D (Config.CaughtUp), then answers A's
//     buckets. So no bucket has two answering owners, and the survivor knows
//     every lease A ever committed.
//
// When A comes back it opens a new session; the others drop its primary
// buckets as soon as they see it, and A answers them after HandBack.
package ha

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ztpd/ztpd/internal/core"
)

// Buckets is the number of load-balancing buckets (RFC 3074).
const Buckets = 256

// SessionSetting is the settings name (meta bucket) of an appliance's
// session key; its value is the session's lease ID.
func SessionSetting(name string) string { return "ha-session/" + name }

// Info is what an appliance publishes about itself.
type Info struct {
	Name string `json:"name"`
	// PeerURL is where the other appliances fetch image blobs from it.
	PeerURL string    `json:"peer_url,omitempty"`
	Started time.Time `json:"started"`
}

// Config configures Start.
type Config struct {
	Client *clientv3.Client
	// Prefix is the store's key prefix (etcdstore's): the session keys live
	// in its meta bucket.
	Prefix string
	// Name is this appliance; Members every appliance, in the configured
	// order (bucket b's primary is Members[b % len(Members)]).
	Name    string
	Members []string
	// TTL of the session (default 5 s, at least 2 s): the bound on how
	// long a dead appliance's buckets go unanswered.
	TTL time.Duration
	// HandBack is how long a returning appliance waits before answering its
	// buckets again, so the others have seen it (default 1 s).
	HandBack time.Duration
	Info     Info
	// CaughtUp returns once everything committed up to rev has been
	// applied locally (the DHCP lease mirror); buckets and claims taken
	// from another appliance are used only after it.
	CaughtUp func(ctx context.Context, rev int64) error
	Log      *slog.Logger
	// Registerer takes the coordinator's metrics (nil: kept, not exported).
	Registerer prometheus.Registerer
}

// Coordinator is this appliance's part in the group.
type Coordinator struct {
	cfg     Config
	cli     *clientv3.Client
	log     *slog.Logger
	metrics *metrics
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu sync.RWMutex
	// session
	lease    clientv3.LeaseID
	deadline time.Time // our session is certainly alive until then
	// what we see
	live   map[string]bool // sessions alive
	infos  map[string]Info
	claims map[string]string // claim name -> holder
	leader string
	// what we hold
	owned    [Buckets]bool
	held     map[string]bool
	isLeader bool
	running  map[string]bool // singletons running here now
	// leaderCh is closed when leadership is lost (replaced each term)
	leaderCh chan struct{}
	changed  chan struct{} // closed and replaced on every change

	closed   sync.Once
	closeErr error
}

// New checks cfg; nothing is opened until Run (or Start).
func New(cfg Config) (*Coordinator, error) {
	if cfg.Client == nil || cfg.Name == "" {
		return nil, errors.New("ha: client and name are required")
	}
	if !slices.Contains(cfg.Members, cfg.Name) {
		return nil, fmt.Errorf("ha: appliance %q is not among the members %v", cfg.Name, cfg.Members)
	}
	if cfg.TTL == 0 {
		cfg.TTL = 5 * time.Second
	}
	if cfg.TTL < 2*time.Second {
		cfg.TTL = 2 * time.Second
	}
	if cfg.HandBack == 0 {
		cfg.HandBack = time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Info.Name == "" {
		cfg.Info.Name = cfg.Name
	}
	if cfg.Info.Started.IsZero() {
		cfg.Info.Started = time.Now().UTC()
	}
	if !strings.HasSuffix(cfg.Prefix, "/") {
		cfg.Prefix += "/"
	}
	c := &Coordinator{cfg: cfg, cli: cfg.Client, log: cfg.Log, metrics: newMetrics(cfg.Registerer), live: map[string]bool{}, infos: map[string]Info{},
		claims: map[string]string{}, held: map[string]bool{}, leaderCh: make(chan struct{}), changed: make(chan struct{})}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

// Start is New, then the session opened and the group followed; it
// returns once the session exists (buckets follow within HandBack).
func Start(ctx context.Context, cfg Config) (*Coordinator, error) {
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if _, err := c.openSession(ctx); err != nil {
		c.cancel()
		return nil, err
	}
	c.begin()
	return c, nil
}

func (c *Coordinator) begin() {
	c.wg.Add(3)
	go c.keepAlive()
	go c.follow()
	go c.campaign()
}

// Name implements the app's Runner.
func (c *Coordinator) Name() string { return "ha" }

// Run opens the session (retrying while etcd cannot be reached), follows
// the group until ctx ends, then gives everything up (Close).
func (c *Coordinator) Run(ctx context.Context) error {
	for {
		octx, cancel := context.WithTimeout(ctx, c.cfg.TTL)
		_, err := c.openSession(octx)
		cancel()
		if err == nil {
			break
		}
		c.log.Warn("appliance session not opened yet; retrying", "appliance", c.cfg.Name, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
	c.begin()
	<-ctx.Done()
	return c.Close()
}

// Session is this appliance's session while it is certainly alive, else
// 0. Work decided under one session is committed only under that session
// (Fence): an appliance that lost its session and opened another drops
// what it decided before instead of committing it late.
func (c *Coordinator) Session() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !time.Now().Before(c.deadline) {
		return 0
	}
	return int64(c.lease)
}

// Fence fails unless session is this appliance's live session and its
// session key holds it in tx: a commit that calls it cannot succeed once
// that session expired (the store compares what a transaction read when it
// commits), also when the transaction is rerun after a new session opened.
func (c *Coordinator) Fence(tx core.Tx, session int64) error {
	if session == 0 {
		return errors.New("appliance session not alive")
	}
	switch cur := c.Session(); {
	case cur == 0:
		return errors.New("appliance session not alive")
	case cur != session:
		return errors.New("appliance session replaced by a newer one")
	}
	v, ok, err := tx.Settings().Get(SessionSetting(c.cfg.Name))
	if err != nil {
		return err
	}
	if !ok || v != strconv.FormatInt(session, 16) {
		return errors.New("appliance session expired in the store")
	}
	return nil
}

// Keys under the store prefix.
func (c *Coordinator) sessionKey(name string) string {
	return c.cfg.Prefix + "meta/" + SessionSetting(name)
}
func (c *Coordinator) sessionDir() string         { return c.cfg.Prefix + "meta/" + SessionSetting("") }
func (c *Coordinator) infoKey(name string) string { return c.cfg.Prefix + "_ha/info/" + name }
func (c *Coordinator) claimDir() string           { return c.cfg.Prefix + "_ha/claims/" }
func (c *Coordinator) leaderKey() string          { return c.cfg.Prefix + "_ha/leader" }

// SessionValue is the fence's expected value: the session key holds it
// while this appliance's session lives.
func (c *Coordinator) SessionValue() string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return sessionValue(c.lease)
}

func sessionValue(id clientv3.LeaseID) string {
	raw, _ := json.Marshal(strconv.FormatInt(int64(id), 16))
	return string(raw)
}

// openSession grants a lease and writes the session and info keys on it;
// it returns the revision of that write.
func (c *Coordinator) openSession(ctx context.Context) (int64, error) {
	ttl := int64(c.cfg.TTL / time.Second)
	sent := time.Now()
	g, err := c.cli.Grant(ctx, ttl)
	if err != nil {
		return 0, fmt.Errorf("ha: open session: %w", err)
	}
	info, _ := json.Marshal(c.cfg.Info)
	resp, err := c.cli.Txn(ctx).Then(
		clientv3.OpPut(c.sessionKey(c.cfg.Name), sessionValue(g.ID), clientv3.WithLease(g.ID)),
		clientv3.OpPut(c.infoKey(c.cfg.Name), string(info), clientv3.WithLease(g.ID)),
	).Commit()
	if err != nil {
		c.cli.Revoke(context.Background(), g.ID)
		return 0, fmt.Errorf("ha: open session: %w", err)
	}
	c.mu.Lock()
	c.lease = g.ID
	c.deadline = sent.Add(time.Duration(g.TTL) * time.Second)
	c.mu.Unlock()
	c.metrics.sessionValid.Set(1)
	c.log.Info("appliance session opened", "appliance", c.cfg.Name, "ttl", c.cfg.TTL)
	return resp.Header.Revision, nil
}

// Alive reports whether this appliance's session is certainly alive now.
func (c *Coordinator) Alive() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return time.Now().Before(c.deadline)
}

// keepAlive renews the session every TTL/3 and reopens it when it was
// lost. Nothing is answered between the deadline and a new session.
func (c *Coordinator) keepAlive() {
	defer c.wg.Done()
	every := c.cfg.TTL / 3
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(every):
		}
		c.mu.RLock()
		id := c.lease
		c.mu.RUnlock()
		sent := time.Now()
		ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(c.ctx), every)
		resp, err := c.cli.KeepAliveOnce(ctx, id)
		cancel()
		if err == nil && resp.TTL > 0 {
			c.mu.Lock()
			c.deadline = sent.Add(time.Duration(resp.TTL) * time.Second)
			c.mu.Unlock()
			c.metrics.sessionValid.Set(1)
			continue
		}
		if c.ctx.Err() != nil {
			return
		}
		if c.Alive() {
			continue // a missed renewal; the deadline still holds
		}
		c.lost(err)
		ctx, cancel = context.WithTimeout(c.ctx, c.cfg.TTL)
		rev, err := c.openSession(ctx)
		if err != nil {
			c.log.Warn("appliance session lost; answering nothing until it is back", "appliance", c.cfg.Name, "err", err)
		}
		cancel()
		// Buckets come back only once the lease mirror has applied what
		// the others committed while this appliance was away (everything
		// before its new session key), not merely after HandBack.
		c.recompute(rev)
	}
}

// lost drops everything the session held.
func (c *Coordinator) lost(err error) {
	c.mu.Lock()
	had := c.countOwned()
	c.dropLocked()
	c.mu.Unlock()
	c.log.Warn("appliance session expired: stopped answering DHCP and running singletons", "appliance", c.cfg.Name,
		"buckets_dropped", had, "err", err)
}

// dropLocked gives up, in this process, every bucket, claim and the
// leadership (the session's keys in etcd are the caller's business).
func (c *Coordinator) dropLocked() {
	c.owned = [Buckets]bool{}
	clear(c.held)
	c.loseLeadershipLocked()
	c.notifyLocked()
	c.metrics.sessionValid.Set(0)
	c.metrics.bucketsOwned.Set(0)
	c.metrics.claimsHeld.Set(0)
}

func (c *Coordinator) countOwned() int {
	n := 0
	for _, o := range c.owned {
		if o {
			n++
		}
	}
	return n
}

// follow keeps the view of sessions, infos, claims and the leader, from
// one watch over the prefix's HA keys.
func (c *Coordinator) follow() {
	defer c.wg.Done()
	for c.ctx.Err() == nil {
		rev, err := c.loadView()
		if err != nil {
			c.log.Warn("ha: reading the group failed; retrying", "err", err)
			select {
			case <-c.ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		c.recompute(rev)
		c.watchView(rev)
	}
}

// loadView reads the whole HA state at one revision.
func (c *Coordinator) loadView() (int64, error) {
	ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
	defer cancel()
	sess, err := c.cli.Get(ctx, c.sessionDir(), clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	rev := sess.Header.Revision
	rest, err := c.cli.Get(ctx, c.cfg.Prefix+"_ha/", clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.live)
	clear(c.infos)
	clear(c.claims)
	c.leader = ""
	for _, kv := range append(sess.Kvs, rest.Kvs...) {
		c.applyLocked(string(kv.Key), kv.Value, false)
	}
	return rev, nil
}

func (c *Coordinator) watchView(rev int64) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(c.ctx))
	defer cancel()
	sess := c.cli.Watch(ctx, c.sessionDir(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	ha := c.cli.Watch(ctx, c.cfg.Prefix+"_ha/", clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for {
		var resp clientv3.WatchResponse
		var ok bool
		select {
		case resp, ok = <-sess:
		case resp, ok = <-ha:
		}
		if !ok || resp.Err() != nil || resp.Canceled {
			return // reload the view
		}
		c.mu.Lock()
		for _, ev := range resp.Events {
			c.applyLocked(string(ev.Kv.Key), ev.Kv.Value, ev.Type == clientv3.EventTypeDelete)
		}
		c.mu.Unlock()
		c.recompute(resp.Header.Revision)
	}
}

// applyLocked updates the view with one key.
func (c *Coordinator) applyLocked(key string, value []byte, deleted bool) {
	switch {
	case strings.HasPrefix(key, c.sessionDir()):
		name := strings.TrimPrefix(key, c.sessionDir())
		if deleted {
			delete(c.live, name)
		} else {
			c.live[name] = true
		}
	case strings.HasPrefix(key, c.cfg.Prefix+"_ha/info/"):
		name := strings.TrimPrefix(key, c.cfg.Prefix+"_ha/info/")
		var in Info
		if deleted || json.Unmarshal(value, &in) != nil {
			delete(c.infos, name)
		} else {
			c.infos[name] = in
		}
	case strings.HasPrefix(key, c.claimDir()):
		name := strings.TrimPrefix(key, c.claimDir())
		if deleted {
			delete(c.claims, name)
			delete(c.held, name)
		} else {
			c.claims[name] = string(value)
		}
	case key == c.leaderKey():
		if deleted {
			c.leader = ""
		} else {
			c.leader = string(value)
		}
		if c.isLeader && c.leader != c.cfg.Name {
			c.loseLeadershipLocked()
		}
		c.notifyLocked()
	}
}

// Primary is bucket b's owner while everyone is alive.
func Primary(members []string, b int) string { return members[b%len(members)] }

// Owner is bucket b's owner given who is alive: its primary, else the
// live member that ranks it highest (rendezvous hashing), so the buckets of
// a dead appliance spread over the survivors and every appliance that sees
// the same live set computes the same owners.
func Owner(members []string, live map[string]bool, b int) string {
	if p := Primary(members, b); live[p] {
		return p
	}
	best, bestScore := "", uint64(0)
	for _, m := range members {
		if !live[m] {
			continue
		}
		h := fnv.New64a()
		fmt.Fprintf(h, "%s/%d", m, b)
		if s := mix(h.Sum64()); best == "" || s > bestScore {
			best, bestScore = m, s
		}
	}
	return best
}

// mix is splitmix64's finalizer: FNV's sums of names that differ in one
// byte stay ordered alike across buckets, which would hand every bucket of
// a dead appliance to the same survivor.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// recompute derives the buckets this appliance answers from the live set
// seen at rev. Buckets it gains are answered only once the lease mirror has
// caught up with rev; buckets of its own returning from another appliance
// wait HandBack too.
func (c *Coordinator) recompute(rev int64) {
	c.mu.Lock()
	alive := time.Now().Before(c.deadline)
	live := make(map[string]bool, len(c.live))
	for n := range c.live {
		live[n] = true
	}
	var gain []int
	var lose int
	for b := 0; b < Buckets; b++ {
		mine := alive && live[c.cfg.Name] && Owner(c.cfg.Members, live, b) == c.cfg.Name
		switch {
		case mine && !c.owned[b]:
			gain = append(gain, b)
		case !mine && c.owned[b]:
			c.owned[b] = false
			lose++
		}
	}
	c.metrics.membersLive.Set(float64(len(live)))
	if lose > 0 {
		c.notifyLocked()
		c.metrics.bucketsOwned.Set(float64(c.countOwned()))
		c.log.Info("DHCP buckets handed over", "appliance", c.cfg.Name, "dropped", lose, "live", sortedNames(live))
	}
	c.mu.Unlock()
	if len(gain) == 0 {
		return
	}
	c.wg.Add(1)
	go c.acquire(gain, rev, live)
}

// acquire starts answering buckets after the mirror caught up (and after
// HandBack when they come back to their primary).
func (c *Coordinator) acquire(gain []int, rev int64, seen map[string]bool) {
	defer c.wg.Done()
	start := time.Now()
	for c.cfg.CaughtUp != nil && rev > 0 {
		ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
		err := c.cfg.CaughtUp(ctx, rev)
		cancel()
		if err == nil {
			break
		}
		if c.ctx.Err() != nil {
			return
		}
		c.log.Warn("ha: lease mirror has not caught up yet; buckets wait", "rev", rev, "err", err)
	}
	returning := false
	for _, b := range gain {
		if Primary(c.cfg.Members, b) == c.cfg.Name {
			returning = true
		}
	}
	if returning {
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(c.cfg.HandBack):
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !time.Now().Before(c.deadline) || !c.live[c.cfg.Name] {
		return
	}
	n, from := 0, map[string]int{}
	for _, b := range gain {
		// Still ours under the current view?
		if Owner(c.cfg.Members, c.live, b) != c.cfg.Name || c.owned[b] {
			continue
		}
		c.owned[b] = true
		n++
		if p := Primary(c.cfg.Members, b); p != c.cfg.Name {
			from[p]++
			c.metrics.takeovers.Inc()
		}
	}
	if n == 0 {
		return
	}
	c.notifyLocked()
	c.metrics.bucketsOwned.Set(float64(c.countOwned()))
	c.log.Info("DHCP buckets answered", "appliance", c.cfg.Name, "gained", n, "taken_over_from", from,
		"waited", time.Since(start).Round(time.Millisecond), "live", sortedNames(seen))
}

func sortedNames(m map[string]bool) []string {
	var out []string
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (c *Coordinator) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// Changed is closed at the next change of what this appliance holds.
func (c *Coordinator) Changed() <-chan struct{} {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.changed
}

// Serves reports whether this appliance answers bucket b now.
func (c *Coordinator) Serves(b uint8) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.owned[b] && time.Now().Before(c.deadline)
}

// Owned lists the buckets this appliance answers now.
func (c *Coordinator) Owned() []int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !time.Now().Before(c.deadline) {
		return nil
	}
	var out []int
	for b, o := range c.owned {
		if o {
			out = append(out, b)
		}
	}
	return out
}

// Claim takes name (an address block) for this appliance if nobody holds
// it; the claim lives as long as the session. It returns once the lease
// mirror has caught up with the claim, so the block's leases are all known.
func (c *Coordinator) Claim(ctx context.Context, name string) (bool, error) {
	c.mu.RLock()
	id, alive := c.lease, time.Now().Before(c.deadline)
	holder, taken := c.claims[name]
	c.mu.RUnlock()
	if !alive {
		return false, errors.New("ha: session not alive")
	}
	if taken && holder != c.cfg.Name {
		return false, nil
	}
	key := c.claimDir() + name
	resp, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, c.cfg.Name, clientv3.WithLease(id))).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return false, fmt.Errorf("ha: claim %s: %w", name, err)
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || string(kvs[0].Value) != c.cfg.Name || kvs[0].Lease != int64(id) {
			return false, nil
		}
	} else if c.cfg.CaughtUp != nil {
		if err := c.cfg.CaughtUp(ctx, resp.Header.Revision); err != nil {
			return false, err
		}
	}
	c.mu.Lock()
	c.claims[name] = c.cfg.Name
	c.held[name] = true
	c.metrics.claimsHeld.Set(float64(len(c.held)))
	c.mu.Unlock()
	return true, nil
}

// Holds reports whether this appliance holds claim name now.
func (c *Coordinator) Holds(name string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.held[name] && time.Now().Before(c.deadline)
}

// Holder is who holds claim name, as this appliance sees it.
func (c *Coordinator) Holder(name string) (string, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	h, ok := c.claims[name]
	return h, ok
}

// IsLive reports whether appliance name's session is alive, as this one
// sees it. An appliance that cannot see the group answers false for
// everyone but itself, so callers act on it only as the leader.
func (c *Coordinator) IsLive(name string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.live[name]
}

// Peers are the other live appliances' published infos.
func (c *Coordinator) Peers() []Info {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []Info
	for n, in := range c.infos {
		if n != c.cfg.Name && c.live[n] {
			out = append(out, in)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Status is what /healthz and the CLI show.
type Status struct {
	Appliance string   `json:"appliance"`
	Alive     bool     `json:"session_alive"`
	Live      []string `json:"live"`
	Buckets   int      `json:"buckets"`
	// Owned lists the buckets (0-255) this appliance answers.
	Owned    []int  `json:"owned_buckets"`
	Leader   string `json:"leader"`
	IsLeader bool   `json:"is_leader"`
	// Singletons lists the singletons running on this appliance now.
	Singletons []string `json:"singletons"`
	Claims     int      `json:"claims"`
}

// Status reports what this appliance holds and sees.
func (c *Coordinator) Status() Status {
	c.mu.RLock()
	defer c.mu.RUnlock()
	alive := time.Now().Before(c.deadline)
	st := Status{Appliance: c.cfg.Name, Alive: alive, Live: sortedNames(c.live), Leader: c.leader,
		IsLeader: c.isLeader && alive, Claims: len(c.held), Owned: []int{}, Singletons: append([]string{}, sortedNames(c.running)...)}
	if alive {
		for b, o := range c.owned {
			if o {
				st.Owned = append(st.Owned, b)
			}
		}
		st.Buckets = len(st.Owned)
	}
	return st
}

// Kill stops following and renewing without giving anything up, as a
// kill -9 of the appliance would: the others take over once the session
// expires. For fault tests.
func (c *Coordinator) Kill() { c.stop() }

// stop ends the loops and drops everything held, returning the session's
// lease (still alive in etcd).
func (c *Coordinator) stop() clientv3.LeaseID {
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked()
	c.deadline = time.Time{}
	return c.lease
}

// Close gives everything up at once (the lease is revoked), so the others
// take over without waiting for the TTL: a graceful stop.
func (c *Coordinator) Close() error {
	c.closed.Do(c.close)
	return c.closeErr
}

func (c *Coordinator) close() {
	id := c.stop()
	if id == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := c.cli.Revoke(ctx, id); err != nil {
		c.closeErr = fmt.Errorf("ha: give up session: %w", err)
	}
}

// metrics are the coordinator's metrics.
type metrics struct {
	bucketsOwned     prometheus.Gauge
	leaderGauge      prometheus.Gauge
	membersLive      prometheus.Gauge
	sessionValid     prometheus.Gauge
	takeovers        prometheus.Counter
	claimsHeld       prometheus.Gauge
	singletonRunning *prometheus.GaugeVec
}

// newMetrics registers the metrics on reg (nil: kept, not exported).
func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		bucketsOwned: f.NewGauge(prometheus.GaugeOpts{Name: "ztpd_ha_buckets_owned",
			Help: "DHCP load-balancing buckets (of 256) this appliance answers now."}),
		leaderGauge: f.NewGauge(prometheus.GaugeOpts{Name: "ztpd_ha_leader",
			Help: "1 while this appliance runs the singletons (cluster watch, rollouts, retention)."}),
		membersLive: f.NewGauge(prometheus.GaugeOpts{Name: "ztpd_ha_members_live",
			Help: "Appliances whose session is alive, as this one sees them."}),
		sessionValid: f.NewGauge(prometheus.GaugeOpts{Name: "ztpd_ha_session_valid",
			Help: "1 while this appliance's session is known to be alive."}),
		takeovers: f.NewCounter(prometheus.CounterOpts{Name: "ztpd_ha_takeovers_total",
			Help: "Buckets this appliance took over from another."}),
		claimsHeld: f.NewGauge(prometheus.GaugeOpts{Name: "ztpd_ha_claims_held",
			Help: "Claims (DHCP address blocks) this appliance holds."}),
		singletonRunning: f.NewGaugeVec(prometheus.GaugeOpts{Name: "ztpd_ha_singleton_running",
			Help: "1 while this appliance runs the singleton (cluster watch, retention, ...), else 0."}, []string{"singleton"}),
	}
}
