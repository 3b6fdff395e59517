//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meridianmq/meridian/chaos/check"
	"github.com/meridianmq/meridian/chaos/run"
	"github.com/meridianmq/meridian/region"
)

func init() {
	chaosCmd.AddCommand(chaosRunCmd(), chaosListCmd())
}

// chaosRunOpts are the flags of `meridian chaos run`.
type chaosRunOpts struct {
	cfg       run.Config
	cluster   string
	dev       string
	dataDir   string
	bookies   int
	brokers   int
	faults    string
	reportDir string
	output    string
	verbose   bool
	unsafeAck bool
}

func chaosRunCmd() *cobra.Command {
	var o chaosRunOpts
	cmd := &cobra.Command{
		Use:   "run --cluster DIR/cluster.json|--dev a,b,c [--faults kill,pause,restart,partition,net,disk,clock,operator] [--seed N] [--duration 5m] [--rate 2000] [--scenario NAME] [--report DIR] [--output text|json]",
		Short: "Run a workload under a seeded fault schedule (or a named scenario) and check the history",
		Long: `Runs producers in every region (unique payloads: run, origin, producer,
sequence; half of them with deduplication names) and consumers on replicated
(exclusive, failover) and local (shared) subscriptions, with client failover
on, while the fault schedule of --seed (or --scenario) is injected through the
dev cluster's control API. Then every fault is healed, the producers stop, the
run waits for the backlogs to drain (--quiet at most), reads every region's
topics back from the earliest message, and judges the history with the
checkers (meridian chaos check). The same seed gives the same schedule.

--dev a,b starts a 'meridian dev' cluster with fault injection for the run (in
--data-dir, or a temporary directory removed after a valid run) and stops it at
the end, also on Ctrl-C or an error.

Writes history.jsonl, verdict.json, verdict.txt, schedule.json and
report.html to --report (default ./chaos-<id>). Prints a progress line on
stderr, then the verdict table (or one JSON line with --output json).
Exit 0 valid, 1 a checker failed, 2 the run could not be completed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runChaos(cmd, &o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.cluster, "cluster", "", "a running dev cluster's cluster.json (or its directory)")
	f.StringVar(&o.dev, "dev", "", "start a dev cluster with these regions (comma-separated) for the run")
	f.StringVar(&o.dataDir, "data-dir", "", "--dev: the cluster's data directory (default: a temporary one)")
	f.IntVar(&o.bookies, "bookies", 3, "--dev: bookies per region")
	f.IntVar(&o.brokers, "brokers", 2, "--dev: brokers per region")
	f.StringVar(&o.faults, "faults", strings.Join(run.DefaultFamilies, ","), "fault families or kinds (meridian chaos list; the operator family only when named)")
	f.Int64Var(&o.cfg.Seed, "seed", 1, "schedule seed")
	f.DurationVar(&o.cfg.Duration, "duration", 5*time.Minute, "length of the fault phase")
	f.Float64Var(&o.cfg.Rate, "rate", 2000, "messages per second over all producers")
	f.IntVar(&o.cfg.Topics, "topics", 2, "replicated topics")
	f.IntVar(&o.cfg.Size, "size", 100, "payload size in bytes")
	f.DurationVar(&o.cfg.Quiet, "quiet", 2*time.Minute, "longest wait after the heal for every backlog to drain")
	f.StringVar(&o.cfg.Scenario, "scenario", "", "run a named scenario instead of the seeded schedule (meridian chaos list)")
	f.StringVar(&o.cfg.ID, "id", "", "run ID (namespace public/chaos-<id>; default random)")
	f.StringVar(&o.reportDir, "report", "", "directory for history.jsonl, verdict.json, verdict.txt, schedule.json and report.html (default ./chaos-<id>)")
	f.StringVarP(&o.output, "output", "o", "text", "text (verdict table) or json (one line)")
	f.BoolVar(&o.verbose, "verbose", false, "debug logs on stderr")
	f.BoolVar(&o.unsafeAck, "unsafe-ack-before-sync", false, "--dev, tests only: bookies acknowledge before fsync (a deliberately broken build)")
	_ = f.MarkHidden("unsafe-ack-before-sync")
	return cmd
}

// validate checks the flags that need no cluster.
func (o *chaosRunOpts) validate(cmd *cobra.Command) error {
	if err := checkOutput(o.output); err != nil {
		return err
	}
	if (o.cluster == "") == (o.dev == "") {
		return errors.New("chaos run: give exactly one of --cluster DIR/cluster.json and --dev REGIONS")
	}
	for _, name := range []string{"rate", "duration", "topics", "size", "quiet"} {
		if fl := cmd.Flags().Lookup(name); fl.Changed && (fl.Value.String() == "0" || fl.Value.String() == "0s") {
			return fmt.Errorf("chaos run: --%s %s: must be > 0", name, fl.Value)
		}
	}
	if o.unsafeAck && o.dev == "" {
		return errors.New("chaos run: --unsafe-ack-before-sync needs --dev")
	}
	kinds, err := run.KindsOf(strings.Split(o.faults, ","))
	if err != nil {
		return err
	}
	o.cfg.Faults = kinds
	cfg := o.cfg
	cfg.Control = "-"
	return cfg.Validate()
}

func runChaos(cmd *cobra.Command, o *chaosRunOpts) error {
	if err := o.validate(cmd); err != nil {
		return &exitCodeError{2, err}
	}
	if o.cfg.ID == "" {
		o.cfg.ID = fmt.Sprintf("%x", time.Now().UnixNano()&0xffffffff)
	}
	ctx, stop := signalContext(cmd.Context())
	defer stop()
	log := toolLogger(o.verbose)
	stderr := cmd.ErrOrStderr()
	dir := o.reportDir
	if dir == "" {
		dir = "chaos-" + o.cfg.ID
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return &exitCodeError{2, fmt.Errorf("--report: %w", err)}
	}
	hf, err := os.Create(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		return &exitCodeError{2, fmt.Errorf("--report: %w", err)}
	}
	defer hf.Close()

	// The cluster: a running one, or one started for the run.
	if o.dev != "" {
		d, dataDir, err := startChaosDev(ctx, o, log, stderr)
		if err != nil {
			return &exitCodeError{2, err}
		}
		valid := false
		defer func() {
			fmt.Fprintf(stderr, "[chaos %s] stopping the dev cluster\n", o.cfg.ID)
			sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			d.Stop(sctx)
			cancel()
			if o.dataDir == "" && valid {
				_ = os.RemoveAll(dataDir)
			} else {
				fmt.Fprintf(stderr, "[chaos %s] dev cluster data and logs kept in %s\n", o.cfg.ID, dataDir)
			}
		}()
		o.cfg.Progress = stderr
		code, err := chaosRunOn(ctx, o, d.Info(), hf, dir, log, cmd.OutOrStdout())
		valid = code == 0 && err == nil
		if err != nil {
			return &exitCodeError{code, err}
		}
		return nil
	}
	p := o.cluster
	if strings.HasSuffix(p, ".json") {
		p = filepath.Dir(p)
	}
	info, err := region.ReadDevCluster(p)
	if err != nil {
		return &exitCodeError{2, fmt.Errorf("--cluster: %w", err)}
	}
	o.cfg.Progress = stderr
	code, err := chaosRunOn(ctx, o, info, hf, dir, log, cmd.OutOrStdout())
	if err != nil {
		return &exitCodeError{code, err}
	}
	return nil
}

// startChaosDev starts the --dev cluster with fault injection.
func startChaosDev(ctx context.Context, o *chaosRunOpts, log *slog.Logger, stderr io.Writer) (*region.Dev, string, error) {
	bin, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	dataDir := o.dataDir
	if dataDir == "" {
		if dataDir, err = os.MkdirTemp("", "meridian-chaos-"); err != nil {
			return nil, "", err
		}
	}
	cfg := region.DefaultDevConfig()
	cfg.Binary, cfg.DataDir, cfg.Logger, cfg.FaultInjection = bin, dataDir, log, true
	cfg.UnsafeAckBeforeSync = o.unsafeAck
	cfg.Regions = strings.Split(o.dev, ",")
	cfg.Bookies, cfg.Brokers = o.bookies, o.brokers
	cfg.Racks = min(cfg.Racks, cfg.Bookies)
	fmt.Fprintf(stderr, "[chaos %s] starting a dev cluster: regions %s, %d bookies and %d brokers each, in %s\n", o.cfg.ID, o.dev, o.bookies, o.brokers, dataDir)
	d, err := region.StartDev(ctx, cfg)
	if err != nil {
		return nil, dataDir, fmt.Errorf("--dev: %w", err)
	}
	return d, dataDir, nil
}

// chaosRunOn runs the chaos run against the cluster of info (its control
// endpoint with its token, its brokers with its credentials), writes
// the report files and prints the verdict. It returns the exit code.
func chaosRunOn(ctx context.Context, o *chaosRunOpts, info region.DevClusterInfo, hf *os.File, dir string, log *slog.Logger, stdout io.Writer) (int, error) {
	cfg := o.cfg
	cfg.Control, cfg.History, cfg.Logger = info.Control, hf, log
	tok, err := region.ReadControlToken(info.ControlToken)
	if err != nil {
		return 2, err
	}
	cfg.ControlToken = tok
	cfg.TLS, cfg.TokenFile = info.Credentials()
	start := time.Now()
	res, err := run.Run(ctx, cfg)
	if err != nil {
		return 2, err
	}
	if err := hf.Sync(); err != nil {
		return 2, fmt.Errorf("--report: history.jsonl: %w", err)
	}
	v := check.Check(res.History, check.Options{})
	if err := writeChaosRunReport(dir, res, v); err != nil {
		return 2, err
	}
	fmt.Fprintf(cfg.Progress, "[chaos %s] done in %v; report in %s\n", cfg.ID, time.Since(start).Round(time.Second), dir)
	for _, n := range res.Notes {
		fmt.Fprintf(cfg.Progress, "[chaos %s] note: %s\n", cfg.ID, n)
	}
	if o.output == "json" {
		err = v.WriteJSON(stdout)
	} else {
		err = v.WriteText(stdout)
	}
	if err != nil {
		return 2, err
	}
	if !v.Valid {
		var failed []string
		for _, r := range v.Results {
			if !r.Pass {
				failed = append(failed, fmt.Sprintf("%s (%d)", r.Name, r.Count))
			}
		}
		return 1, fmt.Errorf("chaos run %s (seed %d): checkers failed: %s", cfg.ID, cfg.Seed, strings.Join(failed, ", "))
	}
	return 0, nil
}

// writeChaosRunReport writes the checker's report files (report.html,
// verdict.json, verdict.txt) and schedule.json to dir (history.jsonl is
// already there).
func writeChaosRunReport(dir string, res *run.Result, v check.Verdict) error {
	if err := writeChaosReport(dir, res.History, v); err != nil {
		return err
	}
	sched, err := json.MarshalIndent(struct {
		Steps  []run.Step         `json:"steps"`
		Faults []run.FaultOutcome `json:"faults"`
		Notes  []string           `json:"notes,omitempty"`
	}{res.Steps, res.Faults, res.Notes}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "schedule.json"), sched, 0o644); err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	return nil
}

func chaosListCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "list [--output text|json]",
		Short: "Show the fault catalogue and the named scenarios",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return &exitCodeError{2, err}
			}
			out := cmd.OutOrStdout()
			if output == "json" {
				return json.NewEncoder(out).Encode(struct {
					Families  []string       `json:"families"`
					Faults    []run.Kind     `json:"faults"`
					Scenarios []run.Scenario `json:"scenarios"`
				}{run.Families, run.Catalogue(), run.Scenarios()})
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "FAULT\tFAMILY\tWHAT\tHEAL")
			for _, k := range run.Catalogue() {
				what := k.Description
				if k.MinRegions > 1 {
					what += fmt.Sprintf(" (needs %d regions)", k.MinRegions)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k.Name, k.Family, what, k.Heal)
			}
			fmt.Fprintln(tw)
			fmt.Fprintln(tw, "SCENARIO\tFAMILIES\tWHAT\t")
			for _, s := range run.Scenarios() {
				fmt.Fprintf(tw, "%s\t%s\t%s\t\n", s.Name, strings.Join(s.Families, ","), s.Description)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}
