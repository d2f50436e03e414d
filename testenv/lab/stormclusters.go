package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
)

// FirstID is the ID of the first item CloudStack command cmd lists under
// key (listZones/zone, listServiceOfferings/serviceoffering).
func (a *Appliance) FirstID(ctx context.Context, cmd, key string) (string, error) {
	r, err := a.CloudStack(ctx, cmd, nil)
	if err != nil {
		return "", err
	}
	var list []struct{ ID string }
	if err := json.Unmarshal(r[key], &list); err != nil {
		return "", fmt.Errorf("%s: %s: %w", cmd, key, err)
	}
	if len(list) == 0 {
		return "", fmt.Errorf("%s returned nothing", cmd)
	}
	return list[0].ID, nil
}

// CreateStormClusters makes the boot-storm fleet's clusters storm-00 ..
// storm-<n-1> of size workers and 3 control planes each, at Kubernetes
// 1.31.4 (a version record only: no ISO is fetched), over the CloudStack
// API. An external load balancer address gives each cluster its API
// endpoint up front, so switches join without waiting for a VM.
func (a *Appliance) CreateStormClusters(ctx context.Context, n, size int) error {
	v, err := a.CloudStack(ctx, "addKubernetesSupportedVersion", url.Values{
		"semanticversion": {"1.31.4"}, "name": {"v1.31.4"}, "url": {"http://storm.invalid/k8s.iso"}})
	if err != nil {
		return err
	}
	var ver struct{ ID string }
	if err := json.Unmarshal(v["kubernetessupportedversion"], &ver); err != nil || ver.ID == "" {
		return fmt.Errorf("addKubernetesSupportedVersion returned no version: %v", v)
	}
	zone, err := a.FirstID(ctx, "listZones", "zone")
	if err != nil {
		return err
	}
	offering, err := a.FirstID(ctx, "listServiceOfferings", "serviceoffering")
	if err != nil {
		return err
	}
	for c := 0; c < n; c++ {
		if _, err := a.CloudStack(ctx, "createKubernetesCluster", url.Values{
			"name": {fmt.Sprintf("storm-%02d", c)}, "kubernetesversionid": {ver.ID}, "size": {strconv.Itoa(size)},
			"controlnodes": {"3"}, "externalloadbalanceripaddress": {"10.99.0.250"},
			"zoneid": {zone}, "serviceofferingid": {offering}}); err != nil {
			return err
		}
	}
	return nil
}

// CountDevices pages through the REST devices list and counts the devices
// in state ("" for all); the boot storms count the switches whose join
// bundle was issued ("join-issued": their clusters have no Nodes).
func (a *Appliance) CountDevices(ctx context.Context, state string) (int, error) {
	n, cursor := 0, ""
	for {
		q := url.Values{"limit": {"1000"}}
		if state != "" {
			q.Set("state", state)
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Items      []json.RawMessage `json:"items"`
			NextCursor string            `json:"next_cursor"`
		}
		if err := a.REST(ctx, "/api/v1/devices", q, &page); err != nil {
			return 0, err
		}
		n += len(page.Items)
		if page.NextCursor == "" {
			return n, nil
		}
		cursor = page.NextCursor
	}
}
