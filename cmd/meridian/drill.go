//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/meridianmq/meridian/drill"
	"github.com/spf13/cobra"
)

// `meridian drill failover|switchback`: a workload across a move between
// two regions of a `meridian dev` cluster, measured (package drill).

func init() {
	root := &cobra.Command{
		Use:   "drill failover|switchback",
		Short: "Measure a move between regions of a dev cluster: RTO, RPO, duplicates, loss, latency",
		Long: `Run a workload across a move between two regions of a 'meridian dev' cluster and
measure it.

  drill failover    producers and consumers in --from; a fault there (--fault
                    kill-region | cut-links | pause-brokers); the clients fail
                    over to --to; the fault is healed and every acknowledged
                    message must arrive.
  drill switchback  the return trip: the workload runs in --from and an operator
                    moves it to --to (controlled, no fault).

The report gives RTO (fault → first publish and first delivery in --to), RPO
(messages acknowledged in --from and not in --to at the fault, and how many
arrived after the heal), duplicates, lost messages (must be 0) and publish and
end-to-end latency before, during and after the move. It is printed as text or
one JSON line (--output) and written with a self-contained report.html
(timeline chart) to --report DIR (default: drill-<id> next to cluster.json).
Exit 0 when no acknowledged message was lost, 1 when some were, 2 when the
drill could not run.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("drill: missing kind (failover or switchback)")
		},
	}
	root.AddCommand(drillCmd(drill.KindFailover, "a", "b"), drillCmd(drill.KindSwitchback, "b", "a"))
	rootCmd.AddCommand(root)
}

func drillCmd(kind, from, to string) *cobra.Command {
	cfg := drill.DefaultConfig()
	cfg.Kind, cfg.From, cfg.To = kind, from, to
	var output, reportDir string
	var verbose, history bool
	use := kind + " --cluster DIR/cluster.json --from " + from + " --to " + to
	short := "Fail over from a faulty region to another and measure the move"
	if kind == drill.KindSwitchback {
		short = "Move the workload back (controlled switch, no fault) and measure the move"
	} else {
		use += " [--fault kill-region|cut-links|pause-brokers]"
	}
	cmd := &cobra.Command{
		Use:   use + " [--rate 2000] [--duration 60s] [--output text|json] [--report DIR]",
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return &exitCodeError{2, err}
			}
			if kind == drill.KindSwitchback {
				cfg.Fault = drill.FaultNone
			}
			// Zero means "default" in drill.Config: refuse a 0 typed on
			// the command line rather than run with the default.
			for _, name := range []string{"rate", "duration", "fault-after", "heal-after", "drain-timeout", "producers", "consumers", "size", "probe-interval", "failed-probes"} {
				if fl := cmd.Flags().Lookup(name); fl != nil && fl.Changed && (fl.Value.String() == "0" || fl.Value.String() == "0s") {
					return &exitCodeError{2, fmt.Errorf("drill: --%s %s: must be > 0", name, fl.Value)}
				}
			}
			if err := cfg.Validate(); err != nil {
				return &exitCodeError{2, err}
			}
			cfg.Logger = toolLogger(verbose)
			cfg.Progress = cmd.ErrOrStderr()
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			res, err := drill.Run(ctx, cfg)
			if err != nil {
				return &exitCodeError{2, err}
			}
			rep := &res.Report
			dir := reportDir
			if dir == "" {
				base := cfg.Cluster
				if filepath.Ext(base) == ".json" {
					base = filepath.Dir(base)
				}
				dir = filepath.Join(base, "drill-"+rep.Drill)
			}
			if err := writeDrillReport(dir, rep, res.History); err != nil {
				return &exitCodeError{2, err}
			}
			if history {
				b, err := json.Marshal(res.History)
				if err == nil {
					err = os.WriteFile(filepath.Join(dir, "history.json"), b, 0o644)
				}
				if err != nil {
					return &exitCodeError{2, fmt.Errorf("--history: %w", err)}
				}
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "[drill %s] report: %s\n", rep.Drill, filepath.Join(dir, "report.html"))
			if output == "json" {
				err = rep.WriteJSON(cmd.OutOrStdout())
			} else {
				err = rep.WriteText(cmd.OutOrStdout())
			}
			if err != nil {
				return err
			}
			if !rep.Passed() {
				return &exitCodeError{1, fmt.Errorf("drill %s: %d acknowledged messages lost", rep.Drill, rep.Lost)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Cluster, "cluster", "meridian-dev/cluster.json", "the dev cluster's cluster.json (or its directory)")
	f.StringVar(&cfg.From, "from", from, "region the workload starts in")
	f.StringVar(&cfg.To, "to", to, "region the workload moves to")
	if kind == drill.KindFailover {
		f.StringVar(&cfg.Fault, "fault", cfg.Fault, "fault injected in --from: kill-region, cut-links or pause-brokers")
	}
	f.Float64Var(&cfg.Rate, "rate", cfg.Rate, "messages per second over all producers")
	f.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long the producers run")
	f.DurationVar(&cfg.FaultAfter, "fault-after", 0, "when the fault (or the switch) happens, from the start (default duration/4)")
	if kind == drill.KindFailover {
		f.DurationVar(&cfg.HealAfter, "heal-after", 0, "when the fault is healed, from the start (default fault-after + duration/2)")
	}
	f.DurationVar(&cfg.DrainTimeout, "drain-timeout", cfg.DrainTimeout, "how long to wait after the producers stop for every acknowledged message to arrive")
	f.IntVar(&cfg.Producers, "producers", cfg.Producers, "producers")
	f.IntVar(&cfg.Consumers, "consumers", cfg.Consumers, "consumers (more than one: a Shared subscription)")
	f.IntVar(&cfg.Size, "size", cfg.Size, "payload size in bytes")
	f.StringVar(&cfg.Namespace, "namespace", cfg.Namespace, "namespace of the drill's topic (created if missing, replicated between --from and --to)")
	f.StringVar(&cfg.Mode, "mode", drill.ModeClient, "how the workload moves: client (the client's own failover) or reconnect (the drill reopens the clients in --to)")
	f.BoolVar(&cfg.PerRegionSubscription, "per-region-subscription", false, "use an ordinary subscription created in both regions instead of a replicated one (for comparison: every acknowledged message is delivered again after the move)")
	f.DurationVar(&cfg.ProbeInterval, "probe-interval", cfg.ProbeInterval, "failover probe interval")
	f.IntVar(&cfg.FailedProbes, "failed-probes", cfg.FailedProbes, "failed probes in a row before switching")
	f.StringVar(&cfg.ID, "id", "", "drill ID (topic drill-<id>; default random)")
	f.StringVarP(&output, "output", "o", "text", "text or json (one line)")
	f.StringVar(&reportDir, "report", "", "directory for report.html, report.json and report.txt (default: drill-<id> next to cluster.json)")
	f.BoolVar(&verbose, "verbose", false, "debug logs on stderr")
	f.BoolVar(&history, "history", false, "also write history.json: every send, acknowledgement, delivery, observation and event, with its time")
	return cmd
}

// writeDrillReport writes report.html, report.json and report.txt to dir.
func writeDrillReport(dir string, rep *drill.Report, h drill.History) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	for _, f := range []struct {
		name  string
		write func(io.Writer) error
	}{
		{"report.html", func(w io.Writer) error { return rep.WriteHTML(w, h) }},
		{"report.json", rep.WriteJSON},
		{"report.txt", rep.WriteText},
	} {
		var b bytes.Buffer
		if err := f.write(&b); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, f.name), b.Bytes(), 0o644); err != nil {
			return fmt.Errorf("--report: %w", err)
		}
	}
	return nil
}
