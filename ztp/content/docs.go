package content

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/ztpd/ztpd/internal/profile"
	"github.com/ztpd/ztpd/ztp/endpoints"
)

// KubeMaster is the API server a SONiC switch joining by the SONiC method
// writes into config_db's KUBERNETES_MASTER|SERVER.
type KubeMaster struct {
	Host     string // address or DNS name
	Port     int    // default 6443
	Insecure bool
}

// ZTPInput is what a ztp.json needs besides the rendered profile.
type ZTPInput struct {
	DeviceID        string
	BaseURL         string         // http://<advertise>:<port>
	ReportedVersion string         // SONiC-VERSION header ("SONiC.202405.1", "N.A" or "")
	FirmwareURL     string         // where the profile's SONiC image is served
	Join            map[string]any // join section from the JoinProvider, nil for none
}

// ConfigURL is the per-device config_db.json URL.
func ConfigURL(baseURL, deviceID string) string {
	return baseURL + endpoints.ZTPConfigPath + deviceID + "/config_db.json"
}

// NeedsFirmware reports whether the switch must install the profile's image:
// always when its version is unknown (the firmware plugin itself skips an
// image that is already installed), otherwise when the versions differ.
func NeedsFirmware(r *profile.Result, reported string) bool {
	if r.SONiC == nil {
		return false
	}
	have := profile.BuildVersion(reported)
	return have == "" || have != r.SONiC.Version
}

// BuildZTPJSON renders the ztp.json document: sections in the order the
// switch must run them (firmware, configdb-json, the profile's own sections,
// join), numbered with zero-padded prefixes because SONiC runs sections in
// plain string order.
func BuildZTPJSON(r *profile.Result, in ZTPInput) ([]byte, error) {
	type sec struct {
		name string
		body map[string]any
	}
	var secs []sec
	if NeedsFirmware(r, in.ReportedVersion) {
		if in.FirmwareURL == "" {
			return nil, fmt.Errorf("profile %q: no URL for SONiC %s", r.Profile, r.SONiC.Version)
		}
		install := map[string]any{
			"url":         map[string]any{"source": in.FirmwareURL},
			"version":     r.SONiC.InstallerVersion(),
			"set-default": r.SONiC.SetDefault,
		}
		if r.SONiC.SkipReboot {
			install["skip-reboot"] = true
		}
		secs = append(secs, sec{"firmware", map[string]any{"install": install}})
	}
	hasConfig := r.ConfigMode != profile.ModeNone
	if hasConfig {
		body := map[string]any{"url": map[string]any{"source": ConfigURL(in.BaseURL, in.DeviceID)}}
		if r.ConfigMode == profile.ModeMerge {
			// A partial config is merged into the factory one and saved, so
			// /etc/sonic/config_db.json exists when ZTP ends.
			body["clear-config"] = false
			body["save-config"] = true
		}
		secs = append(secs, sec{"configdb-json", body})
	}
	for _, s := range r.Sections {
		secs = append(secs, sec{s.Name, s.Data})
	}
	if in.Join != nil {
		secs = append(secs, sec{"join", in.Join})
	}
	width := 2
	if len(secs) > 99 {
		width = len(strconv.Itoa(len(secs)))
	}
	ztp := make(map[string]any, len(secs)+4)
	for i, s := range secs {
		n := strconv.Itoa(i + 1)
		for len(n) < width {
			n = "0" + n
		}
		ztp[n+"-"+s.name] = s.body
	}
	for k, v := range r.ZTPOptions {
		ztp[k] = v
	}
	ztp["ztp-json-version"] = "1.0"
	if !hasConfig {
		// Without a configdb-json section /etc/sonic/config_db.json may never
		// appear, and the default (true) would restart ZTP every 5 minutes.
		ztp["restart-ztp-no-config"] = false
	}
	b, err := appendJSON(make([]byte, 0, 1024), map[string]any{"ztp": ztp}, "  ", 0)
	if err != nil {
		return nil, fmt.Errorf("profile %q: encode ztp.json: %w", r.Profile, err)
	}
	return append(b, '\n'), nil
}

// BuildConfigDB renders config_db.json: the profile's template (if any) with
// DEVICE_METADATA|localhost hostname, MGMT_INTERFACE and, for switches that
// join by the SONiC method, KUBERNETES_MASTER|SERVER set over it.
func BuildConfigDB(r *profile.Result, f *profile.Facts, km *KubeMaster) ([]byte, error) {
	doc := r.ConfigDB
	if doc == nil {
		doc = map[string]any{}
	}
	entry := func(table, key string) (map[string]any, error) {
		t, ok := doc[table].(map[string]any)
		if !ok {
			if doc[table] != nil {
				return nil, fmt.Errorf("profile %q: config_db table %s is not an object", r.Profile, table)
			}
			t = map[string]any{}
			doc[table] = t
		}
		e, ok := t[key].(map[string]any)
		if !ok {
			if t[key] != nil {
				return nil, fmt.Errorf("profile %q: config_db entry %s|%s is not an object", r.Profile, table, key)
			}
			e = map[string]any{}
			t[key] = e
		}
		return e, nil
	}
	lh, err := entry("DEVICE_METADATA", "localhost")
	if err != nil {
		return nil, err
	}
	lh["hostname"] = r.Hostname
	if _, set := lh["hwsku"]; !set && r.HWSKU != "" {
		lh["hwsku"] = r.HWSKU
	}
	if _, set := lh["platform"]; !set && f.Platform != "" {
		lh["platform"] = f.Platform
	}
	if m := r.Mgmt; m != nil && m.IP != "" {
		if t, ok := doc["MGMT_INTERFACE"].(map[string]any); ok {
			for k := range t { // one address per interface: the profile's wins
				if strings.HasPrefix(k, m.Interface+"|") {
					delete(t, k)
				}
			}
		}
		e, err := entry("MGMT_INTERFACE", m.Interface+"|"+m.CIDR())
		if err != nil {
			return nil, err
		}
		if m.Gateway != "" {
			e["gwaddr"] = m.Gateway
		}
	}
	if km != nil {
		port := km.Port
		if port == 0 {
			port = 6443
		}
		e, err := entry("KUBERNETES_MASTER", "SERVER")
		if err != nil {
			return nil, err
		}
		e["ip"] = km.Host
		e["port"] = strconv.Itoa(port)
		e["insecure"] = strconv.FormatBool(km.Insecure)
		e["disable"] = "false"
	}
	b, err := appendJSON(make([]byte, 0, 2048), doc, "    ", 0)
	if err != nil {
		return nil, fmt.Errorf("profile %q: encode config_db.json: %w", r.Profile, err)
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("profile %q: config_db.json is not valid JSON", r.Profile)
	}
	return append(b, '\n'), nil
}
