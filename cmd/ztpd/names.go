package main

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/core"
)

// Names for a person reading: records refer to clusters by ID; tables show
// their names. A command reads the clusters once (visNames), not per row;
// -o json keeps the IDs and adds the names beside them.

// visNames maps cluster IDs to names.
type visNames map[string]string

// visClusterNames lists the clusters the caller may see, once. When that
// fails (a key that may not list clusters), tables fall back to IDs.
func visClusterNames(c *apiClient) visNames {
	var list []client.CSCluster
	if err := c.CSList("listKubernetesClusters", "kubernetescluster", url.Values{"listall": {"true"}}, &list); err != nil {
		return visNames{}
	}
	n := make(visNames, len(list))
	for _, k := range list {
		n[k.ID] = k.Name
	}
	return n
}

// cluster is the name of cluster id, else the id ("" for none).
func (n visNames) cluster(id string) string {
	if name := n[id]; name != "" {
		return name
	}
	return id
}

// visClusterRef turns a --cluster NAME|ID flag into the ID the API filters
// by ("" stays "").
func visClusterRef(c *apiClient, ref string) (string, error) {
	if ref == "" {
		return "", nil
	}
	id, err := clusterID(c, ref)
	if err != nil {
		return "", fmt.Errorf("--cluster: %w", err)
	}
	return id, nil
}

// visDeviceRef turns a device reference (MAC in any notation, or serial
// number) into the device ID events name.
func visDeviceRef(c *apiClient, ref string) (string, error) {
	if mac, err := core.NormalizeMAC(ref); err == nil {
		return mac, nil
	}
	var d client.Device
	if err := c.REST("GET", "/api/v1/devices/"+url.PathEscape(ref), nil, nil, &d); err != nil {
		return "", fmt.Errorf("--device %s: not a MAC address, and %w", ref, err)
	}
	return d.ID, nil
}

// visWhen is a time for a person: local, to the second, with its age.
func visWhen(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05") + " (" + ago(t) + ")"
}

// visSince parses --since: a duration back from now (10m, 2h) or an RFC
// 3339 time.
func visSince(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		if d < 0 {
			return time.Time{}, errors.New("--since: give a positive duration, e.g. 10m")
		}
		return time.Now().Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since %q: give a duration such as 10m or 2h, or a time such as 2026-12-03T10:00:00Z", v)
	}
	return t, nil
}
