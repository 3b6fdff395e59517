//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/meridianmq/meridian/region"
	"github.com/spf13/cobra"
)

// `meridian dev`: a local multi-region cluster of separate processes, and
// the subcommands that act on it through its control address.

func init() {
	def := region.DefaultDevConfig()
	var (
		dataDir, regions, logLevel string
		cfg                        = def
	)
	cmd := &cobra.Command{
		Use:   "dev --regions a,b,c",
		Short: "Run a local multi-region cluster (separate processes, link proxies between regions)",
		Long: `Run a local multi-region cluster on 127.0.0.1: for every region one metadata
node (replica of the global shard and of the region's shard), --bookies bookies
spread over --racks racks and --brokers brokers, each a separate process of this
binary with its config, data and log under DIR/<region>/. Traffic between regions
goes through link proxies in this process that add --wan-latency and --jitter
and can be cut (see 'meridian dev link'). Once every region is ready,
DIR/cluster.json names each region's first broker and the control address that
'meridian dev link|kill|start|status' use. Ctrl-C stops every process; running
again on the same --data-dir restarts the same cluster with its data.

The cluster is secured by default: TLS on every listener and link (mutual
between the processes), token authentication, encrypted broker gossip, with a
CA, certificates, a key and an admin token generated once in DIR/security.
cluster.json names the CA and the admin token: every meridian tool command
given the address of one of its brokers (--url) and no credential flags or
context uses them. The control endpoint requires DIR/control.token. The
default DIR is $MERIDIAN_DEV_DIR, else ./meridian-dev. --insecure runs the
processes in plaintext without authentication.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level %q: want debug, info, warn or error", logLevel)
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
			bin, err := os.Executable()
			if err != nil {
				return fmt.Errorf("dev: find this binary: %w", err)
			}
			cfg.Binary, cfg.DataDir, cfg.Logger = bin, dataDir, log
			cfg.Regions = nil
			for _, r := range strings.Split(regions, ",") {
				if r = strings.TrimSpace(r); r != "" {
					cfg.Regions = append(cfg.Regions, r)
				}
			}
			if !cmd.Flags().Changed("racks") && cfg.Racks > cfg.Bookies {
				cfg.Racks = cfg.Bookies
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			// First Ctrl-C: orderly stop. Second: kill what is left.
			sig := make(chan os.Signal, 2)
			signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(sig)
			startCtx, cancelStart := context.WithCancel(cmd.Context())
			stopCtx, cancelStop := context.WithCancel(context.Background())
			defer cancelStop()
			go func() {
				<-sig
				log.Info("stopping the dev cluster (Ctrl-C again to kill it)")
				cancelStart()
				<-sig
				cancelStop()
			}()
			d, err := region.StartDev(startCtx, cfg)
			if err != nil {
				cancelStart()
				return err
			}
			info := d.Info()
			fmt.Fprintf(cmd.OutOrStdout(), "meridian dev: %d regions ready; cluster file %s/%s, control %s\n", len(info.Regions), dataDir, region.DevClusterFile, info.Control)
			for _, r := range info.Regions {
				fmt.Fprintf(cmd.OutOrStdout(), "  region %s: grpc %s  http %s\n", r.Name, r.GRPC, r.HTTP)
			}
			if info.CA != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "secured: TLS with CA %s, admin token %s (the meridian tools find them through the cluster file)\n", info.CA, info.AdminToken)
			} else {
				fmt.Fprintln(cmd.OutOrStdout(), "INSECURE (--insecure): plaintext, no authentication")
			}
			<-startCtx.Done()
			d.Stop(stopCtx)
			fmt.Fprintln(cmd.OutOrStdout(), "meridian dev: stopped")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&regions, "regions", "a,b,c", "comma-separated region names")
	f.DurationVar(&cfg.WANLatency, "wan-latency", 0, "one-way latency added to traffic between regions (e.g. 40ms)")
	f.DurationVar(&cfg.Jitter, "jitter", 0, "jitter added to that latency (uniform in ±jitter)")
	f.IntVar(&cfg.Bookies, "bookies", def.Bookies, "bookies per region")
	f.IntVar(&cfg.Racks, "racks", def.Racks, "racks the bookies of a region are spread over")
	f.IntVar(&cfg.Brokers, "brokers", def.Brokers, "brokers per region")
	f.DurationVar(&cfg.ReadyTimeout, "ready-timeout", def.ReadyTimeout, "how long the cluster may take to start")
	f.StringVar(&logLevel, "log-level", "info", "log level of the dev process: debug, info, warn, error")
	f.BoolVar(&cfg.Insecure, "insecure", false, "run the processes in plaintext without authentication (default: TLS and tokens with credentials generated in DIR/security)")
	f.BoolVar(&cfg.FaultInjection, "fault-injection", false, "start bookies and metadata nodes with their fault controls ('meridian dev disk|clock'; chaos testing only)")
	f.BoolVar(&cfg.UnsafeAckBeforeSync, "unsafe-ack-before-sync", false, "BREAKS DURABILITY: bookies acknowledge before fsync (needs --fault-injection; for testing the chaos suite)")
	cmd.PersistentFlags().StringVar(&dataDir, "data-dir", devDataDirDefault(), "the cluster's directory (configs, data, logs, cluster.json; default $"+devDirEnv+" or ./"+def.DataDir+")")
	cmd.AddCommand(devLinkCmd(&dataDir), devKillCmd(&dataDir), devStartCmd(&dataDir), devStatusCmd(&dataDir))
	cmd.AddCommand(devFaultCmds(&dataDir)...)
	rootCmd.AddCommand(cmd)
}

// devControl finds the running cluster of dataDir.
func devControl(dataDir string) (*region.DevControlClient, error) {
	info, err := region.ReadDevCluster(dataDir)
	if err != nil {
		return nil, err
	}
	return info.ControlClient(nil)
}

func devLinkCmd(dataDir *string) *cobra.Command {
	link := &cobra.Command{Use: "link", Short: "Cut, heal, delay, shape or partition links between regions or processes",
		Long: "An endpoint is a region (a: its links to other regions) or a process of a region\n" +
			"(a/broker-0, a/bookie-1, a/meta-0: its links to the other processes of its region)."}
	var oneway bool
	cut := &cobra.Command{
		Use:   "cut A B",
		Short: "Cut traffic between endpoints A and B (with --oneway only A→B)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return devLink(cmd, *dataDir, region.DevLinkRequest{Op: "cut", A: args[0], B: args[1], Oneway: oneway})
		},
	}
	cut.Flags().BoolVar(&oneway, "oneway", false, "cut only traffic from A to B")
	heal := &cobra.Command{
		Use:   "heal A B",
		Short: "Restore traffic between endpoints A and B, both ways",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return devLink(cmd, *dataDir, region.DevLinkRequest{Op: "heal", A: args[0], B: args[1]})
		},
	}
	var jitter string
	latency := &cobra.Command{
		Use:   "latency A B LATENCY",
		Short: "Set the one-way latency (and --jitter) between endpoints A and B, both ways",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			return devLink(cmd, *dataDir, region.DevLinkRequest{Op: "latency", A: args[0], B: args[1], Latency: args[2], Jitter: jitter})
		},
	}
	latency.Flags().StringVar(&jitter, "jitter", "", "jitter (e.g. 5ms; default 0)")
	link.AddCommand(cut, heal, latency, devLinkShapeCmd(dataDir), devLinkPartitionCmd(dataDir), devLinkHealAllCmd(dataDir))
	return link
}

func devLink(cmd *cobra.Command, dataDir string, req region.DevLinkRequest) error {
	c, err := devControl(dataDir)
	if err != nil {
		return err
	}
	st, err := c.Link(cmd.Context(), req)
	if err != nil {
		return fmt.Errorf("dev link %s: %w", req.Op, err)
	}
	printDevLinks(cmd.OutOrStdout(), req, st.Links)
	return nil
}

// devProcessArgs parses ROLE REGION INDEX.
func devProcessArgs(args []string) (region.DevProcessRequest, error) {
	idx, err := strconv.Atoi(args[2])
	if err != nil || idx < 0 {
		return region.DevProcessRequest{}, fmt.Errorf("INDEX: %q is not a number >= 0", args[2])
	}
	return region.DevProcessRequest{Role: args[0], Region: args[1], Index: idx}, nil
}

func devKillCmd(dataDir *string) *cobra.Command {
	var sig string
	cmd := &cobra.Command{
		Use:   "kill ROLE REGION INDEX",
		Short: "Send a signal (default KILL) to a process: ROLE meta|bookie|broker, e.g. kill broker a 0",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := devProcessArgs(args)
			if err != nil {
				return err
			}
			req.Op, req.Signal = "kill", sig
			return devProcess(cmd, *dataDir, req)
		},
	}
	cmd.Flags().StringVar(&sig, "signal", "KILL", "KILL, TERM, INT, STOP (pause) or CONT (resume)")
	return cmd
}

func devStartCmd(dataDir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "start ROLE REGION INDEX",
		Short: "Restart a killed process with its config and data, and wait until it is ready",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := devProcessArgs(args)
			if err != nil {
				return err
			}
			req.Op = "start"
			return devProcess(cmd, *dataDir, req)
		},
	}
}

func devProcess(cmd *cobra.Command, dataDir string, req region.DevProcessRequest) error {
	c, err := devControl(dataDir)
	if err != nil {
		return err
	}
	st, err := c.Process(cmd.Context(), req)
	if err != nil {
		return fmt.Errorf("dev %s: %w", req.Op, err)
	}
	for _, p := range st.Processes {
		if p.Role == req.Role && p.Region == req.Region && p.Index == req.Index {
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s pid %d (starts %d) %s\n", p.Name, p.State, p.PID, p.Starts, p.Exit)
		}
	}
	return nil
}

func devStatusCmd(dataDir *string) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the cluster's processes (pid, state) and links (latency, cut)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("--output %q: want text or json", output)
			}
			c, err := devControl(*dataDir)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			st, err := c.Status(ctx)
			if err != nil {
				return fmt.Errorf("dev status: %w", err)
			}
			return printDevStatus(cmd.OutOrStdout(), st, output)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}

func printDevStatus(w io.Writer, st region.DevStatus, output string) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	fmt.Fprintf(w, "data dir %s, control %s\n\n", st.DataDir, st.Control)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESS\tID\tPID\tSTATE\tSTARTS\tGRPC\tHTTP\tLAST EXIT")
	for _, p := range st.Processes {
		pid := "-"
		if p.PID != 0 {
			pid = strconv.Itoa(p.PID)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", p.Name, p.ID, pid, p.State, p.Starts, p.GRPC, p.HTTP, p.Exit)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LINK\tLATENCY\tJITTER\tCUT\tSHAPE")
	for _, l := range st.Links {
		fmt.Fprintf(tw, "%s→%s\t%s\t%s\t%v\t%s\n", l.From, l.To, l.Latency, l.Jitter, l.Cut, devShapeText(l))
	}
	return tw.Flush()
}
