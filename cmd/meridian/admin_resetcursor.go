package main

import (
	"context"
	"fmt"
	"time"

	"github.com/meridianmq/meridian/client"
	"github.com/spf13/cobra"
)

// newResetCursorCmd is `meridian admin topics reset-cursor`: move a
// subscription to a time, a message ID or an origin position, resolved
// per origin region (on a replicated subscription the reset applies in
// every region).
func newResetCursorCmd(o *adminOpts) *cobra.Command {
	var sub, at, id, origin string
	var earliest, latest bool
	cmd := &cobra.Command{
		Use:   "reset-cursor TOPIC -s SUBSCRIPTION (--time T | --id L:E | --origin REGION:L:E | --earliest | --latest)",
		Short: "Move a subscription's cursor to a time, message ID or origin position",
		Long: `Move a subscription so that the next message delivered is the one named:
--time T (-t): the first published at or after T (RFC 3339, @UNIX_MS, or how long ago:
  -10m, or Pulsar's form 10m, 1h, 7d);
--id L:E (-m): the message stored at L:E in this region;
--origin REGION:L:E: the message produced in REGION at L:E, in whichever region this runs.
Times and origin positions are resolved per origin region, so on a replicated subscription
the reset means the same messages in every region, and it applies in every region.
Connected consumers keep their streams and receive from the new position.`,
	}
	var sp client.StartPosition
	// Flags are checked before connecting: bad input never reaches a broker.
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		var err error
		if sp, err = resetCursorPosition(cmd, at, id, origin, earliest, latest); err != nil {
			return err
		}
		if sub == "" {
			return fmt.Errorf("--subscription (-s) is required")
		}
		return nil
	}
	cmd.RunE = adminRun(o, 1, func(ctx context.Context, a *client.Admin, out *adminOut, args []string) error {
		if err := a.ResetSubscriptionTo(ctx, args[0], sub, sp); err != nil {
			return err
		}
		out.done("reset cursor", args[0]+" "+sub+" to "+sp.String())
		return nil
	})
	fl := cmd.Flags()
	fl.StringVarP(&sub, "subscription", "s", "", "subscription name (required)")
	fl.StringVarP(&at, "time", "t", "", "publish time: RFC 3339, @UNIX_MS, or how long ago: -10m, or Pulsar's 10m, 1h, 7d")
	fl.StringVarP(&id, "id", "m", "", "message ID L:E in this region")
	fl.StringVar(&origin, "origin", "", "origin position REGION:L:E")
	fl.BoolVar(&earliest, "earliest", false, "the oldest retained message")
	fl.BoolVar(&latest, "latest", false, "after the last message stored")
	return cmd
}

// resetCursorPosition parses the one position flag given.
func resetCursorPosition(cmd *cobra.Command, at, id, origin string, earliest, latest bool) (client.StartPosition, error) {
	var given []string
	for _, n := range []string{"time", "id", "origin", "earliest", "latest"} {
		if cmd.Flags().Changed(n) {
			given = append(given, "--"+n)
		}
	}
	if len(given) != 1 {
		return client.StartPosition{}, fmt.Errorf("give exactly one of --time, --id, --origin, --earliest, --latest (got %d: %v)", len(given), given)
	}
	switch given[0] {
	case "--time":
		if d, err := parseDurationFlag("--time", at); err == nil && d >= 0 {
			// Pulsar's `reset-cursor -t 10m`: that long ago.
			return client.StartAtTime(time.Now().Add(-d)), nil
		}
		sp, err := client.ParseStartPosition(at, time.Now())
		if err != nil || !sp.IsTime() {
			return client.StartPosition{}, fmt.Errorf("--time %q: want an RFC 3339 time, @UNIX_MS, or how long ago (-10m, 10m, 1h, 7d)", at)
		}
		return sp, nil
	case "--id":
		sp, err := client.ParseStartPosition(id, time.Now())
		if err != nil || !sp.IsMessageID() {
			return client.StartPosition{}, fmt.Errorf("--id %q: want LEDGER:ENTRY (non-negative integers)", id)
		}
		return sp, nil
	case "--origin":
		sp, err := client.ParseStartPosition("origin:"+origin, time.Now())
		if err != nil {
			return client.StartPosition{}, fmt.Errorf("--origin %q: want REGION:LEDGER:ENTRY (non-negative integers)", origin)
		}
		return sp, nil
	case "--earliest":
		return client.StartEarliest(), nil
	}
	return client.StartLatest(), nil
}
