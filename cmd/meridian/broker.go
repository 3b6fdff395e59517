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

	"github.com/meridianmq/meridian/bookie/ledger"
	"github.com/meridianmq/meridian/broker"
	"github.com/meridianmq/meridian/metadata"
	"github.com/meridianmq/meridian/security"
	"github.com/meridianmq/meridian/topology"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
)

// brokerFileConfig is the YAML form of a broker process (see
// deploy/config/broker.yaml). Unset fields keep their defaults; unknown
// fields are an error.
type brokerFileConfig struct {
	// Broker holds broker.Config fields by their yaml names.
	Broker   broker.Config `yaml:"broker"`
	Metadata struct {
		// Endpoints are metadata nodes' gRPC addresses (required).
		Endpoints []string `yaml:"endpoints"`
		// RegionalShard defaults to broker.region.
		RegionalShard string `yaml:"regional_shard"`
	} `yaml:"metadata"`
	Ledger struct {
		AddTimeout    time.Duration `yaml:"add_timeout"`
		MaxInFlight   int           `yaml:"max_in_flight"`
		MaxEntryBytes int           `yaml:"max_entry_bytes"`
	} `yaml:"ledger"`
	Placement struct {
		MinRacksPerWriteQuorum int  `yaml:"min_racks_per_write_quorum"`
		Enforce                bool `yaml:"enforce"`
	} `yaml:"placement"`
	LogLevel string `yaml:"log_level"`
}

func loadBrokerConfig(data []byte) (brokerFileConfig, error) {
	fc := brokerFileConfig{Broker: broker.DefaultConfig(), LogLevel: "info"}
	fc.Ledger.AddTimeout = 10 * time.Second
	fc.Ledger.MaxInFlight = 1024
	fc.Ledger.MaxEntryBytes = 6 << 20
	// 1, like the samples and the bookies' autorecovery placement: the
	// policy spreads ensembles over racks anyway, and a goal of 2 on a
	// single rack (a laptop, the samples) only logs and counts a degraded
	// placement for every ledger. Set 2 once bookies sit on several racks.
	fc.Placement.MinRacksPerWriteQuorum = 1
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&fc); err != nil {
		return fc, err
	}
	if len(fc.Metadata.Endpoints) == 0 {
		return fc, fmt.Errorf("metadata.endpoints is empty: list at least one metadata node's gRPC address")
	}
	if fc.Broker.Region == "" {
		return fc, fmt.Errorf("broker.region is empty")
	}
	if fc.Metadata.RegionalShard == "" {
		fc.Metadata.RegionalShard = fc.Broker.Region
	}
	if err := validateDialRewrite("broker.dial_rewrite", fc.Broker.DialRewrite); err != nil {
		return fc, err
	}
	return fc, nil
}

func init() {
	var configPath string
	cmd := &cobra.Command{
		Use:   "broker",
		Short: "Run a broker (client and admin protocol) of a region",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := os.ReadFile(configPath)
			if err != nil {
				return fmt.Errorf("--config: %w", err)
			}
			fc, err := loadBrokerConfig(data)
			if err != nil {
				return fmt.Errorf("%s: %w", configPath, err)
			}
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(fc.LogLevel)); err != nil {
				return fmt.Errorf("%s: log_level %q: want debug, info, warn or error", configPath, fc.LogLevel)
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
			ctx := context.Background()
			// One runtime for the broker's listeners and every client it
			// dials with (metadata, bookies): one set of file watchers.
			sec, err := security.NewRuntime(fc.Broker.Security, log.With("component", "security"))
			if err != nil {
				return fmt.Errorf("%s: broker.%w", configPath, err)
			}
			defer sec.Close()
			global, err := metadata.NewClient(ctx, fc.Metadata.Endpoints, metadata.GlobalShard, metadata.WithLogger(log), withDialRewrite(fc.Broker.DialRewrite),
				metadata.WithDialOptions(sec.DialOptions("")...))
			if err != nil {
				return err
			}
			defer global.Close()
			regional, err := metadata.NewClient(ctx, fc.Metadata.Endpoints, fc.Metadata.RegionalShard, metadata.WithLogger(log), withDialRewrite(fc.Broker.DialRewrite),
				metadata.WithDialOptions(sec.DialOptions("")...))
			if err != nil {
				return err
			}
			defer regional.Close()
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			pcfg := topology.DefaultRackAwareConfig()
			pcfg.MinRacksPerWriteQuorum = fc.Placement.MinRacksPerWriteQuorum
			pcfg.Enforce = fc.Placement.Enforce
			pcfg.Registerer = reg
			placement, err := topology.NewRackAwarePlacement(pcfg)
			if err != nil {
				return fmt.Errorf("%s: placement: %w", configPath, err)
			}
			lcfg := ledger.DefaultConfig()
			lcfg.Store = regional
			lcfg.Placement = placement
			lcfg.Region = fc.Broker.Region
			lcfg.Logger = log.With("component", "ledger")
			lcfg.Registerer = reg
			lcfg.AddTimeout = fc.Ledger.AddTimeout
			lcfg.MaxInFlight = fc.Ledger.MaxInFlight
			lcfg.MaxEntryBytes = fc.Ledger.MaxEntryBytes
			lcfg.DialOptions = append(lcfg.DialOptions, rewriteDialer(fc.Broker.DialRewrite)...)
			lcfg.DialOptions = append(lcfg.DialOptions, sec.DialOptions("")...)
			lc, err := ledger.NewClient(lcfg)
			if err != nil {
				return fmt.Errorf("%s: ledger: %w", configPath, err)
			}
			defer lc.Close()
			bc := fc.Broker
			bc.Global, bc.Regional = global, regional
			bc.Ledgers = broker.NewLedgerStore(lc)
			bc.Logger = log.With("component", "broker")
			bc.Registerer, bc.Gatherer = reg, reg
			bc.SecurityRuntime = sec
			srv, err := broker.NewServer(bc)
			if err != nil {
				return fmt.Errorf("%s: %w", configPath, err)
			}
			sctx, cancel := context.WithTimeout(ctx, time.Minute)
			// Like standalone: tenant "public" and "public/default" exist.
			if err := ensureDefaultNamespace(sctx, srv, log); err != nil {
				cancel()
				return fmt.Errorf("default namespace: %w", err)
			}
			err = srv.Start(sctx)
			cancel()
			if err != nil {
				return err
			}
			fmt.Printf("meridian broker %s ready: grpc %s, http %s\n", srv.ID(), srv.Addr(), srv.HTTPAddr())
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
			<-sig
			fmt.Println("meridian broker stopping")
			stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			return srv.Stop(stopCtx)
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "YAML config file (see deploy/config/broker.yaml)")
	_ = cmd.MarkFlagRequired("config")
	rootCmd.AddCommand(cmd)
}

// ensureDefaultNamespace creates public/default, retrying until ctx ends:
// the global shard may be briefly out of reach (a region starting before
// the others, a WAN link just healed), and a timed-out create whose
// outcome is unknown is settled by the next attempt finding it.
func ensureDefaultNamespace(ctx context.Context, srv *broker.Server, log *slog.Logger) error {
	for {
		err := srv.EnsureDefaultNamespace(ctx)
		if err == nil {
			return nil
		}
		log.Warn("default namespace not ensured yet: retrying", "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
}
