package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/ztpd/ztpd/testenv/netns"
)

// SwitchIdentity is what a SONiC switch tells the ZTP server about itself
// in its HTTP headers (sonic-ztp ztp-engine).
type SwitchIdentity struct {
	Serial       string
	Product      string
	BaseMAC      string
	SONiCVersion string // "N.A" when unknown, as sonic-ztp sends it
	Hostname     string
}

// Curl downloads url inside ns the way the SONiC ZTP client does: curl -f
// with its user agent and identity headers. It returns the body.
func Curl(ctx context.Context, ns *netns.NS, dir string, id SwitchIdentity, url string, extra ...string) ([]byte, error) {
	out, err := os.CreateTemp(dir, "dl-*")
	if err != nil {
		return nil, err
	}
	out.Close()
	defer os.Remove(out.Name())
	args := []string{"-f", "-s", "-S", "-o", out.Name(), "-A", "SONiC-ZTP/0.1", "--connect-timeout", "30", "--retry", "3"}
	if id.Serial != "" {
		ver := id.SONiCVersion
		if ver == "" {
			ver = "N.A"
		}
		args = append(args, "-H", "PRODUCT-NAME: "+id.Product, "-H", "SERIAL-NUMBER: "+id.Serial,
			"-H", "BASE-MAC-ADDRESS: "+id.BaseMAC, "-H", "SONiC-VERSION: "+ver)
	}
	args = append(args, extra...)
	args = append(args, "--", url)
	cmd := ns.Command(ctx, "curl", args...)
	msg, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("curl %s: %v: %s", url, err, strings.TrimSpace(string(msg)))
	}
	return os.ReadFile(out.Name())
}

// Fetched is one download a ztp.json walk made.
type Fetched struct {
	Section string
	URL     string
	Body    []byte
}

// WalkZTPJSON downloads ztp.json from url and then every url and
// dynamic-url inside it, section by section in plain string order of the
// section names, as sonic-ztp does. It returns the document and every
// download.
func WalkZTPJSON(ctx context.Context, ns *netns.NS, dir string, id SwitchIdentity, url string) (map[string]any, []Fetched, error) {
	raw, err := Curl(ctx, ns, dir, id, url)
	if err != nil {
		return nil, nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, nil, fmt.Errorf("ztp.json is not JSON: %w", err)
	}
	ztp, ok := doc["ztp"].(map[string]any)
	if !ok {
		return nil, nil, fmt.Errorf("ztp.json has no \"ztp\" object")
	}
	var names []string
	for k, v := range ztp {
		if _, isSection := v.(map[string]any); isSection {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	var got []Fetched
	for _, name := range names {
		urls, err := sectionURLs(ctx, ns, dir, id, ztp[name])
		if err != nil {
			return doc, got, fmt.Errorf("section %s: %w", name, err)
		}
		for _, u := range urls {
			body, err := Curl(ctx, ns, dir, id, u)
			if err != nil {
				return doc, got, fmt.Errorf("section %s: %w", name, err)
			}
			got = append(got, Fetched{Section: name, URL: u, Body: body})
		}
	}
	return doc, got, nil
}

// sectionURLs finds every url / dynamic-url object below v and resolves it.
func sectionURLs(ctx context.Context, ns *netns.NS, dir string, id SwitchIdentity, v any) ([]string, error) {
	var out []string
	var walk func(any) error
	walk = func(v any) error {
		switch t := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(t))
			for k := range t {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				switch k {
				case "url":
					u, err := urlSource(t[k])
					if err != nil {
						return err
					}
					out = append(out, u)
				case "dynamic-url":
					u, err := resolveDynamic(ctx, ns, dir, id, t[k])
					if err != nil {
						return err
					}
					out = append(out, u)
				default:
					if err := walk(t[k]); err != nil {
						return err
					}
				}
			}
		case []any:
			for _, e := range t {
				if err := walk(e); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return out, walk(v)
}

func urlSource(v any) (string, error) {
	switch t := v.(type) {
	case string:
		return t, nil
	case map[string]any:
		if s, ok := t["source"].(string); ok {
			return s, nil
		}
	}
	return "", fmt.Errorf("url %v has no source", v)
}

// resolveDynamic builds prefix + identifier + suffix (sonic-ztp's
// DynamicURL).
func resolveDynamic(ctx context.Context, ns *netns.NS, dir string, id SwitchIdentity, v any) (string, error) {
	m, _ := v.(map[string]any)
	src, _ := m["source"].(map[string]any)
	if src == nil {
		return "", fmt.Errorf("dynamic-url %v has no source object", v)
	}
	prefix, _ := src["prefix"].(string)
	suffix, _ := src["suffix"].(string)
	var ident string
	switch t := src["identifier"].(type) {
	case string:
		switch t {
		case "hostname", "hostname-fqdn":
			ident = id.Hostname
		case "serial-number":
			ident = id.Serial
		case "product-name":
			ident = id.Product
		case "sonic-version":
			ident = id.SONiCVersion
		default:
			ident = t
		}
	case map[string]any:
		u, err := urlSource(t["url"])
		if err != nil {
			return "", err
		}
		body, err := Curl(ctx, ns, dir, id, u)
		if err != nil {
			return "", err
		}
		ident = strings.TrimSpace(string(body))
	default:
		return "", fmt.Errorf("dynamic-url identifier %v not understood", src["identifier"])
	}
	return prefix + ident + suffix, nil
}
