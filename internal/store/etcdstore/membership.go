package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

// Replacing an appliance (its disk died, or the box): its etcd member is
// gone for good, and a member started on an empty data directory cannot
// bootstrap the cluster again (the others have moved on). On a surviving
// appliance the operator replaces the dead member (ReplaceMember: remove
// it, add a new one at the same peer URL); the new box, started on an
// empty data directory, finds itself added (peerState) and joins the
// existing cluster, receiving the data from the leader. A member that
// lost its data but is still listed under its name is refused: joining as
// that member would claim a raft log it no longer has.

// MemberInfo is one member of the etcd cluster as `ztpd store member
// list` shows it.
type MemberInfo struct {
	ID       string   `json:"id"`
	Name     string   `json:"name"` // "" until an added member has started
	PeerURLs []string `json:"peer_urls"`
	Started  bool     `json:"started"`
	Learner  bool     `json:"learner,omitempty"`
}

// Members lists the cluster's members.
func Members(ctx context.Context, cli *clientv3.Client) ([]MemberInfo, error) {
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("etcd member list: %w", err)
	}
	var out []MemberInfo
	for _, m := range resp.Members {
		out = append(out, MemberInfo{ID: fmt.Sprintf("%x", m.ID), Name: m.Name, PeerURLs: m.PeerURLs,
			Started: m.Name != "", Learner: m.IsLearner})
	}
	return out, nil
}

// Replaced is what ReplaceMember did.
type Replaced struct {
	Name    string `json:"name"`
	PeerURL string `json:"peer_url"`
	Removed string `json:"removed_id,omitempty"` // "" when no old member was listed
	Added   string `json:"added_id"`
}

// ReplaceMember removes the member called name (or listed at peerURL) and
// adds a new one at peerURL, through cli (a surviving member). The new
// appliance then starts on an empty data directory and joins. Replacing
// the member cli talks to is refused, as is a member added but not yet
// started (already replaced: start the new appliance).
func ReplaceMember(ctx context.Context, cli *clientv3.Client, name, peerURL string) (Replaced, error) {
	out := Replaced{Name: name, PeerURL: peerURL}
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return out, fmt.Errorf("etcd member list: %w", err)
	}
	for _, m := range resp.Members {
		if m.Name != name && !slices.Contains(m.PeerURLs, peerURL) {
			continue
		}
		if m.ID == resp.Header.MemberId {
			return out, fmt.Errorf("member %s is the one answering this command: run it on another appliance", name)
		}
		if m.Name == "" {
			return out, fmt.Errorf("member %x at %s was added and has not started yet: start ztpd on %s with an empty data directory", m.ID, peerURL, name)
		}
		if _, err := cli.MemberRemove(ctx, m.ID); err != nil {
			return out, fmt.Errorf("etcd member remove %s (%x): %w", m.Name, m.ID, err)
		}
		out.Removed = fmt.Sprintf("%x", m.ID)
	}
	// etcd adds a voting member only once this member has been connected
	// to every other for its health interval (5 s): a cluster that just
	// (re)started says "unhealthy cluster" for a few seconds.
	var add *clientv3.MemberAddResponse
	for {
		add, err = cli.MemberAdd(ctx, []string{peerURL})
		if err == nil {
			break
		}
		if !errors.Is(err, rpctypes.ErrUnhealthy) {
			return out, fmt.Errorf("etcd member add %s: %w", peerURL, err)
		}
		select {
		case <-ctx.Done():
			return out, fmt.Errorf("etcd member add %s: %w (the remaining members are not all connected)", peerURL, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
	out.Added = fmt.Sprintf("%x", add.Member.ID)
	return out, nil
}

// peerMember is one entry of a member's peer API /members.
type peerMember struct {
	ID         uint64   `json:"id"`
	Name       string   `json:"name"`
	PeerURLs   []string `json:"peerURLs"`
	ClientURLs []string `json:"clientURLs"`
}

// started: the member has run and published itself (a member of the
// initial configuration is named from the start; one added later has no
// name until it runs).
func (m peerMember) started() bool { return len(m.ClientURLs) > 0 }

// hasData reports whether dir holds a member's data (etcd's member/).
func hasData(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "member"))
	return err == nil
}

// peerState decides how a member without data starts: "new" while the
// cluster has never formed (no peer answers, or none has run yet) and for
// a member of the initial configuration that never ran (a first start
// that comes late, as etcd itself bootstraps), "existing" for a member
// added by ReplaceMember. It refuses a running cluster that lists this
// peer URL for a member that has run (its data is gone), or not at all.
func peerState(c MemberConfig) (string, error) {
	var others []string
	for _, n := range names(c.Peers) {
		if n != c.Name {
			others = append(others, c.Peers[n])
		}
	}
	own := c.Peers[c.Name]
	tr, err := transport.NewTransport(transport.TLSInfo{CertFile: c.CertFile, KeyFile: c.KeyFile, TrustedCAFile: c.CAFile}, 3*time.Second)
	if err != nil {
		return "", fmt.Errorf("embedded etcd: peer transport: %w", err)
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 3 * time.Second}
	for _, u := range others {
		ms, err := listPeerMembers(hc, u)
		if err != nil {
			c.Log.Debug("peer does not answer its member list", "peer", u, "err", err)
			continue
		}
		if !slices.ContainsFunc(ms, peerMember.started) {
			return embed.ClusterStateFlagNew, nil // the cluster is still forming
		}
		var listed []string
		for _, m := range ms {
			if !slices.Contains(m.PeerURLs, own) {
				listed = append(listed, fmt.Sprintf("%s %s", nameOr(m.Name), strings.Join(m.PeerURLs, ",")))
				continue
			}
			if m.started() {
				return "", fmt.Errorf("embedded etcd: this appliance (%s) has no etcd data in %s, but the running cluster still lists it as member %x: "+
					"its data is gone, so it must join as a new member. On a surviving appliance run `ztpd store member replace %s`, then start this one again",
					c.Name, c.Dir, m.ID, c.Name)
			}
			if m.Name != "" {
				return embed.ClusterStateFlagNew, nil // a late first start
			}
			c.Log.Info("etcd member joins the running cluster as the member added for it", "member", c.Name, "id", fmt.Sprintf("%x", m.ID), "via", u)
			return embed.ClusterStateFlagExisting, nil
		}
		return "", fmt.Errorf("embedded etcd: the running cluster (members: %s) does not list this appliance's peer URL %s: "+
			"on a surviving appliance run `ztpd store member replace %s`, then start this one again", strings.Join(listed, "; "), own, c.Name)
	}
	return embed.ClusterStateFlagNew, nil
}

func nameOr(n string) string {
	if n == "" {
		return "(not started)"
	}
	return n
}

// listPeerMembers reads a member's peer API /members.
func listPeerMembers(hc *http.Client, peerURL string) ([]peerMember, error) {
	resp, err := hc.Get(strings.TrimSuffix(peerURL, "/") + "/members")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/members: %s", peerURL, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	var ms []peerMember
	if err := json.Unmarshal(body, &ms); err != nil {
		return nil, fmt.Errorf("%s/members: %w", peerURL, err)
	}
	if len(ms) == 0 {
		return nil, errors.New("no members listed")
	}
	return ms, nil
}
