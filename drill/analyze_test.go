package drill

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// at is a time offset from the test histories' start.
var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func id(seq int64) MsgID { return MsgID{Producer: 0, Seq: seq} }

// outageHistory is a kill-region drill in miniature: p0-0..5 acknowledged
// by a before the fault at 520ms (p0-4 and p0-5 not yet replicated to b),
// the client switches at 1500ms, p0-6..9 are acknowledged by b from
// 1600ms, p0-3 is delivered again in b (its ack had not reached b), p0-4
// arrives in b after the heal, p0-5 never does (lost), p0-10 is never
// acknowledged.
func outageHistory() History {
	r := NewRecorder(t0, "a", "b")
	for i := int64(0); i <= 5; i++ {
		sent := at(int(i) * 100)
		r.Sent(id(i), sent)
		r.Acked(id(i), sent.Add(10*time.Millisecond), "a", false)
		if i <= 3 {
			r.Delivered(id(i), sent.Add(20*time.Millisecond), "a")
			r.Observed(id(i), sent.Add(50*time.Millisecond))
		}
	}
	r.Event(Event{Kind: EventFault, At: at(520)})
	for i := int64(6); i <= 9; i++ {
		r.Sent(id(i), at(600+int(i-6)*100))
		r.Failed(id(i), errTest("send timeout"))
		r.Sent(id(i), at(1550)) // resent after the switch: same message
	}
	r.Sent(id(10), at(950))
	r.Failed(id(10), errTest("producer closed"))
	r.Event(Event{Kind: EventSwitch, At: at(1500), From: "a", To: "b", Took: 980 * time.Millisecond, Reason: "3 failed probes"})
	for i := int64(6); i <= 9; i++ {
		r.Acked(id(i), at(1600+int(i-6)), "b", false)
		r.Acked(id(i), at(1700), "a", false) // a late second ack does not count
		r.Observed(id(i), at(1610))
		r.Delivered(id(i), at(1650+int(i-6)), "b")
	}
	r.Delivered(id(3), at(1700), "b")
	r.Event(Event{Kind: EventHeal, At: at(1800)})
	r.Observed(id(4), at(2000))
	r.Delivered(id(4), at(2100), "b")
	r.Event(Event{Kind: EventStopSend, At: at(2200)})
	return r.History(at(3000))
}

type errTest string

func (e errTest) Error() string { return string(e) }

func TestAnalyzeOutage(t *testing.T) {
	rep := Analyze(outageHistory())
	eq := func(what string, got, want any) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	eqMs := func(what string, got *float64, want float64) {
		t.Helper()
		if got == nil || *got != want {
			t.Errorf("%s = %v, want %v ms", what, fmtMs(got), want)
		}
	}
	eq("sent", rep.Sent, 11)
	eq("acked", rep.Acked, 10)
	eq("acked in a", rep.AckedInFrom, 6)
	eq("acked in b", rep.AckedInTo, 4)
	eq("failed sends", rep.FailedSends, 1)
	eqMs("fault at", rep.FaultAtMs, 520)
	eqMs("heal at", rep.HealAtMs, 1800)
	eq("duration", rep.DurationMs, int64(2200))
	eqMs("RTO publish", rep.RTOPublishMs, 1080)
	eqMs("RTO deliver", rep.RTODeliverMs, 1130)
	eq("RPO", rep.RPOMessages, 2)
	eqMs("RPO window", rep.RPOWindowMs, 110)
	eq("RPO recovered", rep.RPORecovered, 1)
	eq("RPO missing", strings.Join(rep.RPOMissing, ","), "p0-5")
	eq("duplicates", rep.Duplicates, 1)
	eq("duplicates after fault", rep.DuplicatesAfterFault, 1)
	eq("duplicate messages", rep.DuplicateMessages, 1)
	eq("delivered", rep.Delivered, 9)
	eq("deliveries", rep.Deliveries, 10)
	eq("lost", rep.Lost, 1)
	eq("lost IDs", strings.Join(rep.LostIDs, ","), "p0-5")
	eq("not in b", rep.NotInTo, 1)
	eq("publish before n", rep.PublishLatency.Before.N, 6)
	eqMs("publish before p99", rep.PublishLatency.Before.P99Ms, 10)
	eq("publish during n", rep.PublishLatency.During.N, 4)
	// p0-6 was first sent at 600ms and acknowledged at 1600ms.
	eqMs("publish during max", rep.PublishLatency.During.MaxMs, 1000)
	eq("publish after n", rep.PublishLatency.After.N, 0)
	if rep.PublishLatency.After.P50Ms != nil {
		t.Errorf("after p50 = %v with no sample, want null", *rep.PublishLatency.After.P50Ms)
	}
	eq("e2e before n", rep.EndToEnd.Before.N, 5) // p0-0..4 (p0-4 after the heal), not p0-5
	eqMs("e2e before max", rep.EndToEnd.Before.MaxMs, 1700)
	eq("switches", len(rep.Switches), 1)
	eqMs("switch took", rep.Switches[0].TookMs, 980)
	eq("switch at", rep.Switches[0].AtMs, 1500.0)
	eq("passed", rep.Passed(), false)
	eq("delivered in the last 100ms before the fault", rep.DeliveredLast100ms, 0) // the last, p0-3, at 320ms
	eq("RTO target", *rep.Targets.RTOWithin10s, true)
	eq("duplicates target", *rep.Targets.DuplicatesWithinLast100ms, false) // 1 duplicate > 0 deliveries
	if rep.AckPendingAtFault != nil || rep.AckLagAtFaultMs != nil {
		t.Errorf("ack readings %v %v without samples, want null", rep.AckPendingAtFault, rep.AckLagAtFaultMs)
	}
	// The readings taken last before the fault are the ones reported.
	h := outageHistory()
	h.Samples = []Sample{
		{At: at(300), Name: SamplePendingAcks, Value: 1}, {At: at(500), Name: SamplePendingAcks, Value: 7},
		{At: at(600), Name: SamplePendingAcks, Value: 99}, {At: at(510), Name: SampleAckLag, Value: 42},
	}
	rep = Analyze(h)
	if rep.AckPendingAtFault == nil || *rep.AckPendingAtFault != 7 || rep.AckLagAtFaultMs == nil || *rep.AckLagAtFaultMs != 42 {
		t.Errorf("ack readings at the fault %v %v, want 7 and 42", fmtMs(rep.AckPendingAtFault), fmtMs(rep.AckLagAtFaultMs))
	}
}

// A clean drill: everything replicated before the fault, every message
// delivered once: RPO 0 with no window, no duplicates, nothing lost.
func TestAnalyzeClean(t *testing.T) {
	r := NewRecorder(t0, "a", "b")
	for i := int64(0); i < 100; i++ {
		sent := at(int(i) * 10)
		region := "a"
		if i >= 50 {
			region = "b"
		}
		r.Sent(id(i), sent)
		r.Acked(id(i), sent.Add(2*time.Millisecond), region, false)
		r.Observed(id(i), sent.Add(5*time.Millisecond))
		r.Delivered(id(i), sent.Add(8*time.Millisecond), region)
		if i == 49 {
			r.Event(Event{Kind: EventFault, At: sent.Add(6 * time.Millisecond)})
		}
	}
	rep := Analyze(r.History(at(1000)))
	if rep.RPOMessages != 0 || rep.RPOWindowMs != nil || rep.Duplicates != 0 || rep.Lost != 0 || rep.NotInTo != 0 || !rep.Passed() ||
		!*rep.Targets.RTOWithin10s || !*rep.Targets.DuplicatesWithinLast100ms {
		t.Fatalf("clean drill: %+v", rep)
	}
	// p0-39..48 were delivered (at i*10+8ms) in the 100ms before the fault at 496ms.
	if rep.DeliveredLast100ms != 10 {
		t.Fatalf("delivered in the last 100ms before the fault: %d, want 10", rep.DeliveredLast100ms)
	}
	// The first acknowledgement by b after the fault (496ms) is p0-50's at 502ms.
	if rep.RTOPublishMs == nil || *rep.RTOPublishMs != 6 || rep.RTODeliverMs == nil || *rep.RTODeliverMs != 12 {
		t.Fatalf("RTO publish %v deliver %v, want 6ms and 12ms", fmtMs(rep.RTOPublishMs), fmtMs(rep.RTODeliverMs))
	}
}

// With no publish or delivery in the target region after the fault, the
// RTOs are missing (null), not zero.
func TestAnalyzeNoRecovery(t *testing.T) {
	r := NewRecorder(t0, "a", "b")
	r.Sent(id(0), at(0))
	r.Acked(id(0), at(5), "a", false)
	r.Delivered(id(0), at(6), "a")
	r.Event(Event{Kind: EventFault, At: at(10)})
	r.Sent(id(1), at(20))
	r.Failed(id(1), errTest("timeout"))
	rep := Analyze(r.History(at(100)))
	if rep.RTOPublishMs != nil || rep.RTODeliverMs != nil {
		t.Fatalf("RTO %v / %v without any success in b, want null", fmtMs(rep.RTOPublishMs), fmtMs(rep.RTODeliverMs))
	}
	if *rep.Targets.RTOWithin10s {
		t.Fatal("RTO target met with no RTO measured")
	}
	if rep.RPOMessages != 1 || rep.RPORecovered != 0 || rep.Lost != 0 || rep.FailedSends != 1 {
		t.Fatalf("report %+v", rep)
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js.String(), `"rto_publish_ms":null`) || strings.Count(js.String(), "\n") != 1 {
		t.Fatalf("JSON line: %s", js.String())
	}
}

// A message acknowledged by the source while the fault was being injected
// (the kill requests take a few ms) counts in the RPO: the cut-off is the
// end of the injection.
func TestAnalyzeRPODuringInjection(t *testing.T) {
	r := NewRecorder(t0, "a", "b")
	r.Sent(id(0), at(0))
	r.Acked(id(0), at(5), "a", false)
	r.Observed(id(0), at(8))
	r.Sent(id(1), at(98))
	r.Acked(id(1), at(103), "a", false) // during the injection (100..110ms)
	r.Event(Event{Kind: EventFault, At: at(100), Took: 10 * time.Millisecond})
	r.Observed(id(1), at(900)) // after the heal
	rep := Analyze(r.History(at(1000)))
	if rep.RPOMessages != 1 || rep.RPORecovered != 1 || rep.RPOWindowMs == nil || *rep.RPOWindowMs != 7 || rep.FaultTookMs == nil || *rep.FaultTookMs != 10 {
		t.Fatalf("RPO %d recovered %d window %v fault took %v; want 1, 1, 7ms, 10ms", rep.RPOMessages, rep.RPORecovered, fmtMs(rep.RPOWindowMs), fmtMs(rep.FaultTookMs))
	}
}

// A controlled move has no fault: the operator's switch command starts
// the clock.
func TestAnalyzeSwitchCommand(t *testing.T) {
	r := NewRecorder(t0, "b", "a")
	r.Sent(id(0), at(0))
	r.Acked(id(0), at(5), "b", false)
	r.Event(Event{Kind: EventSwitchCommand, At: at(100), From: "b", To: "a"})
	r.Sent(id(1), at(150))
	r.Acked(id(1), at(400), "a", false)
	r.Delivered(id(0), at(450), "a")
	r.Delivered(id(1), at(450), "a")
	r.Observed(id(0), at(300))
	r.Observed(id(1), at(400))
	rep := Analyze(r.History(at(500)))
	if rep.RTOPublishMs == nil || *rep.RTOPublishMs != 300 || rep.RTODeliverMs == nil || *rep.RTODeliverMs != 350 {
		t.Fatalf("RTO %v / %v, want 300ms / 350ms", fmtMs(rep.RTOPublishMs), fmtMs(rep.RTODeliverMs))
	}
	if rep.RPOMessages != 1 || rep.RPORecovered != 1 || rep.Lost != 0 {
		t.Fatalf("RPO %d recovered %d lost %d", rep.RPOMessages, rep.RPORecovered, rep.Lost)
	}
}

func TestTimeline(t *testing.T) {
	h := outageHistory()
	bk := Timeline(h, 100*time.Millisecond)
	if len(bk) != 30 {
		t.Fatalf("%d buckets, want 30", len(bk))
	}
	// 0-100ms: p0-0 acknowledged (10ms) and delivered (20ms), seen in b (50ms).
	if bk[0].AckedPerSec != 10 || bk[0].DeliveredPerSec != 10 || bk[0].NotInTo != 0 || bk[0].Undelivered != 0 {
		t.Fatalf("bucket 0: %+v", bk[0])
	}
	// At the fault (bucket 500-600ms): p0-4 and p0-5 not in b, not delivered.
	if bk[5].NotInTo != 2 || bk[5].Undelivered != 2 {
		t.Fatalf("bucket 5: %+v", bk[5])
	}
	// After b acknowledges p0-6..9 (1600ms) they are in b and delivered by 1700ms.
	if bk[16].AckedPerSec != 40 || bk[16].DeliveredPerSec != 40 {
		t.Fatalf("bucket 16: %+v", bk[16])
	}
	// p0-4 reaches b at 2000ms and is delivered at 2100ms; p0-5 never.
	if bk[19].NotInTo != 2 || bk[20].NotInTo != 1 || bk[21].Undelivered != 1 || bk[29].NotInTo != 1 || bk[29].Undelivered != 1 {
		t.Fatalf("buckets 19..29: %+v", bk[19:])
	}
}

func TestPayloadRoundTrip(t *testing.T) {
	sent := time.Unix(0, 1764500000123456789)
	p := Payload("d1", MsgID{Producer: 3, Seq: 123456}, sent, 100)
	if len(p) != 100 {
		t.Fatalf("payload of %d bytes, want 100", len(p))
	}
	d, mid, ts, ok := ParsePayload(p)
	if !ok || d != "d1" || mid != (MsgID{Producer: 3, Seq: 123456}) || !ts.Equal(sent) {
		t.Fatalf("parse %q: %v %q %v %v", p, ok, d, mid, ts)
	}
	// Shorter than the header: the header is kept whole.
	if p := Payload("d1", MsgID{}, sent, 8); !bytes.HasPrefix(p, []byte(payloadPrefix)) {
		t.Fatalf("short payload %q", p)
	}
	for _, bad := range []string{"", "hello", "meridian-drill d1 x 1 2", "meridian-drill d1 1 2", "meridian-drill d1 -1 2 3"} {
		if _, _, _, ok := ParsePayload([]byte(bad)); ok {
			t.Errorf("ParsePayload(%q) accepted", bad)
		}
	}
}

func TestHistoryJSON(t *testing.T) {
	h := outageHistory()
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var back History
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if a, z := Analyze(h), Analyze(back); a.Lost != z.Lost || a.RPOMessages != z.RPOMessages || *a.RTOPublishMs != *z.RTOPublishMs || len(back.Observed) != len(h.Observed) {
		t.Fatalf("history through JSON: %+v vs %+v", a, z)
	}
	var id MsgID
	for _, bad := range []string{"", "p", "p1", "x1-2", "p1-x"} {
		if id.UnmarshalText([]byte(bad)) == nil {
			t.Errorf("MsgID %q accepted", bad)
		}
	}
}

func TestReportRender(t *testing.T) {
	h := outageHistory()
	h.Samples = []Sample{{At: at(500), Name: SampleAckLag, Unit: "ms", Value: 20}, {At: at(1500), Name: SampleAckLag, Unit: "ms", Value: 1000}}
	rep := Analyze(h)
	rep.Drill, rep.Kind, rep.Fault, rep.Rate = "t1", "failover", "kill-region", 10
	rep.ClientFailover, rep.Subscription = "client (auto)", "replicated"
	var text, js, html bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"RTO         first publish in b 1.08 s, first delivery in b 1.13 s", "RPO         2 messages", "by the end 1 of 2 arrived", "lost        1 (p0-5)", "FAIL: 1 acknowledged messages lost", "switch      a → b at 1.50 s, took 980.0 ms (3 failed probes)", "targets     RTO ≤ 10s: met; duplicates ≤ deliveries of the last 100 ms: NOT met"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text summary lacks %q:\n%s", want, text.String())
		}
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Lost != 1 || back.RPOMessages != 2 || *back.RTOPublishMs != 1080 {
		t.Fatalf("JSON round trip: %v %+v", err, back)
	}
	if err := rep.WriteHTML(&html, h); err != nil {
		t.Fatal(err)
	}
	s := html.String()
	for _, want := range []string{"<svg", "<polyline", ">fault<", "switch a→b", ">heal<", "first publish in b", SampleAckLag, "FAIL", "RTO ≤ 10 s: met"} {
		if !strings.Contains(s, want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	// Self-contained: no script, no stylesheet or image fetched.
	for _, bad := range []string{"<script", "<link", "src=", "@import", "https://"} {
		if strings.Contains(s, bad) {
			t.Errorf("HTML contains %q: not self-contained", bad)
		}
	}
}
