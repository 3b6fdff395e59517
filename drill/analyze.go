package drill

import (
	"math"
	"slices"
	"sort"
	"time"
)

// Report is what a drill measured. Durations are in milliseconds in JSON;
// a figure that could not be measured is null (nil pointer), never a
// guess.
type Report struct {
	Drill string `json:"drill"`
	// Kind is "failover" or "switchback"; Fault the injected fault
	// ("none" for a controlled move).
	Kind  string `json:"kind"`
	Fault string `json:"fault"`
	From  string `json:"from"`
	To    string `json:"to"`
	// Rate is the target publish rate (messages/s); DurationMs how long
	// the producers ran.
	Rate       float64 `json:"rate"`
	DurationMs int64   `json:"duration_ms"`
	// ClientFailover and Subscription say what moved the workload and
	// how its subscription's progress reached To (see Config.Mode).
	ClientFailover string `json:"client_failover"`
	Subscription   string `json:"subscription"`

	// Sent, Acked, FailedSends: messages handed to producers, acknowledged
	// (in any region), and never acknowledged.
	Sent        int `json:"sent"`
	Acked       int `json:"acked"`
	FailedSends int `json:"failed_sends"`
	// AckedInFrom / AckedInTo split Acked by the acknowledging region.
	AckedInFrom int `json:"acked_in_from"`
	AckedInTo   int `json:"acked_in_to"`
	// Delivered counts distinct messages delivered to the consumers;
	// Deliveries every delivery.
	Delivered  int `json:"delivered"`
	Deliveries int `json:"deliveries"`

	// FaultAtMs, HealAtMs: offsets from the start of the drill (nil when
	// there was none).
	FaultAtMs *float64 `json:"fault_at_ms"`
	HealAtMs  *float64 `json:"heal_at_ms"`

	// RTOPublishMs: from the fault to the first acknowledgement by region
	// To after the fault (a successful publish there). RTODeliverMs: from
	// the fault to the first delivery to a consumer connected to region To.
	// For a controlled move "the fault" is the operator's switch command.
	RTOPublishMs *float64 `json:"rto_publish_ms"`
	RTODeliverMs *float64 `json:"rto_deliver_ms"`

	// FaultTookMs is how long the injection took (the kill requests, the
	// cuts): From may still acknowledge messages meanwhile.
	FaultTookMs *float64 `json:"fault_took_ms"`

	// RPOMessages: messages acknowledged by region From before the fault
	// was complete that the observer had not seen in region To by then.
	// RPOWindowMs: how long before the fault the oldest of them was
	// acknowledged (the time-based RPO). RPORecovered: how many of them
	// reached To by the end (after heal); RPOMissing lists up to 20 that
	// did not.
	RPOMessages  int      `json:"rpo_messages"`
	RPOWindowMs  *float64 `json:"rpo_window_ms"`
	RPORecovered int      `json:"rpo_recovered"`
	RPOMissing   []string `json:"rpo_missing,omitempty"`

	// Duplicates: deliveries beyond the first of each message;
	// DuplicatesAfterFault only those delivered after the fault (the cost
	// of the move); DuplicateMessages the distinct messages delivered more
	// than once.
	Duplicates           int `json:"duplicates"`
	DuplicatesAfterFault int `json:"duplicates_after_fault"`
	DuplicateMessages    int `json:"duplicate_messages"`

	// Lost: acknowledged messages never delivered to a consumer by the
	// end of the drill (must be 0). LostIDs lists up to 20.
	Lost    int      `json:"lost"`
	LostIDs []string `json:"lost_ids,omitempty"`
	// NotInTo: acknowledged messages the observer never saw in region To.
	NotInTo int `json:"not_in_to"`

	// AckPendingAtFault and AckLagAtFaultMs are the source broker's last
	// readings before the fault of the replicated subscription's
	// acknowledgements not yet confirmed by To, and of their age: the
	// bound on the duplicates the move may cause (nil: not read, e.g. no
	// replicated subscription). DeliveredLast100ms counts the deliveries
	// (each acknowledged at once) in the 100ms before the fault.
	AckPendingAtFault  *float64 `json:"ack_pending_at_fault"`
	AckLagAtFaultMs    *float64 `json:"ack_lag_at_fault_ms"`
	DeliveredLast100ms int      `json:"delivered_last_100ms"`

	// Latency by phase: before the fault, during (sent between the fault
	// and the first publish acknowledged in To), after.
	PublishLatency LatencyPhases `json:"publish_latency"`
	EndToEnd       LatencyPhases `json:"e2e_latency"`

	// Targets are the targets, checked (informational: only loss
	// fails a drill).
	Targets Targets `json:"targets"`

	// Switches are the client moves seen.
	Switches []SwitchReport `json:"switches"`
	// Notes say what the drill could not do or how it did it.
	Notes []string `json:"notes,omitempty"`
}

// Target values of a move (issue 9): RTO within 10 s with automatic
// failover; duplicates of the move within the acknowledgements of the last
// 100 ms before it.
const TargetRTO = 10 * time.Second

// Targets says whether a drill met the targets; nil when it could not be
// judged (no move measured).
type Targets struct {
	// RTOWithin10s: both RTOs measured and at most TargetRTO.
	RTOWithin10s *bool `json:"rto_within_10s"`
	// DuplicatesWithinLast100ms: duplicates after the fault at most the
	// messages delivered (each acknowledged at once) in the 100 ms before
	// it.
	DuplicatesWithinLast100ms *bool `json:"duplicates_within_last_100ms"`
}

// LatencyPhases are latency summaries per phase of the drill.
type LatencyPhases struct {
	Before LatencySummary `json:"before"`
	During LatencySummary `json:"during"`
	After  LatencySummary `json:"after"`
}

// LatencySummary summarizes N latencies (milliseconds); nil percentiles
// when N is 0.
type LatencySummary struct {
	N     int      `json:"n"`
	P50Ms *float64 `json:"p50_ms"`
	P99Ms *float64 `json:"p99_ms"`
	MaxMs *float64 `json:"max_ms"`
}

// SwitchReport is one client move.
type SwitchReport struct {
	AtMs   float64  `json:"at_ms"`
	From   string   `json:"from"`
	To     string   `json:"to"`
	Reason string   `json:"reason,omitempty"`
	TookMs *float64 `json:"took_ms"`
}

// maxListed bounds the message IDs a report lists.
const maxListed = 20

func msp(d time.Duration) *float64 {
	v := math.Round(float64(d)/float64(time.Microsecond)) / 1000
	return &v
}

// firstEvent returns the first event of kind k.
func (h *History) firstEvent(k EventKind) (Event, bool) {
	for _, e := range h.Events {
		if e.Kind == k {
			return e, true
		}
	}
	return Event{}, false
}

// faultTime is when the move started: the fault, or the operator's switch
// command for a controlled move.
func (h *History) faultTime() (time.Time, bool) {
	if e, ok := h.firstEvent(EventFault); ok {
		return e.At, true
	}
	if e, ok := h.firstEvent(EventSwitchCommand); ok {
		return e.At, true
	}
	return time.Time{}, false
}

// Analyze computes the report's figures from h. It fills the measured
// fields of a Report; the caller adds the run's description (Drill, Kind,
// Fault, Rate, modes).
func Analyze(h History) Report {
	rep := Report{From: h.From, To: h.To}
	faultAt, hasFault := h.faultTime()
	// faultEnd is when the fault was complete: the RPO cut-off.
	faultEnd := faultAt
	if hasFault {
		rep.FaultAtMs = msp(faultAt.Sub(h.Start))
		if e, ok := h.firstEvent(EventFault); ok && e.Took > 0 {
			rep.FaultTookMs = msp(e.Took)
			faultEnd = faultAt.Add(e.Took)
		}
	}
	if e, ok := h.firstEvent(EventHeal); ok {
		rep.HealAtMs = msp(e.At.Sub(h.Start))
	}
	stopAt := h.End
	if e, ok := h.firstEvent(EventStopSend); ok {
		stopAt = e.At
	}
	rep.DurationMs = stopAt.Sub(h.Start).Milliseconds()

	// First delivery of each message, and duplicates.
	first := make(map[MsgID]time.Time, len(h.Deliveries))
	count := make(map[MsgID]int, len(h.Deliveries))
	var firstDeliverTo time.Time
	for _, d := range h.Deliveries {
		count[d.ID]++
		if t, ok := first[d.ID]; !ok || d.At.Before(t) {
			first[d.ID] = d.At
		}
		if count[d.ID] > 1 {
			rep.Duplicates++
			if hasFault && !d.At.Before(faultAt) {
				rep.DuplicatesAfterFault++
			}
		}
		if hasFault && d.Region == h.To && !d.At.Before(faultAt) && (firstDeliverTo.IsZero() || d.At.Before(firstDeliverTo)) {
			firstDeliverTo = d.At
		}
	}
	rep.Deliveries = len(h.Deliveries)
	rep.Delivered = len(first)
	for _, n := range count {
		if n > 1 {
			rep.DuplicateMessages++
		}
	}

	// RTO (publish): the first acknowledgement by To after the fault. A
	// message sent before the fault and resent to To counts too: its
	// acknowledgement is a successful publish in To.
	var firstAckTo time.Time
	for _, s := range h.Sends {
		if s.Acked.IsZero() {
			rep.FailedSends++
			continue
		}
		rep.Acked++
		switch s.AckRegion {
		case h.From:
			rep.AckedInFrom++
		case h.To:
			rep.AckedInTo++
		}
		if hasFault && s.AckRegion == h.To && !s.Acked.Before(faultAt) && (firstAckTo.IsZero() || s.Acked.Before(firstAckTo)) {
			firstAckTo = s.Acked
		}
	}
	rep.Sent = len(h.Sends)
	if !firstAckTo.IsZero() {
		rep.RTOPublishMs = msp(firstAckTo.Sub(faultAt))
	}
	if !firstDeliverTo.IsZero() {
		rep.RTODeliverMs = msp(firstDeliverTo.Sub(faultAt))
	}

	// RPO, loss, latency.
	var oldest time.Time
	var pub, e2e [3][]time.Duration
	phase := func(sent time.Time) int {
		switch {
		case !hasFault || sent.Before(faultAt):
			return 0
		case firstAckTo.IsZero() || sent.Before(firstAckTo):
			return 1
		}
		return 2
	}
	for _, s := range h.Sends {
		if s.Acked.IsZero() {
			continue
		}
		obs, seen := h.Observed[s.ID]
		if !seen {
			rep.NotInTo++
		}
		if hasFault && s.AckRegion == h.From && s.Acked.Before(faultEnd) && (!seen || obs.After(faultEnd)) {
			rep.RPOMessages++
			if oldest.IsZero() || s.Acked.Before(oldest) {
				oldest = s.Acked
			}
			if seen {
				rep.RPORecovered++
			} else if len(rep.RPOMissing) < maxListed {
				rep.RPOMissing = append(rep.RPOMissing, s.ID.String())
			}
		}
		p := phase(s.Sent)
		pub[p] = append(pub[p], s.Acked.Sub(s.Sent))
		if t, ok := first[s.ID]; ok {
			e2e[p] = append(e2e[p], t.Sub(s.Sent))
		} else {
			rep.Lost++
			if len(rep.LostIDs) < maxListed {
				rep.LostIDs = append(rep.LostIDs, s.ID.String())
			}
		}
	}
	if !oldest.IsZero() {
		rep.RPOWindowMs = msp(faultEnd.Sub(oldest))
	}
	rep.PublishLatency = LatencyPhases{Before: summarize(pub[0]), During: summarize(pub[1]), After: summarize(pub[2])}
	rep.EndToEnd = LatencyPhases{Before: summarize(e2e[0]), During: summarize(e2e[1]), After: summarize(e2e[2])}

	if hasFault {
		rep.AckPendingAtFault = h.lastSample(SamplePendingAcks, faultAt)
		rep.AckLagAtFaultMs = h.lastSample(SampleAckLag, faultAt)
		for _, d := range h.Deliveries {
			if d.At.Before(faultAt) && !d.At.Before(faultAt.Add(-100*time.Millisecond)) {
				rep.DeliveredLast100ms++
			}
		}
	}
	if hasFault {
		rtoOK := rep.RTOPublishMs != nil && rep.RTODeliverMs != nil &&
			*rep.RTOPublishMs <= float64(TargetRTO.Milliseconds()) && *rep.RTODeliverMs <= float64(TargetRTO.Milliseconds())
		dupOK := rep.DuplicatesAfterFault <= rep.DeliveredLast100ms
		rep.Targets = Targets{RTOWithin10s: &rtoOK, DuplicatesWithinLast100ms: &dupOK}
	}
	for _, e := range h.Events {
		if e.Kind != EventSwitch {
			continue
		}
		sw := SwitchReport{AtMs: *msp(e.At.Sub(h.Start)), From: e.From, To: e.To, Reason: e.Reason}
		if e.Took > 0 {
			sw.TookMs = msp(e.Took)
		}
		rep.Switches = append(rep.Switches, sw)
	}
	return rep
}

// lastSample returns the value of the last sample named name taken at or
// before t (nil if none).
func (h *History) lastSample(name string, t time.Time) *float64 {
	var v *float64
	var at time.Time
	for _, s := range h.Samples {
		if s.Name == name && !s.At.After(t) && (v == nil || !s.At.Before(at)) {
			x := s.Value
			v, at = &x, s.At
		}
	}
	return v
}

// summarize returns the count and p50/p99/max of ds (nearest rank).
func summarize(ds []time.Duration) LatencySummary {
	s := LatencySummary{N: len(ds)}
	if len(ds) == 0 {
		return s
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	s.P50Ms = msp(quantile(ds, 0.50))
	s.P99Ms = msp(quantile(ds, 0.99))
	s.MaxMs = msp(ds[len(ds)-1])
	return s
}

// quantile returns the nearest-rank q-quantile of sorted ds.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// Bucket is one interval of the timeline.
type Bucket struct {
	// StartMs is the interval's start from the drill's start.
	StartMs float64
	// AckedPerSec, DeliveredPerSec: acknowledgements and first deliveries
	// in the interval, per second.
	AckedPerSec     float64
	DeliveredPerSec float64
	// DuplicatesPerSec: deliveries of messages delivered before.
	DuplicatesPerSec float64
	// NotInTo: messages acknowledged by region From before the interval's
	// end that the observer had not seen in To by then (the replication
	// backlog the drill can see).
	NotInTo int
	// Undelivered: acknowledged messages not yet delivered to a consumer
	// at the interval's end (the consumers' lag).
	Undelivered int
}

// Timeline cuts h into buckets of width step (at least 1ms).
func Timeline(h History, step time.Duration) []Bucket {
	step = max(step, time.Millisecond)
	span := h.End.Sub(h.Start)
	if span <= 0 {
		return nil
	}
	n := int((span + step - 1) / step)
	out := make([]Bucket, n)
	for i := range out {
		out[i].StartMs = *msp(time.Duration(i) * step)
	}
	idx := func(t time.Time) int {
		i := int(t.Sub(h.Start) / step)
		return max(0, min(i, n-1))
	}
	sec := step.Seconds()
	first := map[MsgID]time.Time{}
	for _, d := range h.Deliveries {
		if t, ok := first[d.ID]; !ok || d.At.Before(t) {
			if ok {
				out[idx(t)].DuplicatesPerSec += 1 / sec
			}
			first[d.ID] = d.At
		} else {
			out[idx(d.At)].DuplicatesPerSec += 1 / sec
		}
	}
	// Differences per bucket, summed into running levels: +1 when a
	// message enters a backlog, -1 in the bucket it leaves it.
	notIn := make([]int, n+1)
	undeliv := make([]int, n+1)
	for _, s := range h.Sends {
		if s.Acked.IsZero() {
			continue
		}
		a := idx(s.Acked)
		out[a].AckedPerSec += 1 / sec
		if s.AckRegion == h.From {
			notIn[a]++
			if t, ok := h.Observed[s.ID]; ok {
				notIn[max(a, idx(t))]--
			}
		}
		undeliv[a]++
		if t, ok := first[s.ID]; ok {
			undeliv[max(a, idx(t))]--
		}
	}
	for _, t := range first {
		out[idx(t)].DeliveredPerSec += 1 / sec
	}
	lvlN, lvlU := 0, 0
	for i := range out {
		lvlN += notIn[i]
		lvlU += undeliv[i]
		out[i].NotInTo, out[i].Undelivered = lvlN, lvlU
	}
	return out
}

// sortedEvents returns h's events in time order.
func sortedEvents(h History) []Event {
	ev := slices.Clone(h.Events)
	sort.SliceStable(ev, func(i, j int) bool { return ev[i].At.Before(ev[j].At) })
	return ev
}
