package check

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// hb builds hand-made histories: a run in regions a and b with one topic
// and the subscriptions the test adds.
type hb struct {
	t0   time.Time
	n    int
	recs []Record
}

func newHB(subs ...Subscription) *hb {
	b := &hb{t0: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	b.add(Record{Kind: KindRun, Run: &Run{ID: "r1", Seed: 7, Regions: []string{"a", "b"}, Topics: []string{"t"}, Subscriptions: subs}})
	return b
}

func (b *hb) add(r Record) *hb {
	b.n++
	r.T = b.t0.Add(time.Duration(b.n) * 10 * time.Millisecond)
	b.recs = append(b.recs, r)
	return b
}

func msg(kind Kind, region, producer string, seq int64) Record {
	return Record{Kind: kind, Region: region, Origin: "a", Producer: producer, Seq: seq, Topic: "t"}
}

// sendAck records a send by producer (created in a) acknowledged by region.
func (b *hb) sendAck(region, producer string, seqs ...int64) *hb {
	for _, s := range seqs {
		b.add(msg(KindSend, region, producer, s))
		b.add(msg(KindAck, region, producer, s))
	}
	return b
}

func (b *hb) read(region, producer string, seqs ...int64) *hb {
	for _, s := range seqs {
		b.add(msg(KindRead, region, producer, s))
	}
	return b
}

func (b *hb) deliver(region, sub, typ, producer string, seqs ...int64) *hb {
	for _, s := range seqs {
		r := msg(KindDeliver, region, producer, s)
		r.Sub, r.SubType = sub, typ
		b.add(r)
	}
	return b
}

func (b *hb) sample(region, name string, labels map[string]string, v float64) *hb {
	return b.add(Record{Kind: KindSample, Region: region, Sample: &Sample{Name: name, Labels: labels, Value: v}})
}

func (b *hb) h() History { return History{Records: b.recs} }

// run checks b's history with only the named checker and returns its result.
func run(t *testing.T, b *hb, name string, opt Options) Result {
	t.Helper()
	opt.Checkers = []string{name}
	v := Check(b.h(), opt)
	r, ok := v.Result(name)
	if !ok {
		t.Fatalf("checker %s did not run", name)
	}
	if v.Valid != r.Pass {
		t.Fatalf("Valid %v but %s pass %v", v.Valid, name, r.Pass)
	}
	t.Logf("%s: pass %v count %d: %s %q", name, r.Pass, r.Count, r.Detail, r.Examples)
	return r
}

func wantResult(t *testing.T, r Result, pass bool, count int) {
	t.Helper()
	if r.Pass != pass || r.Count != count {
		t.Fatalf("%s: pass %v count %d, want pass %v count %d (%s, %q)", r.Name, r.Pass, r.Count, pass, count, r.Detail, r.Examples)
	}
	if !pass && len(r.Examples) == 0 {
		t.Fatalf("%s failed without examples", r.Name)
	}
}

// healthy is a clean run: 3 messages acknowledged in a, read back and
// delivered in both regions.
func healthy() *hb {
	return newHB().sendAck("a", "p1", 1, 2, 3).
		read("a", "p1", 1, 2, 3).read("b", "p1", 1, 2, 3).
		deliver("a", "s", "exclusive", "p1", 1, 2, 3).deliver("b", "s", "exclusive", "p1", 1, 2, 3)
}

func TestCheckHealthyHistoryIsValid(t *testing.T) {
	v := Check(healthy().h(), Options{})
	if !v.Valid || len(v.Results) != len(Checkers) {
		t.Fatalf("healthy history: valid %v, %d results: %+v", v.Valid, len(v.Results), v.Results)
	}
	if v.Stats.Sent != 3 || v.Stats.Acked != 3 || v.Stats.ReadPerRegion["b"] != 3 || v.Stats.Deliveries != 6 || v.Stats.Delivered != 3 {
		t.Fatalf("stats %+v", v.Stats)
	}
}

func TestCheckLost(t *testing.T) {
	// Acknowledged #3 is neither read back nor delivered in b: lost in b.
	b := newHB().sendAck("a", "p1", 1, 2, 3).read("a", "p1", 1, 2, 3).read("b", "p1", 1, 2)
	r := run(t, b, CheckLost, Options{})
	wantResult(t, r, false, 1)
	if !strings.Contains(r.Detail, "b: 1") || !strings.Contains(r.Examples[0], "a/p1#3") {
		t.Fatalf("detail %q examples %q", r.Detail, r.Examples)
	}
	// A delivery in b counts as present there while b's read-back is not
	// known to be complete.
	b.deliver("b", "s", "shared", "p1", 3)
	wantResult(t, run(t, b, CheckLost, Options{}), true, 0)
	// Once b's read-back is complete it is the authority: #3 was
	// delivered in b but is gone from its log (a bookie that acknowledged
	// before its fsync and lost power): lost in b.
	b.add(Record{Kind: KindPhase, Phase: PhaseReadBackComplete, Region: "b", Topic: "t"})
	wantResult(t, run(t, b, CheckLost, Options{}), false, 1)
	// A send that timed out and was never stored is not lost.
	b = newHB().sendAck("a", "p1", 1).read("a", "p1", 1).read("b", "p1", 1)
	b.add(msg(KindSend, "a", "p1", 2)).add(msg(KindTimeout, "a", "p1", 2))
	b.add(msg(KindSend, "a", "p1", 3)).add(msg(KindFail, "a", "p1", 3))
	wantResult(t, run(t, b, CheckLost, Options{}), true, 0)
	// An ack after a timeout (a late answer) makes it acknowledged.
	b.add(msg(KindAck, "a", "p1", 2))
	wantResult(t, run(t, b, CheckLost, Options{}), false, 1)
}

func TestCheckUnexpected(t *testing.T) {
	wantResult(t, run(t, healthy(), CheckUnexpected, Options{}), true, 0)
	// Delivered and read but never sent: counted once.
	b := healthy().deliver("a", "s", "exclusive", "p9", 1).read("b", "p9", 1)
	wantResult(t, run(t, b, CheckUnexpected, Options{}), false, 1)
	// An unparsed payload of a run topic; another topic's is ignored.
	b = healthy().add(Record{Kind: KindRead, Region: "a", Topic: "t", Unparsed: true, Payload: "garbage"}).
		add(Record{Kind: KindRead, Region: "a", Topic: "other", Unparsed: true, Payload: "x"})
	wantResult(t, run(t, b, CheckUnexpected, Options{}), false, 1)
	// A definitely failed send that was stored.
	b = healthy()
	b.add(msg(KindSend, "a", "p1", 4)).add(msg(KindFail, "a", "p1", 4)).read("a", "p1", 4)
	wantResult(t, run(t, b, CheckUnexpected, Options{}), false, 1)
	// A timed-out send that was stored is not an anomaly.
	b = healthy()
	b.add(msg(KindSend, "a", "p1", 4)).add(msg(KindTimeout, "a", "p1", 4)).read("a", "p1", 4).read("b", "p1", 4)
	wantResult(t, run(t, b, CheckUnexpected, Options{}), true, 0)
	if v := Check(b.h(), Options{}); v.Stats.IndefiniteStored != 1 || !v.Valid {
		t.Fatalf("indefinite stored %d, valid %v", v.Stats.IndefiniteStored, v.Valid)
	}
}

func TestCheckDuplicated(t *testing.T) {
	// Redeliveries pass without a bound and are counted.
	b := healthy().deliver("a", "s", "exclusive", "p1", 2, 3)
	r := run(t, b, CheckDuplicated, Options{})
	wantResult(t, r, true, 2)
	// With a bound of 1 per subscription they fail.
	wantResult(t, run(t, b, CheckDuplicated, Options{BoundDuplicates: true, MaxDuplicates: 1}), false, 2)
	wantResult(t, run(t, b, CheckDuplicated, Options{BoundDuplicates: true, MaxDuplicates: 2}), true, 2)
	// A non-dedup message stored twice in every region (a resend): counted only.
	b = healthy().read("a", "p1", 2).read("b", "p1", 2)
	wantResult(t, run(t, b, CheckDuplicated, Options{}), true, 0)
	// A dedup producer's message stored twice: a failure.
	b = newHB()
	for _, s := range []int64{1, 2} {
		r := msg(KindSend, "a", "d1", s)
		r.Dedup = true
		b.add(r).add(msg(KindAck, "a", "d1", s))
	}
	// Their redeliveries are counted apart from the others'.
	b.deliver("a", "s", "exclusive", "d1", 1, 2, 2)
	r = run(t, b, CheckDuplicated, Options{})
	wantResult(t, r, true, 1)
	if !strings.Contains(r.Detail, "1 duplicate deliveries (1 of messages of deduplicating producers, 0 of others)") {
		t.Fatalf("detail %q", r.Detail)
	}
	b.read("a", "d1", 1, 2, 2).read("b", "d1", 1, 2, 2)
	wantResult(t, run(t, b, CheckDuplicated, Options{}), false, 2)
	// With copy IDs: #2 held in each region as two copies, one first stored
	// by a and one by b (a client failover made both accept it): allowed,
	// counted. Two copies first stored by the same region: a failure.
	copyRead := func(b *hb, region, origin, id string, seq int64) {
		r := msg(KindRead, region, "d1", seq)
		r.StoredOrigin, r.OriginID = origin, id
		b.add(r)
	}
	dedupRun := func() *hb {
		b := newHB()
		for _, s := range []int64{1, 2} {
			r := msg(KindSend, "a", "d1", s)
			r.Dedup = true
			b.add(r).add(msg(KindAck, "a", "d1", s))
		}
		for _, reg := range []string{"a", "b"} {
			copyRead(b, reg, "a", "1:1", 1)
			copyRead(b, reg, "a", "1:2", 2)
		}
		return b
	}
	b = dedupRun()
	for _, reg := range []string{"a", "b"} {
		copyRead(b, reg, "b", "7:1", 2)
	}
	r = run(t, b, CheckDuplicated, Options{})
	wantResult(t, r, true, 0)
	if !strings.Contains(r.Detail, "first stored by different regions (a client failover; allowed) 2") {
		t.Fatalf("detail %q", r.Detail)
	}
	b = dedupRun()
	for _, reg := range []string{"a", "b"} {
		copyRead(b, reg, "a", "1:3", 2)
	}
	wantResult(t, run(t, b, CheckDuplicated, Options{}), false, 1)
	// A replicated copy stored twice (b holds #2 twice, a once): a failure
	// even without dedup.
	b = healthy().read("b", "p1", 2)
	r = run(t, b, CheckDuplicated, Options{})
	wantResult(t, r, false, 1)
	if !strings.Contains(r.Examples[0], "stored 2 times in b but 1 in a") {
		t.Fatalf("examples %q", r.Examples)
	}
}

func TestCheckOrder(t *testing.T) {
	wantResult(t, run(t, healthy(), CheckOrder, Options{}), true, 0)
	// A redelivery after a rewind is not a violation.
	b := healthy().deliver("a", "s", "exclusive", "p1", 2, 3)
	wantResult(t, run(t, b, CheckOrder, Options{}), true, 0)
	// #2 first delivered after #3 on an exclusive subscription.
	b = newHB().sendAck("a", "p1", 1, 2, 3).read("a", "p1", 1, 2, 3).read("b", "p1", 1, 2, 3).
		deliver("a", "s", "exclusive", "p1", 1, 3, 2)
	wantResult(t, run(t, b, CheckOrder, Options{}), false, 1)
	// The same on a shared subscription is not checked.
	b = newHB().sendAck("a", "p1", 1, 2, 3).read("a", "p1", 1, 2, 3).read("b", "p1", 1, 2, 3).
		deliver("a", "s", "shared", "p1", 1, 3, 2)
	wantResult(t, run(t, b, CheckOrder, Options{}), true, 0)
	// Out of order in a region's log.
	b = newHB().sendAck("a", "p1", 1, 2, 3).read("a", "p1", 1, 2, 3).read("b", "p1", 2, 1, 3)
	r := run(t, b, CheckOrder, Options{})
	wantResult(t, r, false, 1)
	if !strings.Contains(r.Detail, "read-back b: 1") {
		t.Fatalf("detail %q", r.Detail)
	}
	// Messages acknowledged by different regions (client failover) may
	// interleave in a third order: not a violation.
	b = newHB().sendAck("a", "p1", 1, 2).sendAck("b", "p1", 3, 4).read("a", "p1", 1, 2, 3, 4).read("b", "p1", 3, 4, 1, 2)
	wantResult(t, run(t, b, CheckOrder, Options{}), true, 0)
	// Key_shared: order per key. #3 (key x) after #1 (key y) is fine, #2
	// (key x) after #3 (key x) is not.
	b = newHB().sendAck("a", "p1", 1, 2, 3)
	for _, d := range []struct {
		seq int64
		key string
	}{{3, "x"}, {1, "y"}, {2, "x"}} {
		r := msg(KindDeliver, "a", "p1", d.seq)
		r.Sub, r.SubType, r.Key = "ks", "key_shared", d.key
		b.add(r)
	}
	wantResult(t, run(t, b, CheckOrder, Options{}), false, 1)

	// A replicated subscription is one subscription in every region: its
	// consumer got #1 and #3 in a, moved to b, and got #2 (first there)
	// then #3 again. Merged in time order, #2 after #3 is a violation;
	// #3 in b is a redelivery.
	repl := func(region string, seqs ...int64) func(*hb) {
		return func(b *hb) {
			for _, s := range seqs {
				r := msg(KindDeliver, region, "p1", s)
				r.Sub, r.SubType, r.Replicated = "rs", "exclusive", true
				b.add(r)
			}
		}
	}
	b = newHB().sendAck("a", "p1", 1, 2, 3).read("a", "p1", 1, 2, 3).read("b", "p1", 1, 2, 3)
	repl("a", 1, 3)(b)
	repl("b", 2, 3)(b)
	r = run(t, b, CheckOrder, Options{})
	wantResult(t, r, false, 1)
	if !strings.Contains(r.Detail, "replicated t/rs: 1") {
		t.Fatalf("detail %q", r.Detail)
	}
	// Moving on in order: #1 and #2 in a, #2 again (a redelivery) and #3
	// in b. Per region, b's first #2 after... nothing; merged, in order.
	b = newHB().sendAck("a", "p1", 1, 2, 3).read("a", "p1", 1, 2, 3).read("b", "p1", 1, 2, 3)
	repl("a", 1, 2)(b)
	repl("b", 3)(b)
	repl("a", 2)(b)
	wantResult(t, run(t, b, CheckOrder, Options{}), true, 0)
}

func TestCheckDivergence(t *testing.T) {
	wantResult(t, run(t, healthy(), CheckDivergence, Options{}), true, 0)
	// A timed-out send stored in a only: divergence, not loss.
	b := healthy()
	b.add(msg(KindSend, "a", "p1", 4)).add(msg(KindTimeout, "a", "p1", 4)).read("a", "p1", 4)
	r := run(t, b, CheckDivergence, Options{})
	wantResult(t, r, false, 1)
	if !strings.Contains(r.Detail, "b: 1") || !strings.Contains(r.Detail, "(1 of them not acknowledged,") {
		t.Fatalf("detail %q", r.Detail)
	}
	wantResult(t, run(t, b, CheckLost, Options{}), true, 0)
	// A region without any read-back lacks everything.
	b = newHB().sendAck("a", "p1", 1, 2).read("a", "p1", 1, 2)
	r = run(t, b, CheckDivergence, Options{})
	wantResult(t, r, false, 2)
	if !strings.Contains(r.Detail, "no read-back from b") {
		t.Fatalf("detail %q", r.Detail)
	}
}

func TestCheckStuck(t *testing.T) {
	sub := Subscription{Region: "a", Topic: "t", Name: "s", Type: "exclusive"}
	heal := Record{Kind: KindPhase, Phase: "heal"}
	// Backlog draining after the heal: not stuck.
	b := newHB(sub).sendAck("a", "p1", 1, 2, 3).deliver("a", "s", "exclusive", "p1", 1, 2, 3)
	rl := map[string]string{"remote": "b"}
	b.sample("a", SeriesReplBacklog, rl, 90).add(heal)
	for _, v := range []float64{50, 40, 20, 5, 0, 0} {
		b.sample("a", SeriesReplBacklog, rl, v)
	}
	wantResult(t, run(t, b, CheckStuck, Options{}), true, 0)
	// A backlog that stays at 7 over the last samples: stuck.
	for range 5 {
		b.sample("a", SeriesReplBacklog, rl, 7)
	}
	r := run(t, b, CheckStuck, Options{})
	wantResult(t, r, false, 1)
	if !strings.Contains(r.Examples[0], "repl_backlog_msgs{region=a,remote=b}") {
		t.Fatalf("examples %q", r.Examples)
	}
	// Still going down at the end: not stuck, with a window of 3 samples.
	for _, v := range []float64{9, 8, 6} {
		b.sample("a", SeriesReplBacklog, rl, v)
	}
	wantResult(t, run(t, b, CheckStuck, Options{StuckSamples: 3}), true, 0)
	// Samples before the heal do not count: a stuck-looking backlog that
	// drained after it is fine.
	b = newHB(sub).sendAck("a", "p1", 1).deliver("a", "s", "exclusive", "p1", 1)
	for range 6 {
		b.sample("a", SeriesSubBacklog, map[string]string{"sub": "s"}, 4)
	}
	b.add(heal).sample("a", SeriesSubBacklog, map[string]string{"sub": "s"}, 0)
	wantResult(t, run(t, b, CheckStuck, Options{}), true, 0)
	// Backlog 0 while an acknowledged message was never delivered.
	b.sendAck("a", "p1", 2).sample("a", SeriesSubBacklog, map[string]string{"sub": "s"}, 0)
	r = run(t, b, CheckStuck, Options{})
	wantResult(t, r, false, 1)
	if !strings.Contains(r.Examples[0], "a:t:s: backlog 0 but 1 acknowledged") {
		t.Fatalf("examples %q", r.Examples)
	}
	// A replicated subscription's delivery in another region counts.
	sub.Replicated = true
	b.recs[0].Run.Subscriptions = []Subscription{sub}
	b.deliver("b", "s", "exclusive", "p1", 2)
	wantResult(t, run(t, b, CheckStuck, Options{}), true, 0)
}

func TestOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		opt  Options
		want string
	}{
		{Options{Checkers: []string{"lost", "nope"}}, "checkers[1]"},
		{Options{MaxDuplicates: -1}, "max_duplicates"},
		{Options{StuckSamples: 1}, "stuck_samples"},
	} {
		err := c.opt.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%+v: error %v, want one naming %s", c.opt, err, c.want)
		}
	}
	if err := (Options{}).Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestVerdictWriteTextAndJSON(t *testing.T) {
	b := newHB().sendAck("a", "p1", 1, 2).read("a", "p1", 1, 2).read("b", "p1", 1)
	v := Check(b.h(), Options{})
	if v.Valid {
		t.Fatal("a lost message: valid")
	}
	var txt bytes.Buffer
	if err := v.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + txt.String())
	for _, want := range []string{"CHECKER", "lost", "FAIL", "a/p1#2", "INVALID: lost, divergence failed"} {
		if !strings.Contains(txt.String(), want) {
			t.Fatalf("text lacks %q:\n%s", want, txt.String())
		}
	}
	var js bytes.Buffer
	if err := v.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if strings.Count(js.String(), "\n") != 1 {
		t.Fatalf("JSON is not one line: %q", js.String())
	}
	var back Verdict
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Valid || len(back.Results) != len(Checkers) || back.Run.ID != "r1" {
		t.Fatalf("JSON round trip: %v %+v", err, back)
	}
}

func TestCheckRoundTripsThroughJSONL(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, r := range healthy().recs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	h, err := ReadHistory(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if v := Check(h, Options{}); !v.Valid || v.Stats.Acked != 3 {
		t.Fatalf("re-read history: %+v", v)
	}
}

// readCopy records a read of producer p's seq in region that names its
// stored copy.
func (b *hb) readCopy(region, producer string, seq int64, storedIn, id string) *hb {
	r := msg(KindRead, region, producer, seq)
	r.StoredOrigin, r.OriginID = storedIn, id
	return b.add(r)
}

func TestCheckCopiesNamed(t *testing.T) {
	// A resend without dedup stored twice (two copies) in every region:
	// counted, valid.
	b := newHB().sendAck("a", "p1", 1)
	for _, r := range []string{"a", "b"} {
		b.readCopy(r, "p1", 1, "a", "1:0:0").readCopy(r, "p1", 1, "a", "1:1:0")
	}
	if v := Check(b.h(), Options{}); !v.Valid {
		t.Fatalf("two copies everywhere: %+v", v.Results)
	}
	// The same copy twice in b: its receiver stored a replicated copy twice.
	b = newHB().sendAck("a", "p1", 1).readCopy("a", "p1", 1, "a", "1:0:0").
		readCopy("b", "p1", 1, "a", "1:0:0").readCopy("b", "p1", 1, "a", "1:0:0")
	r := run(t, b, CheckDuplicated, Options{})
	wantResult(t, r, false, 1)
	if !strings.Contains(r.Examples[0], "copy 1:0:0@a stored 2 times in b") {
		t.Fatalf("examples %q", r.Examples)
	}
	// Two different copies in b, one in a (b's copy, a resend after a
	// failover, not replicated to a): not a copy stored twice, but
	// divergence.
	b = newHB().sendAck("a", "p1", 1).readCopy("a", "p1", 1, "a", "1:0:0").
		readCopy("b", "p1", 1, "a", "1:0:0").readCopy("b", "p1", 1, "b", "7:0:0")
	wantResult(t, run(t, b, CheckDuplicated, Options{}), true, 0)
	r = run(t, b, CheckDivergence, Options{})
	wantResult(t, r, false, 1)
	if !strings.Contains(r.Detail, "1 with only a copy missing") || !strings.Contains(r.Detail, "a: 1") {
		t.Fatalf("detail %q", r.Detail)
	}
	// Order per storage origin: #2, acknowledged by a but first stored
	// by b before the producer failed over, reaches a's log after #3
	// (a's own): not a violation when the copies are named.
	b = newHB().sendAck("a", "p1", 1, 2, 3).
		readCopy("a", "p1", 1, "a", "1:0:0").readCopy("a", "p1", 3, "a", "1:2:0").readCopy("a", "p1", 2, "b", "5:0:0").
		readCopy("b", "p1", 2, "b", "5:0:0").readCopy("b", "p1", 1, "a", "1:0:0").readCopy("b", "p1", 3, "a", "1:2:0")
	wantResult(t, run(t, b, CheckOrder, Options{}), true, 0)
	// ... but #3 before #1 of the same storage origin is.
	b = newHB().sendAck("a", "p1", 1, 2, 3).
		readCopy("a", "p1", 3, "a", "1:2:0").readCopy("a", "p1", 1, "a", "1:0:0").readCopy("a", "p1", 2, "a", "1:1:0")
	wantResult(t, run(t, b, CheckOrder, Options{}), false, 2)
	// A timed-out message with a named copy is order-checked too.
	b = newHB().sendAck("a", "p1", 1, 3)
	b.add(msg(KindSend, "a", "p1", 2)).add(msg(KindTimeout, "a", "p1", 2))
	b.readCopy("a", "p1", 1, "a", "1:0:0").readCopy("a", "p1", 3, "a", "1:2:0").readCopy("a", "p1", 2, "a", "1:1:0")
	wantResult(t, run(t, b, CheckOrder, Options{}), false, 1)
}
