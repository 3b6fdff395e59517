package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	clientv1 "github.com/meridianmq/meridian/api/client/v1"
)

// printAckReplication prints, after a topic's stats, the acknowledgement
// replication of its replicated subscriptions: one line per subscription
// and remote region (what is not yet replicated is what a consumer moving
// to that region would see again).
func printAckReplication(w io.Writer, s *clientv1.TopicStats) {
	var subs []*clientv1.SubscriptionStats
	for _, ss := range s.GetSubscriptions() {
		if ss.GetReplicated() {
			subs = append(subs, ss)
		}
	}
	if len(subs) == 0 {
		return
	}
	fmt.Fprintln(w, "ack replication (replicated subscriptions):")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  SUBSCRIPTION\tREMOTE\tCONNECTED\tLAG\tPENDING ACKS\tPENDING RANGES\tLAST ERROR")
	for _, ss := range subs {
		if len(ss.GetAckReplication()) == 0 {
			fmt.Fprintf(tw, "  %s\t-\t-\t-\t-\t-\tno remote region\n", ss.GetName())
		}
		for _, a := range ss.GetAckReplication() {
			fmt.Fprintf(tw, "  %s\t%s\t%v\t%.3fs\t%d\t%d\t%s\n", ss.GetName(), a.GetRegion(), a.GetConnected(),
				a.GetLagSeconds(), a.GetPendingAcks(), a.GetPendingRanges(), a.GetLastError())
		}
	}
	_ = tw.Flush()
}
