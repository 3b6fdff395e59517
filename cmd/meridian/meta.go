package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/meridianmq/meridian/metadata"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
)

func init() {
	var configPath, logLevel string
	cmd := &cobra.Command{
		Use:   "meta --config FILE",
		Short: "Run one metadata node (Dragonboat replicas of the global and regional shards)",
		Long: "Run one metadata node from a YAML config (see deploy/config/meta.yaml): node_id, raft_address,\n" +
			"grpc_address, http_address, data_dir and the shards it hosts with their initial members.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if configPath == "" {
				return fmt.Errorf("meta: --config is required")
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("meta: --log-level %q: %w", logLevel, err)
			}
			cfg, err := metadata.LoadNodeConfig(configPath)
			if err != nil {
				return err
			}
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			cfg.Registerer = reg
			node, err := metadata.NewNode(cfg)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := node.Start(ctx); err != nil {
				return err
			}
			cfg.Logger.Info("meta node running", "grpc", node.GRPCAddr(), "http", node.HTTPAddr())
			<-ctx.Done()
			node.Stop()
			return nil
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "YAML node config file (required)")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	rootCmd.AddCommand(cmd)
}
