package check

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Sample series the stuck checker reads (see Sample).
const (
	SeriesReplBacklog = "repl_backlog_msgs"
	SeriesSubBacklog  = "sub_backlog_msgs"
)

// checkStuck finds what makes no progress after the heal:
//
//   - a repl_backlog_msgs series (per region and label "remote") or a
//     sub_backlog_msgs series (per region and label "sub", optionally
//     "topic") whose last value is > 0 and that did not go down over its
//     last Options.StuckSamples samples (fewer if it has fewer, at least
//     2). When the history has a "heal" phase only samples from it on
//     count, so a backlog that built up during a fault and drained after
//     the heal is not stuck;
//   - a subscription of the run whose last sub_backlog_msgs sample is 0
//     while acknowledged messages of its topic were never delivered to
//     it (a replicated subscription's deliveries count in any region;
//     a local one's only in its region).
func checkStuck(x *hindex, opt Options) Result {
	healAt, healed := x.phaseAt("heal")
	type series struct {
		name, region string
		labels       map[string]string
		values       []float64
	}
	byID := map[string]*series{}
	var ids []string
	for _, r := range x.samples {
		s := r.Sample
		if s.Name != SeriesReplBacklog && s.Name != SeriesSubBacklog {
			continue
		}
		if healed && r.T.Before(healAt) {
			continue
		}
		id := seriesID(s.Name, r.Region, s.Labels)
		se, ok := byID[id]
		if !ok {
			se = &series{name: s.Name, region: r.Region, labels: s.Labels}
			byID[id] = se
			ids = append(ids, id)
		}
		se.values = append(se.values, s.Value)
	}
	var ex examples
	stuck := 0
	for _, id := range ids {
		se := byID[id]
		w := se.values[max(0, len(se.values)-opt.StuckSamples):]
		if len(w) < 2 || w[len(w)-1] <= 0 || w[len(w)-1] < w[0] {
			continue
		}
		if se.name == SeriesSubBacklog && x.deletedElsewhere(se.labels["topic"], se.region) {
			// The topic was deleted in another region: the copies here of
			// that region's subscriptions keep what its deleted copies
			// had not acknowledged, and nothing will (completeness.go).
			continue
		}
		stuck++
		ex.add("%s: %g at the end, %g %d samples before (no progress)", id, w[len(w)-1], w[0], len(w)-1)
	}
	// Subscriptions whose backlog says 0 while deliveries are missing.
	missingSubs := 0
	if x.run != nil {
		for _, sub := range x.run.Subscriptions {
			last, ok := x.lastSubBacklog(sub)
			if !ok || last != 0 {
				continue
			}
			missing, first := 0, msgKey{}
			for _, k := range x.sendOrder {
				s := x.sends[k]
				if s.outcome != KindAck || s.topic != sub.Topic || x.deliveredTo(sub, k) || x.deletedBefore(s) || x.skippedFor(sub.Topic, sub.Name, s) {
					continue
				}
				if missing == 0 {
					first = k
				}
				missing++
			}
			if missing > 0 {
				missingSubs++
				ex.add("subscription %s:%s:%s: backlog 0 but %d acknowledged messages never delivered (first %s)", sub.Region, sub.Topic, sub.Name, missing, first)
			}
		}
	}
	n := stuck + missingSubs
	when := "after the heal"
	if !healed {
		when = "(no heal phase: all samples)"
	}
	return Result{
		Pass:  n == 0,
		Count: n,
		Detail: fmt.Sprintf("%d of %d backlog series %s without progress over their last %d samples; %d subscriptions at backlog 0 with undelivered messages",
			stuck, len(ids), when, opt.StuckSamples, missingSubs),
		Examples: ex,
	}
}

// seriesID names a series: name{region=..,label=..}.
func seriesID(name, region string, labels map[string]string) string {
	parts := []string{"region=" + region}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, k+"="+labels[k])
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

// lastSubBacklog returns the last sub_backlog_msgs sample of sub.
func (x *hindex) lastSubBacklog(sub Subscription) (float64, bool) {
	for i := len(x.samples) - 1; i >= 0; i-- {
		r := x.samples[i]
		s := r.Sample
		if s.Name != SeriesSubBacklog || r.Region != sub.Region || s.Labels["sub"] != sub.Name {
			continue
		}
		if t := s.Labels["topic"]; t != "" && t != sub.Topic {
			continue
		}
		return s.Value, true
	}
	return 0, false
}

// deliveredTo reports whether k was delivered to sub: in any region for
// a replicated subscription, in its own region for a local one.
func (x *hindex) deliveredTo(sub Subscription, k msgKey) bool {
	for _, sk := range x.subOrder {
		if sk.Topic != sub.Topic || sk.Sub != sub.Name || (!sub.Replicated && sk.Region != sub.Region) {
			continue
		}
		if x.deliveredSet[sk][k] {
			return true
		}
	}
	return false
}
