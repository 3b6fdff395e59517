// Command meridian is Meridian's single binary: servers (meta, bookie,
// broker, standalone) and tools (produce, consume, admin, perf). It only
// parses flags and calls the packages that do the work.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// rootCmd is the top-level command; each subcommand file adds itself in init.
var rootCmd = &cobra.Command{
	Use:           "meridian",
	Short:         "Meridian: geo-replicated multi-region messaging",
	SilenceUsage:  true,
	SilenceErrors: true,
}

func main() {
	if err := rootCmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "meridian:", err)
		var ec *exitCodeError
		if errors.As(err, &ec) {
			os.Exit(ec.code)
		}
		os.Exit(1)
	}
}

// exitCodeError makes the command exit with code instead of 1.
type exitCodeError struct {
	code int
	err  error
}

func (e *exitCodeError) Error() string { return e.err.Error() }
func (e *exitCodeError) Unwrap() error { return e.err }
