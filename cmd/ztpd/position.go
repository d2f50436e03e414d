package main

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/api/client"
	"github.com/ztpd/ztpd/internal/positions"
)

func init() { register(newPositionCmd) }

func newPositionCmd(opts *rootOptions) *cobra.Command {
	f := &apiFlags{}
	cmd := &cobra.Command{
		Use:     "position",
		Aliases: []string{"positions"},
		Short:   "List, show, add, change, remove and import the cabling plan's positions",
		Long: `The cabling plan names each slot a device can be plugged into: how the network
proves it (the relay that forwards its DHCP requests, by its giaddr, and the
option 82 circuit-id and remote-id that relay adds) and what the device there
is (name, role, cluster, profile, reserved address, labels, expected serial,
rack and port). A device whose request arrives through a planned position gets
that position's address, name and profile.

Positions come from the plan files under "positions:" in the configuration
(YAML or CSV; change those in their files, and reload with SIGHUP) and from
positions stored through the API, which these commands change. Both are
checked together: a stored position the network cannot tell apart from a
file's line is refused, naming both.`,
		Example: `  ztpd position list
  ztpd position show leaf-07a -o json
  ztpd position set leaf-07a --relay 10.99.7.1 --circuit-id Ethernet12 --address 10.99.7.21 \
      --cluster fabric-2 --role worker --rack 7 --port Ethernet12 --field loopback=10.255.0.7
  ztpd position import rack7.csv
  ztpd position delete leaf-07a --yes
  ztpd profile check --position leaf-07a     # what that slot's device would get`,
	}
	addAPIFlags(cmd, f)
	cmd.AddCommand(newPositionListCmd(opts, f), newPositionShowCmd(opts, f), newPositionSetCmd(opts, f),
		newPositionDeleteCmd(opts, f), newPositionImportCmd(opts, f))
	return cmd
}

func newPositionListCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var rack string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the positions of the plan in use, by name",
		Example: `  ztpd position list
  ztpd position list --rack 7 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			var page client.Page[client.Position]
			if err := c.REST("GET", "/api/v1/positions", nil, nil, &page); err != nil {
				return err
			}
			list := page.Items
			if rack != "" {
				list = list[:0:0]
				for _, p := range page.Items {
					if p.Rack == rack {
						list = append(list, p)
					}
				}
			}
			if list == nil {
				list = []client.Position{}
			}
			return printResult(opts, os.Stdout, list, func(tw *tabwriter.Writer) {
				row(tw, "NAME", "RELAY", "CIRCUIT-ID", "REMOTE-ID", "ADDRESS", "RACK", "PORT", "CLUSTER", "ROLE", "PROFILE", "SERIAL", "SOURCE")
				for _, p := range list {
					row(tw, p.Name, p.Relay, dash(p.CircuitID), dash(p.RemoteID), dash(p.Address), dash(p.Rack), dash(p.Port),
						dash(p.Cluster), dash(p.Role), dash(p.Profile), dash(p.Serial), p.Source)
				}
			})
		},
	}
	cmd.Flags().StringVar(&rack, "rack", "", "only the positions of this rack")
	return cmd
}

func newPositionShowCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	return &cobra.Command{
		Use:     "show NAME",
		Short:   "Show one position",
		Example: `  ztpd position show leaf-07a`,
		Args:    oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			var p client.Position
			if err := c.REST("GET", "/api/v1/positions/"+url.PathEscape(args[0]), nil, nil, &p); err != nil {
				return err
			}
			return printResult(opts, os.Stdout, p, func(tw *tabwriter.Writer) { positionRows(tw, p) })
		},
	}
}

func positionRows(tw *tabwriter.Writer, p client.Position) {
	row(tw, "name", p.Name)
	row(tw, "relay", p.Relay)
	for _, kv := range [][2]string{{"circuit-id", p.CircuitID}, {"remote-id", p.RemoteID}, {"interface-id", p.InterfaceID},
		{"address", p.Address}, {"rack", p.Rack}, {"port", p.Port}, {"cluster", p.Cluster}, {"role", p.Role},
		{"profile", p.Profile}, {"serial", p.Serial}} {
		if kv[1] != "" {
			row(tw, kv[0], kv[1])
		}
	}
	for _, m := range []struct {
		what string
		kv   map[string]string
	}{{"label", p.Labels}, {"field", p.Fields}} {
		keys := make([]string, 0, len(m.kv))
		for k := range m.kv {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			row(tw, m.what, k+"="+m.kv[k])
		}
	}
	source := p.Source
	if source == "api" {
		source = "stored through the API"
	}
	row(tw, "source", source)
}

func newPositionSetCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var p client.Position
	var labels, fields []string
	cmd := &cobra.Command{
		Use:   "set NAME",
		Short: "Add a position, or change one stored through the API (admin key)",
		Long: `Add the position NAME, or change the one stored through the API under that
name: the flags given replace those fields, the others are kept (--label and
--field set one key each; an empty value, --label tier=, removes that key). The whole plan is checked with it (two positions
the network cannot tell apart, a name, address or serial given twice, an
address outside every DHCP subnet, a profile that is not loaded) and served at
once. A position of a plan file is changed in its file.

Circuit and remote ids are written as device records show them: the text when
every byte is printable ASCII, else colon-separated hex (00:06:65:74:68:31:32)
or hex:0006657468....`,
		Example: `  ztpd position set leaf-07a --relay 10.99.7.1 --circuit-id Ethernet12
  ztpd position set leaf-07a --address 10.99.7.21 --cluster fabric-2 --role worker
  ztpd position set leaf-07a --serial SN07A --label tier=leaf --field loopback=10.255.0.7 -o json`,
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			name := args[0]
			var cur client.Position
			err = c.REST("GET", "/api/v1/positions/"+url.PathEscape(name), nil, nil, &cur)
			var ce *client.Error
			switch {
			case err == nil && cur.Source != "api":
				return fmt.Errorf("position %s is defined at %s: change it there (and reload ztpd)", name, cur.Source)
			case err != nil && !(errors.As(err, &ce) && ce.HTTPStatus == 404):
				return err
			}
			cur.Name, cur.Source = name, ""
			fl := cmd.Flags()
			for _, s := range []struct {
				flag string
				dst  *string
				v    string
			}{{"relay", &cur.Relay, p.Relay}, {"circuit-id", &cur.CircuitID, p.CircuitID}, {"remote-id", &cur.RemoteID, p.RemoteID},
				{"interface-id", &cur.InterfaceID, p.InterfaceID}, {"address", &cur.Address, p.Address}, {"rack", &cur.Rack, p.Rack},
				{"port", &cur.Port, p.Port}, {"cluster", &cur.Cluster, p.Cluster}, {"role", &cur.Role, p.Role},
				{"profile", &cur.Profile, p.Profile}, {"serial", &cur.Serial, p.Serial}} {
				if fl.Changed(s.flag) {
					*s.dst = s.v
				}
			}
			if fl.Changed("label") {
				if cur.Labels, err = planKeyValues("--label", cur.Labels, labels); err != nil {
					return err
				}
			}
			if fl.Changed("field") {
				if cur.Fields, err = planKeyValues("--field", cur.Fields, fields); err != nil {
					return err
				}
			}
			var got client.Position
			if err := c.REST("PUT", "/api/v1/positions/"+url.PathEscape(name), nil, cur, &got); err != nil {
				return err
			}
			return printResult(opts, os.Stdout, got, func(tw *tabwriter.Writer) { positionRows(tw, got) })
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&p.Relay, "relay", "", "address of the relay that forwards the slot's requests (its giaddr); required for a new position")
	fl.StringVar(&p.CircuitID, "circuit-id", "", "option 82 circuit-id the relay adds for the slot (e.g. its port)")
	fl.StringVar(&p.RemoteID, "remote-id", "", "option 82 remote-id the relay adds")
	fl.StringVar(&p.InterfaceID, "interface-id", "", "DHCPv6 relay interface-id (option 18)")
	fl.StringVar(&p.Address, "address", "", "address reserved for the slot's device")
	fl.StringVar(&p.Rack, "rack", "", "rack the slot is in")
	fl.StringVar(&p.Port, "port", "", "port the slot is cabled to")
	fl.StringVar(&p.Cluster, "cluster", "", "cluster the slot's device joins")
	fl.StringVar(&p.Role, "role", "", "control-plane, worker or sonic")
	fl.StringVar(&p.Profile, "profile", "", "profile the slot's device gets (else profiles match it as usual)")
	fl.StringVar(&p.Serial, "serial", "", "serial of the box expected there (another box is refused)")
	fl.StringArrayVar(&labels, "label", nil, "KEY=VALUE label of the slot's device (repeatable)")
	fl.StringArrayVar(&fields, "field", nil, "KEY=VALUE plan field templates see as .Position.Fields (repeatable)")
	return cmd
}

// planKeyValues is m with the KEY=VALUE flags applied; an empty value removes
// the key.
func planKeyValues(flag string, m map[string]string, kvs []string) (map[string]string, error) {
	m = maps.Clone(m)
	if m == nil {
		m = map[string]string{}
	}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s %q: use KEY=VALUE", flag, kv)
		}
		if v == "" {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	return m, nil
}

func newPositionDeleteCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:     "delete NAME",
		Aliases: []string{"rm"},
		Short:   "Remove a position stored through the API (admin key)",
		Long: `Remove a position stored through the API. Its device's next DHCP request is
served by the ordinary rules (a pool address, profiles matched by its facts).
A position of a plan file is removed from its file.`,
		Example: `  ztpd position delete leaf-07a --yes`,
		Args:    oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := confirm(cmd, "delete position "+args[0], yes); err != nil {
				return err
			}
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			if err := c.REST("DELETE", "/api/v1/positions/"+url.PathEscape(args[0]), nil, nil, nil); err != nil {
				return err
			}
			return printResult(opts, os.Stdout, map[string]string{"deleted": args[0]}, func(tw *tabwriter.Writer) {
				row(tw, "deleted", args[0])
			})
		},
	}
	addYesFlag(cmd, &yes)
	return cmd
}

func newPositionImportCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "import FILE",
		Short: "Store the positions of a YAML or CSV plan file through the API, all or none (admin key)",
		Long: `Read a plan file (YAML, or CSV when its name ends in .csv: the same format as
the plan files under "positions:"), check it here with every problem at its
line, then store its positions through the API together: each is added, or
replaces the stored position of its name; on any problem (with the plan in
use too) none is stored.

YAML:
  positions:
    - name: leaf-07a
      relay: 10.99.7.1
      circuit_id: Ethernet12
      address: 10.99.7.21
      cluster: fabric-2
      role: worker
      fields: {loopback: 10.255.0.7}

CSV (a header row names the columns; labels as key=value;key=value; any other
column is a plan field templates see as .Position.Fields):
  name,relay,circuit_id,address,rack,port,labels,loopback
  leaf-07a,10.99.7.1,Ethernet12,10.99.7.21,7,Ethernet12,tier=leaf,10.255.0.7`,
		Example: `  ztpd position import rack7.yaml
  ztpd position import fleet.csv -o json`,
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutputFormat(opts); err != nil {
				return err
			}
			raw, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			ps, errs := positions.Parse(args[0], raw)
			if _, berrs := positions.Build(ps); len(errs)+len(berrs) > 0 {
				return append(errs, berrs...)
			}
			if len(ps) == 0 {
				return fmt.Errorf("%s: no positions", args[0])
			}
			body := client.PositionImport{Items: make([]client.Position, len(ps))}
			for i, p := range ps {
				body.Items[i] = client.Position{Name: p.Name, Relay: p.Relay.String(), CircuitID: p.CircuitID, RemoteID: p.RemoteID,
					InterfaceID: p.InterfaceID, Role: p.Role, Cluster: p.Cluster, Profile: p.Profile, Serial: p.Serial,
					Rack: p.Rack, Port: p.Port, Labels: p.Labels, Fields: p.Fields}
				if p.Address.IsValid() {
					body.Items[i].Address = p.Address.String()
				}
			}
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			var out client.PositionImported
			if err := c.REST("POST", "/api/v1/positions/import", nil, body, &out); err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			return printResult(opts, os.Stdout, out, func(tw *tabwriter.Writer) {
				row(tw, "added", out.Created)
				row(tw, "replaced", out.Replaced)
			})
		},
	}
}
