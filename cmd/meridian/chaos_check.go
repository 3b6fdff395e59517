package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/meridianmq/meridian/chaos/check"
	"github.com/spf13/cobra"
)

// `meridian chaos check history.jsonl`: re-check a recorded run offline.

func init() {
	var output, reportDir string
	var opt check.Options
	cmd := &cobra.Command{
		Use:   "check HISTORY.jsonl [--output text|json] [--report DIR] [--checkers lost,order,...]",
		Short: "Run the checkers on a recorded history.jsonl and print the verdict",
		Long: `Read a history.jsonl written by 'meridian chaos run' and judge it with the
checkers (all of them unless --checkers names some):

  lost        acknowledged, and in some region neither read back nor delivered
  unexpected  delivered or read back but never sent (or its send failed
              definitely), or a payload that is not the run's
  duplicated  duplicate deliveries per subscription (counted; fail only beyond
              --max-duplicates), a deduplicating producer's message stored twice,
              or a replicated copy stored twice in one region
  order       per producer and acknowledging region: read-backs, exclusive and
              failover subscriptions, key_shared per key
  divergence  the regions' read-backs hold different messages
  stuck       a replication or subscription backlog that does not go down after
              the heal, or a subscription at backlog 0 with undelivered messages
  completeness  every acknowledged message delivered at least once to every
              replicated subscription, in some region, unless an explicit
              reset to latest or skip, or a topic delete, excused it

Prints the verdict table (or one JSON line with --output json); with --report
writes report.html (timeline of faults, throughput, replication lag, errors),
verdict.json and verdict.txt to DIR. Exit 0 when valid, 1 when a checker
failed, 2 when the history cannot be read.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return &exitCodeError{2, err}
			}
			if fl := cmd.Flags().Lookup("max-duplicates"); fl.Changed {
				opt.BoundDuplicates = true
			}
			if err := opt.Validate(); err != nil {
				return &exitCodeError{2, err}
			}
			h, err := readHistoryFile(args[0])
			if err != nil {
				return &exitCodeError{2, err}
			}
			v := check.Check(h, opt)
			if reportDir != "" {
				if err := writeChaosReport(reportDir, h, v); err != nil {
					return &exitCodeError{2, err}
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "[chaos check] report: %s\n", filepath.Join(reportDir, "report.html"))
			}
			if output == "json" {
				err = v.WriteJSON(cmd.OutOrStdout())
			} else {
				err = v.WriteText(cmd.OutOrStdout())
			}
			if err != nil {
				return &exitCodeError{2, err}
			}
			if !v.Valid {
				return &exitCodeError{1, fmt.Errorf("chaos check %s: %s", args[0], failedCheckers(v))}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&output, "output", "o", "text", "text or json (one line)")
	f.StringVar(&reportDir, "report", "", "directory for report.html, verdict.json and verdict.txt (default: none)")
	f.StringSliceVar(&opt.Checkers, "checkers", nil, "checkers to run (default: all): lost, unexpected, duplicated, order, divergence, stuck, completeness")
	f.IntVar(&opt.MaxDuplicates, "max-duplicates", 0, "fail duplicated when a subscription has more duplicate deliveries than this (default: no bound)")
	f.IntVar(&opt.StuckSamples, "stuck-samples", check.DefaultStuckSamples, "last samples over which a backlog must go down after the heal (>= 2)")
	chaosCmd.AddCommand(cmd)
}

// readHistoryFile reads a history.jsonl; an empty one is an error.
func readHistoryFile(path string) (check.History, error) {
	f, err := os.Open(path)
	if err != nil {
		return check.History{}, fmt.Errorf("history: %w", err)
	}
	defer f.Close()
	h, err := check.ReadHistory(f)
	if err != nil {
		return h, fmt.Errorf("%s: %w", path, err)
	}
	if len(h.Records) == 0 {
		return h, fmt.Errorf("%s: history is empty", path)
	}
	return h, nil
}

// failedCheckers names the checkers that failed.
func failedCheckers(v check.Verdict) string {
	var s string
	for _, r := range v.Results {
		if !r.Pass {
			if s != "" {
				s += ", "
			}
			s += fmt.Sprintf("%s (%d)", r.Name, r.Count)
		}
	}
	return s + " failed"
}

// writeChaosReport writes report.html, verdict.json and verdict.txt to
// dir (created if missing). The runner writes the same files.
func writeChaosReport(dir string, h check.History, v check.Verdict) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	for _, f := range []struct {
		name  string
		write func(io.Writer) error
	}{
		{"report.html", func(w io.Writer) error { return check.WriteHTML(w, h, v) }},
		{"verdict.json", v.WriteJSON},
		{"verdict.txt", v.WriteText},
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
