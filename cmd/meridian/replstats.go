package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// printReplicators prints a topic's replicators (one line per remote
// region) after its stats: what an operator looks at during a partition or
// a backfill.
func printReplicators(w io.Writer, s *clientv1.TopicStats) {
	rs := s.GetReplicators()
	if len(rs) == 0 {
		return
	}
	fmt.Fprintln(w, "replication:")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  REMOTE\tCONNECTED\tBACKLOG MSGS\tBACKLOG BYTES\tLAG\tRATE MSG/S\tRATE B/S\tSTALLED\tBACKFILL\tLAST ERROR")
	for _, r := range rs {
		lag := fmt.Sprintf("%.1fs", r.GetLagSeconds())
		if r.GetMaxLagMs() > 0 {
			lag += fmt.Sprintf(" (bound %.1fs", float64(r.GetMaxLagMs())/1000)
			if r.GetLagBoundExceeded() {
				lag += ", EXCEEDED"
			}
			lag += ")"
		}
		fmt.Fprintf(tw, "  %s\t%v\t%d\t%d\t%s\t%.1f\t%.0f\t%v\t%.1f%%\t%s\n", r.GetRemoteRegion(), r.GetConnected(),
			r.GetBacklogEntries(), r.GetBacklogBytes(), lag, r.GetMsgRateOut(), r.GetBytesRateOut(), r.GetStalled(),
			100*r.GetBackfillProgress(), r.GetLastError())
	}
	_ = tw.Flush()
}
