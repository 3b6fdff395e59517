package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
	"github.com/spf13/cobra"
)

// newBookiesScrubCmd is `meridian admin bookies scrub BOOKIE_ID`: the
// bookie verifies the CRC of every entry it stores and marks the damaged
// ledgers under-replicated; the command prints what it found.
func newBookiesScrubCmd(o *adminOpts) *cobra.Command {
	var timeout time.Duration
	fn := func(ctx context.Context, api clientv1.AdminClient, out *adminOut, args []string) error {
		r, err := api.ScrubBookie(ctx, &clientv1.ScrubBookieRequest{BookieId: args[0]})
		if err != nil {
			return err
		}
		if out.json {
			out.message(r)
			return nil
		}
		fmt.Fprintf(out.w, "bookie %s: %d entries (%d bytes) checked in %s, %d corrupt\n", r.GetBookieId(),
			r.GetEntriesChecked(), r.GetBytesChecked(), time.Duration(r.GetTookMs())*time.Millisecond, r.GetCorruptEntries())
		for _, c := range r.GetCorruptRanges() {
			fmt.Fprintf(out.w, "corrupt ledger %d entries %d-%d\n", c.GetLedgerId(), c.GetFirstEntry(), c.GetLastEntry())
		}
		if r.GetRangesTruncated() {
			fmt.Fprintln(out.w, "(more corrupt ranges not listed)")
		}
		for _, d := range r.GetDamagedJournal() {
			fmt.Fprintf(out.w, "damaged journal %s bytes %d-%d ledgers %s\n", d.GetFile(), d.GetFromOffset(), d.GetToOffset(), joinIDs(d.GetLedgers()))
		}
		fmt.Fprintf(out.w, "damaged ledgers: %s; marked under-replicated: %s\n", joinIDs(r.GetDamagedLedgers()), joinIDs(r.GetLedgersMarked()))
		return nil
	}
	cmd := &cobra.Command{
		Use:   "scrub BOOKIE_ID",
		Short: "Verify the CRC of every entry a bookie stores; mark damaged ledgers for repair",
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 {
				return fmt.Errorf("--timeout must be > 0, got %s", timeout)
			}
			// The scrub reads all the bookie's data at its scrub rate: it
			// gets its own deadline, not --connect-timeout.
			so := *o
			so.timeout = timeout
			return adminAPIRun(&so, 1, fn)(cmd, args)
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Minute, "how long to wait for the scrub to finish")
	return cmd
}

func joinIDs(ids []int64) string {
	if len(ids) == 0 {
		return "none"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, ",")
}
