package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// chaosCmd is `meridian chaos` until the checker part's chaos.go lands
// (this file goes at that merge).
var chaosCmd = &cobra.Command{
	Use:   "chaos run|list|check",
	Short: "Chaos suite: inject faults into a cluster under a workload and check the history",
	Args:  cobra.NoArgs,
	RunE: func(*cobra.Command, []string) error {
		return &exitCodeError{2, errors.New("chaos: missing subcommand (run, list or check)")}
	},
}

func init() { rootCmd.AddCommand(chaosCmd) }
