package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/meridianmq/meridian/region"
	"github.com/spf13/cobra"
)

func init() {
	var dataDir, grpcAddr, httpAddr, regionName, logLevel string
	cmd := &cobra.Command{
		Use:   "standalone",
		Short: "Run a whole region (metadata, one bookie, one broker) in one process",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level %q: want debug, info, warn or error", logLevel)
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			sa, err := region.StartStandalone(ctx, region.StandaloneConfig{DataDir: dataDir, GRPCAddr: grpcAddr, HTTPAddr: httpAddr, Region: regionName, Logger: log})
			cancel()
			if err != nil {
				return err
			}
			fmt.Printf("meridian standalone ready: grpc %s, http %s (metrics /metrics, admin /admin/v1/), data %s\n", sa.GRPCAddr(), sa.HTTPAddr(), dataDir)
			sig := make(chan os.Signal, 1)
			signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
			<-sig
			fmt.Println("meridian standalone stopping")
			return sa.Close()
		},
	}
	cmd.Flags().StringVar(&dataDir, "data-dir", "./data", "directory for metadata, journal and ledgers")
	cmd.Flags().StringVar(&grpcAddr, "grpc", "127.0.0.1:6650", "gRPC address (client and admin protocol)")
	cmd.Flags().StringVar(&httpAddr, "http", "127.0.0.1:8080", "HTTP address (/metrics, /healthz, /readyz, admin JSON)")
	cmd.Flags().StringVar(&regionName, "region", "standalone", "region name")
	cmd.Flags().StringVar(&logLevel, "log-level", "warn", "log level: debug, info, warn, error")
	rootCmd.AddCommand(cmd)
}
