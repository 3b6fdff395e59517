package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// chaosCmd is `meridian chaos`: the chaos suite. Its subcommands attach
// themselves in their files' init: check (chaos_check.go), run and list
// (chaos_run.go).
var chaosCmd = &cobra.Command{
	Use:   "chaos run|list|check",
	Short: "Chaos suite: inject faults into a cluster under a workload and check the history",
	Long: `The chaos suite runs a workload on a cluster (a 'meridian dev' cluster or your
own regions) while injecting faults from a catalogue, records every send,
acknowledgement, delivery, read-back, fault and sample in history.jsonl, and
judges the history with Jepsen-style checkers: lost, unexpected, duplicated,
order, divergence and stuck.

Exit codes: 0 the history is valid, 1 a checker failed, 2 the run (or the
check) could not be completed.`,
	Args: cobra.NoArgs,
	RunE: func(*cobra.Command, []string) error {
		return &exitCodeError{2, errors.New("chaos: missing subcommand (run, list or check)")}
	},
}

func init() { rootCmd.AddCommand(chaosCmd) }
