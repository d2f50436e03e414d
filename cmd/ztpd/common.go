package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/ztpd/ztpd/internal/app"
	"github.com/ztpd/ztpd/internal/config"
)

// systemConfigFile is the packaged configuration. Commands use it when
// neither --config nor ZTPD_CONFIG says otherwise, so `ztpd device list` on
// an installed appliance reads the service's data directory instead of
// creating an empty ./ztpd-data.
const systemConfigFile = "/etc/ztpd/ztpd.yaml"

// configFile is the configuration file commands read: --config, else
// ZTPD_CONFIG (set but empty: none), else systemConfigFile when it exists,
// else none (the embedded default).
func configFile(opts *rootOptions) string {
	if opts.configPath != "" {
		return opts.configPath
	}
	if v, ok := os.LookupEnv("ZTPD_CONFIG"); ok {
		return v
	}
	if _, err := os.Stat(systemConfigFile); err == nil {
		return systemConfigFile
	}
	return ""
}

// loadConfig reads the configuration file and applies the global flags over it.
func loadConfig(opts *rootOptions) (config.Config, error) {
	cfg, err := config.Load(configFile(opts))
	if err != nil {
		return cfg, err
	}
	if opts.dataDir != "" {
		cfg.DataDir = opts.dataDir
	}
	if opts.logLevel != "" {
		cfg.Log.Level = opts.logLevel
	}
	if opts.logFormat != "" {
		cfg.Log.Format = opts.logFormat
	}
	return cfg, nil
}

func newLogger(cfg config.Config) *slog.Logger {
	return app.NewLogger(os.Stderr, cfg.Log.Level, cfg.Log.Format)
}

func checkOutputFormat(opts *rootOptions) error {
	switch opts.output {
	case "table", "json":
		return nil
	}
	return fmt.Errorf("--output %q: use table or json", opts.output)
}

// printResult writes v as indented JSON with -o json, otherwise calls table.
func printResult(opts *rootOptions, w io.Writer, v any, table func(tw *tabwriter.Writer)) error {
	if err := checkOutputFormat(opts); err != nil {
		return err
	}
	if opts.output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// row writes tab-separated cells as one table line.
func row(tw io.Writer, cells ...any) {
	parts := make([]string, len(cells))
	for i, c := range cells {
		parts[i] = fmt.Sprint(c)
	}
	fmt.Fprintln(tw, strings.Join(parts, "\t"))
}

// humanBytes renders a size for a person: "512 B", "1.4 GiB". Tables use it;
// -o json keeps the exact byte count.
func humanBytes(n int64) string {
	if n < 0 {
		return "-" + humanBytes(-n)
	}
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v := float64(n) / unit
	i := 0
	for v >= unit && i < len(units)-1 {
		v /= unit
		i++
	}
	if v < 10 {
		return fmt.Sprintf("%.1f %s", v, units[i])
	}
	return fmt.Sprintf("%.0f %s", v, units[i])
}

// addYesFlag adds --yes/-y, which confirms a destructive command up front.
func addYesFlag(cmd *cobra.Command, yes *bool) {
	cmd.Flags().BoolVarP(yes, "yes", "y", false, "do it without asking (needed when standard input is not a terminal)")
}

// confirm guards a destructive command. what says what will happen, e.g.
// `delete cluster "edge-1" and destroy its CA`. With --yes it goes ahead; on
// a terminal it asks and goes ahead only on "y" or "yes"; otherwise (a
// script, a pipe) it refuses and says to pass --yes, so nothing is destroyed
// by a command that nobody confirmed.
func confirm(cmd *cobra.Command, what string, yes bool) error {
	if yes {
		return nil
	}
	in, ok := cmd.InOrStdin().(*os.File)
	if !ok || !term.IsTerminal(int(in.Fd())) {
		return fmt.Errorf("%s: not confirmed: standard input is not a terminal, so nobody can be asked; pass --yes (-y) to confirm", what)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "%s? [y/N] ", what)
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && line == "" {
		return fmt.Errorf("%s: not confirmed (no answer)", what)
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return fmt.Errorf("%s: not confirmed (answer y to go ahead, or pass --yes)", what)
}

// oneArg is the Args of every command that takes one argument: a missing
// or extra argument is said in the command's own terms (the argument's
// name from its Use line, the usage), not as cobra's "accepts 1 arg(s),
// received 0".
func oneArg(cmd *cobra.Command, args []string) error {
	name := "an argument"
	if f := strings.Fields(cmd.Use); len(f) > 1 {
		name = f[1]
	}
	usage := cmd.CommandPath() + " " + strings.Join(strings.Fields(cmd.Use)[1:], " ")
	switch {
	case len(args) == 0:
		return fmt.Errorf("missing %s: usage: %s (%s --help)", name, usage, cmd.CommandPath())
	case len(args) > 1:
		return fmt.Errorf("%s takes one %s, given %d (%s): usage: %s", cmd.CommandPath(), name, len(args), strings.Join(args, " "), usage)
	}
	return nil
}

// deniedDataDir is the error for a data directory this user may not look
// into (ztpd's own, mode 0700): without it a store and socket that only
// seem absent would hide the real cause. nil when the directory is
// readable or absent.
func deniedDataDir(dir string) error {
	_, err := os.Stat(filepath.Join(dir, app.AdminSocketName))
	if !os.IsPermission(err) {
		return nil
	}
	return fmt.Errorf("permission denied: this user may not read the ztpd data directory %s; run the command with sudo (sudo ztpd ...), "+
		"or pass --api-url, --api-key and --secret-key", dir)
}
