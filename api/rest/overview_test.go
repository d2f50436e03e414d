package rest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/api/internal/apitest"
	"github.com/ztpd/ztpd/internal/core"
)

// raPools is a fixed pool report (the DHCP server's in ztpd serve).
type raPools []client.PoolUse

func (p raPools) Pools() []client.PoolUse { return p }

// raEvent appends an event of the device stream at t.
func raEvent(t *testing.T, e *env, typ, device, cluster string, at time.Time) {
	t.Helper()
	err := e.st.Update(func(tx core.Tx) error {
		_, err := tx.Events().Append(core.Event{Time: at, Type: typ, Device: device, Cluster: cluster, Message: typ})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRESTOverview(t *testing.T) {
	e, _, _, mine, theirs, _ := tenancyEnv(t)
	apitest.Seed(t, e.st, 20) // 20 leased devices in no cluster: 7 VMs, 13 SONiC
	pools := raPools{{Name: "lab", Subnet: "10.99.1.0/24", RangeStart: "10.99.1.100", RangeEnd: "10.99.1.199", Size: 100, Used: 20, Reserved: 2, Free: 78}}
	e.srv.console.pools = pools
	e.srv.console.warnings = func() []string { return []string{"no device profiles are loaded"} }
	now := time.Now().UTC()
	raEvent(t, e, "member.joined", "02:00:00:00:0a:01", mine.ID, now.Add(-61*time.Minute)) // before the hour: not counted
	raEvent(t, e, "member.joined", "02:00:00:00:0a:01", mine.ID, now.Add(-7*time.Minute))
	raEvent(t, e, "member.joined", "02:00:00:00:0b:01", theirs.ID, now.Add(-time.Minute))
	raEvent(t, e, "join.issued", "02:00:00:00:0b:01", theirs.ID, now.Add(-time.Minute))
	for i := range 12 {
		raEvent(t, e, "dhcp.ack", fmt.Sprintf("02:00:00:00:00:%02x", i), "", now)
	}

	var ov client.Overview
	a := e.rest(e.admin.APIKey, e.adminSec)
	r := a.Do("GET", "/api/v1/overview", nil)
	if r.Status != 200 {
		t.Fatalf("overview: %d %s", r.Status, r.Raw)
	}
	r.Decode(t, &ov)
	d := ov.Devices
	if d.Total != 22 || d.ByState["leased"] != 20 || d.ByState["joined"] != 2 || d.ByKind["vm"] != 9 || d.ByKind["sonic"] != 13 || d.Unmatched != 0 {
		t.Errorf("devices: %+v", d)
	}
	ob := ov.Onboarding
	if ob.BucketSeconds != 300 || len(ob.Joined) != 12 || ob.Joined[10] != 1 || ob.Joined[11] != 1 || sum(ob.Joined) != 2 {
		t.Errorf("onboarding: %+v", ob)
	}
	if from := now.Add(-time.Hour); ob.From.Sub(from).Abs() > 5*time.Second {
		t.Errorf("onboarding from %s, want about %s", ob.From, from)
	}
	if len(ov.Events) != 10 || ov.Events[0].Seq < ov.Events[9].Seq || ov.Events[0].Type != "dhcp.ack" {
		t.Errorf("events: %d, newest first? %+v", len(ov.Events), ov.Events)
	}
	if len(ov.Pools) != 1 || ov.Pools[0] != pools[0] {
		t.Errorf("pools: %+v", ov.Pools)
	}
	if len(ov.Clusters) != 3 {
		t.Errorf("admin sees %d clusters: %+v", len(ov.Clusters), ov.Clusters)
	}
	for _, c := range ov.Clusters {
		if c.ID == mine.ID && (c.MembersReady != 1 || c.MembersDesired != mine.ControlNodes+mine.Size) {
			t.Errorf("cluster %s: %+v (size %d+%d)", c.Name, c, mine.ControlNodes, mine.Size)
		}
	}
	if len(ov.Warnings) != 1 {
		t.Errorf("warnings: %q", ov.Warnings)
	}

	// A user key: its account's cluster, device and events only.
	u := e.rest(e.user.APIKey, e.userSec)
	r = u.Do("GET", "/api/v1/overview", nil)
	if r.Status != 200 {
		t.Fatalf("user overview: %d %s", r.Status, r.Raw)
	}
	ov = client.Overview{}
	r.Decode(t, &ov)
	if ov.Devices.Total != 1 || ov.Devices.ByState["joined"] != 1 {
		t.Errorf("user devices: %+v", ov.Devices)
	}
	if len(ov.Clusters) != 1 || ov.Clusters[0].ID != mine.ID {
		t.Errorf("user clusters: %+v", ov.Clusters)
	}
	// Warnings name every account's profiles, clusters and images.
	if len(ov.Warnings) != 0 {
		t.Errorf("user sees the appliance's warnings: %q", ov.Warnings)
	}
	if sum(ov.Onboarding.Joined) != 1 || ov.Onboarding.Joined[10] != 1 {
		t.Errorf("user onboarding: %+v", ov.Onboarding)
	}
	for _, ev := range ov.Events {
		if ev.Cluster != mine.ID && ev.Fields["account"] != e.user.Account {
			t.Errorf("user sees event %+v", ev)
		}
	}
	if strings.Contains(string(r.Raw), theirs.ID) {
		t.Errorf("user overview names another account's cluster: %s", r.Raw)
	}
}

func sum(n []int) int {
	s := 0
	for _, v := range n {
		s += v
	}
	return s
}

func TestRESTPoolsWarningsAndConfig(t *testing.T) {
	e := newEnv(t, envOpts{})
	a, u := e.rest(e.admin.APIKey, e.adminSec), e.rest(e.user.APIKey, e.userSec)
	// Without DHCP: no pools, no warnings, an empty configuration.
	for path, want := range map[string]string{"/api/v1/pools": "[]", "/api/v1/warnings": "[]", "/api/v1/settings/config": "{}"} {
		if r := a.Do("GET", path, nil); r.Status != 200 || strings.TrimSpace(string(r.Raw)) != want {
			t.Errorf("%s: %d %s, want %s", path, r.Status, r.Raw, want)
		}
	}
	e.srv.console.pools = raPools{{Name: "lab", Subnet: "10.99.1.0/24", RangeStart: "10.99.1.10", RangeEnd: "10.99.1.20", Size: 11, Free: 11}}
	var pools []client.PoolUse
	r := u.Do("GET", "/api/v1/pools", nil)
	r.Decode(t, &pools)
	if r.Status != 200 || len(pools) != 1 || pools[0].Free != 11 {
		t.Errorf("pools: %d %s", r.Status, r.Raw)
	}
	// Warnings are computed on each call.
	n := 0
	e.srv.console.warnings = func() []string { n++; return []string{fmt.Sprintf("warning %d", n)} }
	for i := 1; i <= 2; i++ {
		var w []string
		r := a.Do("GET", "/api/v1/warnings", nil)
		r.Decode(t, &w)
		if len(w) != 1 || w[0] != fmt.Sprintf("warning %d", i) {
			t.Errorf("warnings call %d: %s", i, r.Raw)
		}
	}
	if r := u.Do("GET", "/api/v1/warnings", nil); r.Status != 403 {
		t.Errorf("user reads the warnings: %d %s", r.Status, r.Raw)
	}
	e.srv.console.config = func() any { return map[string]any{"data_dir": "/var/lib/ztpd", "api": map[string]any{"addr": ":8443"}} }
	if r := u.Do("GET", "/api/v1/settings/config", nil); r.Status != 403 {
		t.Errorf("user reads the configuration: %d", r.Status)
	}
	if r := a.Do("GET", "/api/v1/settings/config", nil); r.Status != 200 || !strings.Contains(string(r.Raw), `"data_dir":"/var/lib/ztpd"`) {
		t.Errorf("config: %d %s", r.Status, r.Raw)
	}
}

func TestRESTDeviceSearch(t *testing.T) {
	e := newEnv(t, envOpts{})
	apitest.Seed(t, e.st, 250)
	err := e.st.Update(func(tx core.Tx) error {
		d, err := tx.Devices().Get("02:00:00:00:00:07")
		if err != nil {
			return err
		}
		d.Hostname, d.Product, d.Profile = "Leaf-07", "Accton-AS7326", "leaves"
		return tx.Devices().Put(d)
	})
	if err != nil {
		t.Fatal(err)
	}
	a := e.rest(e.admin.APIKey, e.adminSec)
	for q, want := range map[string]int{
		"sn0001":            10, // serials SN00010..SN00019, any case
		"02:00:00:00:00:0A": 1,  // MAC
		"10.99.2.":          0,
		"10.99.1.25":        2, // 10.99.1.25 and 10.99.1.250
		"leaf-0":            1, // hostname
		"as7326":            1, // product
		"LEAVES":            1, // profile
		"nothing-like-this": 0,
	} {
		r := a.Do("GET", "/api/v1/devices?limit=1000&q="+strings.ReplaceAll(q, ":", "%3A"), nil)
		var p client.Page[client.Device]
		r.Decode(t, &p)
		if r.Status != 200 || len(p.Items) != want {
			t.Errorf("q=%s: %d devices (HTTP %d), want %d", q, len(p.Items), r.Status, want)
		}
	}
}
