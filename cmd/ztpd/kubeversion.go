package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/ztpd/ztpd/api/client"
)

// Kubernetes version management: "ztpd kube-version". ztpd's own build
// version is "ztpd version" (version.go).

func init() { register(newKubeVersionCmd) }

func newKubeVersionCmd(opts *rootOptions) *cobra.Command {
	f := &apiFlags{}
	cmd := &cobra.Command{
		Use:     "kube-version",
		Aliases: []string{"kube-versions"},
		Short:   "Manage the Kubernetes versions clusters run (add, list, enable, disable, delete)",
		Long: `Manage the Kubernetes versions clusters run: CloudStack's Kubernetes supported
versions, each with its binaries ISO. "add --iso" stores the ISO here through
the data directory's admin socket; the other subcommands use the CloudStack
API (/client/api). For ztpd's own build version, see "ztpd version".`,
		Example: `  ztpd kube-version add --iso kubernetes-1.31.4.iso --semver 1.31.4
  ztpd kube-version list
  ztpd kube-version disable v1.30.2
  ztpd kube-version delete v1.30.2 --delete-iso`,
	}
	cmd.AddCommand(newVersionAddCmd(opts, f), newVersionListCmd(opts, f), newVersionStateCmd(opts, f, "enable"),
		newVersionStateCmd(opts, f, "disable"), newVersionDeleteCmd(opts, f))
	for _, c := range cmd.Commands() {
		addAPIFlags(c, f)
	}
	return cmd
}

// versionID resolves a Kubernetes version name, semantic version or ID.
func versionID(c *apiClient, ref string) (string, error) {
	var list []client.CSVersion
	if err := c.CSList("listKubernetesSupportedVersions", "kubernetessupportedversion", nil, &list); err != nil {
		return "", err
	}
	for _, v := range list {
		if v.ID == ref || v.Name == ref {
			return v.ID, nil
		}
	}
	var match []string
	for _, v := range list {
		if v.SemanticVersion == strings.TrimPrefix(ref, "v") {
			match = append(match, v.ID)
		}
	}
	if len(match) == 1 {
		return match[0], nil
	}
	if len(match) > 1 {
		return "", fmt.Errorf("several versions are %s; name one by its name or ID", ref)
	}
	return "", fmt.Errorf("no Kubernetes version %q (see: ztpd kube-version list)", ref)
}

func newVersionAddCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var iso, semver, name, sha, isoURL, checksum string
	var minCPU, minMem int
	cmd := &cobra.Command{
		Use:   "add",
		Short: "Add a Kubernetes version: store its binaries ISO here, or register an ISO URL",
		Long: `Add a Kubernetes version.

With --iso (a local admin operation through the data directory's admin socket,
like "image add"): the ISO is stored in the image store as <name>.iso (kind
binaries-iso), served at http://<advertise>:<http port>/isos/<name>.iso, and
the version is created Enabled with that URL and the ISO's SHA-256. The name
defaults to v<semver>, CloudStack's default. The url and checksum printed are
what a real CloudStack's addKubernetesSupportedVersion needs.

With --url (through the API, admin key): the version points at an ISO served
elsewhere.`,
		Example: `  ztpd kube-version add --iso kubernetes-1.31.4.iso --semver 1.31.4
  ztpd kube-version add --iso k8s.iso --semver 1.31.4 --name k8s-1.31 --sha256 9f86d0...
  ztpd kube-version add --semver 1.30.2 --url http://mirror/k8s-1.30.2.iso --checksum '{SHA-256}ab12...'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputFormat(opts); err != nil {
				return err
			}
			if (iso == "") == (isoURL == "") {
				return fmt.Errorf("give exactly one of --iso FILE or --url URL")
			}
			// Release tags are written v1.31.4; the API's semantic version
			// (CloudStack's) is 1.31.4.
			semver = strings.TrimPrefix(semver, "v")
			if iso != "" {
				return addVersionFromISO(opts, iso, semver, name, sha, minCPU, minMem)
			}
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			p := url.Values{"semanticversion": {semver}, "url": {isoURL}}
			for k, v := range map[string]string{"name": name, "checksum": checksum} {
				if v != "" {
					p.Set(k, v)
				}
			}
			if minCPU > 0 {
				p.Set("mincpunumber", strconv.Itoa(minCPU))
			}
			if minMem > 0 {
				p.Set("minmemory", strconv.Itoa(minMem))
			}
			inner, err := c.CS("addKubernetesSupportedVersion", p)
			if err != nil {
				return err
			}
			var v client.CSVersion
			if err := json.Unmarshal(inner["kubernetessupportedversion"], &v); err != nil {
				return err
			}
			return printVersion(opts, v)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&iso, "iso", "", "binaries ISO to store here (e.g. from ztpd iso build)")
	fl.StringVar(&semver, "semver", "", "Kubernetes semantic version, e.g. 1.31.4 or v1.31.4 (required)")
	fl.StringVar(&name, "name", "", "version name (default v<semver>); the ISO is stored as <name>.iso")
	fl.StringVar(&sha, "sha256", "", "expected SHA-256 of --iso; the add fails on a mismatch")
	fl.StringVar(&isoURL, "url", "", "URL of an ISO served elsewhere (instead of --iso)")
	fl.StringVar(&checksum, "checksum", "", "checksum of the --url ISO, e.g. {SHA-256}<hex>")
	fl.IntVar(&minCPU, "min-cpu", 0, "minimum vCPUs per node (default and floor 2)")
	fl.IntVar(&minMem, "min-memory", 0, "minimum memory per node in MiB (default and floor 2048)")
	_ = cmd.MarkFlagRequired("semver")
	return cmd
}

func addVersionFromISO(opts *rootOptions, iso, semver, name, sha string, minCPU, minMem int) error {
	fh, err := os.Open(iso)
	if err != nil {
		return err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", iso)
	}
	s, err := openAdmin(opts)
	if err != nil {
		return err
	}
	defer s.close()
	var body io.Reader = fh
	if term.IsTerminal(int(os.Stderr.Fd())) && opts.output != "json" {
		bar := progressbar.DefaultBytes(st.Size(), "storing "+filepath.Base(iso))
		body = io.TeeReader(fh, bar)
		defer bar.Finish()
	}
	q := url.Values{"semver": {semver}, "name": {name}, "sha256": {sha}}
	if minCPU > 0 {
		q.Set("min_cpu", strconv.Itoa(minCPU))
	}
	if minMem > 0 {
		q.Set("min_memory_mb", strconv.Itoa(minMem))
	}
	var res client.VersionAdded
	if err := s.do("POST", "/admin/versions?"+q.Encode(), body, &res); err != nil {
		return fmt.Errorf("kube-version add: %w", err)
	}
	return printResult(opts, os.Stdout, res, func(tw *tabwriter.Writer) {
		row(tw, "name", res.Version.Name)
		row(tw, "id", res.Version.ID)
		row(tw, "semver", res.Version.SemVer)
		row(tw, "state", res.Version.State)
		row(tw, "iso", res.Image.Name+" ("+humanBytes(res.Image.Size)+")")
		row(tw, "url", res.URL)
		row(tw, "checksum", res.Checksum)
		row(tw, "sha256", res.Image.SHA256)
	})
}

func printVersion(opts *rootOptions, v client.CSVersion) error {
	return printResult(opts, os.Stdout, v, func(tw *tabwriter.Writer) {
		row(tw, "name", v.Name)
		row(tw, "id", v.ID)
		row(tw, "semver", v.SemanticVersion)
		row(tw, "state", v.State)
		row(tw, "url", dash(v.ISOURL))
		row(tw, "min cpu / memory", fmt.Sprintf("%d / %s", v.MinCPUNumber, humanBytes(int64(v.MinMemory)<<20)))
		row(tw, "supports HA", v.SupportsHA)
	})
}

func newVersionListCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List Kubernetes versions",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			var list []client.CSVersion
			if err := c.CSList("listKubernetesSupportedVersions", "kubernetessupportedversion", nil, &list); err != nil {
				return err
			}
			if list == nil {
				list = []client.CSVersion{}
			}
			return printResult(opts, os.Stdout, list, func(tw *tabwriter.Writer) {
				row(tw, "NAME", "SEMVER", "STATE", "HA", "MIN CPU", "MIN MEM", "URL", "ID")
				for _, v := range list {
					row(tw, v.Name, v.SemanticVersion, v.State, v.SupportsHA, v.MinCPUNumber, humanBytes(int64(v.MinMemory)<<20), dash(v.ISOURL), v.ID)
				}
			})
		},
	}
}

func newVersionStateCmd(opts *rootOptions, f *apiFlags, op string) *cobra.Command {
	state := map[string]string{"enable": "Enabled", "disable": "Disabled"}[op]
	return &cobra.Command{
		Use:   op + " NAME",
		Short: map[string]string{"enable": "Enable a version", "disable": "Disable a version: no new clusters or upgrades to it"}[op],
		Args:  oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			id, err := versionID(c, args[0])
			if err != nil {
				return err
			}
			inner, err := c.CS("updateKubernetesSupportedVersion", url.Values{"id": {id}, "state": {state}})
			if err != nil {
				return err
			}
			var v client.CSVersion
			if err := json.Unmarshal(inner["kubernetessupportedversion"], &v); err != nil {
				return err
			}
			return printVersion(opts, v)
		},
	}
}

func newVersionDeleteCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var deleteISO, yes bool
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a version no cluster uses",
		Args:  oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			id, err := versionID(c, args[0])
			if err != nil {
				return err
			}
			what := fmt.Sprintf("delete Kubernetes version %q (%s)", args[0], id)
			if deleteISO {
				what += " and remove its binaries ISO from the image store"
			}
			if err := confirm(cmd, what, yes); err != nil {
				return err
			}
			p := url.Values{"id": {id}}
			if deleteISO {
				p.Set("deleteiso", "true")
			}
			_, job, err := c.async("deleteKubernetesSupportedVersion", p, "deleting "+args[0])
			if err != nil {
				return err
			}
			if f.noWait {
				return printJob(opts, "deleteKubernetesSupportedVersion", job)
			}
			return printResult(opts, os.Stdout, map[string]any{"id": id, "name": args[0], "deleted": true},
				func(tw *tabwriter.Writer) { row(tw, "deleted", args[0], id) })
		},
	}
	cmd.Flags().BoolVar(&deleteISO, "delete-iso", false, "also remove the binaries ISO from the image store")
	addYesFlag(cmd, &yes)
	return cmd
}
