package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/spf13/cobra"
)

// newSkipLostCmd is `meridian admin topics skip-lost`: acknowledge, on one
// subscription, an entry (or a whole ledger) that no bookie can serve any
// more, so that delivery moves past it. Without --yes it only prints what
// it would skip.
func newSkipLostCmd(o *adminOpts) *cobra.Command {
	var sub, entry string
	var ledger int64
	var yes bool
	cmd := &cobra.Command{
		Use:   "skip-lost TOPIC -s SUBSCRIPTION (--entry L:E | --ledger L) [--yes]",
		Short: "Skip an unreadable entry or ledger on a subscription (the messages are never delivered to it)",
		Long: "A subscription whose next entry cannot be read from any bookie stops there; " +
			"'topics stats' shows it under \"blocked\". skip-lost acknowledges that entry (--entry) " +
			"or every entry of the ledger (--ledger) on one subscription. Without --yes nothing " +
			"changes: it prints what it would skip. An entry that reads fine is refused.",
	}
	cmd.RunE = adminAPIRun(o, 1, func(ctx context.Context, api clientv1.AdminClient, out *adminOut, args []string) error {
		req := &clientv1.SkipLostEntriesRequest{Topic: args[0], Subscription: sub, Confirm: yes}
		switch {
		case sub == "":
			return fmt.Errorf("--subscription (-s) is required")
		case entry != "" && cmd.Flags().Changed("ledger"):
			return fmt.Errorf("give either --entry or --ledger, not both")
		case entry != "":
			id, err := parseEntryID(entry)
			if err != nil {
				return fmt.Errorf("--entry %q: %w", entry, err)
			}
			req.Target = &clientv1.SkipLostEntriesRequest_Entry{Entry: id}
		case cmd.Flags().Changed("ledger"):
			if ledger < 0 {
				return fmt.Errorf("--ledger %d: must be >= 0", ledger)
			}
			req.Target = &clientv1.SkipLostEntriesRequest_LedgerId{LedgerId: ledger}
		default:
			return fmt.Errorf("give --entry L:E or --ledger L")
		}
		r, err := api.SkipLostEntries(ctx, req)
		if err != nil {
			return err
		}
		if out.json {
			(&lineWriter{w: out.w}).json(map[string]any{"applied": r.GetApplied(), "entries": r.GetEntries(), "description": r.GetDescription()})
		} else {
			fmt.Fprintln(out.w, r.GetDescription())
		}
		if !r.GetApplied() {
			return fmt.Errorf("nothing skipped (dry run): add --yes to apply it")
		}
		return nil
	})
	f := cmd.Flags()
	f.StringVarP(&sub, "subscription", "s", "", "subscription to move past the lost entries (required)")
	f.StringVar(&entry, "entry", "", "the lost entry, as LEDGER:ENTRY (see 'topics stats', subscriptions[].blocked)")
	f.Int64Var(&ledger, "ledger", -1, "skip every entry of this ledger")
	f.BoolVar(&yes, "yes", false, "confirm: really acknowledge the entries")
	return cmd
}

// parseEntryID parses "L:E" (a trailing ":B" batch index is accepted and
// ignored: an entry is skipped whole).
func parseEntryID(s string) (*clientv1.MessageId, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return nil, fmt.Errorf("want LEDGER:ENTRY")
	}
	l, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || l < 0 {
		return nil, fmt.Errorf("ledger %q: want an integer >= 0", parts[0])
	}
	e, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || e < 0 {
		return nil, fmt.Errorf("entry %q: want an integer >= 0", parts[1])
	}
	return &clientv1.MessageId{LedgerId: l, EntryId: e}, nil
}
