package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/meridianmq/meridian/bookie"
	"github.com/meridianmq/meridian/bookie/autorecovery"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/security"
	"github.com/meridianmq/meridian/topology"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/experimental"
	"gopkg.in/yaml.v3"
)

// bookieFileConfig is the YAML form of bookie.Config (see
// deploy/config/bookie.yaml). Unset fields keep bookie.DefaultConfig values;
// unknown fields are an error.
type bookieFileConfig struct {
	ID                  *string        `yaml:"id"`
	Region              *string        `yaml:"region"`
	Rack                *string        `yaml:"rack"`
	ListenAddr          *string        `yaml:"listen_addr"`
	AdvertiseAddr       *string        `yaml:"advertise_addr"`
	HTTPAddr            *string        `yaml:"http_addr"`
	JournalDir          *string        `yaml:"journal_dir"`
	LedgerDir           *string        `yaml:"ledger_dir"`
	MaxEntryBytes       *int           `yaml:"max_entry_bytes"`
	GroupMaxWait        *time.Duration `yaml:"group_max_wait"`
	GroupMaxBytes       *int           `yaml:"group_max_bytes"`
	GroupMaxEntries     *int           `yaml:"group_max_entries"`
	FlushWhenIdle       *bool          `yaml:"flush_when_idle"`
	MaxQueuedAdds       *int           `yaml:"max_queued_adds"`
	MaxJournalFileBytes *int64         `yaml:"max_journal_file_bytes"`
	CheckpointInterval  *time.Duration `yaml:"checkpoint_interval"`
	GCInterval          *time.Duration `yaml:"gc_interval"`
	CompactionThreshold *float64       `yaml:"compaction_threshold"`
	DiskUsageThreshold  *float64       `yaml:"disk_usage_threshold"`
	DiskUsageLowWater   *float64       `yaml:"disk_usage_low_water"`
	DiskCheckInterval   *time.Duration `yaml:"disk_check_interval"`
	ReadRangeMaxBytes   *int64         `yaml:"read_range_max_bytes"`
	SessionTTL          *time.Duration `yaml:"session_ttl"`
	LogLevel            *string        `yaml:"log_level"`

	// Byte bounds of the add path (bookie.Config.MaxQueuedAddBytes and
	// MaxInflightAddBytesPerStream).
	MaxQueuedAddBytes            *int64 `yaml:"max_queued_add_bytes"`
	MaxInflightAddBytesPerStream *int64 `yaml:"max_inflight_add_bytes_per_stream"`
	// Limits against hostile peers (bookie.Config.Limits, netguard.Limits).
	MaxConnectionsPerIP     *int           `yaml:"max_connections_per_ip"`
	MaxStreamsPerConnection *uint32        `yaml:"max_streams_per_connection"`
	MaxHeaderListBytes      *uint32        `yaml:"max_header_list_bytes"`
	MaxConnectionIdle       *time.Duration `yaml:"max_connection_idle"`
	HTTPReadTimeout         *time.Duration `yaml:"http_read_timeout"`
	HTTPWriteTimeout        *time.Duration `yaml:"http_write_timeout"`
	HTTPIdleTimeout         *time.Duration `yaml:"http_idle_timeout"`
	HTTPMaxHeaderBytes      *int           `yaml:"http_max_header_bytes"`
	// Scrub: CRC verification of every stored entry (bookie.Config).
	ScrubInterval       *time.Duration `yaml:"scrub_interval"`
	ScrubStartDelay     *time.Duration `yaml:"scrub_start_delay"`
	ScrubBytesPerSecond *int64         `yaml:"scrub_bytes_per_second"`
	// FaultInjection writes through a fault-injecting file layer and serves
	// POST /debug/faults on http_addr (chaos testing only).
	FaultInjection bool `yaml:"fault_injection"`
	// UnsafeAckBeforeSync (needs fault_injection) acknowledges adds before
	// their fsync: a deliberately broken bookie for the chaos suite's
	// broken-build test (bookie.TestingConfig.UnsafeAckBeforeSync).
	UnsafeAckBeforeSync bool `yaml:"unsafe_ack_before_sync"`
	Gossip              *struct {
		// BindAddr is the memberlist address (host:port); required to enable gossip.
		BindAddr      string   `yaml:"bind_addr"`
		AdvertiseAddr string   `yaml:"advertise_addr"`
		Seeds         []string `yaml:"seeds"`
		// Profile is "lan" (default) or "wan".
		Profile string `yaml:"profile"`
		// GossipKeyFile encrypts the pool (one base64 key per line, the
		// first the primary; reloaded on change: rotation).
		GossipKeyFile string `yaml:"gossip_key_file"`
	} `yaml:"gossip"`
	Metadata struct {
		// Endpoints of metadata nodes; empty = run without registration.
		Endpoints []string `yaml:"endpoints"`
		// Shard is the regional shard to register in ("" = the region).
		Shard string `yaml:"shard"`
	} `yaml:"metadata"`
	// Autorecovery runs an auditor candidate and a re-replication worker in
	// the bookie process (only with metadata endpoints).
	Autorecovery autorecoveryFileConfig `yaml:"autorecovery"`
	// DialRewrite maps addresses the bookie dials (metadata nodes, other
	// bookies) to the address to dial instead: a link proxy of
	// `meridian dev`.
	DialRewrite map[string]string `yaml:"dial_rewrite"`
	// Security is the bookie's TLS identity and authentication, used by its
	// listeners and by every dial of the process (metadata, autorecovery's
	// bookie connections); see security.Config.
	Security security.Config `yaml:"security"`
}

// autorecoveryFileConfig is the autorecovery section of a bookie config.
// Unset fields keep the autorecovery defaults.
type autorecoveryFileConfig struct {
	// Enabled (default true) runs autorecovery when metadata is configured.
	Enabled *bool `yaml:"enabled"`
	// LostBookieDelay: how long a bookie must be gone before its ledgers are
	// re-replicated (default 30s).
	LostBookieDelay *time.Duration `yaml:"lost_bookie_delay"`
	CheckInterval   *time.Duration `yaml:"check_interval"`
	AuditInterval   *time.Duration `yaml:"audit_interval"`
	PollInterval    *time.Duration `yaml:"poll_interval"`
	RetryBackoff    *time.Duration `yaml:"retry_backoff"`
	CopyConcurrency *int           `yaml:"copy_concurrency"`
	// Placement of replacement bookies (topology.NewRackAwarePlacement).
	Placement struct {
		MinRacksPerWriteQuorum *int  `yaml:"min_racks_per_write_quorum"`
		Enforce                *bool `yaml:"enforce"`
	} `yaml:"placement"`
}

// autorecoveryPlan is the validated autorecovery part of a bookie config;
// Store is filled in when the metadata client exists.
type autorecoveryPlan struct {
	enabled   bool
	auditor   autorecovery.AuditorConfig
	worker    autorecovery.WorkerConfig
	placement topology.RackAwareConfig
}

// autorecoveryConfigs validates the autorecovery section; errors name the
// yaml field and the limit.
func autorecoveryConfigs(fc bookieFileConfig, cfg bookie.Config) (autorecoveryPlan, error) {
	ar := fc.Autorecovery
	p := autorecoveryPlan{
		enabled:   len(fc.Metadata.Endpoints) > 0,
		auditor:   autorecovery.DefaultAuditorConfig(),
		worker:    autorecovery.DefaultWorkerConfig(),
		placement: topology.DefaultRackAwareConfig(),
	}
	if ar.Enabled != nil {
		if *ar.Enabled && len(fc.Metadata.Endpoints) == 0 {
			return p, fmt.Errorf("autorecovery.enabled: true needs metadata.endpoints")
		}
		p.enabled = p.enabled && *ar.Enabled
	}
	setIf(&p.auditor.LostBookieDelay, ar.LostBookieDelay)
	setIf(&p.auditor.CheckInterval, ar.CheckInterval)
	setIf(&p.auditor.AuditInterval, ar.AuditInterval)
	setIf(&p.worker.PollInterval, ar.PollInterval)
	setIf(&p.worker.RetryBackoff, ar.RetryBackoff)
	setIf(&p.worker.CopyConcurrency, ar.CopyConcurrency)
	p.placement.MinRacksPerWriteQuorum = 1
	setIf(&p.placement.MinRacksPerWriteQuorum, ar.Placement.MinRacksPerWriteQuorum)
	setIf(&p.placement.Enforce, ar.Placement.Enforce)
	switch a, w := p.auditor, p.worker; {
	case a.LostBookieDelay < 0:
		return p, fmt.Errorf("autorecovery.lost_bookie_delay %v must be >= 0", a.LostBookieDelay)
	case a.CheckInterval < time.Millisecond:
		return p, fmt.Errorf("autorecovery.check_interval %v must be >= 1ms", a.CheckInterval)
	case a.AuditInterval < a.CheckInterval:
		return p, fmt.Errorf("autorecovery.audit_interval %v must be >= check_interval %v", a.AuditInterval, a.CheckInterval)
	case w.PollInterval < time.Millisecond:
		return p, fmt.Errorf("autorecovery.poll_interval %v must be >= 1ms", w.PollInterval)
	case w.RetryBackoff < 0:
		return p, fmt.Errorf("autorecovery.retry_backoff %v must be >= 0", w.RetryBackoff)
	case w.CopyConcurrency < 1 || w.CopyConcurrency > 1024:
		return p, fmt.Errorf("autorecovery.copy_concurrency %d must be in [1, 1024]", w.CopyConcurrency)
	case p.placement.MinRacksPerWriteQuorum < 1:
		return p, fmt.Errorf("autorecovery.placement.min_racks_per_write_quorum %d must be >= 1", p.placement.MinRacksPerWriteQuorum)
	}
	p.auditor.ID, p.worker.ID = cfg.ID, cfg.ID
	if err := validateDialRewrite("dial_rewrite", fc.DialRewrite); err != nil {
		return p, err
	}
	p.auditor.DialOptions = append(p.auditor.DialOptions, rewriteDialer(fc.DialRewrite)...)
	p.worker.DialOptions = append(p.worker.DialOptions, rewriteDialer(fc.DialRewrite)...)
	p.worker.MaxEntryBytes = cfg.MaxEntryBytes
	return p, nil
}

func setIf[T any](dst *T, src *T) {
	if src != nil {
		*dst = *src
	}
}

// loadBookieConfig parses a YAML bookie config and validates its
// autorecovery section; errors name the field.
func loadBookieConfig(data []byte) (bookie.Config, bookieFileConfig, autorecoveryPlan, error) {
	cfg, fc, err := parseBookieConfig(data)
	if err != nil {
		return cfg, fc, autorecoveryPlan{}, err
	}
	plan, err := autorecoveryConfigs(fc, cfg)
	if err != nil {
		return cfg, fc, plan, fmt.Errorf("bookie config: %w", err)
	}
	return cfg, fc, plan, nil
}

// bookieSecurity builds the process's security runtime into
// cfg.SecurityRuntime; close it when the process ends.
func bookieSecurity(cfg *bookie.Config) (*security.Runtime, error) {
	rt, err := security.NewRuntime(cfg.Security, cfg.Logger.With("component", "security"))
	if err != nil {
		return nil, fmt.Errorf("bookie config: %w", err)
	}
	cfg.SecurityRuntime = rt
	return rt, nil
}

// bookieMetadataClient connects to the metadata endpoints fc names, on
// metadata.shard (the bookie's region by default).
func bookieMetadataClient(ctx context.Context, configPath string, cfg bookie.Config, fc bookieFileConfig) (*metadata.Client, error) {
	shard := fc.Metadata.Shard
	if shard == "" {
		shard = cfg.Region
	}
	if shard == "" {
		return nil, fmt.Errorf("%s: metadata.shard (or region) must be set when metadata.endpoints is", configPath)
	}
	mc, err := metadata.NewClient(ctx, fc.Metadata.Endpoints, shard, metadata.WithLogger(cfg.Logger), withDialRewrite(fc.DialRewrite),
		metadata.WithDialOptions(cfg.SecurityRuntime.DialOptions("")...))
	if err != nil {
		return nil, fmt.Errorf("metadata client: %w", err)
	}
	return mc, nil
}

func parseBookieConfig(data []byte) (bookie.Config, bookieFileConfig, error) {
	var fc bookieFileConfig
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&fc); err != nil {
		return bookie.Config{}, fc, fmt.Errorf("bookie config: %w", err)
	}
	cfg := bookie.DefaultConfig()
	setIf(&cfg.ID, fc.ID)
	setIf(&cfg.Region, fc.Region)
	setIf(&cfg.Rack, fc.Rack)
	setIf(&cfg.ListenAddr, fc.ListenAddr)
	setIf(&cfg.AdvertiseAddr, fc.AdvertiseAddr)
	setIf(&cfg.HTTPAddr, fc.HTTPAddr)
	setIf(&cfg.JournalDir, fc.JournalDir)
	setIf(&cfg.LedgerDir, fc.LedgerDir)
	setIf(&cfg.MaxEntryBytes, fc.MaxEntryBytes)
	setIf(&cfg.GroupMaxWait, fc.GroupMaxWait)
	setIf(&cfg.GroupMaxBytes, fc.GroupMaxBytes)
	setIf(&cfg.GroupMaxEntries, fc.GroupMaxEntries)
	setIf(&cfg.FlushWhenIdle, fc.FlushWhenIdle)
	setIf(&cfg.MaxQueuedAdds, fc.MaxQueuedAdds)
	setIf(&cfg.MaxQueuedAddBytes, fc.MaxQueuedAddBytes)
	setIf(&cfg.MaxInflightAddBytesPerStream, fc.MaxInflightAddBytesPerStream)
	setIf(&cfg.MaxJournalFileBytes, fc.MaxJournalFileBytes)
	setIf(&cfg.Limits.MaxConnectionsPerIP, fc.MaxConnectionsPerIP)
	setIf(&cfg.Limits.MaxStreamsPerConnection, fc.MaxStreamsPerConnection)
	setIf(&cfg.Limits.MaxHeaderListBytes, fc.MaxHeaderListBytes)
	setIf(&cfg.Limits.MaxConnectionIdle, fc.MaxConnectionIdle)
	setIf(&cfg.Limits.HTTPReadTimeout, fc.HTTPReadTimeout)
	setIf(&cfg.Limits.HTTPWriteTimeout, fc.HTTPWriteTimeout)
	setIf(&cfg.Limits.HTTPIdleTimeout, fc.HTTPIdleTimeout)
	setIf(&cfg.Limits.HTTPMaxHeaderBytes, fc.HTTPMaxHeaderBytes)
	setIf(&cfg.CheckpointInterval, fc.CheckpointInterval)
	setIf(&cfg.GCInterval, fc.GCInterval)
	setIf(&cfg.CompactionThreshold, fc.CompactionThreshold)
	setIf(&cfg.DiskUsageThreshold, fc.DiskUsageThreshold)
	setIf(&cfg.DiskUsageLowWater, fc.DiskUsageLowWater)
	setIf(&cfg.DiskCheckInterval, fc.DiskCheckInterval)
	setIf(&cfg.ReadRangeMaxBytes, fc.ReadRangeMaxBytes)
	setIf(&cfg.SessionTTL, fc.SessionTTL)
	setIf(&cfg.ScrubInterval, fc.ScrubInterval)
	setIf(&cfg.ScrubStartDelay, fc.ScrubStartDelay)
	setIf(&cfg.ScrubBytesPerSecond, fc.ScrubBytesPerSecond)
	cfg.Security = fc.Security
	if fc.LogLevel != nil {
		var l slog.Level
		if err := l.UnmarshalText([]byte(*fc.LogLevel)); err != nil {
			return cfg, fc, fmt.Errorf("bookie config: log_level: %w", err)
		}
	}
	if fc.FaultInjection {
		cfg.Testing.FS = newChaosFaultFS()
		cfg.Testing.FaultHTTP = true
		cfg.Testing.UnsafeAckBeforeSync = fc.UnsafeAckBeforeSync
	} else if fc.UnsafeAckBeforeSync {
		return cfg, fc, fmt.Errorf("bookie config: unsafe_ack_before_sync needs fault_injection: true (chaos testing only)")
	}
	if g := fc.Gossip; g != nil && g.BindAddr != "" {
		mc := topology.DefaultMembershipConfig()
		mc.BindAddr, mc.AdvertiseAddr, mc.Seeds = g.BindAddr, g.AdvertiseAddr, g.Seeds
		mc.KeyFile = g.GossipKeyFile
		if g.Profile != "" {
			mc.Profile = topology.Profile(g.Profile)
		}
		if mc.Profile != topology.ProfileLAN && mc.Profile != topology.ProfileWAN {
			return cfg, fc, fmt.Errorf("bookie config: gossip.profile must be lan or wan, got %q", g.Profile)
		}
		cfg.Gossip = &mc
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fc, fmt.Errorf("bookie config: %w", err)
	}
	return cfg, fc, nil
}

func init() {
	var configPath string
	cmd := &cobra.Command{
		Use:   "bookie",
		Short: "Run a bookie (storage node)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configPath == "" {
				return fmt.Errorf("--config is required")
			}
			data, err := os.ReadFile(configPath)
			if err != nil {
				return err
			}
			cfg, fc, plan, err := loadBookieConfig(data)
			if err != nil {
				return fmt.Errorf("%s: %w", configPath, err)
			}
			level := slog.LevelInfo
			if fc.LogLevel != nil {
				_ = level.UnmarshalText([]byte(*fc.LogLevel))
			}
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			// One registry for the bookie and autorecovery: both on /metrics.
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			cfg.Registerer, cfg.Gatherer = reg, reg
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			sec, err := bookieSecurity(&cfg)
			if err != nil {
				return fmt.Errorf("%s: %w", configPath, err)
			}
			defer sec.Close()
			if len(fc.Metadata.Endpoints) > 0 {
				mc, err := bookieMetadataClient(ctx, configPath, cfg, fc)
				if err != nil {
					return err
				}
				defer mc.Close()
				cfg.Metadata = mc
				// Damaged replicas found by scrubs and reads are marked for
				// autorecovery, which rewrites them from healthy replicas.
				id := cfg.ID
				cfg.MarkUnderReplicated = func(ctx context.Context, ledgerID int64, reason string) error {
					return autorecovery.MarkCorrupt(ctx, mc, ledgerID, id, reason)
				}
			}
			// Large entries: gRPC's default pool zeroes a 1 MiB buffer per
			// 64 KiB message; the bookie's pool does not (see bookie.BufferPool).
			experimental.SetDefaultBufferPool(bookie.BufferPool())
			srv, err := bookie.NewServer(cfg)
			if err != nil {
				return err
			}
			startCtx, cancel := context.WithTimeout(ctx, time.Minute)
			err = srv.Start(startCtx)
			cancel()
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "bookie %s serving gRPC on %s, HTTP on %s\n", cfg.ID, srv.Addr(), srv.HTTPAddr())
			stopAR := func() {}
			if plan.enabled {
				if stopAR, err = startAutorecovery(plan, cfg, reg); err != nil {
					srv.Stop()
					return err
				}
				fmt.Fprintf(os.Stderr, "bookie %s running autorecovery (auditor candidate and worker, lost_bookie_delay %v)\n", cfg.ID, plan.auditor.LostBookieDelay)
			}
			<-ctx.Done()
			stopAR()
			srv.Stop()
			return nil
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "bookie YAML config file")
	cmd.AddCommand(bookieFormatCmd())
	rootCmd.AddCommand(cmd)
}

// bookieFormatCmd is `meridian bookie format`: it (re)formats a stopped
// bookie's data directories and writes its cookies (see bookie.Format).
func bookieFormatCmd() *cobra.Command {
	var (
		configPath string
		force      bool
	)
	cmd := &cobra.Command{
		Use:   "format",
		Short: "Format a stopped bookie's data directories: new instance ID and cookies (--force wipes existing data)",
		Long: `Format writes a new cookie (bookie ID, new instance UUID, directory layout)
to the bookie's journal and ledger directories and to the regional metadata.

With --force it first WIPES the directories. Use it after a disk was lost or
replaced: the bookie then joins as a new instance and stays in limbo (it
answers "ledger unknown", never "not found", for ledgers its previous
instance may have held) until autorecovery has moved those ledgers to other
bookies. The bookie must be stopped.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configPath == "" {
				return fmt.Errorf("--config is required")
			}
			data, err := os.ReadFile(configPath)
			if err != nil {
				return err
			}
			cfg, fc, err := parseBookieConfig(data)
			if err != nil {
				return fmt.Errorf("%s: %w", configPath, err)
			}
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			sec, err := bookieSecurity(&cfg)
			if err != nil {
				return fmt.Errorf("%s: %w", configPath, err)
			}
			defer sec.Close()
			if len(fc.Metadata.Endpoints) > 0 {
				mc, err := bookieMetadataClient(ctx, configPath, cfg, fc)
				if err != nil {
					return err
				}
				defer mc.Close()
				cfg.Metadata = mc
			}
			ck, err := bookie.Format(ctx, cfg, bookie.FormatOptions{Force: force})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "bookie %s formatted: instance %s", ck.BookieID, ck.InstanceID)
			if ck.LimboBelowLedger > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), ", in limbo for ledgers below %d until autorecovery has moved them", ck.LimboBelowLedger)
			}
			fmt.Fprintln(cmd.OutOrStdout())
			return nil
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "bookie YAML config file")
	cmd.Flags().BoolVar(&force, "force", false, "wipe data directories that are not empty")
	return cmd
}

// startAutorecovery starts an auditor candidate and a worker on the bookie's
// regional store; the returned func closes both.
func startAutorecovery(plan autorecoveryPlan, cfg bookie.Config, reg *prometheus.Registry) (func(), error) {
	plan.placement.Registerer = reg
	placement, err := topology.NewRackAwarePlacement(plan.placement)
	if err != nil {
		return nil, fmt.Errorf("autorecovery.placement: %w", err)
	}
	a, w := plan.auditor, plan.worker
	a.Store, w.Store, w.Placement = cfg.Metadata, cfg.Metadata, placement
	a.DialOptions = append(a.DialOptions, cfg.SecurityRuntime.DialOptions("")...)
	w.DialOptions = append(w.DialOptions, cfg.SecurityRuntime.DialOptions("")...)
	a.Logger = cfg.Logger
	w.Logger = cfg.Logger
	a.Registerer, w.Registerer = reg, reg
	auditor, err := autorecovery.NewAuditor(a)
	if err != nil {
		return nil, err
	}
	worker, err := autorecovery.NewWorker(w)
	if err != nil {
		return nil, err
	}
	auditor.Start()
	worker.Start()
	return func() {
		_ = worker.Close()
		_ = auditor.Close()
	}, nil
}
