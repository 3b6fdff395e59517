package drill

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Passed reports whether the drill lost no acknowledged message.
func (r *Report) Passed() bool { return r.Lost == 0 }

// WriteJSON writes the report as one JSON line.
func (r *Report) WriteJSON(w io.Writer) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func fmtMs(v *float64) string {
	if v == nil {
		return "n/a"
	}
	if *v >= 1000 {
		return fmt.Sprintf("%.2f s", *v/1000)
	}
	return fmt.Sprintf("%.1f ms", *v)
}

func fmtLat(s LatencySummary) string {
	if s.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%s / %s  (n=%d)", fmtMs(s.P50Ms), fmtMs(s.P99Ms), s.N)
}

// WriteText writes the human summary.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fault := r.Fault
	if fault == "" {
		fault = "none"
	}
	fmt.Fprintf(&b, "meridian drill %s %s: %s → %s, fault %s, %.0f msg/s for %s\n", r.Kind, r.Drill, r.From, r.To, fault, r.Rate, fmtMs(ptr(float64(r.DurationMs))))
	fmt.Fprintf(&b, "  client failover: %s; subscription: %s\n", r.ClientFailover, r.Subscription)
	fmt.Fprintf(&b, "  sent %d, acknowledged %d (by %s %d, by %s %d), never acknowledged %d\n",
		r.Sent, r.Acked, r.From, r.AckedInFrom, r.To, r.AckedInTo, r.FailedSends)
	moment := "the fault"
	if r.Kind == KindSwitchback {
		moment = "the switch command"
		fmt.Fprintf(&b, "  switch command at %s\n", fmtMs(r.FaultAtMs))
	} else {
		fmt.Fprintf(&b, "  fault at %s (injected in %s), heal at %s\n", fmtMs(r.FaultAtMs), fmtMs(r.FaultTookMs), fmtMs(r.HealAtMs))
	}
	fmt.Fprintf(&b, "  RTO         first publish in %s %s, first delivery in %s %s\n", r.To, fmtMs(r.RTOPublishMs), r.To, fmtMs(r.RTODeliverMs))
	fmt.Fprintf(&b, "  RPO         %d messages acknowledged in %s and not in %s at %s", r.RPOMessages, r.From, r.To, moment)
	if r.RPOWindowMs != nil {
		fmt.Fprintf(&b, " (oldest %s before it)", fmtMs(r.RPOWindowMs))
	}
	fmt.Fprintf(&b, "; by the end %d of %d arrived\n", r.RPORecovered, r.RPOMessages)
	fmt.Fprintf(&b, "  duplicates  %d (%d after %s) over %d messages", r.Duplicates, r.DuplicatesAfterFault, moment, r.DuplicateMessages)
	if r.AckPendingAtFault != nil {
		fmt.Fprintf(&b, "; at %s %.0f acknowledgements not yet replicated to %s (lag %s)", moment, *r.AckPendingAtFault, r.To, fmtMs(r.AckLagAtFaultMs))
	}
	fmt.Fprintf(&b, "; %d delivered in the last 100 ms before it\n", r.DeliveredLast100ms)
	fmt.Fprintf(&b, "  lost        %d", r.Lost)
	if len(r.LostIDs) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(r.LostIDs, " "))
	}
	fmt.Fprintf(&b, "; never seen in %s: %d\n", r.To, r.NotInTo)
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  latency\tpublish p50 / p99\tend-to-end p50 / p99")
	for _, p := range []struct {
		name   string
		pu, ee LatencySummary
	}{
		{"before", r.PublishLatency.Before, r.EndToEnd.Before},
		{"during", r.PublishLatency.During, r.EndToEnd.During},
		{"after", r.PublishLatency.After, r.EndToEnd.After},
	} {
		fmt.Fprintf(tw, "    %s\t%s\t%s\n", p.name, fmtLat(p.pu), fmtLat(p.ee))
	}
	tw.Flush()
	if len(r.Switches) == 0 {
		fmt.Fprintln(&b, "  switches    none")
	}
	for _, s := range r.Switches {
		fmt.Fprintf(&b, "  switch      %s → %s at %s, took %s", s.From, s.To, fmtMs(&s.AtMs), fmtMs(s.TookMs))
		if s.Reason != "" {
			fmt.Fprintf(&b, " (%s)", s.Reason)
		}
		fmt.Fprintln(&b)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  note        %s\n", n)
	}
	if t := r.Targets; t.RTOWithin10s != nil && t.DuplicatesWithinLast100ms != nil {
		fmt.Fprintf(&b, "  targets     RTO ≤ %v: %s; duplicates ≤ deliveries of the last 100 ms: %s\n", TargetRTO, met(*t.RTOWithin10s), met(*t.DuplicatesWithinLast100ms))
	}
	if r.Passed() {
		fmt.Fprintln(&b, "  result      PASS: no acknowledged message lost")
	} else {
		fmt.Fprintf(&b, "  result      FAIL: %d acknowledged messages lost\n", r.Lost)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func ptr(v float64) *float64 { return &v }

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}
