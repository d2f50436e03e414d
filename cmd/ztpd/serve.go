package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/internal/app"
	"github.com/ztpd/ztpd/internal/config"
)

func init() { register(newServeCmd) }

type serveFlags struct {
	httpAddr      string
	metadataAddr  string
	apiAddr       string
	advertiseAddr string
	dhcpIfaces    []string
	dhcpRanges    []string
	dhcpRelays    []string
	tftp          bool
	tftpAddr      string
	pprofAddr     string
	adminKeyFile  string
	grace         time.Duration
	profiles      []string
}

func newServeCmd(opts *rootOptions) *cobra.Command {
	f := &serveFlags{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the appliance: DHCP, TFTP, HTTP ZTP content and the API",
		Long: `Run the appliance until SIGINT or SIGTERM, then shut down gracefully.

With no arguments ztpd runs on an embedded default that needs no root and no
external service: state in ./ztpd-data (one bbolt file), HTTP on
127.0.0.1:8080 with /healthz and /metrics (Prometheus). DHCP starts only when
--dhcp-interface (or dhcp.interfaces in --config) is given; TFTP only with
--tftp. Both need root (ports 67 and 69).

Device-facing URLs (ztp.json, config_db.json, images, join, ISO URLs) use
--advertise-addr. Without it they use the first --dhcp-interface's address;
without DHCP either, the address each request arrived on, and for URLs made
outside a request (ISO URLs given to CloudStack, the join base) the
--http-addr host, 127.0.0.1 by default, which no device can reach: on a real
network, give --advertise-addr.

Flags override the same settings in the --config file. The configuration is
validated before anything starts; every error names its field.

Only one ztpd may use a data directory; a second one fails at once.

Memory: unless set in the environment, GOGC is 400 and GOMEMLIMIT (a soft
heap limit) 768 MiB, or 80% of a lower cgroup memory.max: the collector runs
rarely while the heap is small and sooner as it nears the limit.

SIGHUP (systemctl reload ztpd) reads the profile files again: a valid set
replaces the one in use, one with errors is refused as a whole (every error
logged) and the profiles in use keep serving. It also reads the device HTTPS
listener's certificate files (http.tls.cert_file, key_file) again: a valid pair
is served to the next connection and documents name its pin; one that does not
load is refused and the certificate in use stays. Other settings need a
restart.

The device HTTPS listener (http.tls) is on by default, at port 443 of the
--http-addr host, or a free port when that host is loopback; switches fetch
their join answer and send their reports there, pinned to its certificate.
With http.tls.enabled: false they cross the network in clear, and serve warns
at every start.`,
		Example: `  # try it out, no root
  ztpd serve

  # serve a real subnet on veth0 (address 10.99.0.1/16)
  ztpd serve --data-dir /var/lib/ztpd --dhcp-interface veth0 \
      --dhcp-range 10.99.1.10-10.99.1.250 --http-addr 10.99.0.1:8080

  # everything from a file, JSON logs
  ztpd serve --config /etc/ztpd/ztpd.yaml --log-format json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(opts)
			if err != nil {
				return err
			}
			applyServeFlags(cmd, f, &cfg)
			if err := cfg.Validate(); err != nil {
				return err
			}
			log := newLogger(cfg)
			tuneGC(log)
			// Every listener first: a port in use fails here, before the
			// data directory, the at-rest key or an admin key exist.
			lns, err := app.Bind(cfg)
			if err != nil {
				return err
			}
			defer lns.Close()
			a, err := app.New(cfg, log)
			if err != nil {
				return err
			}
			closed := false
			defer func() {
				if !closed {
					a.Close()
				}
			}()
			// The address bound (with port 0 the system chose it) and the
			// pins documents name.
			deviceHTTPS, devicePins := "", ""
			if lns.DeviceTLS != nil && a.DeviceTLS != nil {
				deviceHTTPS, devicePins = lns.DeviceTLS.Addr().String(), a.DeviceTLS.PinList()
			}
			a.UseListeners(lns)
			if err := a.Start(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			reloadOnHangup(ctx, a)
			apiAddr, apiTLS := cfg.APIListener()
			a.OnServing(func() {
				log.Info("ztpd started", "version", version, "data_dir", cfg.DataDir, "http", cfg.HTTP.Addr,
					"device_https", deviceHTTPS, "device_tls_pin", devicePins, "api", firstOf(apiAddr, cfg.HTTP.Addr), "api_tls", apiTLS,
					"dhcp_interfaces", cfg.DHCP.Interfaces, "advertise", cfg.AdvertiseAddr)
			})
			err = a.Serve(ctx, f.grace)
			// Closing (write-behind records flushed, cluster jobs stopped,
			// the store closed) is part of the stop: "ztpd stopped" comes
			// after it.
			closed = true
			if cerr := a.Close(); cerr != nil {
				log.Warn("closing after the stop", "err", cerr)
			}
			log.Info("ztpd stopped")
			if err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.httpAddr, "http-addr", "", "ZTP HTTP listen address (default 127.0.0.1:8080)")
	fl.StringVar(&f.metadataAddr, "metadata-addr", "", "extra listener for the cloud-init metadata service, e.g. 10.99.0.1:80")
	fl.StringVar(&f.apiAddr, "api-addr", "", "API listen address (default: the HTTP listener when it is loopback, else <http host>:8443 with TLS)")
	fl.StringVar(&f.advertiseAddr, "advertise-addr", "", "IP address in the URLs handed to devices (default: the first --dhcp-interface's address; without DHCP, see above: often 127.0.0.1, which no device reaches)")
	fl.StringArrayVar(&f.dhcpIfaces, "dhcp-interface", nil, "serve DHCP on this interface (repeatable)")
	fl.StringArrayVar(&f.dhcpRanges, "dhcp-range", nil, "dynamic pool A-B inside a DHCP interface's subnet (repeatable)")
	fl.StringArrayVar(&f.dhcpRelays, "dhcp-relay", nil, "trust this relay agent: it sends from this address and sets it as giaddr (repeatable; dhcp.relays for more)")
	fl.BoolVar(&f.tftp, "tftp", false, "serve ZTP content over TFTP")
	fl.StringVar(&f.tftpAddr, "tftp-addr", "", "TFTP listen address (default :69)")
	fl.StringVar(&f.pprofAddr, "pprof-addr", "", "serve Go runtime profiles (net/http/pprof) here, e.g. 127.0.0.1:6060")
	fl.StringVar(&f.adminKeyFile, "admin-key-file", "", "write the first admin API key and secret to this new file (mode 0600) instead of standard output (api.admin_key_file)")
	fl.DurationVar(&f.grace, "shutdown-grace", 10*time.Second, "how long to let in-flight requests finish on shutdown")
	fl.StringArrayVar(&f.profiles, "profiles", nil, "device profile YAML file or directory (repeatable; replaces profiles: of --config)")
	return cmd
}

// reloadOnHangup reloads the profiles and the device HTTPS listener's
// certificate files on every SIGHUP (systemctl reload ztpd) until ctx ends.
func reloadOnHangup(ctx context.Context, a *app.App) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = a.ReloadProfiles()  // logged; the profiles in use stay
				_ = a.ReloadDeviceTLS() // logged; the certificate in use stays
			}
		}
	}()
}

// serveGCPercent is the GOGC a server runs with unless GOGC is set. The live
// heap is small (caches of device records and rendered documents) and the
// request path allocates; collecting at 5x the live heap instead of 2x cut
// the ztp.json p99 at ~5,000 req/s from 21.5 ms to 16-19 ms on the bench.
const serveGCPercent = 400

// serveMemoryLimit is the soft heap limit (GOMEMLIMIT) a server runs with
// unless GOMEMLIMIT is set: GOGC=400 alone lets the heap grow to 5x the live
// heap, which at 30,000 devices was ~1 GB of anonymous memory for ~150 MB
// live. Under the limit the collector runs sooner instead; above
// it, when the live heap itself is larger, the runtime caps GC at about half
// the CPU rather than failing. A cgroup memory limit (systemd MemoryMax=)
// lowers it to 80% of that limit.
const serveMemoryLimit = 768 << 20

func tuneGC(log *slog.Logger) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(serveGCPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		limit := memoryLimit(cgroupMemoryMax())
		debug.SetMemoryLimit(limit)
		log.Debug("garbage collector tuned", "gogc", serveGCPercent, "memory_limit_bytes", limit)
	}
}

// memoryLimit is serveMemoryLimit, or 80% of a lower cgroup limit
// (cgroupMax 0: none).
func memoryLimit(cgroupMax int64) int64 {
	if cgroupMax > 0 && cgroupMax*8/10 < serveMemoryLimit {
		return cgroupMax * 8 / 10
	}
	return serveMemoryLimit
}

// cgroupMemoryMax is this process's cgroup v2 memory.max, or 0 when there is
// none ("max", cgroup v1, unreadable).
func cgroupMemoryMax() int64 {
	raw, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		path, ok := strings.CutPrefix(line, "0::")
		if !ok {
			continue
		}
		v, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", path, "memory.max"))
		if err != nil {
			return 0
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
		if err != nil {
			return 0 // "max"
		}
		return n
	}
	return 0
}

func applyServeFlags(cmd *cobra.Command, f *serveFlags, cfg *config.Config) {
	fl := cmd.Flags()
	if fl.Changed("http-addr") {
		cfg.HTTP.Addr = f.httpAddr
	}
	if fl.Changed("metadata-addr") {
		cfg.HTTP.MetadataAddr = f.metadataAddr
	}
	if fl.Changed("api-addr") {
		cfg.API.Addr = f.apiAddr
	}
	if fl.Changed("advertise-addr") {
		cfg.AdvertiseAddr = f.advertiseAddr
	}
	if fl.Changed("dhcp-interface") {
		cfg.DHCP.Interfaces = f.dhcpIfaces
	}
	if fl.Changed("dhcp-range") {
		cfg.DHCP.Ranges = append(cfg.DHCP.Ranges, f.dhcpRanges...)
	}
	for _, r := range f.dhcpRelays {
		cfg.DHCP.Relays = append(cfg.DHCP.Relays, config.Relay{Address: r})
	}
	if fl.Changed("tftp") {
		cfg.TFTP.Enabled = f.tftp
	}
	if fl.Changed("tftp-addr") {
		cfg.TFTP.Addr = f.tftpAddr
	}
	if fl.Changed("pprof-addr") {
		cfg.Debug.PprofAddr = f.pprofAddr
	}
	if fl.Changed("admin-key-file") {
		cfg.API.AdminKeyFile = f.adminKeyFile
	}
	if fl.Changed("profiles") {
		cfg.Profiles = f.profiles
	}
}
