package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"text/tabwriter"

	"github.com/ztpd/ztpd/internal/app"
	"github.com/ztpd/ztpd/internal/core"
)

// Operators on the appliance itself need no API key: without API
// credentials, every API command goes through the admin socket of the data
// directory (mode 0600), which serves the same API as the local
// administrator (newLocalAPIClient). `cluster kubeconfig` and `cluster
// members` use admin routes of their own.

// apiCredentialsGiven reports whether the API client would have a key.
func apiCredentialsGiven(f *apiFlags) bool {
	file, _ := readCLIFile()
	return firstOf(f.key, os.Getenv("ZTPD_API_KEY"), file.APIKey) != ""
}

func localKubeconfig(opts *rootOptions, ref, file string) error {
	s, err := openAdmin(opts)
	if err != nil {
		return err
	}
	defer s.close()
	raw, err := adminRaw(s, "GET", "/admin/clusters/"+url.PathEscape(ref)+"/kubeconfig")
	if err != nil {
		return fmt.Errorf("cluster kubeconfig: %w", err)
	}
	if file == "" || file == "-" {
		_, err = os.Stdout.Write(raw)
		return err
	}
	if _, err := app.CopyAtomic(file, bytes.NewReader(raw), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	if opts.output == "json" {
		return printResult(opts, os.Stdout, map[string]string{"cluster": ref, "file": file}, nil)
	}
	fmt.Fprintf(os.Stderr, "wrote %s (mode 0600)\n", file)
	return nil
}

func localMembers(opts *rootOptions, ref string) error {
	var list []core.Membership
	if err := adminDo(opts, "GET", "/admin/clusters/"+url.PathEscape(ref)+"/members", nil, &list); err != nil {
		return fmt.Errorf("cluster members: %w", err)
	}
	return printMembers(opts, list)
}

func printMembers(opts *rootOptions, list []core.Membership) error {
	if list == nil {
		list = []core.Membership{}
	}
	return printResult(opts, os.Stdout, list, func(tw *tabwriter.Writer) {
		row(tw, "DEVICE", "NODE", "ROLE", "STATE", "VERSION", "SINCE")
		for _, m := range list {
			row(tw, m.Device, dash(m.NodeName), m.Role, m.State, dash(m.Version), visWhen(m.UpdatedAt))
		}
	})
}

// adminRaw sends a request and returns the raw body of a 2xx answer.
func adminRaw(s *adminSession, method, path string) ([]byte, error) {
	req, err := http.NewRequest(method, "http://ztpd"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		return nil, app.AdminError(resp, raw)
	}
	return raw, nil
}
